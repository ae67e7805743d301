"""Provider cuda: registered everywhere, unsupported with a reason where it cannot build; the
sources compile wherever nvcc is present; on a GPU, every kernel against the native reference
(dtypes, hidden sizes, token counts, contiguous / strided / 3-D rows), in-place semantics,
batch invariance and opcheck on every ``torch.ops.ir_cuda`` op."""

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

from ir_kernels_cuda import build as build_module
from ir_kernels_cuda import impls
from ir_kernels_cuda.build import (
    PROGRAMMATIC_NAMESPACE,
    SOURCES,
    BuildUnavailable,
    build,
    csrc_dir,
)
from ir_kernels_cuda.testing import (
    assert_bad_arguments_are_named,
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
    programmatic_chains,
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
    assert_matches_native_on_the_second_gpu,
    assert_nonfinite_like_native,
    assert_rotary_reads_only_the_table,
    catalog_ops,
    clone_args,
    matrix_spec,
    needs_process_group,
    nonfinite_variant_ids,
    nonfinite_variants,
    results_of,
    sample_inputs,
)

GPU = impls.SUPPORTED
PROVIDERS = [(op, p) for op in ops for p in op.impls if p.startswith("cuda")]
on_gpu = pytest.mark.skipif(not GPU, reason=f"provider cuda unsupported here: {impls.REASON}")


def test_registered_for_every_catalog_op() -> None:
    """Every op but the collectives, which a provider for one device does not implement."""
    single = {op.name for op in catalog_ops() if not needs_process_group(op)}
    assert {op.name for op, _ in PROVIDERS} == single
    inplace = {op.name for op, p in PROVIDERS if p == "cuda_inplace"}
    assert inplace == {
        "fused_add_rms_norm",
        "rotary_embedding",
        "qk_norm_rotary_embedding",
        "rotary_embedding_write_kv_cache",
    }
    assert all(op.impls[p].inplace == (p == "cuda_inplace") for op, p in PROVIDERS)
    assert all(op.impls[p].batch_invariant for op, p in PROVIDERS)


