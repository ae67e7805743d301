"""SASS instructions an element of Triton's flat gated kernel, compiled offline for sm_90 (no
GPU needed: `triton_offline`). The per-element count is the kernel's instructions over the
outputs a thread handles; it counts the address arithmetic and loads once a thread, so it falls
slightly with more outputs a thread.

Usage: python benchmarks/cpu/gate_sass_counts.py (packages on PYTHONPATH)
"""

from __future__ import annotations

import re
import tempfile
from collections import Counter
from pathlib import Path

import triton
from triton_offline import compile_sm90, sass

from ir_kernels_triton import pointwise_kernels as pk

GATES = {"silu": pk.ACT_SILU, "gelu": pk.ACT_GELU, "gelu_tanh": pk.ACT_GELU_TANH}
#: (outputs a row, block, warps)
LAUNCHES = ((28672, 1024, 4), (28672, 2048, 2), (5632, 512, 2))
SIGNATURE = {"x_ptr": "*bf16", "out_ptr": "*bf16", "scale_ptr": "*fp32", "total": "i32"}


def sass_lines(act: int, width: int, block: int, warps: int, work: Path) -> list[str]:
    """The machine instructions of the flat bf16 gated kernel for this launch."""
    constants = {
        "D": width, "ACT": act, "QUANT": False, "BLOCK": block, "EVEN": True,
        "INTERPRETED": False, "PDL": False,
    }  # fmt: skip
    aligned = ["x_ptr", "out_ptr", "total"]
    compiled = compile_sm90(pk.flat_gated_kernel, SIGNATURE, constants, aligned, warps)
    listing = sass(compiled, work, f"gate_{act}_{width}_{block}_{warps}")
    return [line for line in listing.splitlines() if re.match(r"\s+/\*[0-9a-f]{4}\*/", line)]


def opcode(line: str) -> str:
    """The opcode of a SASS line of ``cuobjdump -sass`` (after its predicate, if any)."""
    found = re.search(r"\*/\s+(?:@!?P\d\s+)?([A-Z0-9_]+)", line)
    if found is None:
        raise ValueError(f"no opcode in SASS line {line!r}")
    return found[1]


def main() -> None:
    print(f"Triton {triton.__version__}, sm_90, bf16")
    with tempfile.TemporaryDirectory() as work:
        for name, act in GATES.items():
            for width, block, warps in LAUNCHES:
                lines = sass_lines(act, width, block, warps, Path(work))
                ops = Counter(opcode(s) for s in lines)
                per_thread = block // (32 * warps)
                top = " ".join(f"{op}={n}" for op, n in ops.most_common(6))
                print(
                    f"{name} {width} wide, {block} x {warps}: {len(lines)} instructions, "
                    f"{len(lines) / per_thread:.1f} an element ({top})"
                )


if __name__ == "__main__":
    main()
