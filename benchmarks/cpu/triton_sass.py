"""Without a GPU: the machine code (sm_90) of the Triton kernels that quantize to fp8, as a
listing `sass_compare.py` reads, to check that a change meant to leave them alone does.

Triton compiles for a target given by hand and its package carries `cuobjdump`, so no GPU is
needed. Each configuration (bf16 rows, every pointer 16-byte aligned, as the launchers pass
them) is listed under a name of its own: the norm kernel with a static or dynamic scale, with
and without a residual or ``scale_ub``, in one pass or looped; per-token and group quant; the
cluster norm and cluster quant of 8192-wide rows. The package is the one on `sys.path`: for an
older revision, point ``PYTHONPATH`` at its tree (``git worktree add /tmp/old REV``). Then:

    PYTHONPATH=/tmp/old/packages/ir-spec/src:/tmp/old/packages/ir-kernels-triton/src \\
        python benchmarks/cpu/triton_sass.py /tmp/old.sass
    python benchmarks/cpu/triton_sass.py /tmp/new.sass   # this tree, installed
    python benchmarks/cpu/sass_compare.py /tmp/old.sass /tmp/new.sass

Two Triton versions can compile the same source differently: compare listings of one version.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from triton_offline import compile_sm90, norm_signature, sass

from ir_kernels_triton import cluster_norm as cn
from ir_kernels_triton import dynamic_quant_kernels as dq
from ir_kernels_triton import norm_kernels as nk
from ir_kernels_triton import norm_rules as nr

#: Config = (name, kernel, signature of the runtime arguments, constexprs, warps, aligned args)
Config = tuple[str, Any, dict[str, str], dict[str, Any], int, list[str]]

NORM_SIGNATURE = norm_signature("bf16", "bf16", "fp8e4nv")
QUANT_SIGNATURE = {
    "x_ptr": "*bf16", "x_stride": "i32", "q_ptr": "*fp8e4nv", "q_stride": "i32",
    "scale_ptr": "*fp32", "ub_ptr": "*fp32",
}  # fmt: skip


def pointers(signature: dict[str, str]) -> list[str]:
    return [name for name, kind in signature.items() if kind.startswith("*")]


def configs() -> Iterator[Config]:
    """Every listed configuration."""
    for single, block in ((True, 2048), (False, 1024)):
        for quant in (1, 2):
            for residual in (False, True):
                for ub in (False, True) if quant == 2 else (False,):
                    constants: dict[str, Any] = dict(
                        HAS_RESIDUAL=residual, HAS_WEIGHT=True, QUANT=quant, HAS_UB=ub,
                        BLOCK=block, SINGLE_PASS=single, EXACT_FP8=False, EARLY_WEIGHT=True,
                        EVICT_FIRST=False, SPLIT=1, FULL_ROW=False, RELOAD=False, PDL=False,
                    )  # fmt: skip
                    name = f"norm_q{quant}_res{int(residual)}_ub{int(ub)}_single{int(single)}"
                    warps = nr.norm_warps(block, quant, residual)
                    yield (
                        name,
                        nk.norm_kernel,
                        NORM_SIGNATURE,
                        constants,
                        warps,
                        pointers(NORM_SIGNATURE),
                    )
        for ub in (False, True):
            signature = QUANT_SIGNATURE | {"hidden": "i32"}
            constants = dict(HAS_UB=ub, BLOCK=block, SINGLE_PASS=single, EXACT_FP8=False, PDL=False)
            yield (
                f"dynamic_quant_ub{int(ub)}_single{int(single)}",
                dq.dynamic_quant_kernel,
                signature,
                constants,
                4,
                pointers(signature),
            )
    group_signature = {
        "x_ptr": "*bf16", "x_stride": "i32", "q_ptr": "*fp8e4nv", "q_stride": "i32",
        "scale_ptr": "*fp32", "scale_row_stride": "i32", "scale_group_stride": "i32",
        "hidden": "i32", "group_size": "i32", "groups": "i32",
    }  # fmt: skip
    group_constants = dict(GROUPS_PER_PROGRAM=8, GROUP_BLOCK=128, EXACT_FP8=False, PDL=False)
    yield (
        "group_quant",
        dq.group_quant_kernel,
        group_signature,
        group_constants,
        4,
        pointers(group_signature),
    )
    block = 8192
    for ub in (False, True):
        signature = norm_signature("bf16", "bf16", "fp8e4nv", hidden=False)
        warps = nr.norm_warps(block, 2, False)
        constants = dict(
            HAS_RESIDUAL=False, QUANT=2, HAS_UB=ub, BLOCK=block, ROW_WARPS=warps,
            S=cn.CLUSTER, SUM_ASM="", SUM_CONSTRAINTS="",
        )  # fmt: skip
        constants.update(cn.sum_by_warps(cn.CLUSTER, warps, block))
        aligned = [k for k in signature if k != "eps"]
        yield (
            f"cluster_norm_ub{int(ub)}",
            cn.cluster_norm_kernel,
            signature,
            constants,
            warps // cn.CLUSTER,
            aligned,
        )
        constants = dict(HAS_UB=ub, BLOCK=block, S=cn.CLUSTER)
        yield (
            f"cluster_quant_ub{int(ub)}",
            cn.cluster_quant_kernel,
            QUANT_SIGNATURE,
            constants,
            4,
            pointers(QUANT_SIGNATURE),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("out", type=Path, help="where the listing goes")
    args = parser.parse_args()
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as work:
        for name, kernel, runtime, constants, warps, aligned in configs():
            compiled = compile_sm90(kernel, runtime, constants, aligned, warps)
            listing = sass(compiled, Path(work), name)
            # one kernel a cubin: its body under the configuration's own name
            body = listing.split("Function :", 1)[1].split("\n", 1)[1]
            lines += [f"\t\tFunction : {name}", body]
            print(name, flush=True)
    args.out.write_text("\n".join(lines))
    print(f"{len(lines) // 2} kernels -> {args.out}")


if __name__ == "__main__":
    main()