def test_the_cache_key_follows_every_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change to any header of csrc/, or a new one, changes the build's cache key: a header
    left out would leave a stale build in place after it changed."""
    copy = tmp_path / "csrc"
    shutil.copytree(csrc_dir(), copy)
    monkeypatch.setattr(build_module, "csrc_dir", lambda: copy)
    assert {"common.cuh", "emulation.h", "norm_kernels.cuh"} <= set(build_module.headers())
    keys = {build_module.cache_key("9.0a")}
    for name in build_module.headers():
        header = copy / name
        text = header.read_text()
        header.write_text(text + "\n// changed\n")
        keys.add(build_module.cache_key("9.0a"))
        header.write_text(text)
    (copy / "added.cuh").write_text("#pragma once\n")
    keys.add(build_module.cache_key("9.0a"))
    assert len(keys) == len(build_module.headers()) + 1


@pytest.mark.skipif(GPU, reason="the kernels build here")
def test_unsupported_here_with_the_reason() -> None:
    assert impls.REASON
    for op, provider in PROVIDERS:
        impl = op.impls[provider]
        assert not impl.supported
        assert impl.unsupported_reason == impls.REASON


NVCC = shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None or GPU, reason="needs nvcc (and no GPU: the real build runs)")
def test_sources_compile_with_nvcc(tmp_path: Path) -> None:
    """A syntax or type error in csrc/ fails here, on machines without a GPU. The CPU build of
    torch ships the c10/ATen headers but not one generated CUDA header; a stub stands in."""
    from torch.utils.cpp_extension import include_paths

    stub = tmp_path / "stub" / "c10" / "cuda" / "impl"
    stub.mkdir(parents=True)
    (stub / "cuda_cmake_macros.h").write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    cuda_include = Path(NVCC or "").resolve().parents[1] / "include"
    flags = [f"-I{p}" for p in include_paths()] + [
        f"-I{tmp_path / 'stub'}",
        f"-I{cuda_include}",
        "-I/usr/local/cuda/include",
        f"-I{csrc_dir()}",
        "-std=c++20",
        "-O1",
    ]
    # every source plainly; the programmatic build's own lines (device.cuh, ops.cpp) in the
    # smallest kernel source
    builds: list[tuple[str, list[str]]] = [(name, []) for name in SOURCES]
    builds += [(name, ["-DIR_CUDA_PROGRAMMATIC"]) for name in ("ops.cpp", "rotary.cu")]

    def compile_one(name: str, defines: list[str]) -> subprocess.CompletedProcess[str]:
        source = csrc_dir() / name
        obj = tmp_path / f"{name}{''.join(defines)}.o"
        if name.endswith(".cu"):
            arch = "-gencode=arch=compute_90a,code=sm_90a"
            command = [NVCC or "nvcc", arch, "--expt-relaxed-constexpr", *flags, *defines]
            command += ["-c", str(source), "-o", str(obj)]
        else:
            command = ["g++", *flags, *defines, "-c", str(source), "-o", str(obj)]
        return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)

    # norm.cu takes most of the time: the others compile beside it
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        done = list(pool.map(lambda build: compile_one(*build), builds))
    for (name, defines), result in zip(builds, done, strict=True):
        assert result.returncode == 0, f"{name} {defines}:\n{result.stderr[-4000:]}"


# ------------------------------------------------------------------------------ GPU only
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
HIDDEN = [8, 769, 2048, 5125, 8192, 16384, 65536]
TOKENS = [0, 1, 7, 4096]
LAYOUTS = ["contiguous", "strided", "3d"]


def spec_for(
    dtype: torch.dtype, hidden: int, tokens: int, layout: str, seed: int = 0, **options: Any
) -> SampleSpec:
    return matrix_spec(dtype, hidden, tokens, layout, device="cuda", seed=seed, **options)


#: Largest tokens x hidden the matrix runs (65536 wide rows at 4096 tokens would only add time).
MAX_ELEMENTS = 1 << 26


@on_gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("op", "provider"), PROVIDERS, ids=[f"{o.name}-{p}" for o, p in PROVIDERS])
def test_matches_native(
    op: IrOp, provider: str, dtype: torch.dtype, hidden: int, tokens: int, layout: str
) -> None:
    if hidden * tokens > MAX_ELEMENTS:
        pytest.skip(f"{tokens} x {hidden} is above the matrix's {MAX_ELEMENTS} elements")
    assert_impl_matches_native(
        op, provider, sample_inputs(op, spec_for(dtype, hidden, tokens, layout))
    )


@on_gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("name", "options"), OPTION_VARIANTS, ids=OPTION_VARIANT_IDS)
def test_variants(name: str, options: dict[str, Any], dtype: torch.dtype, layout: str) -> None:
    op = getattr(ops, name)
    args = sample_inputs(op, spec_for(dtype, 256, 7, layout, **options))
    for provider in [p for p in op.impls if p.startswith("cuda")]:
        if options.get("weight_dtype", dtype) != dtype:
            assert not op.impls[provider].accepts(args)  # `test_norm_weight_of_the_rows_dtype`
        else:
            assert_impl_matches_native(op, provider, args)


@on_gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize(("op", "provider"), PROVIDERS, ids=[f"{o.name}-{p}" for o, p in PROVIDERS])
def test_kernels_launch_on_the_gpu_of_their_rows(op: IrOp, provider: str) -> None:
    """Rows on the second GPU while the first is current: each op launches on its rows' GPU
    (its `DeviceScope`) and leaves GPU 0 current."""
    assert_matches_native_on_the_second_gpu(op, provider)


@on_gpu
@pytest.mark.parametrize("layout", ["contiguous", "strided", "3d"])
@pytest.mark.parametrize(("tokens", "width"), [(16, 14336), (16, 28672), (32, 14336)])
@pytest.mark.parametrize("name", ["silu_and_mul", "gelu_and_mul", "silu_and_mul_static_quant_fp8"])
def test_gated_rows_just_past_decode_sizes(name: str, tokens: int, width: int, layout: str) -> None:
    """Few rows past the decode launches' 128K outputs (229K and 458K): the gated ops without
    quantization take the decode form up to 256K (`activation.cu`), silu four elements a thread
    up to 512K, the rest their own."""
    op = getattr(ops, name)
    args = sample_inputs(op, spec_for(torch.bfloat16, width, tokens, layout))
    assert_impl_matches_native(op, "cuda", args)


@on_gpu
@pytest.mark.parametrize("padding", [13, 64])
@pytest.mark.parametrize("hidden", [769, 4096, 8192])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("op", "provider"), PROVIDERS, ids=[f"{o.name}-{p}" for o, p in PROVIDERS])
def test_strided_rows_reach_the_kernels(
    op: IrOp, provider: str, dtype: torch.dtype, hidden: int, padding: int
) -> None:
    """Rows `padding` elements longer than their width, given to the implementation as they are
    (the matrix's copies are contiguous): 13 leaves the rows unaligned, 64 keeps every row
    aligned at a stride that is not its width (the aligned kernels' row strides)."""
    spec = SampleSpec(
        batch_shape=(7,),
        hidden_size=hidden,
        dtype=dtype,
        device="cuda",
        seed=hidden,
        row_padding=padding,
    )
    assert_matches_native_in_layout(op, provider, sample_inputs(op, spec))


ROTARY_HEADS = [
    (op, p)
    for op in (ops.qk_norm_rotary_embedding, ops.rotary_embedding_write_kv_cache)
    for p in op.impls
    if p.startswith("cuda")
]
ROTARY_HEAD_IDS = [f"{o.name}-{p}" for o, p in ROTARY_HEADS]


@on_gpu
@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "unaligned"])
@pytest.mark.parametrize("tokens", [1, 16, 4096])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("op", "provider"), ROTARY_HEADS, ids=ROTARY_HEAD_IDS)
def test_heads_of_one_packed_qkv(
    op: IrOp, provider: str, dtype: torch.dtype, tokens: int, offset: int
) -> None:
    """Query, key (and value) as slices of one packed qkv projection's rows, in a decode step
    and past it. In place, the heads are normalized and rotated inside the packed rows, and
    their other columns (the value, the rows' ends) are left as they were."""
    args, packed = packed_qkv_arguments(op, dtype, "cuda", tokens=tokens, offset=offset)
    assert_matches_native_in_layout(op, provider, args)
    if op.impls[provider].inplace:
        before = packed.clone()
        expected = results_of(op, native := clone_args(args), op.native(*native))
        got = results_of(op, args, op.impls[provider].fn(*args))
        assert_close(op, got, expected)
        written = args[1].shape[-1] + args[2].shape[-1]  # the query's and the key's columns
        assert torch.equal(packed[:, written:], before[:, written:])
        assert torch.equal(packed[:, :written], torch.cat(got[:2], dim=-1))


