"""Whether this Triton launches kernels programmatically (``launch_pdl``) and what that saves
at decode sizes: an empty kernel and a row negation (16 x 8192 and 1 x 4096 bf16), each with
``gdc_wait`` / ``gdc_launch_dependents`` first, replayed back to back from a CUDA graph
(`do_bench_cudagraph`, fastest of 5 rotated rounds), launched plainly and with ``launch_pdl``.

Usage (GPU machine): python benchmarks/gpu/triton_pdl_probe.py
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from probe_tools import time_rotated
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait


@triton.jit
def empty_kernel(PDL: tl.constexpr):
    if PDL:
        gdc_wait()
        gdc_launch_dependents()


@triton.jit
def negate_kernel(out_ptr, x_ptr, n, BLOCK: tl.constexpr, PDL: tl.constexpr):
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, -tl.load(x_ptr + offsets, mask=mask), mask=mask)


def main() -> None:
    print("triton", triton.__version__)
    candidates = {
        "empty plain": lambda: empty_kernel[(1,)](PDL=False),
        "empty pdl": lambda: empty_kernel[(1,)](PDL=True, launch_pdl=True),
    }
    for rows, width in ((1, 4096), (16, 8192)):
        x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
        out = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 1024),)

        def plain(out=out, x=x, n=n, grid=grid) -> None:
            negate_kernel[grid](out, x, n, BLOCK=1024, PDL=False)

        def pdl(out=out, x=x, n=n, grid=grid) -> None:
            negate_kernel[grid](out, x, n, BLOCK=1024, PDL=True, launch_pdl=True)

        pdl()
        torch.cuda.synchronize()
        assert torch.equal(out, -x)
        candidates[f"negate {rows}x{width} plain"] = plain
        candidates[f"negate {rows}x{width} pdl"] = pdl
    for name, values in time_rotated(candidates, 5).items():
        print(f"{name:28s} {min(values):.3f} us")


if __name__ == "__main__":
    main()
