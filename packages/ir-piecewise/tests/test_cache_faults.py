"""File-system faults of the compile cache degrade to compiling without it, with one warning
that names the path and the reason: a read-only cache, a cache path that is a file, an entry
that is a directory, an entry filed under another key, and a lock another process holds."""

import ctypes
import json
import logging
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

import ir_dispatch  # noqa: F401  (installs the dispatcher)
import ir_piecewise
from ir_piecewise import CompilationConfig, counters, traces
from ir_piecewise.backend import global_key

sys.path.insert(0, str(Path(__file__).parent))
from toy_model import ToyModel, toy_config

HERE = Path(__file__).parent
TOL = {"atol": 2e-5, "rtol": 2e-5}
# prctl(2) and capabilities(7): what root's reading process drops in the read-only test
PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 24, 1, 2


def compile_fresh(model: ToyModel, cfg: CompilationConfig, n: int = 5) -> None:
    """Compile and check `model` as a new process would (Dynamo reset, counters zeroed)."""
    torch._dynamo.reset()
    counters.reset()
    x = torch.randn(n, 64)
    with torch.no_grad():
        torch.testing.assert_close(ir_piecewise.compile(model, cfg)(x), model(x), **TOL)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name == "ir_piecewise"
    ]


def split_entries(cfg: CompilationConfig, model: ToyModel) -> tuple[Path, list[Path]]:
    """The saved trace of `model` called with 5 tokens under no_grad, and the pieces' entries."""
    with torch.no_grad():
        key = traces.trace_key(global_key(cfg), model, {"x": torch.randn(5, 64)}, [("x", 0)])
    root = cfg.resolved_cache_dir()
    trace = ir_piecewise.CompileCache(root).path(key)
    assert trace.exists()
    return trace, sorted(p for p in root.glob("*/*.irpw") if p != trace)


def test_a_cache_path_that_is_a_file_compiles_without_the_cache(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "cache").write_text("not a directory")
    with caplog.at_level(logging.WARNING, logger="ir_piecewise"):
        compile_fresh(ToyModel().eval(), toy_config(tmp_path))
    warnings = warnings_of(caplog)
    assert len(warnings) == 1, warnings
    assert str(tmp_path / "cache") in warnings[0]
    assert "not a directory" in warnings[0]
    assert counters.num_backend_compilations > 0
    assert (tmp_path / "cache").read_text() == "not a directory"


def test_an_entry_that_is_a_directory_is_compiled_without_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model, cfg = ToyModel().eval(), toy_config(tmp_path)
    compile_fresh(model, cfg)
    _, pieces = split_entries(cfg, model)
    pieces[0].unlink()
    pieces[0].mkdir()
    with caplog.at_level(logging.WARNING, logger="ir_piecewise"):
        compile_fresh(model, cfg, 7)
    warnings = warnings_of(caplog)
    assert len(warnings) == 1, warnings  # reading it and storing over it: one warning
    assert str(pieces[0]) in warnings[0]
    assert "Is a directory" in warnings[0]
    assert counters.num_backend_compilations == 1
    assert pieces[0].is_dir()


def test_an_entry_under_another_key_is_removed_and_recompiled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model, cfg = ToyModel().eval(), toy_config(tmp_path)
    compile_fresh(model, cfg)
    _, pieces = split_entries(cfg, model)
    assert len(pieces) >= 2
    pieces[1].write_bytes(pieces[0].read_bytes())  # a whole, valid entry, of another piece
    with caplog.at_level(logging.WARNING, logger="ir_piecewise"):
        compile_fresh(model, cfg, 7)
    warnings = warnings_of(caplog)
    assert len(warnings) == 1, warnings
    assert str(pieces[1]) in warnings[0]
    assert "another key" in warnings[0]
    assert counters.num_backend_compilations == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ir_piecewise"):
        compile_fresh(model, cfg, 3)  # re-stored under its own key: loads everything
    assert not warnings_of(caplog)
    assert counters.num_traces_loaded == 1
    assert counters.num_backend_compilations == 0


def test_a_held_lock_is_waited_for_a_bounded_time(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process holds the cache's lock: after `cache_lock_timeout` seconds the
    compilation goes on without storing, says why once, and does not wait again."""
    lock = tmp_path / "cache" / ".lock"
    lock.parent.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from filelock import FileLock\n"
            f"with FileLock({str(lock)!r}):\n"
            "    print('held', flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        done = threading.Event()
        errors: list[BaseException] = []

        def compile_it() -> None:
            try:
                compile_fresh(ToyModel().eval(), toy_config(tmp_path, cache_lock_timeout=0.5))
            except BaseException as exc:  # reported by the test thread
                errors.append(exc)
            done.set()

        with caplog.at_level(logging.WARNING, logger="ir_piecewise"):
            threading.Thread(target=compile_it, daemon=True).start()
            assert done.wait(timeout=300), "compilation still waits for the held lock"
        if errors:
            raise errors[0]
    finally:
        holder.kill()
        holder.wait()
    warnings = warnings_of(caplog)
    assert len(warnings) == 1, warnings
    assert str(lock) in warnings[0]
    assert "held by another process" in warnings[0]
    assert "cache_lock_timeout" in warnings[0]
    assert counters.num_backend_compilations > 1  # several pieces, one wait
    assert not list((tmp_path / "cache").glob("*/*.irpw"))


def test_cache_lock_timeout_is_checked() -> None:
    for bad in (-1.0, float("inf"), True, "5"):
        with pytest.raises(ValueError, match="cache_lock_timeout"):
            CompilationConfig(cache_lock_timeout=bad)  # type: ignore[arg-type]


def bound_by_permissions() -> None:
    """In a child process of root, before it runs: drop the capabilities that let root ignore
    file permissions (``prctl(PR_CAPBSET_DROP, CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH)``), so
    that a read-only directory is read-only to it too."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def make_read_only(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def run_toy(cache: Path, out: Path, inductor: Path, *, read_only: bool) -> dict[str, Any]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(inductor)}
    limited = read_only and os.geteuid() == 0
    done = subprocess.run(
        [sys.executable, str(HERE / "run_toy.py"), str(cache), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
        preexec_fn=bound_by_permissions if limited else None,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(out.read_text())
    result["warnings"] = [line for line in done.stderr.splitlines() if line.startswith("ir_pie")]
    return result


def test_a_read_only_cache_loads_and_stores_nothing(tmp_path: Path) -> None:
    """A process that may not write the cache (another user's, or a read-only volume) loads its
    entries; what it would store (here its trace, removed beforehand) it skips, saying so once.
    """
    cache = tmp_path / "cache"
    cold = run_toy(cache, tmp_path / "cold.json", tmp_path / "ind-0", read_only=False)
    # 3 distinct pieces x (ranges [1, 8], [9, 256], [257, inf) and the size 4)
    assert cold["counters"]["num_backend_compilations"] == 12
    # the key as the runner's process sees it: this process's selection state (providers other
    # tests registered) may differ
    trace = ir_piecewise.CompileCache(cache).path(cold["trace_key"])
    trace.unlink()
    make_read_only(cache)
    try:
        warm = run_toy(cache, tmp_path / "warm.json", tmp_path / "ind-1", read_only=True)
    finally:
        for path in [cache, *cache.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    assert warm["outputs"] == cold["outputs"]
    assert warm["counters"]["num_cache_hits"] == 12
    assert warm["counters"]["num_backend_compilations"] == 0
    assert len(warm["warnings"]) == 1, warm["warnings"]
    assert str(cache) in warm["warnings"][0]
    assert "Permission denied" in warm["warnings"][0]
    assert not trace.exists()
