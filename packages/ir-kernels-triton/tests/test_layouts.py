"""Without a GPU: the norm kernels compiled for sm_90 give a decode row the same reduction
layout, hence the same bits, whether one program has it or several share it (the split), with
or without the masks of a row that fills its block, and spread over a cluster's blocks: batch
invariance of `norms.rules.split_for`, `full_row_for` and `cluster_for` for the installed
Triton.

The compiles run in a process of `layouts_offline.py` without ``TRITON_INTERPRET``: in a
process that interprets the kernels (the package's test session sets it where there is no GPU)
Triton cannot compile them. Each check takes a few minutes on two cores; its own nox session,
``layouts``, runs this module alone.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).with_name("layouts_offline.py")


def run_check(*args: str) -> dict[str, Any]:
    """The JSON result of `layouts_offline.py` with `args`, run without the interpreter; skips
    where this Triton cannot compile for sm_90 offline."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(result["skip"])
    return result


@pytest.mark.slow
@pytest.mark.parametrize("alignment", ["aligned", "unaligned"])
def test_shared_rows_keep_the_reduction_layout(alignment: str) -> None:
    """One, two and four programs a row, and a full row with and without masks, give every
    reduction the same layout; unaligned: only the rows of `x` specialized as 16-byte aligned,
    as where `row_split` still splits."""
    result = run_check("split", *(["--unaligned"] if alignment == "unaligned" else []))
    assert result["checked"] > 200
    assert result["differences"] == []


@pytest.mark.slow
def test_cluster_blocks_keep_the_reduction_layout() -> None:
    """Every variant `cluster_for` spreads reduces each block's part in the one-program
    kernel's layout (but for its share of the warps), and its PTX holds the exchange."""
    result = run_check("cluster")
    assert result["checked"] >= 10
    assert result["differences"] == []


def test_the_check_refuses_the_interpreter() -> None:
    """Run with ``TRITON_INTERPRET=1`` the script says why it cannot check, rather than report
    layouts it did not compile."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "probe"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "run without TRITON_INTERPRET=1" in done.stderr
