"""The fuzzer's settings, from the environment.

``IR_FUZZ_SEED``
    The base seed: program ``k`` of a run has seed ``base + k``. Default: derived from the CI
    run (``GITHUB_RUN_ID`` and ``GITHUB_RUN_ATTEMPT``), else from the pytest-xdist run id
    (every worker agrees on it), else random; printed either way.
``IR_FUZZ_PROGRAMS``
    Programs per run (default `CPU_PROGRAMS` without a GPU, `GPU_PROGRAMS` with one). Each
    runs eagerly with every runner; a share also compiled and piecewise.
``IR_FUZZ_COMPILE_EVERY``, ``IR_FUZZ_PIECEWISE_EVERY``
    Every n-th program also goes through ``ir_passes.compile`` (default 40) and
    ``ir_piecewise.compile`` (default 100), and every (n // 10)-th program that reads a
    donated tensor (only compiled runs refuse it). Inductor's compilation on a CPU costs about
    ten eager programs, so these shares keep a CPU run of 500 programs within a few minutes.
``IR_FUZZ_REPLAY``
    Comma-separated program seeds: run exactly these programs, through every runner (what a
    failure prints to replay it).
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

import torch

CPU_PROGRAMS = 500
GPU_PROGRAMS = 2000
COMPILE_EVERY = 40
PIECEWISE_EVERY = 100
SEED_LIMIT = 1 << 31


@dataclass(frozen=True)
class Settings:
    """What one fuzzer run does."""

    base_seed: int
    seed_source: str
    programs: int
    compile_every: int
    piecewise_every: int
    replay: tuple[int, ...]
    device: str

    def seeds(self) -> list[int]:
        """The program seeds of this run."""
        if self.replay:
            return list(self.replay)
        return [self.base_seed + k for k in range(self.programs)]

    def describe(self) -> str:
        if self.replay:
            return f"ir fuzz: replaying program seeds {', '.join(map(str, self.replay))}"
        return (
            f"ir fuzz: base seed {self.base_seed} ({self.seed_source}), {self.programs} "
            f"programs on {self.device}, every one eager; every {self.compile_every}th also "
            f"compiled, every {self.piecewise_every}th piecewise (those reading a donated "
            "tensor ten times as often). Replay one: IR_FUZZ_REPLAY=<seed>; this run: "
            f"IR_FUZZ_SEED={self.base_seed} IR_FUZZ_PROGRAMS={self.programs}"
        )


def _int(environ: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ValueError(f"{name}={raw!r}: expected an integer >= {minimum}")
    return value


def default_seed(environ: Mapping[str, str], xdist_run: str | None) -> tuple[int, str]:
    """The base seed without ``IR_FUZZ_SEED``, and where it comes from."""
    run_id = environ.get("GITHUB_RUN_ID", "").strip()
    if run_id:
        text = f"{run_id}.{environ.get('GITHUB_RUN_ATTEMPT', '1').strip()}"
        source = f"CI run {text}"
    elif xdist_run:
        text, source = xdist_run, "pytest-xdist run id"
    else:
        return secrets.randbelow(SEED_LIMIT), "random"
    return int(hashlib.sha256(text.encode()).hexdigest(), 16) % SEED_LIMIT, source


def from_environment(environ: Mapping[str, str], xdist_run: str | None = None) -> Settings:
    """Settings from `environ`; a malformed variable raises `ValueError` naming it."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    raw_seed = environ.get("IR_FUZZ_SEED", "").strip()
    if raw_seed:
        base_seed, source = _int(environ, "IR_FUZZ_SEED", 0, 0), "IR_FUZZ_SEED"
    else:
        base_seed, source = default_seed(environ, xdist_run)
    replay: list[int] = []
    for part in environ.get("IR_FUZZ_REPLAY", "").split(","):
        if part.strip():
            replay.append(_int({"IR_FUZZ_REPLAY": part}, "IR_FUZZ_REPLAY", 0, 0))
    default_programs = GPU_PROGRAMS if device == "cuda" else CPU_PROGRAMS
    return Settings(
        base_seed=base_seed,
        seed_source=source,
        programs=_int(environ, "IR_FUZZ_PROGRAMS", default_programs, 1),
        compile_every=_int(environ, "IR_FUZZ_COMPILE_EVERY", COMPILE_EVERY, 1),
        piecewise_every=_int(environ, "IR_FUZZ_PIECEWISE_EVERY", PIECEWISE_EVERY, 1),
        replay=tuple(replay),
        device=device,
    )


#: This process's settings, made once by the fuzzer's conftest (`configure`).
_current: Settings | None = None


def configure(xdist_run: str | None) -> Settings:
    """Make (once) and return this process's settings."""
    global _current
    if _current is None:
        _current = from_environment(os.environ, xdist_run)
    return _current


def current() -> Settings:
    """This process's settings (made by `configure`, or now from the environment)."""
    return configure(None)
