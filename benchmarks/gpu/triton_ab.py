"""Probe: this tree's Triton provider against an earlier tree's, op by op, in one process.

Each other tree's package (`--other NAME=DIR`, DIR the ``ir_kernels_triton`` folder of, e.g.,
``git archive REV packages/ir-kernels-triton/src/ir_kernels_triton``) is copied as
``ir_kernels_triton_NAME`` with its provider renamed ``triton_NAME`` and its torch ops
``ir_triton_NAME``, and imported beside this tree's, so all register with the same catalog.
Each shape of the kernel grid (bf16, the ops' sample inputs, shared by all) runs every tree's
implementation; their outputs are compared with this tree's first (bitwise unless `--close`),
then each is timed by CUDA-graph replay (median) in `--rounds` rotated rounds beside an empty
Triton kernel, and the fastest round is printed, µs. For a change that must not cost time.

Usage (GPU machine, from this directory, packages on ``PYTHONPATH``: ``source env.sh``):
``python3 triton_ab.py --other old=DIR [--other NAME=DIR ...] [--ops a,b] [--tokens 1,16,...]
[--hidden 2048,...] [--rounds 5] [--close] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import importlib
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from probe_tools import (
    bf16_inputs,
    checked_times,
    fastest_line,
    launch_empty_kernel,
    write_results,
)

import ir_kernels_triton  # noqa: F401  (registers provider triton)
from ir_stack.bench.kernels import GATED, INTERMEDIATE


def import_other(name: str, package: Path) -> str:
    """`package` (an ``ir_kernels_triton`` folder) imported as ``ir_kernels_triton_<name>``,
    registering its implementations as provider ``triton_<name>``, which is returned."""
    provider = f"triton_{name}"
    root = Path(tempfile.mkdtemp(prefix="ir-triton-ab-"))
    copy = root / f"ir_kernels_triton_{name}"
    shutil.copytree(package, copy)
    renames = {
        "impls.py": (r'^(INPLACE_)?PROVIDER = "triton(_inplace)?"$', 2),
        "torch_ops.py": (r'^NAMESPACE = "ir_triton"$', 1),
    }
    for file, (pattern, expected) in renames.items():
        path = copy / file
        text, count = re.subn(
            pattern,
            lambda m: (
                m.group(0)
                .replace('"ir_triton"', f'"ir_triton_{name}"')
                .replace('"triton', f'"{provider}')
            ),
            path.read_text(),
            flags=re.MULTILINE,
        )
        if count != expected:
            raise SystemExit(f"{path}: expected {expected} lines to rename, found {count}")
        path.write_text(text)
    sys.path.insert(0, str(root))
    importlib.import_module(copy.name)
    return provider


def named_folder(text: str) -> tuple[str, Path]:
    """``NAME=DIR`` as (NAME, DIR); NAME must make an identifier."""
    name, sep, folder = text.partition("=")
    if not sep or not name.isidentifier() or not folder:
        raise argparse.ArgumentTypeError(f"expected NAME=DIR with NAME an identifier, got {text!r}")
    return name, Path(folder)


def time_shape(
    name: str, tokens: int, hidden: int, others: dict[str, str], rounds: int, close: bool
) -> dict[str, Any]:
    """Every tree's implementation of op `name` at one shape (`others`: name to provider):
    the record of its times."""
    width = INTERMEDIATE[hidden] if name in GATED else hidden
    op, args = bf16_inputs(name, tokens, width)
    fns = {"new": op.impls["triton"].fn} | {n: op.impls[p].fn for n, p in others.items()}
    candidates: dict[str, Callable[[], Any]] = {n: partial(fn, *args) for n, fn in fns.items()}
    candidates["empty"] = launch_empty_kernel
    times = checked_times(f"{name} {tokens}x{width}", candidates, others, rounds, close)
    print(f"{name} {tokens}x{width}: {fastest_line(times, 3)}", flush=True)
    best = {n: min(v) for n, v in times.items()}
    return dict(op=name, tokens=tokens, width=width, us=best, rounds=times)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument(
        "--other", type=named_folder, action="append", required=True, metavar="NAME=DIR"
    )
    parser.add_argument("--ops", default="dynamic_quant_fp8,group_quant_fp8")
    parser.add_argument("--tokens", default="1,16,128,1024,4096,16384")
    parser.add_argument("--hidden", default="2048,4096,8192")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--close", action="store_true")
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    others = {name: import_other(name, folder) for name, folder in opts.other}
    records = []
    for name in opts.ops.split(","):
        for tokens in [int(t) for t in opts.tokens.split(",")]:
            for hidden in [int(h) for h in opts.hidden.split(",")]:
                records.append(time_shape(name, tokens, hidden, others, opts.rounds, opts.close))
    write_results(opts.json, records)


if __name__ == "__main__":
    main()
