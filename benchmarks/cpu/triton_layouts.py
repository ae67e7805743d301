"""Without a GPU: compile `norm_kernel` for sm_90 with one, two and four programs a row and
compare the layout Triton gives every reduction's operand (the layout fixes the order of the
sum, so equal layouts mean the split keeps the bits); and, beside a weight of the row's width,
with and without the masks of a row that fills its block (`full_row_for`). Configurations:
fp32/fp16/bf16, with and without a residual, no, static or dynamic fp8 output, row blocks
1024/4096/8192, weight early or late, masks or none, plus fp32 and fp16 rows with a bf16
weight; arguments specialized as at run time on aligned rows, or with `--unaligned` as where
only the rows of `x` are (`row_split` splits no other rows: the layout follows the alignment of
`x`, which Triton knows from its specialization and the kernel cannot read).

CI runs both modes with the installed Triton (`nox -s layouts`). To check the Triton the GPU
machine runs, use it, e.g. `pip download --no-deps triton==3.6.0` and
`pip install --no-deps --target /tmp/t36 <wheel>`, then from the repository root:
`PYTHONPATH=/tmp/t36:packages/ir-spec/src:packages/ir-kernels-triton/src python
benchmarks/cpu/triton_layouts.py` (`triton-tuning-H100.log` sections 11 and 13).
"""

import functools
import itertools
import multiprocessing
import os
import re
import sys
from concurrent.futures import ProcessPoolExecutor

import triton
from triton_offline import compile_sm90, norm_signature

from ir_kernels_triton import cluster_norm as cn
from ir_kernels_triton import norm_kernels as nk
from ir_kernels_triton import norm_rules as nr

WIDTH = {"fp32": 4, "fp16": 2, "bf16": 2}
INTS = ("x_stride", "r_stride", "out_stride", "res_stride", "hidden", "variance_size")


def ttgir(
    dtype: str,
    weight: str,
    residual: bool,
    quant: int,
    block: int,
    split: int,
    early: bool,
    full_row: bool = False,
    unaligned: bool = False,
) -> str:
    signature = norm_signature(dtype, weight, "fp8e4nv" if quant else dtype)
    constants = dict(
        HAS_RESIDUAL=residual, HAS_WEIGHT=True, QUANT=quant, HAS_UB=False, BLOCK=block,
        SINGLE_PASS=True, EXACT_FP8=False, EARLY_WEIGHT=early, EVICT_FIRST=False, SPLIT=split,
        FULL_ROW=full_row, RELOAD=False, PDL=False,
    )  # fmt: skip
    if unaligned:
        aligned = ["x_ptr", "x_stride"]
    else:
        aligned = [k for k, v in signature.items() if v.startswith("*")] + list(INTS)
    warps = nr.norm_warps(block, quant, residual)
    compiled = compile_sm90(nk.norm_kernel, signature, constants, aligned, warps)
    return str(compiled.asm["ttgir"])


def reduction_layouts(ir: str) -> list[str]:
    layouts = dict(re.findall(r"^(#\w+) = (.*)$", ir, re.M))
    operands = re.findall(r'"tt.reduce"\(.*?\}\) : \(tensor<[^,]*, (#\w+)>', ir, re.S)
    return [layouts[name] for name in operands]


def cluster_ttgir(dtype: str, residual: bool, quant: int, block: int) -> tuple[str, str]:
    """TTGIR and PTX of `cluster_norm_kernel` for rows of `block` (one of `CLUSTER_BLOCKS`)
    `dtype` elements beside a weight of their type, every argument 16-byte aligned, as
    `launch_norm` compiles it (one block of the row's warps over `CLUSTER`)."""
    signature = norm_signature(dtype, dtype, "fp8e4nv" if quant else dtype, hidden=False)
    warps = nr.norm_warps(block, quant, residual)
    constants = dict(
        HAS_RESIDUAL=residual, QUANT=quant, HAS_UB=False, BLOCK=block, ROW_WARPS=warps,
        S=cn.CLUSTER, SUM_ASM="", SUM_CONSTRAINTS="",
    )  # fmt: skip
    # as `launch_norm` passes them: each warp sends its own sum where a block holds several
    constants.update(cn.sum_by_warps(cn.CLUSTER, warps, block))
    aligned = [k for k in signature if k != "eps"]
    compiled = compile_sm90(
        cn.cluster_norm_kernel, signature, constants, aligned, warps // cn.CLUSTER
    )
    return str(compiled.asm["ttgir"]), str(compiled.asm["ptx"])


def warp_sum_layouts(ir: str) -> list[str]:
    """The layouts of the x operand of every warp-sum exchange (`cluster_norm.warp_sum_asm`)
    in `ir`: that operand's elements are summed in its register order, as a reduction is."""
    layouts = dict(re.findall(r"^(#\w+) = (.*)$", ir, re.M))
    operands = re.findall(
        r"tt\.elementwise_inline_asm \"\{[^\"]*WARP_SUM_WAIT[^\"]*\".*?: tensor<[^,]*, (#\w+)>", ir
    )
    return [layouts[name] for name in operands]


