"""The kernels' own source run on the CPU: built with ``IR_CUDA_HOST_EMULATION`` (each CUDA
thread a fiber, shared memory and warp shuffles emulated), every ``cuda`` implementation
is checked against the native reference over dtypes, widths (vector body with scalar head and
tail, the all-scalar path, rows streamed in chunks), token counts and layouts, plus the op
variants, in-place semantics and batch invariance. Needs the CUDA toolkit's headers, not a GPU;
the GPU tests (`test_kernels.py`) run the real build."""

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from ir_kernels_cuda import impls
from ir_kernels_cuda.build import BuildUnavailable, build_emulated
from ir_kernels_cuda.testing import (
    assert_dynamic_norm_sums_as_one_team,
    assert_fused_add_sums_as_one_team,
    assert_matches_native_in_layout,
    assert_rotary_heads_read_only_the_table,
    assert_same_bits,
    bits,
    first_rows,
    opcheck_arguments,
    opcheck_utils,
    packed_qkv_arguments,
)
from ir_spec import IrOp, SampleSpec, ops
from ir_spec.testing import (
    NONFINITE_CASE_IDS,
    NONFINITE_CASES,
    OPTION_VARIANT_IDS,
    OPTION_VARIANTS,
    assert_close,
    assert_gelu_accurate_in_the_negative_tail,
    assert_impl_matches_native,
    assert_nonfinite_like_native,
    assert_rotary_reads_only_the_table,
    clone_args,
    matrix_spec,
    nonfinite_variant_ids,
    nonfinite_variants,
    results_of,
    sample_inputs,
)

PROVIDERS = [(op, p) for op in ops for p in op.impls if p.startswith("cuda")]
IDS = [f"{o.name}-{p}" for o, p in PROVIDERS]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
#: 8: one vector; 769 and 2050: scalar heads and tails, or all-scalar rows where the pointers'
#: alignments disagree; 4096: whole vectors; 8205: wider than one tile (streamed) in float32.
HIDDEN = [8, 769, 2050, 4096, 8205]
TOKENS = [1, 5]
LAYOUTS = ["contiguous", "strided", "3d"]


def spec(dtype: torch.dtype, hidden: int, tokens: int, layout: str, **options: Any) -> SampleSpec:
    return matrix_spec(dtype, hidden, tokens, layout, device="cpu", **options)


@pytest.fixture(scope="module", autouse=True)
def emulated_kernels() -> Iterator[None]:
    """Point the implementations at the emulated build for this module's tests."""
    try:
        build_emulated()
    except BuildUnavailable as exc:
        pytest.skip(f"no emulated build here: {exc}")
    impls.register_fakes("ir_cuda_emulated")
    previous = impls.KERNELS
    impls.KERNELS = torch.ops.ir_cuda_emulated
    yield
    impls.KERNELS = previous


def check(op: IrOp, provider: str, args: tuple[Any, ...]) -> None:
    """`assert_impl_matches_native` without asking `accepts` (it requires CUDA tensors)."""
    assert_impl_matches_native(op, provider, args, check_accepts=False)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("op", "provider"), PROVIDERS, ids=IDS)
def test_matches_native(
    op: IrOp, provider: str, dtype: torch.dtype, hidden: int, tokens: int, layout: str
) -> None:
    check(op, provider, sample_inputs(op, spec(dtype, hidden, tokens, layout)))


@pytest.mark.parametrize("padding", [13, 64])
@pytest.mark.parametrize("hidden", [769, 4096])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("op", "provider"), PROVIDERS, ids=IDS)
def test_strided_rows_reach_the_kernels(
    op: IrOp, provider: str, dtype: torch.dtype, hidden: int, padding: int
) -> None:
    """Rows `padding` elements longer than their width, given to the implementation as they are
    (the matrix's copies are contiguous): 13 leaves the rows unaligned, 64 keeps every row
    aligned at a stride that is not its width (the aligned kernels' row strides)."""
    spec = SampleSpec(
        batch_shape=(5,), hidden_size=hidden, dtype=dtype, seed=hidden, row_padding=padding
    )
    assert_matches_native_in_layout(op, provider, sample_inputs(op, spec))


