"""Cache invalidation across processes: a second process recompiles exactly when something that
changes the compiled code changed — a helper the native function calls, a package version, a
pass switch, a priority — and loads everything otherwise. Each process shares the compile cache
and Inductor's own caches with the others, so a stale entry in either would show as a wrong
result or a missing compilation."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent

OP_MODULE = '''
import torch
from torch import Tensor, nn

from ir_spec import ops, register_op


def _helper(x: Tensor) -> Tensor:
    return x * SCALE + 1.0


@register_op
def inval_scale(x: Tensor) -> Tensor:
    """A catalog-like op whose meaning lives partly in a helper."""
    return torch.sin(_helper(x))


@inval_scale.register_impl("inval_alt")
def _alt(x: Tensor) -> Tensor:
    return torch.sin(_helper(x)) + 0.5


class OneOp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, 32))

    def forward(self, x: Tensor) -> Tensor:
        return ops.inval_scale(x * self.weight)
'''


def write_op(op_dir: Path, scale: str) -> None:
    op_dir.mkdir(exist_ok=True)
    (op_dir / "inval_op.py").write_text(OP_MODULE.replace("SCALE", scale))


def run(tmp_path: Path, *flags: str) -> dict[str, Any]:
    out = tmp_path / "out.json"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    env.pop("TORCHINDUCTOR_FORCE_DISABLE_CACHES", None)
    done = subprocess.run(
        [
            sys.executable,
            str(HERE / "run_invalidation.py"),
            str(tmp_path / "op"),
            str(tmp_path / "cache"),
            str(out),
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(out.read_text())
    return result


#: compile ranges of the one piece: the rotary fusions' threshold (256) splits [1, inf) while
#: they are on (the default), not with ``--no-fuse``
RANGES, RANGES_UNFUSED = 2, 1


def assert_recompiled(result: dict[str, Any], ranges: int = RANGES) -> None:
    assert result["error"] < 1e-5, result  # the compiled code is the current code's
    assert result["counters"]["num_traces_loaded"] == 0, result
    assert result["counters"]["num_cache_hits"] == 0, result
    assert result["counters"]["num_backend_compilations"] == ranges, result
    assert result["fx_graph_cache_misses"] >= 1, result  # Inductor compiled too
    assert result["fx_graph_cache_hits"] == 0, result


def assert_loaded(result: dict[str, Any]) -> None:
    assert result["error"] < 1e-5, result
    assert result["counters"]["num_traces_loaded"] == 1, result
    assert result["counters"]["num_cache_hits"] == RANGES, result
    assert result["counters"]["num_backend_compilations"] == 0, result
    assert result["fx_graph_cache_misses"] == 0, result


def test_each_change_recompiles_and_nothing_else_does(tmp_path: Path) -> None:
    write_op(tmp_path / "op", "2.0")
    assert_recompiled(run(tmp_path))
    assert_loaded(run(tmp_path))  # nothing changed
    write_op(tmp_path / "op", "3.0")  # (a) the helper the native function calls
    assert_recompiled(run(tmp_path))
    assert_recompiled(run(tmp_path, "--bump", "ir-spec"))  # (b) a package version
    assert_recompiled(run(tmp_path, "--no-fuse"), RANGES_UNFUSED)  # (c) a pass switch
    assert_recompiled(run(tmp_path, "--priority", "inval_alt"))  # (d) a priority
    assert_loaded(run(tmp_path))  # (a)'s entries: the other changes replaced nothing
