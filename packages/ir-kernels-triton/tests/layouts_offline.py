"""Compile the norm kernels for sm_90 without a GPU and compare the layouts Triton gives their
reductions (run as a script by `test_layouts.py`, in a process without ``TRITON_INTERPRET``:
the interpreter's kernels cannot be compiled).

Triton orders a reduction by its operand's layout, so equal layouts mean the same order of a
row's sum, hence the same bits. Three checks, each printing one JSON object on stdout:

- ``split``: `norm_kernel` with one, two and four programs a row (`rules.split_for`), and,
  beside a weight of the row's width, with and without the masks of a row that fills its block
  (`rules.full_row_for`). fp32/fp16/bf16 rows, with and without a residual, no, static or
  dynamic fp8 output, row blocks 1024/4096/8192, weight early or late, masks or none, plus
  fp32 and fp16 rows beside a bf16 weight. Arguments are specialized as at run time on aligned
  rows, or (``--unaligned``) as where only the rows of `x` are: `rules.row_split` splits no
  other rows, since the layout follows the alignment of `x`, which Triton knows from its
  specialization and the kernel cannot read.
- ``cluster``: `cluster_norm_kernel` for the variants `rules.cluster_for` spreads at each width:
  each block's reduction (or warp-sum exchange) must run in the one-program kernel's layout,
  but for its share of the warps, and its PTX must hold the exchange.
- ``probe``: whether this Triton compiles for sm_90 offline at all.

Output: ``{"checked": N, "differences": [...]}``, or ``{"skip": reason}`` where this Triton
cannot compile for sm_90 offline.
"""

import argparse
import functools
import itertools
import json
import multiprocessing
import os
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Any

#: The widths of the row types, in bytes.
WIDTH = {"fp32": 4, "fp16": 2, "bf16": 2}
#: The integer arguments of `norm_kernel`, specialized as multiples of 16 on aligned rows.
INTS = ("x_stride", "r_stride", "out_stride", "res_stride", "hidden", "variance_size")

#: One configuration of `norm_kernel`: rows, weight, residual, quant, block, early weight, full
#: row (no masks).
Case = tuple[str, str, bool, int, int, bool, bool]


def norm_signature(dtype: str, weight: str, out: str, hidden: bool = True) -> dict[str, str]:
    """The runtime arguments of `norm_kernel` (and, without `hidden`, of
    `cluster_norm_kernel`) for rows of `dtype`, a weight of `weight` and outputs of `out`."""
    signature = {
        "x_ptr": f"*{dtype}", "x_stride": "i32", "r_ptr": f"*{dtype}", "r_stride": "i32",
        "w_ptr": f"*{weight}", "out_ptr": f"*{out}", "out_stride": "i32",
        "res_ptr": f"*{dtype}", "res_stride": "i32", "scale_ptr": "*fp32",
        "scale_out_ptr": "*fp32", "scale_ub_ptr": "*fp32", "hidden": "i32",
        "variance_size": "i32", "eps": "fp32", "x_heads": "i32", "x_head_stride": "i32",
    }  # fmt: skip
    if not hidden:
        for name in ("hidden", "x_heads", "x_head_stride"):
            del signature[name]
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
    Floating-point fusion stays on, Triton's default, said aloud (unset, Triton 3.9 warns that
    its default will change)."""
    import triton
    from triton.backends.compiler import GPUTarget

    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    signature = runtime | dict.fromkeys(constants, "constexpr")
    names = list(signature)
    source = triton.compiler.ASTSource(
        fn=kernel,
        signature=signature,
        constexprs=constants,
        attrs={(names.index(k),): [["tt.divisibility", 16]] for k in aligned},
    )
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})


def reduction_layouts(ir: str) -> list[str]:
    """The layout of every reduction's operand in TTGIR `ir`, in order."""
    layouts = dict(re.findall(r"^(#\w+) = (.*)$", ir, re.M))
    operands = re.findall(r'"tt.reduce"\(.*?\}\) : \(tensor<[^,]*, (#\w+)>', ir, re.S)
    return [layouts[name] for name in operands]


def warp_sum_layouts(ir: str) -> list[str]:
    """The layouts of the x operand of every warp-sum exchange (`launch.clusters.warp_sum_asm`)
    in `ir`: that operand's elements are summed in its register order, as a reduction is."""
    layouts = dict(re.findall(r"^(#\w+) = (.*)$", ir, re.M))
    operands = re.findall(
        r"tt\.elementwise_inline_asm \"\{[^\"]*WARP_SUM_WAIT[^\"]*\".*?: tensor<[^,]*, (#\w+)>", ir
    )
    return [layouts[name] for name in operands]


def norm_ttgir(case: Case, split: int, unaligned: bool = False) -> str:
    """TTGIR of `norm_kernel` for `case` with `split` programs a row."""
    from ir_kernels_triton.norms import kernel, rules

    dtype, weight, residual, quant, block, early, full_row = case
    signature = norm_signature(dtype, weight, "fp8e4nv" if quant else dtype)
    # rows addressed by one stride: one head a row, specialized away as at run time
    constants = dict(
        x_heads=1, HAS_RESIDUAL=residual, HAS_WEIGHT=True, QUANT=quant, HAS_UB=False, BLOCK=block,
        SINGLE_PASS=True, EXACT_FP8=False, EARLY_WEIGHT=early, EVICT_FIRST=False, SPLIT=split,
        FULL_ROW=full_row, RELOAD=False, PDL=False,
    )  # fmt: skip
    if unaligned:
        aligned = ["x_ptr", "x_stride", "x_head_stride"]
    else:
        aligned = [k for k, v in signature.items() if v.startswith("*")] + list(INTS)
        aligned.append("x_head_stride")
    warps = rules.norm_warps(block, quant, residual)
    return str(compile_sm90(kernel.norm_kernel, signature, constants, aligned, warps).asm["ttgir"])