ROTARY_HEADS = [
    (op, p)
    for op in (ops.qk_norm_rotary_embedding, ops.rotary_embedding_write_kv_cache)
    for p in op.impls
    if p.startswith("cuda")
]
ROTARY_HEAD_IDS = [f"{o.name}-{p}" for o, p in ROTARY_HEADS]


@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "unaligned"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("op", "provider"), ROTARY_HEADS, ids=ROTARY_HEAD_IDS)
def test_heads_of_one_packed_qkv(op: IrOp, provider: str, dtype: torch.dtype, offset: int) -> None:
    """Query, key (and value) as slices of one packed qkv projection's rows. In place, the
    heads are normalized and rotated inside the packed rows, and their other columns (the
    value, the rows' ends) are left as they were."""
    args, packed = packed_qkv_arguments(op, dtype, "cpu", offset=offset)
    assert_matches_native_in_layout(op, provider, args)
    if op.impls[provider].inplace:
        before = packed.clone()
        expected = results_of(op, native := clone_args(args), op.native(*native))
        got = results_of(op, args, op.impls[provider].fn(*args))
        assert_close(op, got, expected)
        written = args[1].shape[-1] + args[2].shape[-1]  # the query's and the key's columns
        assert torch.equal(packed[:, written:], before[:, written:])
        assert torch.equal(packed[:, :written], torch.cat(got[:2], dim=-1))


