"""Autotuning per compile range with the compile cache: each range times its own shapes, the
decisions are stored with the pieces, and a second process (a warm start) loads them without
timing again. Each start runs in its own process (`run_autotune.py`), as a warm start does,
with its own slow provider registered."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ir_passes import PassConfig
from ir_piecewise.backend import global_key

sys.path.insert(0, str(Path(__file__).parent))
from toy_model import toy_config

HERE = Path(__file__).parent


def run_autotune(cache: Path, out: Path, inductor: Path) -> dict[str, Any]:
    """`run_autotune.py` with Inductor's own caches in `inductor` (fresh for the cold start,
    so its passes run)."""
    done = subprocess.run(
        [sys.executable, str(HERE / "run_autotune.py"), str(cache), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(inductor)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def test_each_range_is_tuned_and_a_warm_start_times_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cold = run_autotune(cache, tmp_path / "cold.json", tmp_path / "inductor-cold")
    # each range at both ends
    tokens = {"range-1-8": (1, 8), "range-9-256": (9, 256), "range-257-inf": (257, 257 * 8)}
    assert sorted(cold["decisions"]) == sorted(tokens)
    for label, decisions in cold["decisions"].items():
        assert decisions, label  # one silu_and_mul a layer, identical layers share a piece
        for decision in decisions.values():
            assert decision["op"] == "silu_and_mul"
            timed = decision["timed"]
            assert [t["arguments"] for t in timed] == [
                f"(float32[{n}, 256])" for n in tokens[label]
            ]
            assert decision["priority_choice"] == "t_pw_slow"
            assert decision["choice"] == "native", decision  # the other candidate
            assert all(t["timings_ms"]["t_pw_slow"] > t["timings_ms"]["native"] for t in timed)
    assert cold["timed"] == 2 * 2 * 3  # two candidates at two counts, in each range
    assert cold["compilations"] > 0
    assert max(cold["errors"]) < 2e-5

    warm = run_autotune(cache, tmp_path / "warm.json", tmp_path / "inductor-warm")
    assert warm["compilations"] == 0
    assert warm["cache_hits"] > 0
    assert warm["timed"] == 0
    assert warm["decisions"] == cold["decisions"]
    assert warm["report"]["passes_ran"] is False
    assert warm["report"]["changed"]
    assert warm["errors"] == cold["errors"]


def test_the_autotune_flag_is_in_the_cache_key(tmp_path: Path) -> None:
    off = toy_config(tmp_path)
    on = toy_config(tmp_path, passes=PassConfig(autotune=True))
    assert global_key(on) != global_key(off)
