"""Probe: this tree's Triton rotary kernel against an earlier tree's, in one process.

Each shape of the kernel grid (bf16, query and key of `hidden` elements in heads of 128, the
grid's table) runs both launchers, in place and into new tensors; their outputs are checked
bitwise against each other first, then each is timed by CUDA-graph replay (median) in
`--rounds` rotated rounds, and the fastest round is printed, µs, beside an empty Triton kernel.
Written for the check that positions outside the table read nothing (round 79), which must
not cost the kernel time.

Put the earlier tree's package where Python finds it as `ir_kernels_triton_old`, as
`benchmarks/kernels/gated_against_old.py` describes (`git archive REV
packages/ir-kernels-triton/src/ir_kernels_triton`, the directory renamed, its `__init__.py`
emptied); then, from this directory with the packages on `PYTHONPATH` (`source env.sh`):
`PYTHONPATH=$PYTHONPATH:OLD_PARENT python3 triton_rotary_ab.py [--tokens 1,16,...]
[--hidden 2048,...] [--rounds 5] [--json OUT]`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from ir_kernels_triton_old import rotary_kernels as old  # type: ignore[import-not-found]
from probe_tools import bf16_inputs, fastest_line, launch_empty_kernel, time_rotated, write_results

from ir_kernels_triton import rotary_kernels as new


def launcher(module: Any, args: tuple[Any, ...], outs: tuple[Any, Any]) -> Callable[[], Any]:
    """A call of `module`'s ``launch_rotary`` on the sample `args` into `outs` (the query and
    key themselves: in place). Both trees' calls share their tensors, so that neither gains
    by where its tensors lie in memory (`placement_probe.py`)."""
    positions, query, key, head_size, cache, neox = args

    def call() -> tuple[torch.Tensor, torch.Tensor]:
        module.launch_rotary(positions, query, key, head_size, cache, neox, *outs)
        return outs

    return call


def time_shape(tokens: int, hidden: int, rounds: int) -> list[dict[str, Any]]:
    """Both trees' launches at one shape, out of place and in place: a record of each."""
    _, args = bf16_inputs("rotary_embedding", tokens, hidden)
    query, key = args[1], args[2]
    records = []
    for form in ("out", "inplace"):
        outs = (query, key) if form == "inplace" else (query.clone(), key.clone())
        mine, theirs = launcher(new, args, outs), launcher(old, args, outs)
        if form == "out":
            # in place, each call rotates the result of the one before
            ours = [t.clone() for t in mine()]
            for a, b in zip(ours, theirs(), strict=True):
                assert torch.equal(a.view(torch.int16), b.view(torch.int16)), (tokens, hidden)
        times = time_rotated({"new": mine, "old": theirs, "empty": launch_empty_kernel}, rounds)
        print(f"rotary_embedding {form} {tokens}x{hidden}: {fastest_line(times, 3)}", flush=True)
        best = {name: min(v) for name, v in times.items()}
        records.append(dict(tokens=tokens, hidden=hidden, form=form, us=best, rounds=times))
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--tokens", default="1,16,128,1024,4096,16384")
    parser.add_argument("--hidden", default="2048,4096,8192")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    records = []
    for tokens in [int(t) for t in opts.tokens.split(",")]:
        for hidden in [int(h) for h in opts.hidden.split(",")]:
            records += time_shape(tokens, hidden, opts.rounds)
    write_results(opts.json, records)


if __name__ == "__main__":
    main()