@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "unaligned"])
@pytest.mark.parametrize("is_neox_style", [True, False], ids=["neox", "pairs"])
@pytest.mark.parametrize("rotary_dim", [64, 32], ids=["whole-head", "partial"])
@pytest.mark.parametrize("positions_dtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize(("op", "provider"), ROTARY_HEADS, ids=ROTARY_HEAD_IDS)
def test_rotary_heads_outside_the_table_give_nan(
    op: IrOp,
    provider: str,
    positions_dtype: torch.dtype,
    rotary_dim: int,
    is_neox_style: bool,
    offset: int,
) -> None:
    """Positions outside the table (an int64 one by its high word too) read nothing outside
    it: NaN where their tokens rotate, in the results and the key's cache slot. Aligned heads
    take the aligned kernel (partial neox rotation: partners exchanged by shuffles), unaligned
    ones the generic kernel."""
    assert_rotary_heads_read_only_the_table(
        op,
        provider,
        "cpu",
        positions_dtype=positions_dtype,
        rotary_dim=rotary_dim,
        is_neox_style=is_neox_style,
        offset=offset,
    )


CACHE_WRITERS = [
    (op, p)
    for op in (ops.write_kv_cache, ops.rotary_embedding_write_kv_cache)
    for p in op.impls
    if p.startswith("cuda")
]


@pytest.mark.parametrize("slot_dtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("hidden", [769, 4096])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    ("op", "provider"), CACHE_WRITERS, ids=[f"{o.name}-{p}" for o, p in CACHE_WRITERS]
)
def test_slots_past_the_cache_store_nothing(
    op: IrOp, provider: str, dtype: torch.dtype, hidden: int, slot_dtype: torch.dtype
) -> None:
    """A slot past the cache's last stores nothing (the native function fails in torch's
    indexing there), as a padding slot: the call gives what the native function gives with
    those tokens' slots -1. int32 slots as int64 ones."""
    args = list(sample_inputs(op, spec(dtype, hidden, 5, "contiguous")))
    names = list(op.signature.parameters)
    cache = args[names.index("key_cache")]
    slots = args[names.index("slot_mapping")].to(slot_dtype)
    padded = slots.clone()
    slots[1], slots[3] = cache.shape[0] * cache.shape[1], 2**31 - 1
    padded[1], padded[3] = -1, -1
    args[names.index("slot_mapping")] = slots
    got = results_of(op, call := clone_args(args), op.impls[provider].fn(*call))
    args[names.index("slot_mapping")] = padded
    expected = results_of(op, native := clone_args(args), op.native(*native))
    assert_close(op, got, expected)


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("hidden", [384, 5120])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_group_counts_not_a_power_of_two(dtype: torch.dtype, hidden: int, layout: str) -> None:
    """3 and 40 groups of 128 a token: the kernels find a strided row's group by division there
    (a shift where the count is a power of two; contiguous rows are one row per group)."""
    x = sample_inputs(ops.group_quant_fp8, spec(dtype, hidden, 5, layout))[0]
    check(ops.group_quant_fp8, "cuda", (x, 128, False))


@pytest.mark.parametrize("aligned", [True, False], ids=["aligned", "unaligned"])
@pytest.mark.parametrize("is_neox_style", [True, False], ids=["neox", "pairs"])
@pytest.mark.parametrize("rotary_dim", [64, 32], ids=["whole-head", "partial"])
@pytest.mark.parametrize("positions_dtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("provider", ["cuda", "cuda_inplace"])
def test_rotary_positions_outside_the_table_give_nan(
    provider: str, positions_dtype: torch.dtype, rotary_dim: int, is_neox_style: bool, aligned: bool
) -> None:
    """Negative positions and those past the table read nothing outside it (an int64 one by
    its high word too): NaN where they rotate, the other tokens untouched. Whole heads and
    partial rotation in place take the aligned kernel, out of place partial rotation and
    unaligned rows the generic one (its vector and scalar paths)."""
    assert_rotary_reads_only_the_table(
        ops.rotary_embedding.impls[provider].fn,
        torch.bfloat16,
        "cpu",
        positions_dtype=positions_dtype,
        rotary_dim=rotary_dim,
        is_neox_style=is_neox_style,
        aligned=aligned,
    )


NONFINITE_PROVIDERS = nonfinite_variants("cuda")


@pytest.mark.parametrize(("value", "column"), NONFINITE_CASES, ids=NONFINITE_CASE_IDS)
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("hidden", [8, 769, 4096, 8205])
@pytest.mark.parametrize(
    ("op", "provider", "options"),
    NONFINITE_PROVIDERS,
    ids=nonfinite_variant_ids(NONFINITE_PROVIDERS),
)
def test_nonfinite_inputs_give_what_native_gives(
    op: IrOp,
    provider: str,
    options: dict[str, Any],
    hidden: int,
    tokens: int,
    layout: str,
    value: float,
    column: float,
) -> None:
    """A NaN or an infinity in a bf16 row gives NaN and infinities where the native function
    does: a NaN makes a dynamic scale and its whole row (or group) NaN. Aligned rows take the
    vector paths, strided ones the scalar heads and tails."""
    args = sample_inputs(op, spec(torch.bfloat16, hidden, tokens, layout, **options))
    assert_nonfinite_like_native(op, op.impls[provider].fn, args, value=value, column=column)


@pytest.mark.parametrize("hidden", [2048, 769])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rotary_takes_int32_positions(dtype: torch.dtype, hidden: int) -> None:
    """int32 positions give bitwise the int64 positions' result (aligned and generic kernels)."""
    args = sample_inputs(ops.rotary_embedding, spec(dtype, hidden, 5, "contiguous"))
    as_int32 = (args[0].to(torch.int32), *args[1:])
    check(ops.rotary_embedding, "cuda", as_int32)
    impl = ops.rotary_embedding.impls["cuda"]
    assert_same_bits(impl.fn(*clone_args(args)), impl.fn(*clone_args(as_int32)))


@pytest.mark.parametrize(("op", "provider"), PROVIDERS, ids=IDS)
def test_no_tokens(op: IrOp, provider: str) -> None:
    check(op, provider, sample_inputs(op, spec(torch.float16, 256, 0, "contiguous")))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("name", "options"), OPTION_VARIANTS, ids=OPTION_VARIANT_IDS)
def test_variants(name: str, options: dict[str, Any], dtype: torch.dtype, layout: str) -> None:
    op = getattr(ops, name)
    args = sample_inputs(op, spec(dtype, 256, 5, layout, **options))
    for provider in [p for p in op.impls if p.startswith("cuda")]:
        if options.get("weight_dtype", dtype) != dtype:
            # supports_args leaves it to other providers; the kernels' own check refuses it
            with pytest.raises(RuntimeError, match=r"weight must be .* dtype"):
                op.impls[provider].fn(*clone_args(args))
        else:
            check(op, provider, args)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize(("name", "hidden"), [("group_quant_fp8", 512), ("dynamic_quant_fp8", 128)])
@pytest.mark.parametrize("gbps_per_sm", ["25.4", "37"])
def test_short_rows_over_the_l2(
    monkeypatch: pytest.MonkeyPatch, name: str, hidden: int, dtype: torch.dtype, gbps_per_sm: str
) -> None:
    """Rows of 16 vectors without a norm, over an L2 shrunk to 64 KiB, store after a block
    barrier (`launch_streamed_groups`), as the launch table says for each device class: teams
    of 16 with one vector a thread in blocks of 128 at 25.4 GB/s of DRAM bandwidth per SM, teams
    of 8 in blocks of 512 at 37 (1200 rows: the last block partly empty). Still the reference's
    result, and a row's bits are those it gets alone (one token stays on teams of 8 that store
    row by row)."""
    monkeypatch.setenv("IR_CUDA_EMULATED_L2_BYTES", str(64 << 10))
    monkeypatch.setenv("IR_CUDA_EMULATED_DRAM_GBPS_PER_SM", gbps_per_sm)
    op = getattr(ops, name)
    args = sample_inputs(op, spec(dtype, hidden, 300, "contiguous"))
    check(op, "cuda", args)
    whole = op.impls["cuda"].fn(*clone_args(args))
    alone = op.impls["cuda"].fn(*clone_args((args[0][:1], *args[1:])))
    for got, expected in zip(alone, whole, strict=True):
        assert torch.equal(bits(got), bits(expected)[:1])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ["silu_and_mul", "gelu_and_mul"])
