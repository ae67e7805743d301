"""Time a Triton norm op with its warps a row (`norm_rules.norm_warps`) changed for one width.

`norm_warps` fixes a row's reduction order, so the provider keeps one count a width at every
batch size (batch invariance). Changing it is a trade across the whole column of batch sizes:
this probe times the provider's op at each batch size with the count as it is and with the
counts asked for, side by side in rotated rounds of CUDA-graph replays (launch plans off, so
every candidate launches through `launch_norm`'s rules: a decode-size batch may take a
cluster). It also checks that each count keeps a row's bits from a batch of one to the
batch timed (the provider's batch-invariance promise).

    python benchmarks/gpu/triton_warps_probe.py --op rms_norm_dynamic_quant_fp8 --width 8192 \
        --warps 16 --tokens 1,16,128,1024,4096,16384 [--json OUT]

Run from the repository root with ``benchmarks/gpu`` on ``PYTHONPATH`` (`env.sh`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import triton
from probe_tools import (
    NORM_OPS,
    bf16_inputs,
    fastest_line,
    launch_empty_kernel,
    norm_variant,
    time_rotated,
    write_results,
)

from ir_kernels_triton import MAX_SINGLE_PASS, norm_rules
from ir_kernels_triton.plans import set_launch_plans


@contextmanager
def warps_for(op: str, width: int, warps: int | None) -> Iterator[None]:
    """`norm_warps` answering `warps` for `op`'s rows of `width` (None: as it is) inside."""
    original = norm_rules.norm_warps
    op_quant, op_residual = norm_variant(op)

    def changed(block: int, quant: int, residual: bool = False) -> int:
        if warps is not None and (block, quant, residual) == (width, op_quant, op_residual):
            return warps
        return original(block, quant, residual)

    norm_rules.norm_warps = changed
    try:
        yield
    finally:
        norm_rules.norm_warps = original


def _call(
    impl: Callable[..., Any], args: tuple[Any, ...], op: str, width: int, warps: int | None
) -> Callable[[], Any]:
    def run() -> Any:
        with warps_for(op, width, warps):
            return impl(*args)

    return run


def _bits(value: Any) -> list[torch.Tensor]:
    values = value if isinstance(value, (tuple, list)) else [value]
    return [v.contiguous().view(torch.uint8) for v in values]


def same_first_row(
    impl: Callable[..., Any], args: tuple[Any, ...], op: str, width: int, warps: int | None
) -> bool:
    """Whether row 0 of a batch gives the bits it gives alone (every output)."""
    rows = args[0].shape[0]
    alone = tuple(
        a[:1] if isinstance(a, torch.Tensor) and a.dim() == 2 and a.shape[0] == rows else a
        for a in args
    )
    whole = _bits(_call(impl, args, op, width, warps)())
    first = _bits(_call(impl, alone, op, width, warps)())
    return all(torch.equal(w[:1], f[:1]) for w, f in zip(whole, first, strict=True))


def probe(op: str, width: int, tokens: int, counts: list[int], rounds: int) -> dict[str, Any]:
    name_op, args = bf16_inputs(op, tokens, width)
    impl = name_op.impls["triton"].fn
    default = norm_rules.norm_warps(width, *norm_variant(op))
    variants = {f"warps={default}": None, **{f"warps={w}": w for w in counts if w != default}}
    candidates: dict[str, Callable[[], Any]] = {"empty": launch_empty_kernel}
    same: dict[str, bool] = {}
    for tag, warps in variants.items():
        same[tag] = same_first_row(impl, args, op, width, warps)
        candidates[tag] = _call(impl, args, op, width, warps)
    times = time_rotated(candidates, rounds)
    bits = " ".join(f"{t}:{'same' if s else 'DIFFERS'}" for t, s in same.items())
    print(
        f"{op} {tokens}x{width}: {fastest_line(times)}  (row 0 alone vs in the batch: {bits})",
        flush=True,
    )
    return {"op": op, "tokens": tokens, "width": width, "same_bits_alone": same, "times_us": times}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--op", default="rms_norm_dynamic_quant_fp8", choices=NORM_OPS)
    parser.add_argument(
        "--width", type=int, default=8192, help="the row width, a power of two (one row block)"
    )
    parser.add_argument("--warps", default="16", help="counts to time beside the provider's")
    parser.add_argument("--tokens", default="1,16,128,1024,4096,16384")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path)
    a = parser.parse_args()
    # `norm_warps` answers for a row block: a width whose rows fill their block in one pass
    if a.width & (a.width - 1) or not 0 < a.width <= MAX_SINGLE_PASS:
        parser.error(
            f"--width {a.width}: expected a power of two up to {MAX_SINGLE_PASS} "
            "(the row block `norm_warps` is asked about)"
        )
    import ir_kernels_triton  # noqa: F401  (registers provider triton)

    set_launch_plans(False)
    print("triton", triton.__version__, torch.cuda.get_device_name())
    counts = [int(w) for w in a.warps.split(",")]
    results = [probe(a.op, a.width, int(t), counts, a.rounds) for t in a.tokens.split(",")]
    write_results(a.json, results)


if __name__ == "__main__":
    main()