def cluster_case(case: tuple[str, bool, int, int]) -> tuple[list[str], list[str], bool]:
    """The reduction layouts of the one-program kernel and of the cluster kernel for `case`
    (the warps a block aside; a warp-sum exchange counts as the sum's reduction), and whether
    the cluster kernel's PTX holds its exchange."""
    dtype, residual, quant, block = case
    one = reduction_layouts(ttgir(dtype, dtype, residual, quant, block, 1, True, True))
    ir, ptx = cluster_ttgir(dtype, residual, quant, block)
    spread = warp_sum_layouts(ir) + reduction_layouts(ir)
    exchange = all(op in ptx for op in ("mapa.shared::cluster", "st.async", "mbarrier.try_wait"))

    def no_warps(layouts: list[str]) -> list[str]:
        return [re.sub(r"warpsPerCTA = \[\d+\]", "warpsPerCTA = [_]", x) for x in layouts]

    return no_warps(one), no_warps(spread), exchange


def case_layouts(
    case: tuple[str, str, bool, int, int, bool, bool], unaligned: bool
) -> list[list[str]]:
    """The reduction layouts of `case` with one, two and four programs a row."""
    dtype, weight, residual, quant, block, early, full = case
    return [
        reduction_layouts(ttgir(dtype, weight, residual, quant, block, n, early, full, unaligned))
        for n in (1, 2, 4)
    ]


def main() -> int:
    unaligned = "--unaligned" in sys.argv
    cases = (
        [
            (dtype, dtype, residual, quant, block, early, full)
            for dtype, residual, quant, block, early, full in itertools.product(
                ("fp32", "fp16", "bf16"),
                (False, True),
                (0, 1, 2),
                (1024, 4096, 8192),
                (False, True),
                (False, True),
            )
        ]
        + [
            ("fp32", "bf16", False, quant, block, True, full)
            for quant in (0, 1, 2)
            for block in (1024, 8192)
            for full in (False, True)
        ]
        + [
            # two 16-bit types: the same width, so the masks may go
            ("fp16", "bf16", residual, quant, 8192, True, full)
            for residual in (False, True)
            for quant in (0, 2)
            for full in (False, True)
        ]
    )
    different = 0
    layouts = {}
    # each compile takes a core for about a second: the cases compile in parallel
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1, mp_context=context) as pool:
        compiled = list(
            pool.map(functools.partial(case_layouts, unaligned=unaligned), cases, chunksize=4)
        )
    for case, (one, *split) in zip(cases, compiled, strict=True):
        layouts[case] = one
        if any(other != one for other in split):
            different += 1
            print("different:", case, one, split)
    # masks dropped (`full_row_for`) only beside a weight of the row's width: there the rule
    # may follow the batch, so the layouts must agree with and without them
    unmasked = 0
    for case, one in layouts.items():
        if WIDTH[case[0]] == WIDTH[case[1]] and case[6] and layouts[(*case[:6], False)] != one:
            unmasked += 1
            print("different without masks:", case, one, layouts[(*case[:6], False)])
    # rows spread over a cluster (`cluster_norm`): each block's reduction must run in the
    # one-program kernel's layout (but for its share of the warps), on aligned rows only
    clustered = 0
    if not unaligned:
        # the variants `norm_rules.cluster_for` spreads at each width
        spread_at: dict[int, tuple[tuple[bool, int], ...]] = {
            nr.WIDE_CLUSTER_BLOCK: ((True, 0), (True, 1), (False, 2), (False, 0))
        }
        spread_at.update(
            {block: ((True, 0), (True, 1)) for block in cn.CLUSTER_BLOCKS if block not in spread_at}
        )
        cluster_cases = [
            (dtype, residual, quant, block)
            for block, variants in spread_at.items()
            for dtype in ("fp16", "bf16")
            for residual, quant in variants
        ]
        with ProcessPoolExecutor(max_workers=os.cpu_count() or 1, mp_context=context) as pool:
            for config, (one, spread, exchange) in zip(
                cluster_cases, pool.map(cluster_case, cluster_cases), strict=True
            ):
                if one != spread or not exchange:
                    clustered += 1
                    print("cluster kernel differs:", config, one, spread, "exchange", exchange)
        print(f"{len(cluster_cases)} cluster configurations, {clustered} differing")
    print(
        f"{len(cases)} configurations, {different} with other reduction layouts when split, "
        f"{unmasked} without masks (triton {triton.__version__})"
    )
    return 1 if different or unmasked or clustered else 0


if __name__ == "__main__":
    sys.exit(main())