@on_gpu
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
    """Positions outside the table read nothing outside it: NaN where their tokens rotate, in
    the results and the key's cache slot; every other element as with positions in it."""
    assert_rotary_heads_read_only_the_table(
        op,
        provider,
        "cuda",
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


@on_gpu
@pytest.mark.parametrize("slot_dtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("hidden", [769, 4096])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    ("op", "provider"), CACHE_WRITERS, ids=[f"{o.name}-{p}" for o, p in CACHE_WRITERS]
)
def test_slots_past_the_cache_store_nothing(
    op: IrOp, provider: str, dtype: torch.dtype, hidden: int, slot_dtype: torch.dtype
) -> None:
    """A slot past the cache's last stores nothing, as a padding slot: the call gives what the
    native function gives with those tokens' slots -1."""
    args = list(sample_inputs(op, spec_for(dtype, hidden, 7, "contiguous")))
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


@on_gpu
@pytest.mark.parametrize("tokens", [1, 16])
@pytest.mark.parametrize(("op", "provider"), PROVIDERS, ids=[f"{o.name}-{p}" for o, p in PROVIDERS])
def test_every_op_replays_from_a_cuda_graph(op: IrOp, provider: str, tokens: int) -> None:
    """Every implementation replays from a CUDA graph at decode sizes (bf16 rows of 4096, the
    benchmark's graph replays), with the results and cache slots of a plain call."""
    args = sample_inputs(op, spec_for(torch.bfloat16, 4096, tokens, "contiguous", seed=9))
    fn = op.impls[provider].fn
    expected = results_of(op, plain := clone_args(args), fn(*plain))
    captured_args = clone_args(args)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn(*clone_args(captured_args))
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = fn(*captured_args)
    graph.replay()  # (capturing ran nothing: the captured arguments are as they were)
    torch.cuda.synchronize()
    for got, want in zip(results_of(op, captured_args, result), expected, strict=True):
        assert torch.equal(bits(got), bits(want))


@pytest.mark.parametrize(("op", "provider"), PROVIDERS, ids=[f"{o.name}-{p}" for o, p in PROVIDERS])
def test_every_implementation_takes_the_benchmark_samples(op: IrOp, provider: str) -> None:
    """The kernel benchmark (`ir_stack.bench.kernels`) times an op through its public name on
    its `sample_inputs`, bf16 rows on the GPU: every implementation's `supports_args` takes
    them, so none is left out of the grid (checked on fake CUDA tensors, so it runs without a
    GPU)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    spec = SampleSpec(batch_shape=(16,), hidden_size=4096, dtype=torch.bfloat16, device="cpu")
    real = sample_inputs(op, spec)
    supported = op.impls[provider].supports_args
    assert supported is not None
    with FakeTensorMode():
        args = [
            torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="cuda")
            if isinstance(a, torch.Tensor)
            else a
            for a in real
        ]
        assert supported(*args)


NORM_OPS = [op for op in ops if "weight" in op.signature.parameters and "cuda" in op.impls]


@pytest.mark.parametrize("op", NORM_OPS, ids=lambda op: op.name)
def test_norm_weight_of_the_rows_dtype(op: IrOp) -> None:
    """The kernels read a norm's weight in the rows' dtype: a float32 weight beside half rows,
    which the op allows, is left to other providers (checked on fake CUDA tensors, so it runs
    without a GPU too)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    real = sample_inputs(op, matrix_spec(torch.bfloat16, 64, 3, "contiguous", device="cpu"))
    supported = op.impls["cuda"].supports_args
    assert supported is not None
    with FakeTensorMode():
        args = [
            torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="cuda")
            if isinstance(a, torch.Tensor)
            else a
            for a in real
        ]
        weight = list(op.signature.parameters).index("weight")
        assert supported(*args)
        args[weight] = torch.empty(64, device="cuda", dtype=torch.float32)
        assert not supported(*args)