def test_streamed_gates_follow_the_cards_bandwidth(
    monkeypatch: pytest.MonkeyPatch, name: str, dtype: torch.dtype
) -> None:
    """Gates streamed from DRAM (an L2 shrunk to 64 KiB) take the launch table's form for each
    device class: four elements a thread (silu) at 25.4 GB/s of DRAM bandwidth per SM, a vector
    a thread (silu) or a vector a thread in blocks of 64 (16-bit gelu) at 37. The reference's
    result, and the same bits in both classes."""
    op = getattr(ops, name)
    # 80 rows of 2048 outputs: past the decode sizes (128K outputs) and gelu's few-row launch
    args = sample_inputs(op, spec(dtype, 4096, 80, "contiguous"))
    monkeypatch.setenv("IR_CUDA_EMULATED_L2_BYTES", str(64 << 10))
    results = []
    for gbps_per_sm in ("25.4", "37"):
        monkeypatch.setenv("IR_CUDA_EMULATED_DRAM_GBPS_PER_SM", gbps_per_sm)
        check(op, "cuda", args)
        results.append(op.impls["cuda"].fn(*clone_args(args)))
    assert torch.equal(results[0], results[1])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hidden", [2048, 2056])
def test_streamed_static_quant_runs_flat(
    monkeypatch: pytest.MonkeyPatch, hidden: int, dtype: torch.dtype
) -> None:
    """static_quant_fp8 past the decode sizes with its bytes streamed from DRAM (an L2 shrunk to
    64 KiB) runs contiguous rows as one flat run, a vector a thread (at 2056 the last block only
    partly in the run), and strided rows on the row grid: both the reference's result, and
    bitwise the same."""
    monkeypatch.setenv("IR_CUDA_EMULATED_L2_BYTES", str(64 << 10))
    op = ops.static_quant_fp8
    x, scale = sample_inputs(op, spec(dtype, hidden, 80, "contiguous"))
    wide = torch.empty(80, hidden + 8, dtype=dtype)
    wide[:, :hidden] = x
    strided = wide[:, :hidden]
    check(op, "cuda", (x, scale))
    check(op, "cuda", (strided, scale))
    flat = op.impls["cuda"].fn(x, scale)
    assert torch.equal(bits(flat), bits(op.impls["cuda"].fn(strided, scale)))


