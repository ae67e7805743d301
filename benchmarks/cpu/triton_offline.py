"""Triton kernels compiled offline for Hopper (sm_90), with no GPU: Triton compiles for a
target given by hand, and its package carries the `cuobjdump` that lists the machine code.
Shared by `triton_layouts.py` (reduction layouts), `triton_sass.py` (machine code) and
`gate_sass_counts.py` (the gated kernels' instruction counts)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import triton
from triton.backends.compiler import GPUTarget

TARGET = GPUTarget("cuda", 90, 32)
CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"


def norm_signature(dtype: str, weight: str, out: str, hidden: bool = True) -> dict[str, str]:
    """The runtime arguments of `norm_kernel` (and, without `hidden`, of
    `cluster_norm_kernel`) for rows of `dtype`, a weight of `weight` and outputs of `out`."""
    signature = {
        "x_ptr": f"*{dtype}", "x_stride": "i32", "r_ptr": f"*{dtype}", "r_stride": "i32",
        "w_ptr": f"*{weight}", "out_ptr": f"*{out}", "out_stride": "i32",
        "res_ptr": f"*{dtype}", "res_stride": "i32", "scale_ptr": "*fp32",
        "scale_out_ptr": "*fp32", "scale_ub_ptr": "*fp32", "hidden": "i32",
        "variance_size": "i32", "eps": "fp32",
    }  # fmt: skip
    if not hidden:
        del signature["hidden"]
    return signature


def compile_sm90(
    kernel: Any,
    runtime: dict[str, str],
    constants: dict[str, Any],
    aligned: list[str],
    warps: int,
) -> Any:
    """`kernel` compiled for sm_90 with the `runtime` arguments' types, the `constants`, and
    the `aligned` arguments specialized as 16-byte aligned (divisible by 16), as at run time.
    Floating-point fusion stays on, Triton 3.9's default, said aloud (unset, 3.9 warns that
    3.10 will turn it off)."""
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    signature = runtime | dict.fromkeys(constants, "constexpr")
    names = list(signature)
    source = triton.compiler.ASTSource(
        fn=kernel,
        signature=signature,
        constexprs=constants,
        attrs={(names.index(k),): [["tt.divisibility", 16]] for k in aligned},
    )
    return triton.compile(source, target=TARGET, options={"num_warps": warps})


def sass(compiled: Any, work: Path, name: str) -> str:
    """`cuobjdump -sass` of a compiled kernel (its cubin written under `work` as `name`)."""
    cubin = work / f"{name}.cubin"
    cubin.write_bytes(compiled.asm["cubin"])
    return subprocess.run(
        [str(CUOBJDUMP), "-sass", str(cubin)], capture_output=True, text=True, check=True
    ).stdout