@on_gpu
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("hidden", [384, 5120])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_group_counts_not_a_power_of_two(dtype: torch.dtype, hidden: int, layout: str) -> None:
    """3 and 40 groups of 128 a token: the kernels find a strided row's group by division there
    (a shift where the count is a power of two; contiguous rows are one row per group)."""
    x = sample_inputs(ops.group_quant_fp8, spec_for(dtype, hidden, 4096, layout))[0]
    assert_impl_matches_native(ops.group_quant_fp8, "cuda", (x, 128, False))


NONFINITE_PROVIDERS = nonfinite_variants("cuda")


@on_gpu
@pytest.mark.parametrize(("value", "column"), NONFINITE_CASES, ids=NONFINITE_CASE_IDS)
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("tokens", [1, 5, 64])
@pytest.mark.parametrize("hidden", [8, 769, 1536, 3584, 8192, 20000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    ("op", "provider", "options"),
    NONFINITE_PROVIDERS,
    ids=nonfinite_variant_ids(NONFINITE_PROVIDERS),
)
def test_nonfinite_inputs_give_what_native_gives(
    op: IrOp,
    provider: str,
    options: dict[str, Any],
    dtype: torch.dtype,
    hidden: int,
    tokens: int,
    layout: str,
    value: float,
    column: float,
) -> None:
    """A NaN or an infinity in a row gives NaN and infinities where the native function does:
    a NaN makes a dynamic scale and its whole row (or group) NaN. 1536 and 3584 leave a
    team's last vectors past the row, 8192 at decode sizes spreads rows over a cluster, 20000
    streams them."""
    args = sample_inputs(op, spec_for(dtype, hidden, tokens, layout, **options))
    assert_nonfinite_like_native(op, op.impls[provider].fn, args, value=value, column=column)


@on_gpu
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
        "cuda",
        positions_dtype=positions_dtype,
        rotary_dim=rotary_dim,
        is_neox_style=is_neox_style,
        aligned=aligned,
    )