# each emulates 2 x 257 rows of 512 threads (about 30 s)
@pytest.mark.parametrize(
    ("name", "provider"), [("rms_norm", "cuda"), ("fused_add_rms_norm", "cuda_inplace")]
)
def test_wide_rows_read_again_over_the_l2(
    monkeypatch: pytest.MonkeyPatch, name: str, provider: str
) -> None:
    """bf16 rows of 8192 past 256 rows whose op touches more than 4 L2 sizes (the L2 shrunk to
    1 MiB) are read again after their sum (`reload_rows`) at 37 GB/s of DRAM bandwidth per SM
    (the deep-loads class), held in registers at 25.4: bitwise the same result (the held rows'
    kernel is checked against the reference by the other tests)."""
    op = getattr(ops, name)
    args = sample_inputs(op, spec(torch.bfloat16, 8192, 257, "contiguous"))
    monkeypatch.setenv("IR_CUDA_EMULATED_L2_BYTES", str(1 << 20))
    results = []
    for gbps_per_sm in ("25.4", "37"):
        monkeypatch.setenv("IR_CUDA_EMULATED_DRAM_GBPS_PER_SM", gbps_per_sm)
        results.append(op.impls[provider].fn(*clone_args(args)))
    assert_same_bits(results[0], results[1])


@pytest.mark.parametrize(("dtype", "width"), [(torch.bfloat16, 4096), (torch.float32, 2048)])
@pytest.mark.parametrize(("op", "provider"), PROVIDERS, ids=IDS)
def test_rows_are_batch_invariant(op: IrOp, provider: str, dtype: torch.dtype, width: int) -> None:
    """The first rows give bitwise the same results (and cache slots) alone as inside a larger
    batch. At these widths (512 vectors), 1 and 4 rows are spread over clusters of blocks and 40
    are not (`cluster.cuh`), and the fused add's 40 rows take two vectors a thread where the
    spread rows take one (`kHalves`); float32 outputs show a sum's last bit, which bf16 rounds
    away."""
    rows = 40
    inputs = sample_inputs(op, spec(dtype, width, rows, "contiguous", max_position=64))
    big = clone_args(inputs)
    full = op.impls[provider].fn(*big)
    for batch in (1, 4):
        part = clone_args(
            [
                a[:batch] if isinstance(a, torch.Tensor) and a.dim() and a.shape[0] == rows else a
                for a in inputs
            ]
        )
        out = op.impls[provider].fn(*part)
        for got, expected in zip(
            first_rows(op, part, out, batch), first_rows(op, big, full, batch), strict=True
        ):
            assert torch.equal(got, expected)


# each pair emulates 1200 rows of 256-512 threads (about 40 s): one dtype per provider
@pytest.mark.parametrize(
    ("provider", "dtype", "width"),
    [("cuda", torch.float32, 2048), ("cuda_inplace", torch.bfloat16, 4096)],
)
def test_fused_add_sums_as_one_team_in_every_layout(
    provider: str, dtype: torch.dtype, width: int
) -> None:
    """1 and 32 rows are spread over clusters (4 blocks a row, 132 SMs), 40 take two vectors a
    thread, all 1200 one. With float32 rows, 7 of the 32 differed where the two-vector kernel
    chained its vectors together, and 3 where the team's warps were combined farthest first."""
    fn = ops.fused_add_rms_norm.impls[provider].fn
    assert_fused_add_sums_as_one_team(fn, dtype, width, "cpu", batches=(1, 32, 40))


