"""Where a fresh compile of ir-piecewise's toy model differs from the same pieces loaded from the
compile cache: piece by piece, and with the configuration of every Inductor kernel each ran.

One process, new Inductor and Triton cache directories (made here unless
``TORCHINDUCTOR_CACHE_DIR``/``TRITON_CACHE_DIR`` are set): A compiles the model's pieces, B
loads them (no CUDA graphs in either); both run the same inputs at several token counts. It
prints the model's largest |A - B| per token count; each piece call whose inputs were equal in A
and B and whose outputs were not, per output; Inductor's autotunings in each (kernel, pick); the
configuration each Inductor kernel launched with in each, by kernel source hash; and the
``.best_config`` files of the autotune cache. Argument ``det``: Inductor's deterministic mode.
Run on the GPU machine from the repository root after ``source benchmarks/gpu/env.sh``
(round 47, `benchmarks/results/piecewise-fresh-vs-loaded-H200.md`).
"""

import hashlib
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

_scratch = Path(tempfile.mkdtemp(prefix="pieces-probe-"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(_scratch / "inductor"))
os.environ.setdefault("TRITON_CACHE_DIR", str(_scratch / "triton"))

import torch  # noqa: E402
from torch._inductor.runtime import triton_heuristics  # noqa: E402

sys.path.insert(0, str(Path.cwd() / "packages" / "ir-piecewise" / "tests"))
from toy_model import ToyModel, toy_config  # noqa: E402

import ir_dispatch  # noqa: E402,F401  (installs the dispatcher)
import ir_piecewise  # noqa: E402
from ir_piecewise import counters, pieces  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SIZES = (64, 1, 2, 4, 8, 16, 32, 64)  # the first call compiles at 64 tokens
Record = tuple[str, int | None, list[Any], list[torch.Tensor]]

phase = "A"
piece_calls: dict[str, list[Record]] = {"A": [], "B": []}
autotunings: dict[str, list[tuple[str, str | None]]] = {"A": [], "B": []}
launches: dict[str, dict[int, tuple[str, str, str]]] = {"A": {}, "B": {}}


def _clone(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else value


def _watch() -> None:
    """Wraps the piece runner and Inductor's autotuner to record what they did."""
    run_piece = pieces.CompiledPiece._run_sized
    autotune: Callable[..., Any] = triton_heuristics.CachingAutotuner.autotune_to_one_config
    launch: Callable[..., Any] = triton_heuristics.CachingAutotuner.run

    def recording_run_piece(self: Any, size: int | None, args: tuple[Any, ...]) -> Any:
        out = run_piece(self, size, args)
        outs = out if isinstance(out, tuple | list) else (out,)
        tensors = [o.clone() for o in outs if isinstance(o, torch.Tensor)]
        piece_calls[phase].append((self.name, size, [_clone(a) for a in args], tensors))
        return out

    def recording_autotune(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = autotune(self, *args, **kwargs)
        picked = str(self.launchers[0].config) if self.launchers else None
        autotunings[phase].append((self.fn.__name__, picked))
        return result

    def recording_launch(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = launch(self, *args, **kwargs)
        if id(self) not in launches[phase] and self.launchers:
            source = hashlib.sha256(getattr(self.fn, "src", "").encode()).hexdigest()[:10]
            config = self.launchers[0].config
            launches[phase][id(self)] = (
                self.fn.__name__,
                source,
                f"{config.kwargs} w{config.num_warps}",
            )
        return result

    pieces.CompiledPiece._run_sized = recording_run_piece  # type: ignore[method-assign]
    triton_heuristics.CachingAutotuner.autotune_to_one_config = recording_autotune  # type: ignore[method-assign]
    triton_heuristics.CachingAutotuner.run = recording_launch  # type: ignore[method-assign]


def _inputs(n: int) -> torch.Tensor:
    generator = torch.Generator(DEVICE).manual_seed(n)
    return torch.randn(n, 64, device=DEVICE, generator=generator)


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max()) if a.numel() else 0.0


def _same(a: Any, b: Any) -> bool:
    return torch.equal(a, b) if isinstance(a, torch.Tensor) else bool(a == b)


def main() -> None:
    global phase
    _watch()
    deterministic = sys.argv[1:] == ["det"]
    model = ToyModel().to(DEVICE).eval()
    cache_root = Path(tempfile.mkdtemp())
    outs: dict[str, dict[int, torch.Tensor]] = {}
    with torch.no_grad(), torch._inductor.config.patch(deterministic=deterministic):
        for phase in ("A", "B"):
            torch._dynamo.reset()
            counters.reset()
            compiled = ir_piecewise.compile(model, toy_config(cache_root))
            outs[phase] = {n: compiled(_inputs(n)).clone() for n in SIZES}
            compiles, loads = counters.num_backend_compilations, counters.num_cache_hits
            print(f"{phase}: {compiles} pieces compiled, {loads} loaded")
    print("mode:", "deterministic" if deterministic else "default")
    diffs = " ".join(f"{n}:{_max_diff(outs['A'][n], outs['B'][n]):.2g}" for n in SIZES[1:])
    print("model outputs, A against B:", diffs)
    for (name, size, a_in, a_out), (_, _, b_in, b_out) in zip(
        piece_calls["A"], piece_calls["B"], strict=True
    ):
        if all(_same(x, y) for x, y in zip(a_in, b_in, strict=True)) and any(
            _max_diff(x, y) for x, y in zip(a_out, b_out, strict=True)
        ):
            per_output = " ".join(
                f"{tuple(x.shape)}:{_max_diff(x, y):.2g}" for x, y in zip(a_out, b_out, strict=True)
            )
            print(f"  {name} at {size} tokens, equal inputs; outputs {per_output}")
    for p in ("A", "B"):
        print(f"autotunings in {p}: {autotunings[p]}")
        print(f"kernels launched in {p} (name, source hash, configuration):")
        for launched in sorted(set(launches[p].values()), key=lambda v: (v[1], v[0])):
            print("   ", launched)
    best = sorted(Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]).rglob("*.best_config"))
    print(f"{len(best)} .best_config files:")
    for path in best:
        print("   ", path.name[:16], path.read_text()[:120])


if __name__ == "__main__":
    main()