@on_gpu
@pytest.mark.parametrize("hidden", [2048, 769])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rotary_takes_int32_positions(dtype: torch.dtype, hidden: int) -> None:
    """int32 positions give bitwise the int64 positions' result (aligned and generic kernels)."""
    args = sample_inputs(ops.rotary_embedding, spec_for(dtype, hidden, 7, "contiguous"))
    as_int32 = (args[0].to(torch.int32), *args[1:])
    assert_impl_matches_native(ops.rotary_embedding, "cuda", as_int32)
    impl = ops.rotary_embedding.impls["cuda"]
    assert_same_bits(impl.fn(*clone_args(args)), impl.fn(*clone_args(as_int32)))


@on_gpu
@pytest.mark.parametrize("hidden", [2048, 8192])
@pytest.mark.parametrize(("op", "provider"), PROVIDERS, ids=[f"{o.name}-{p}" for o, p in PROVIDERS])
def test_rows_are_batch_invariant(op: IrOp, provider: str, hidden: int) -> None:
    """The first rows give bitwise the same results (and cache slots) inside batches of 1, 7 and
    4096 (on Hopper,
    wide rows of the small batches are spread over thread block clusters, `cluster.cuh`, and
    the fused adds' 4096 x 2048, 56-64 MB, load their rows evict-first, `just_over_l2`)."""
    # a rotary cache of 5000 positions, so that only batch-shaped tensors have 4096 rows
    inputs = sample_inputs(
        op, spec_for(torch.bfloat16, hidden, 4096, "contiguous", seed=3, max_position=5000)
    )
    big = clone_args(inputs)
    full = op.impls[provider].fn(*big)
    for batch in (1, 7):
        part = clone_args(
            [
                a[:batch] if isinstance(a, torch.Tensor) and a.dim() and a.shape[0] == 4096 else a
                for a in inputs
            ]
        )
        out = op.impls[provider].fn(*part)
        for got, expected in zip(
            first_rows(op, part, out, batch), first_rows(op, big, full, batch), strict=True
        ):
            assert torch.equal(got, expected)


SPLIT_OPS = [ops.rms_norm, ops.rms_norm_static_quant_fp8]


@on_gpu
@pytest.mark.parametrize("hidden", [4096, 8192])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", SPLIT_OPS, ids=[o.name for o in SPLIT_OPS])
def test_split_rows_give_the_bits_of_whole_rows(op: IrOp, dtype: torch.dtype, hidden: int) -> None:
    """Up to 16 rows held by teams of 256 or 512 threads of two vectors (16-bit rows of 4096 and
    8192, float32 of 4096) are each shared by four blocks that reduce the whole row and store a
    slice (`split_rows` in norm.cu); 17 rows are not shared, nor rows whose output is written
    over x. The first rows give the same bits in every case."""
    args = sample_inputs(op, spec_for(dtype, hidden, 17, "contiguous", seed=5))

    def first_rows(n: int) -> tuple[Any, ...]:
        return tuple(
            a[:n].clone() if isinstance(a, torch.Tensor) and a.dim() and a.shape[0] == 17 else a
            for a in args
        )

    impl = op.impls["cuda"]  # (neither op has an in-place provider)
    whole = impl.fn(*first_rows(17))
    split = impl.fn(*first_rows(16))
    whole, split = (r[0] if isinstance(r, tuple) else r for r in (whole, split))
    assert torch.equal(bits(split), bits(whole)[:16])
    if op is ops.rms_norm:
        x = first_rows(16)[0]
        torch.ops.ir_cuda.rms_norm_out(x, x, args[1], args[2], None)
        assert torch.equal(bits(x), bits(whole)[:16])