@pytest.mark.parametrize("width", [2048, 4096])
def test_dynamic_norm_sums_as_one_team_in_every_layout(width: int) -> None:
    """float32 rows of 512 (2048 wide) and 1024 vectors (4096), whose sums must not depend on
    the layout. The wider are spread over clusters at 1 and 32 rows and held by teams of half
    the threads with four vectors each (`halves_kernel`) at 40 and 300; the narrower by one
    block of two vectors a thread up to 256 rows and by the halves teams past that (300)."""
    fn = ops.rms_norm_dynamic_quant_fp8.impls["cuda"].fn
    assert_dynamic_norm_sums_as_one_team(
        fn, torch.float32, width, "cpu", batches=(1, 32, 40), rows=300
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gelu_is_accurate_in_the_negative_tail(dtype: torch.dtype) -> None:
    assert_gelu_accurate_in_the_negative_tail(ops.gelu_and_mul.impls["cuda"].fn, dtype, "cpu")


def test_opcheck_every_op() -> None:
    """Schemas (mutated arguments), fakes and autograd registration of every op, checked by
    torch.library.opcheck on the emulated build."""
    cases = opcheck_arguments("cpu")
    assert set(cases) == set(impls.IR_CUDA_OPS)
    for name, args in cases.items():
        torch.library.opcheck(
            getattr(torch.ops.ir_cuda_emulated, name), args, test_utils=opcheck_utils(args)
        )


#: The argument checks, run in a child process (`test_the_emulated_ops_check_their_arguments`).
ARGUMENT_CHECKS = """
import torch

from ir_kernels_cuda.build import build_emulated
from ir_kernels_cuda.testing import assert_bad_arguments_are_named

build_emulated()
assert_bad_arguments_are_named(torch.ops.ir_cuda_emulated, "cpu", torch.float32)
"""


def test_the_emulated_ops_check_their_arguments() -> None:
    """Bad arguments raise a RuntimeError naming them. In a child process, so that a crash
    fails this test instead of ending the run: where the library links a C++ runtime of its own,
    the first check that throws ends the process with a segmentation fault
    (`tests/test_runtime_link.py`)."""
    result = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", ARGUMENT_CHECKS],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, f"exit status {result.returncode}:\n{result.stderr[-3000:]}"


def test_long_builds_report_progress(caplog: pytest.LogCaptureFixture) -> None:
    import time

    from ir_kernels_cuda.build import progress

    with caplog.at_level("WARNING", logger="ir_kernels_cuda"), progress("compiling", every=0.05):
        time.sleep(0.3)
    beats = [r.getMessage() for r in caplog.records if "so far" in r.getMessage()]
    assert len(beats) >= 3
    assert beats[0].startswith("ir_kernels_cuda: compiling: ")


def test_a_killed_build_does_not_block_the_next(caplog: pytest.LogCaptureFixture) -> None:
    """torch's lock file, left in the build directory by a killed build, is removed (it made
    every later build wait for ever)."""
    import threading

    from ir_kernels_cuda import build

    baton = build.build_emulated() / "lock"
    baton.write_text("")
    build.build_emulated.cache_clear()
    with caplog.at_level("WARNING", logger="ir_kernels_cuda"):
        loader = threading.Thread(target=build.build_emulated, daemon=True)
        loader.start()
        loader.join(timeout=300)
    assert not loader.is_alive(), "the build waited on the stale lock file"
    assert not baton.exists()
    assert any("left by a build that was stopped" in r.getMessage() for r in caplog.records)


def test_a_second_process_waits_for_the_first_build(caplog: pytest.LogCaptureFixture) -> None:
    """While another process holds the build lock, the build says it waits, then loads."""
    import subprocess
    import sys

    from ir_kernels_cuda import build

    lock = build.build_emulated() / "build.lock"
    script = (
        f"import filelock, time\nwith filelock.FileLock({str(lock)!r}):\n"
        "    print('held', flush=True)\n    time.sleep(1.5)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "held"
    build.build_emulated.cache_clear()
    with caplog.at_level("WARNING", logger="ir_kernels_cuda"):
        build.build_emulated()
    assert holder.wait(timeout=30) == 0
    assert any("waiting for another process" in r.getMessage() for r in caplog.records)