def split_layouts(case: Case, unaligned: bool) -> list[list[str]]:
    """The reduction layouts of `case` with one, two and four programs a row."""
    return [reduction_layouts(norm_ttgir(case, n, unaligned)) for n in (1, 2, 4)]


def split_cases() -> list[Case]:
    """The configurations of the ``split`` check."""
    return (
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


def check_split(pool: ProcessPoolExecutor, unaligned: bool) -> dict[str, Any]:
    """The ``split`` check: rows shared by programs, and rows without masks."""
    cases = split_cases()
    compiled = pool.map(functools.partial(split_layouts, unaligned=unaligned), cases, chunksize=4)
    layouts: dict[Case, list[str]] = {}
    differences = []
    for case, (one, *split) in zip(cases, compiled, strict=True):
        layouts[case] = one
        if any(other != one for other in split):
            differences.append({"case": case, "one program": one, "split": split})
    # masks dropped (`full_row_for`) only beside a weight of the row's width: there the rule
    # may follow the batch, so the layouts must agree with and without them
    for case, one in layouts.items():
        masked = layouts[(*case[:6], False)]
        if WIDTH[case[0]] == WIDTH[case[1]] and case[6] and masked != one:
            differences.append({"case": case, "without masks": one, "with masks": masked})
    return {"checked": len(cases), "differences": differences}


def cluster_case(case: tuple[str, bool, int, int]) -> tuple[list[str], list[str], bool]:
    """The reduction layouts of the one-program kernel and of the cluster kernel for `case`
    (rows, residual, quant, block; the warps a block aside, a warp-sum exchange counting as the
    sum's reduction), and whether the cluster kernel's PTX holds its exchange."""
    from ir_kernels_triton.launch import clusters, tuning
    from ir_kernels_triton.norms import cluster_kernel, rules

    dtype, residual, quant, block = case
    one = reduction_layouts(norm_ttgir((dtype, dtype, residual, quant, block, True, True), 1))
    blocks = tuning.COMMON.clusters.norm_blocks
    signature = norm_signature(dtype, dtype, "fp8e4nv" if quant else dtype, hidden=False)
    warps = rules.norm_warps(block, quant, residual)
    constants = dict(
        HAS_RESIDUAL=residual, QUANT=quant, HAS_UB=False, BLOCK=block, ROW_WARPS=warps,
        S=blocks, SUM_ASM="", SUM_CONSTRAINTS="",
    )  # fmt: skip
    # as `launch_norm` passes them: each warp sends its own sum where a block holds several
    constants.update(clusters.sum_by_warps(blocks, warps, block))
    aligned = [k for k in signature if k != "eps"]
    compiled = compile_sm90(
        cluster_kernel.cluster_norm_kernel, signature, constants, aligned, warps // blocks
    )
    ir, ptx = str(compiled.asm["ttgir"]), str(compiled.asm["ptx"])
    spread = warp_sum_layouts(ir) + reduction_layouts(ir)
    exchange = all(op in ptx for op in ("mapa.shared::cluster", "st.async", "mbarrier.try_wait"))

    def no_warps(layouts: list[str]) -> list[str]:
        return [re.sub(r"warpsPerCTA = \[\d+\]", "warpsPerCTA = [_]", x) for x in layouts]

    return no_warps(one), no_warps(spread), exchange


def check_cluster(pool: ProcessPoolExecutor) -> dict[str, Any]:
    """The ``cluster`` check: rows spread over a cluster keep one program's layout."""
    from ir_kernels_triton.launch import tuning

    table = tuning.COMMON.clusters
    # the variants (residual, quant) `rules.cluster_for` spreads at each width
    spread_at: dict[int, tuple[tuple[bool, int], ...]] = {
        table.wide_norm_width: ((True, 0), (True, 1), (True, 2), (False, 2), (False, 0))
    }
    spread_at.update(
        {width: ((True, 0), (True, 1)) for width in table.norm_widths if width not in spread_at}
    )
    cases = [
        (dtype, residual, quant, block)
        for block, variants in spread_at.items()
        for dtype in ("fp16", "bf16")
        for residual, quant in variants
    ]
    differences = [
        {"case": case, "one program": one, "cluster": spread, "exchange": exchange}
        for case, (one, spread, exchange) in zip(cases, pool.map(cluster_case, cases), strict=True)
        if one != spread or not exchange
    ]
    return {"checked": len(cases), "differences": differences}


def probe() -> str:
    """Why this Triton cannot compile a kernel for sm_90 offline, or ``""`` where it can."""
    try:
        import triton
        import triton.language as tl

        @triton.jit
        def copy(src, dst, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(dst + offs, tl.load(src + offs))

        compile_sm90(copy, {"src": "*fp32", "dst": "*fp32"}, {"BLOCK": 128}, ["src", "dst"], 4)
    except Exception as error:  # any failure: this Triton cannot do it here
        return f"Triton cannot compile for sm_90 offline here ({type(error).__name__}: {error})"
    return ""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("check", choices=("split", "cluster", "probe"))
    parser.add_argument("--unaligned", action="store_true", help="only the rows of x aligned")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        parser.error("run without TRITON_INTERPRET=1: interpreted kernels cannot be compiled")
    reason = probe()
    if reason or args.check == "probe":
        print(json.dumps({"skip": reason} if reason else {"checked": 1, "differences": []}))
        return 0
    # each compile takes a core for a while: the configurations compile in parallel
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=args.workers, mp_context=context) as pool:
        split = args.check == "split"
        result = check_split(pool, args.unaligned) if split else check_cluster(pool)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