@on_gpu
@pytest.mark.parametrize(("dtype", "width"), [(torch.float32, 2048), (torch.bfloat16, 4096)])
@pytest.mark.parametrize("provider", ["cuda", "cuda_inplace"])
def test_fused_add_sums_as_one_team_in_every_layout(
    provider: str, dtype: torch.dtype, width: int
) -> None:
    """On a card of 132 SMs, 1 and 16 rows of 512 vectors are spread over clusters (one vector
    a thread), 40 and 1024 take two vectors a thread, all 1200 one: one sum order in all three."""
    fn = ops.fused_add_rms_norm.impls[provider].fn
    assert_fused_add_sums_as_one_team(fn, dtype, width, "cuda", batches=(1, 16, 40, 1024))


@on_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("vectors", [512, 1024])
def test_dynamic_norm_sums_as_one_team_in_every_layout(dtype: torch.dtype, vectors: int) -> None:
    """Rows of 512 and 1024 vectors. The wider are spread over clusters at 1 and 16 rows and
    held by teams of half the threads with four vectors each (`halves_kernel`) past that; the
    narrower by one block of two vectors a thread at 1, 16 and 40 rows and by the halves teams
    past 256 (1024 and all 4096). float32 scales carry the sum's last bits; bf16 rows are the
    benchmark grid's."""
    width = vectors * 16 // dtype.itemsize
    fn = ops.rms_norm_dynamic_quant_fp8.impls["cuda"].fn
    assert_dynamic_norm_sums_as_one_team(
        fn, dtype, width, "cuda", batches=(1, 16, 40, 1024), rows=4096
    )


@on_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gelu_is_accurate_in_the_negative_tail(dtype: torch.dtype) -> None:
    assert_gelu_accurate_in_the_negative_tail(ops.gelu_and_mul.impls["cuda"].fn, dtype, "cuda")


@on_gpu
def test_rows_wider_than_a_tile_stream() -> None:
    """Rows wider than one register tile (512 threads x 4 vectors) take the streamed kernel;
    fused_add_rms_norm in place must still read each element before overwriting it."""
    for op in (ops.rms_norm, ops.fused_add_rms_norm, ops.rms_norm_dynamic_quant_fp8):
        for provider in [p for p in op.impls if p.startswith("cuda")]:
            args = sample_inputs(op, spec_for(torch.float32, 8192 + 4 * 3 + 1, 3, "strided"))
            assert_impl_matches_native(op, provider, args)


@on_gpu
def test_rejects_what_the_kernels_cannot_address() -> None:
    x = torch.randn(4, 64, device="cuda")
    assert not ops.rms_norm.impls["cuda"].accepts((x.t(), None, 1e-6, None))
    assert not ops.rms_norm.impls["cuda"].accepts((x.cpu(), None, 1e-6, None))
    assert not ops.rms_norm.impls["cuda"].accepts((x.double(), None, 1e-6, None))
    strided_weight = torch.randn(128, device="cuda")[::2]
    assert not ops.rms_norm.impls["cuda"].accepts((x, strided_weight, 1e-6, None))
    assert not ops.silu_and_mul.impls["cuda"].accepts((torch.randn(4, 63, device="cuda"),))


def programmatic_build_reason() -> str:
    """Why the programmatic build cannot run here, or ""."""
    if not GPU:
        return f"provider cuda unsupported here: {impls.REASON}"
    if torch.cuda.get_device_capability()[0] < 9:
        return "programmatic dependent launch needs compute capability 9.0 or later"
    return ""


PROGRAMMATIC_REASON = programmatic_build_reason()
on_hopper = pytest.mark.skipif(bool(PROGRAMMATIC_REASON), reason=PROGRAMMATIC_REASON)


@on_gpu
@pytest.mark.parametrize("namespace", ["ir_cuda", PROGRAMMATIC_NAMESPACE])
def test_opcheck_every_ir_cuda_op(namespace: str) -> None:
    if namespace == PROGRAMMATIC_NAMESPACE:
        if PROGRAMMATIC_REASON:
            pytest.skip(PROGRAMMATIC_REASON)
        build(programmatic=True)
        impls.register_fakes(namespace)
    cases = opcheck_arguments("cuda")
    assert set(cases) == set(impls.IR_CUDA_OPS)
    for name, args in cases.items():
        torch.library.opcheck(
            getattr(getattr(torch.ops, namespace), name), args, test_utils=opcheck_utils(args)
        )


