"""SASS instructions an element of Triton's flat gated kernel, compiled offline for sm_90 (no
GPU needed: Triton compiles for a target given by hand, and its bundled cuobjdump lists the
machine code). The per-element count is the kernel's instructions over the outputs a thread
handles; it counts the address arithmetic and loads once a thread, so it falls slightly with
more outputs a thread.

Usage: python benchmarks/kernels/gate_sass_counts.py (packages on PYTHONPATH)
"""

import os
import re
import subprocess
import tempfile
from collections import Counter

import triton
from triton.backends.compiler import GPUTarget

from ir_kernels_triton import pointwise_kernels as pk

CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
GATES = {"silu": pk.ACT_SILU, "gelu": pk.ACT_GELU, "gelu_tanh": pk.ACT_GELU_TANH}
#: (outputs a row, block, warps)
LAUNCHES = ((28672, 1024, 4), (28672, 2048, 2), (5632, 512, 2))


def sass_lines(act: int, width: int, block: int, warps: int) -> list[str]:
    """The machine instructions of the flat bf16 gated kernel for this launch."""
    signature = {
        "x_ptr": "*bf16",
        "out_ptr": "*bf16",
        "scale_ptr": "*fp32",
        "total": "i32",
        **{k: "constexpr" for k in ("D", "ACT", "QUANT", "BLOCK", "EVEN", "INTERPRETED", "PDL")},
    }
    constants = {"D": width, "ACT": act, "QUANT": False, "BLOCK": block, "EVEN": True}
    aligned = [["tt.divisibility", 16]]
    source = triton.compiler.ASTSource(
        fn=pk.flat_gated_kernel,
        signature=signature,
        constexprs={**constants, "INTERPRETED": False, "PDL": False},
        attrs={(0,): aligned, (1,): aligned, (3,): aligned},
    )
    target = GPUTarget("cuda", 90, 32)
    compiled = triton.compile(source, target=target, options={"num_warps": warps})
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        listing = subprocess.run(
            [CUOBJDUMP, "-sass", cubin.name], capture_output=True, text=True, check=True
        ).stdout
    return [line for line in listing.splitlines() if re.match(r"\s+/\*[0-9a-f]{4}\*/", line)]


def opcode(line: str) -> str:
    """The opcode of a SASS line of ``cuobjdump -sass`` (after its predicate, if any)."""
    found = re.search(r"\*/\s+(?:@!?P\d\s+)?([A-Z0-9_]+)", line)
    if found is None:
        raise ValueError(f"no opcode in SASS line {line!r}")
    return found[1]


def main() -> None:
    print(f"Triton {triton.__version__}, sm_90, bf16")
    for name, act in GATES.items():
        for width, block, warps in LAUNCHES:
            lines = sass_lines(act, width, block, warps)
            ops = Counter(opcode(s) for s in lines)
            per_thread = block // (32 * warps)
            top = " ".join(f"{op}={n}" for op, n in ops.most_common(6))
            print(
                f"{name} {width} wide, {block} x {warps}: {len(lines)} instructions, "
                f"{len(lines) / per_thread:.1f} an element ({top})"
            )


if __name__ == "__main__":
    main()