@on_gpu
@pytest.mark.parametrize("namespace", ["ir_cuda", PROGRAMMATIC_NAMESPACE])
def test_the_ops_check_their_arguments(namespace: str) -> None:
    """Bad arguments raise a RuntimeError naming them, the sizes whole. Where the library links
    a C++ runtime of its own (a $CXX that links libstdc++ statically), the first such check
    ends the process (`tests/test_runtime_link.py`)."""
    if namespace == PROGRAMMATIC_NAMESPACE:
        if PROGRAMMATIC_REASON:
            pytest.skip(PROGRAMMATIC_REASON)
        build(programmatic=True)
    assert_bad_arguments_are_named(getattr(torch.ops, namespace), "cuda", torch.bfloat16)


@on_gpu
@pytest.mark.parametrize("hidden", [4096, 8192])
def test_kernels_capture_in_a_cuda_graph(hidden: int) -> None:
    """A launch replays from a CUDA graph; at 8192 wide the rows of a batch of 16 are spread
    over thread block clusters on Hopper (a launch with a cluster attribute)."""
    x = torch.randn(16, hidden, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(hidden, device="cuda", dtype=torch.bfloat16)
    impl = ops.rms_norm.impls["cuda"]
    expected = impl.fn(x, w, 1e-6, None)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        impl.fn(x, w, 1e-6, None)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = impl.fn(x, w, 1e-6, None)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, expected)


@on_hopper
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize(("rows", "width"), [(1, 4096), (16, 8192), (7, 2048), (4096, 4096)])
def test_programmatic_launches_wait_for_the_kernel_before(
    rows: int, width: int, graph: bool
) -> None:
    """Chains of launches, each reading what the one before wrote, give the same bits launched
    programmatically as plainly (16 x 8192: norms over thread block clusters; 4096 x 4096:
    grids of several waves, which do not let the next launch start early)."""
    build(programmatic=True)
    expected = programmatic_chains(torch.ops.ir_cuda, rows, width)
    got = programmatic_chains(getattr(torch.ops, PROGRAMMATIC_NAMESPACE), rows, width, graph=graph)
    for a, b in zip(got, expected, strict=True):
        assert torch.equal(a, b)


@on_hopper
def test_programmatic_launch_setting_switches_the_implementations() -> None:
    from ir_kernels_cuda.launch import (
        programmatic_launch,
        programmatic_launch_enabled,
        set_programmatic_launch,
    )

    assert set_programmatic_launch(False) is False  # off by default
    x = torch.randn(3, 64, device="cuda", dtype=torch.bfloat16)
    off = ops.rms_norm.impls["cuda"].fn(x, None, 1e-6, None)
    with programmatic_launch(True):
        assert programmatic_launch_enabled()
        assert impls.KERNELS is getattr(torch.ops, PROGRAMMATIC_NAMESPACE)
        assert set_programmatic_launch(True) is True
        on = ops.rms_norm.impls["cuda"].fn(x, None, 1e-6, None)
        getattr(torch.ops, PROGRAMMATIC_NAMESPACE).empty_kernel(x)
    assert not programmatic_launch_enabled()
    assert impls.KERNELS is torch.ops.ir_cuda
    torch.cuda.synchronize()
    assert torch.equal(on, off)


def test_programmatic_launch_takes_a_bool() -> None:
    from ir_kernels_cuda.launch import set_programmatic_launch

    with pytest.raises(TypeError, match="enabled must be a bool, got 'yes'"):
        set_programmatic_launch("yes")  # type: ignore[arg-type]


@pytest.mark.skipif(GPU, reason="the programmatic build runs here")
def test_programmatic_launch_without_a_gpu_says_why() -> None:
    from ir_kernels_cuda.launch import programmatic_launch_enabled, set_programmatic_launch

    before = impls.KERNELS
    with pytest.raises(BuildUnavailable):
        set_programmatic_launch(True)
    assert not programmatic_launch_enabled()
    assert impls.KERNELS is before
