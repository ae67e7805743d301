"""Provider triton against the native reference: every op, dtypes, hidden sizes, token counts,
contiguous and strided rows, 3-D inputs; in-place variants; batch invariance; rejections.

Without a GPU the kernels run in Triton's interpreter on a reduced matrix (float32/float16,
small sizes); on a GPU the full matrix runs, bfloat16 included.
"""

import dataclasses
import itertools
from typing import Any

import pytest
import torch

import ir_kernels_triton
from ir_kernels_triton.launch import tuning
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
    clone_args,
    matrix_spec,
    nonfinite_variants,
    results_of,
    sample_inputs,
    single_process_ops,
)

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if GPU else [])
HIDDEN = [8, 769, 2048, 5125, 8192, 16384, 65536] if GPU else [8, 769, 2048, 5125]
TOKENS = [0, 1, 7, 4096] if GPU else [0, 1, 7]
LAYOUTS = ["contiguous", "strided", "3d"]
#: the collectives' implementations run in worlds of processes: test_collective.py
PROVIDERS = [(op, p) for op in single_process_ops() for p in op.impls if p.startswith("triton")]


def spec_for(
    dtype: torch.dtype, hidden: int, tokens: int, layout: str, seed: int = 0, **options: Any
) -> SampleSpec:
    return matrix_spec(dtype, hidden, tokens, layout, device=DEVICE, seed=seed, **options)


def test_provider_registered_everywhere() -> None:
    """On every op but the collectives, which a provider for one device does not implement."""
    assert ir_kernels_triton.SUPPORTED
    for op in single_process_ops():
        assert "triton" in op.impls, op.name
        assert op.impls["triton"].batch_invariant
    for op in single_process_ops():
        if op.allow_inplace:
            assert op.impls["triton_inplace"].inplace, op.name
            assert op.impls["triton_inplace"].batch_invariant, op.name


def test_unsupported_platforms_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where Triton cannot run, the reason (shown by ``ir_dispatch.explain``) says what is
    missing and how to run the kernels on the CPU instead."""
    from ir_kernels_triton.launch import device

    monkeypatch.setattr(device, "interpreting", lambda: False)
    monkeypatch.setattr(device.torch.cuda, "is_available", lambda: False)
    reason = device.unsupported_reason()
    assert reason.startswith("no GPU visible to torch")
    assert "TRITON_INTERPRET=1" in reason
    monkeypatch.setattr(device, "HAVE_TRITON", False)
    assert device.unsupported_reason() == "the triton package is not installed"
    monkeypatch.setattr(device, "HAVE_TRITON", True)
    monkeypatch.setattr(device, "interpreting", lambda: True)
    assert device.unsupported_reason() == ""


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("op", "provider"), PROVIDERS, ids=[f"{o.name}-{p}" for o, p in PROVIDERS])
def test_matches_native(
    op: IrOp, provider: str, dtype: torch.dtype, hidden: int, tokens: int, layout: str
) -> None:
    assert_impl_matches_native(
        op, provider, sample_inputs(op, spec_for(dtype, hidden, tokens, layout))
    )


class _OnSecondGpu:
    """Stands in for a tensor on GPU 1 (`get_device` is all the guard reads)."""

    def get_device(self) -> int:
        return 1


def test_a_call_makes_the_gpu_of_its_rows_current_where_there_are_several(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The guard's choice, without GPUs: a kernel runs under ``torch.cuda.device`` of its
    first activation's GPU where that is not the current one, and plainly where it is, or
    where the activation is not on a GPU (the interpreter's CPU tensors)."""
    from ir_kernels_triton.launch import torch_ops

    entered: list[int] = []

    class Device:
        def __init__(self, index: int) -> None:
            self.index = index

        def __enter__(self) -> None:
            entered.append(self.index)

        def __exit__(self, *exc: object) -> None:
            pass

    monkeypatch.setattr(torch.cuda, "device", Device)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)

    def kernel(*args: object) -> str:
        return "ran"

    assert torch_ops._on_device_of(_OnSecondGpu(), kernel, ()) == "ran"  # type: ignore[arg-type]
    assert entered == [1]
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert torch_ops._on_device_of(_OnSecondGpu(), kernel, ()) == "ran"  # type: ignore[arg-type]
    assert torch_ops._on_device_of(torch.empty(1), kernel, ()) == "ran"
    assert entered == [1]
    # a provider's call takes that path where several GPUs are visible
    monkeypatch.setattr(torch_ops, "several_gpus", lambda: True)
    args = sample_inputs(ops.rms_norm, spec_for(torch.float32, 64, 3, "contiguous"))
    assert_impl_matches_native(ops.rms_norm, "triton", args)
    # (on a GPU its rows are on GPU 0 while GPU 1 is said to be current)
    assert entered == [1] + ([0] if GPU else [])


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize(("op", "provider"), PROVIDERS, ids=[f"{o.name}-{p}" for o, p in PROVIDERS])
def test_kernels_launch_on_the_gpu_of_their_rows(op: IrOp, provider: str) -> None:
    """Rows on the second GPU while the first is current: Triton launches on the current
    device, so the provider makes the rows' GPU current for the launch, and GPU 0 again
    after it."""
    assert_matches_native_on_the_second_gpu(op, provider)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("name", "options"), OPTION_VARIANTS, ids=OPTION_VARIANT_IDS)
def test_variants(name: str, options: dict[str, Any], dtype: torch.dtype, layout: str) -> None:
    op = getattr(ops, name)
    for provider in [p for p in op.impls if p.startswith("triton")]:
        args = sample_inputs(op, spec_for(dtype, 256, 7, layout, **options))
        assert_impl_matches_native(op, provider, args)


def test_large_hidden_takes_the_looped_kernel() -> None:
    hidden = tuning.COMMON.rows.max_single_pass + 128 * 3
    for op in single_process_ops():
        for provider in [p for p in op.impls if p.startswith("triton")]:
            args = sample_inputs(op, spec_for(torch.float32, hidden, 2, "strided"))
            assert_impl_matches_native(op, provider, args)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hidden", [769, 1008, 1024])
@pytest.mark.parametrize("quant", [0, 1, 2], ids=["plain", "static", "dynamic"])
@pytest.mark.parametrize("residual", [False, True], ids=["norm", "add"])
def test_norm_tuning_knobs_keep_results(
    residual: bool, quant: int, hidden: int, dtype: torch.dtype
) -> None:
    """The knobs that may follow the batch (early weight load, evict-first hint, register cap,
    programs per row, reading the row again after its sum) only reorder loads, move values
    between registers and memory or share out the rows, and masks kept on a row that fills its
    block (1024) select nothing: every setting gives bitwise the default's result. fp32 rows
    (a bf16 weight beside them) are where Triton's layout of the row, hence the order of its
    sum, first followed the accesses a split changes; a dynamic scale's rows, split only when
    asked, take the whole row's peak in every program. Rows of 769 are
    not 16-byte aligned: they are never split, and asking for it is an error."""
    from ir_kernels_triton.norms import kernel as nk
    from ir_kernels_triton.norms import rules as nr

    gen = torch.Generator(device=DEVICE).manual_seed(3)
    x = torch.randn(5, hidden, device=DEVICE, generator=gen).to(dtype)
    r = torch.randn(5, hidden, device=DEVICE, generator=gen).to(dtype) if residual else None
    w = torch.randn(hidden, device=DEVICE, generator=gen).to(torch.bfloat16)
    scale = torch.full((1,), 0.02, device=DEVICE)
    out_dtype = torch.float8_e4m3fn if quant else x.dtype
    splits = (1, 4) if hidden % 16 == 0 else (1,)

    def run(**knobs: Any) -> list[torch.Tensor]:
        out = torch.empty(5, hidden, device=DEVICE, dtype=out_dtype)
        res = torch.empty_like(x) if residual else None
        scales = torch.empty(5, device=DEVICE) if quant == nr.QUANT_DYNAMIC else None
        nk.launch_norm(
            x, w, 1e-6, None, out, residual=r, residual_out=res, quant=quant,
            scale=scale if quant == nr.QUANT_STATIC else None, scale_out=scales, **knobs,
        )  # fmt: skip
        return [t.float() for t in (out, res, scales) if t is not None]

    expected = run()
    settings: list[dict[str, Any]] = [
        {"early_weight": early, "evict_first": evict, "max_registers": registers, "split": split}
        for early, evict, registers, split in itertools.product(
            (False, True), (False, True), (None, 32), splits
        )
    ]
    settings += [{"reload": True, "early_weight": e, "split": n} for e in (0, 1) for n in splits]
    settings.append({"keep_masks": True})
    for knobs in settings:
        for got, want in zip(run(**knobs), expected, strict=True):
            assert torch.equal(got, want), knobs
    if splits == (1,):
        with pytest.raises(ValueError, match="split=4"):
            run(split=4)


# on the GPU, norm rows 8192 wide and rows in a 4096 block are shared by several programs in
# batches of 1 and 7, not 4096 (4080 wide: the test tells batch-shaped tensors by their 4096
# rows, so no width may be 4096)
BATCH_INVARIANCE_HIDDEN = [2048, 4080, 8192] if GPU else [64]
# the interpreter runs one program at a time: on CPU the largest batch is smaller
LARGEST_BATCH = 4096 if GPU else 256


@pytest.mark.parametrize("hidden", BATCH_INVARIANCE_HIDDEN)
@pytest.mark.parametrize(("op", "provider"), PROVIDERS, ids=[f"{o.name}-{p}" for o, p in PROVIDERS])
def test_batch_invariant(op: IrOp, provider: str, hidden: int) -> None:
    """Row 0 gives bitwise the same result inside batches of 1, 7 and 4096 (256 on CPU)."""
    # a cos/sin cache of 5000 positions, so that only batch-shaped tensors have 4096 rows
    big = sample_inputs(
        op, spec_for(torch.float16, hidden, LARGEST_BATCH, "contiguous", max_position=5000)
    )
    assert_row_zero_batch_invariant(op, op.impls[provider], big)


@pytest.mark.parametrize("tokens", [2, 7] + ([4099] if GPU else []))
@pytest.mark.parametrize("head_size", [64, 128, 256, 67])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rms_norm_takes_the_heads_of_a_packed_projection(
    dtype: torch.dtype, head_size: int, tokens: int
) -> None:
    """Query and key heads normalized head by head where they lie in a packed ``qkv``
    projection (Qwen3's ``q_norm`` / ``k_norm``): no single row stride addresses them, yet
    the kernel takes them (`head_rows`) and matches the native function; a layout whose
    tokens do not collapse into one index is still refused."""
    from ir_kernels_triton.launch.rows import head_rows

    q_heads, kv_heads = 5, 2
    width = (q_heads + 2 * kv_heads) * head_size
    gen = torch.Generator(device=DEVICE).manual_seed(tokens * 1000 + head_size)
    qkv = torch.randn(tokens, width, dtype=dtype, device=DEVICE, generator=gen)
    q = qkv[:, : q_heads * head_size].view(tokens, q_heads, head_size)
    k = qkv[:, q_heads * head_size : (q_heads + kv_heads) * head_size]
    k = k.view(tokens, kv_heads, head_size)
    for x, heads in ((q, q_heads), (k, kv_heads)):
        assert head_rows(x) == (width, heads, head_size)
        weight = torch.rand(head_size, dtype=dtype, device=DEVICE, generator=gen) + 0.5
        assert_impl_matches_native(ops.rms_norm, "triton", (x, weight, 1e-6, None))
        # the same heads under a leading batch dimension
        batched = x.view(1, tokens, heads, head_size)
        assert head_rows(batched) == (width, heads, head_size)
        assert_impl_matches_native(ops.rms_norm, "triton", (batched, weight, 1e-6, None))
    # as the torch op compiled graphs call, on these rows (schema, fake and real agree)
    torch.library.opcheck(ops.rms_norm.impls["triton"].fn.torch_op, (q, weight, 1e-6, None))
    # tokens that do not collapse (every other token of a [2, tokens] batch) are not rows
    pairs = qkv.view(1, tokens, width).expand(2, tokens, width)[:, ::2, : q_heads * head_size]
    odd = pairs.unflatten(-1, (q_heads, head_size))
    if odd.shape[1] > 1:
        assert head_rows(odd) is None
        assert not ops.rms_norm.impls["triton"].accepts((odd, weight, 1e-6, None))


@pytest.mark.parametrize("is_neox_style", [True, False], ids=["neox", "pairs"])
def test_qk_norm_heads_a_program_keep_the_bits(is_neox_style: bool) -> None:
    """The heads a QK-norm program takes follow the batch (`rotary_head_block`); they only
    change how many tiles it loops over, never a tile, so every count gives bitwise the same
    heads (fp32 heads of 128 beside fp32 weights: the sums' order shows most)."""
    from ir_kernels_triton.rotary.qk_norm import launch_qk_norm_rotary

    op = ops.qk_norm_rotary_embedding
    spec = spec_for(
        torch.float32, 32 * 128, 3, "strided", is_neox_style=is_neox_style, rotary_dim=96
    )
    args = sample_inputs(op, spec)
    positions, query, key, q_weight, k_weight, eps, head_size, table, neox = args
    runs = []
    for head_block in (None, 1, 8, 32):
        q_out, k_out = torch.empty_like(query), torch.empty_like(key)
        launch_qk_norm_rotary(
            positions, query, key, q_weight, k_weight, eps, head_size, table, neox, q_out, k_out,
            head_block=head_block,
        )  # fmt: skip
        runs.append((q_out, k_out))
    for outs in runs[1:]:
        for got, want in zip(outs, runs[0], strict=True):
            assert torch.equal(got, want)
    assert_close(op, runs[0], op.native(*args))


@pytest.mark.parametrize("name", ["rotary_embedding", "rotary_embedding_write_kv_cache"])
def test_rotary_heads_a_program_keep_the_bits(name: str) -> None:
    """Every count of heads a program, up to all of a token's and wider than the key heads
    (whose tile is then as wide as the key heads, `rotary.kernel.key_head_block`), gives
    bitwise the same query, key and cache rows, the native ones: 24 query and 6 key heads,
    partial rotary, strided rows, padding slots."""
    from ir_kernels_triton.kv_cache.kernel import launch_rotary_write_kv_cache
    from ir_kernels_triton.rotary.kernel import launch_rotary

    op = getattr(ops, name)
    options = {"head_size": 32, "rotary_dim": 16, "padding_slots": True}
    args = sample_inputs(op, spec_for(torch.float32, 24 * 32, 5, "strided", **options))
    runs = []
    for head_block in (None, 1, 4, 8, 16, 32):
        run = clone_args(args)
        q_out, k_out = torch.empty_like(run[1]), torch.empty_like(run[2])
        if name == "rotary_embedding":
            launch_rotary(*run, q_out, k_out, head_block=head_block)
            runs.append((q_out, k_out))
        else:
            launch_rotary_write_kv_cache(*run, q_out, k_out, head_block=head_block)
            runs.append((q_out, k_out, run[7], run[8]))
    for outs in runs[1:]:
        for got, want in zip(outs, runs[0], strict=True):
            assert torch.equal(got, want)
    expected_args = clone_args(args)
    expected = results_of(op, expected_args, op.native(*expected_args))
    assert_close(op, runs[0], expected)


def test_the_fused_cache_write_takes_its_own_launch_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """`launch_rotary_write_kv_cache` takes its heads a program and its warps from
    `tuning.COMMON.rotary_cache`, not from the rotary kernel's entry: here 2 heads a program
    over 2 warps for 8 query heads, where the rotary's entry gives 4 over 4."""
    from ir_kernels_triton.kv_cache import kernel as kv

    op = ops.rotary_embedding_write_kv_cache
    args = sample_inputs(op, spec_for(torch.float32, 8 * 32, 5, "contiguous", head_size=32))
    own = tuning.Rotary(warps=2, few_tokens=64, few_heads=2, mid_tokens=2048, mid_heads=2)
    monkeypatch.setattr(tuning, "COMMON", dataclasses.replace(tuning.COMMON, rotary_cache=own))
    monkeypatch.setattr(kv, "launch_plans_enabled", lambda: False)  # every call launches
    launches: list[tuple[Any, int, int]] = []
    kernel = kv.rotary_write_kv_cache_kernel

    class Recorded:
        def __getitem__(self, grid: Any) -> Any:
            def launch(*kernel_args: Any, **options: Any) -> Any:
                launches.append((grid, options["num_warps"], options["HEAD_BLOCK"]))
                return kernel[grid](*kernel_args, **options)

            return launch

    monkeypatch.setattr(kv, "rotary_write_kv_cache_kernel", Recorded())
    run = clone_args(args)
    kv.launch_rotary_write_kv_cache(*run, run[1], run[2])
    assert launches == [((5, 4), 2, 2)]
    expected_args = clone_args(args)
    expected = results_of(op, expected_args, op.native(*expected_args))
    assert_close(op, (run[1], run[2], run[7], run[8]), expected)


HEAD_CASES = [
    (name, head_size, rotary_dim, neox)
    for name in (
        "qk_norm_rotary_embedding",
        "rotary_embedding_write_kv_cache",
        "write_kv_cache",
    )
    for head_size in (64, 128, 256)
    for rotary_dim in (head_size, head_size // 2)
    for neox in (True, False)
    if name != "write_kv_cache" or (rotary_dim == head_size and neox)
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    ("name", "head_size", "rotary_dim", "is_neox_style"),
    HEAD_CASES,
    ids=[f"{n}-{h}-{r}-{'neox' if x else 'pairs'}" for n, h, r, x in HEAD_CASES],
)
def test_fused_ops_at_every_head_size(
    name: str, head_size: int, rotary_dim: int, is_neox_style: bool, dtype: torch.dtype
) -> None:
    """The head sizes of the models (64, 128, 256), whole and partial rotary, both styles, odd
    token counts in strided rows, with padding slots and blocks of 16 slots: each provider of
    the op matches the native function."""
    op = getattr(ops, name)
    options: dict[str, Any] = {"head_size": head_size, "padding_slots": True}
    if name != "write_kv_cache":
        options |= {"rotary_dim": rotary_dim, "is_neox_style": is_neox_style}
    args = sample_inputs(op, spec_for(dtype, 8 * head_size, 5, "strided", **options))
    for provider in [p for p in op.impls if p.startswith("triton")]:
        assert_impl_matches_native(op, provider, args)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ["qk_norm_rotary_embedding", "rotary_embedding_write_kv_cache"])
@pytest.mark.parametrize("provider", ["triton", "triton_inplace"])
def test_fused_rotary_on_slices_of_a_packed_qkv(
    provider: str, name: str, dtype: torch.dtype
) -> None:
    """Query, key and value as column slices of one ``qkv`` projection (rows one stride
    apart), as attention layers give them: the native results, and in place only the query
    and key columns change."""
    op = getattr(ops, name)
    args = list(sample_inputs(op, spec_for(dtype, 512, 7, "contiguous", head_size=64)))
    names = list(op.signature.parameters)
    query, key = args[1], args[2]
    widths = [query.shape[-1], key.shape[-1], key.shape[-1]]
    qkv = torch.randn(7, sum(widths), device=DEVICE).to(dtype)
    q, k, v = qkv.split(widths, dim=-1)
    args[1], args[2] = q, k
    if "value" in names:
        args[names.index("value")] = v
    native_args = clone_args(args)
    expected = results_of(op, native_args, op.native(*native_args))
    packed = qkv.clone()
    args[1], args[2], v_packed = packed.split(widths, dim=-1)
    if "value" in names:
        args[names.index("value")] = v_packed
    assert_close(op, results_of(op, args, op.impls[provider].fn(*args)), expected)
    assert torch.equal(packed[:, -widths[2] :], qkv[:, -widths[2] :])
    if provider == "triton":
        assert torch.equal(packed, qkv)
    else:
        in_place = (packed[:, : widths[0]], packed[:, widths[0] : -widths[2]])
        assert_close(op, in_place, expected[:2])


NORM_PROVIDERS = [(op, p) for op, p in PROVIDERS if "weight" in op.signature.parameters]


@pytest.mark.parametrize("hidden", BATCH_INVARIANCE_HIDDEN)
@pytest.mark.parametrize(
    ("op", "provider"), NORM_PROVIDERS, ids=[f"{o.name}-{p}" for o, p in NORM_PROVIDERS]
)
def test_batch_invariant_beside_a_float32_weight(op: IrOp, provider: str, hidden: int) -> None:
    """Half rows beside a float32 weight (wider accesses than the rows') too."""
    spec = spec_for(torch.float16, hidden, LARGEST_BATCH, "contiguous", weight_dtype=torch.float32)
    assert_row_zero_batch_invariant(op, op.impls[provider], sample_inputs(op, spec))


def _clusters_launch() -> bool:
    from ir_kernels_triton.launch.clusters import cluster_launches

    return GPU and cluster_launches(torch.empty(1, device="cuda"))


def with_clusters(monkeypatch: pytest.MonkeyPatch, **entries: Any) -> None:
    """The launch table with these `tuning.Clusters` entries changed, for the test."""
    common = tuning.COMMON
    clusters = dataclasses.replace(common.clusters, **entries)
    monkeypatch.setattr(tuning, "COMMON", dataclasses.replace(common, clusters=clusters))


def count_cluster_launches(
    monkeypatch: pytest.MonkeyPatch, module: Any, name: str
) -> list[tuple[int, int]]:
    """Record (rows, blocks a cluster) of every call of `module`'s cluster launcher `name`,
    which still launches."""
    spread: list[tuple[int, int]] = []
    launch = getattr(module, name)

    def counted(rows: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        spread.append((rows, kwargs["S"]))
        return launch(rows, args, kwargs)

    monkeypatch.setattr(module, name, counted)
    return spread


CLUSTER_CASES = [
    ("fused_add_rms_norm", "triton"),
    ("fused_add_rms_norm", "triton_inplace"),
    ("fused_add_rms_norm_static_quant_fp8", "triton"),
    ("fused_add_rms_norm_dynamic_quant_fp8", "triton"),
    ("rms_norm_dynamic_quant_fp8", "triton"),
]


@pytest.mark.skipif(not _clusters_launch(), reason="needs a GPU where Triton launches clusters")
@pytest.mark.parametrize("clusters", [4, 8])
@pytest.mark.parametrize("tokens", [1, 5, 16])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    ("name", "provider"), CLUSTER_CASES, ids=["-".join(c) for c in CLUSTER_CASES]
)
def test_rows_spread_over_a_cluster_give_the_bits_of_whole_rows(
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    provider: str,
    dtype: torch.dtype,
    tokens: int,
    clusters: int,
) -> None:
    """Decode-size rows of 8192 spread over a cluster of four or eight blocks
    (`norms.cluster_kernel`), in place too, give bitwise what the same rows give in a batch of
    `max_rows` + 1 (one program a row, or the split, which keeps its bits), on their first
    launch and replayed from its plan."""
    from ir_kernels_triton.launch.plans import clear_launch_plans, launch_plans_enabled
    from ir_kernels_triton.norms import kernel as nk

    table = tuning.COMMON.clusters
    op = getattr(ops, name)
    impl = op.impls[provider].fn
    big = sample_inputs(
        op, spec_for(dtype, table.wide_norm_width, table.max_rows + 1, "contiguous")
    )
    small = tuple(
        a[:tokens] if isinstance(a, torch.Tensor) and a.shape[:1] == (table.max_rows + 1,) else a
        for a in big
    )
    spread = count_cluster_launches(monkeypatch, nk, "launch_cluster_norm")
    with_clusters(monkeypatch, norm_blocks=clusters)
    clear_launch_plans()

    def outputs(args: tuple[Any, ...]) -> list[torch.Tensor]:
        out = impl(*clone_args(args))
        return [o.view(torch.uint8) for o in (out if isinstance(out, tuple) else (out,))]

    whole = [o[:tokens] for o in outputs(big)]
    assert spread == []  # a batch past decode sizes is not spread
    first, replayed = outputs(small), outputs(small)
    # spread on its first launch, then replayed from its plan (launched again without plans)
    launched = (tokens, clusters)
    assert spread == ([launched] if launch_plans_enabled() else [launched, launched])
    for got in (first, replayed):
        for a, b in zip(got, whole, strict=True):
            assert torch.equal(a, b)


#: (op, provider, width, tokens, whether `cluster_for` spreads the rows) where the rule
#: depends on the op and the rows: at 4096 wide, and plain rms_norm at 8192
CLUSTER_RULE_CASES = [
    ("fused_add_rms_norm", "triton_inplace", 4096, 1, True),
    ("fused_add_rms_norm", "triton_inplace", 4096, 5, True),
    ("fused_add_rms_norm", "triton_inplace", 4096, 16, True),
    ("fused_add_rms_norm", "triton", 4096, 16, False),
    ("fused_add_rms_norm_static_quant_fp8", "triton", 4096, 4, False),
    ("fused_add_rms_norm_static_quant_fp8", "triton", 4096, 5, True),
    ("fused_add_rms_norm_static_quant_fp8", "triton", 4096, 16, True),
    ("rms_norm_dynamic_quant_fp8", "triton", 4096, 16, False),
    ("rms_norm_static_quant_fp8", "triton", 4096, 16, False),
    ("rms_norm", "triton", 8192, 4, False),
    ("rms_norm", "triton", 8192, 5, True),
    ("rms_norm", "triton", 8192, 16, True),
    ("rms_norm_static_quant_fp8", "triton", 8192, 16, False),
]


@pytest.mark.skipif(not _clusters_launch(), reason="needs a GPU where Triton launches clusters")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    ("name", "provider", "width", "tokens", "spread_expected"),
    CLUSTER_RULE_CASES,
    ids=["-".join(map(str, c)) for c in CLUSTER_RULE_CASES],
)
def test_rows_spread_where_the_rule_says_and_keep_their_bits(
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    provider: str,
    width: int,
    dtype: torch.dtype,
    tokens: int,
    spread_expected: bool,
) -> None:
    """Decode-size rows take a cluster only where `cluster_for` says (at 4096 wide the fused
    add in place and its static-fp8 form past `split_rows_fp8` rows; at 8192 plain rms_norm
    past `plain_norm_past_rows` rows), and give bitwise what the same rows give in a batch of
    `max_rows` + 1, on the first launch and from its plan; an out-of-place call between
    in-place ones of the same shapes keeps the split (its own plan)."""
    from ir_kernels_triton.launch.plans import clear_launch_plans, launch_plans_enabled
    from ir_kernels_triton.norms import kernel as nk

    table = tuning.COMMON.clusters
    op = getattr(ops, name)
    impl = op.impls[provider].fn
    big = sample_inputs(op, spec_for(dtype, width, table.max_rows + 1, "contiguous"))
    small = tuple(
        a[:tokens] if isinstance(a, torch.Tensor) and a.shape[:1] == (table.max_rows + 1,) else a
        for a in big
    )
    spread = count_cluster_launches(monkeypatch, nk, "launch_cluster_norm")
    clear_launch_plans()

    def outputs(fn: Any, args: tuple[Any, ...]) -> list[torch.Tensor]:
        out = fn(*clone_args(args))
        return [o.view(torch.uint8) for o in (out if isinstance(out, tuple) else (out,))]

    whole = [o[:tokens] for o in outputs(impl, big)]
    assert spread == []
    got = [outputs(impl, small)]
    if provider == "triton_inplace":
        for a, b in zip(outputs(op.impls["triton"].fn, small), whole, strict=True):
            assert torch.equal(a, b)
    got.append(outputs(impl, small))
    launched = [(tokens, table.norm_blocks)] if spread_expected else []
    assert spread == (launched if launch_plans_enabled() else launched * 2)
    for outs in got:
        for a, b in zip(outs, whole, strict=True):
            assert torch.equal(a, b)


@pytest.mark.skipif(not _clusters_launch(), reason="needs a GPU where Triton launches clusters")
@pytest.mark.parametrize("warps", [1, 2])
@pytest.mark.parametrize("clusters", [2, 4, 8])
@pytest.mark.parametrize("tokens", [1, 5, 16])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("with_ub", [False, True], ids=["no-ub", "ub"])
def test_dynamic_quant_rows_spread_over_a_cluster_give_the_bits_of_one_program(
    monkeypatch: pytest.MonkeyPatch,
    dtype: torch.dtype,
    tokens: int,
    clusters: int,
    warps: int,
    with_ub: bool,
) -> None:
    """Decode-size rows of dynamic quantization spread over a cluster of 2, 4 or 8 blocks
    (`quant.dynamic.cluster_quant_kernel`) give bitwise the fp8 rows and scales of one program
    a row, on the provider's first launch and replayed from its plan; a batch past decode sizes
    is not spread."""
    from ir_kernels_triton.launch.plans import clear_launch_plans, launch_plans_enabled
    from ir_kernels_triton.quant import dynamic as dq

    table = tuning.COMMON.clusters
    (width,) = sorted(table.quant_widths)[-1:]
    op = ops.dynamic_quant_fp8
    impl = op.impls["triton"].fn
    x = torch.randn(tokens, width, device="cuda", dtype=dtype) * 4
    x[:, (7 * width) // 8 + 3] = 300.0  # each row's peak in the last block's slice
    ub = torch.tensor([200.0], device="cuda") if with_ub else None
    spread = count_cluster_launches(monkeypatch, dq, "launch_cluster_quant")
    with_clusters(monkeypatch, quant_blocks=clusters, quant_block_warps=warps)
    clear_launch_plans()
    q_one = torch.empty(tokens, width, device="cuda", dtype=torch.float8_e4m3fn)
    scale_one = torch.empty(tokens, 1, device="cuda")
    dq.launch_dynamic_quant(x, ub, q_one, scale_one, cluster=1)
    assert spread == []
    for _ in range(2):  # the first launch, then its plan
        q, scale = impl(x, ub)
        assert torch.equal(q.view(torch.uint8), q_one.view(torch.uint8))
        assert torch.equal(scale, scale_one)
    launched = (tokens, clusters)
    assert spread == ([launched] if launch_plans_enabled() else [launched, launched])
    big = torch.randn(table.max_rows + 1, width, device="cuda", dtype=dtype)
    before = len(spread)
    impl(big, ub)
    assert len(spread) == before  # not spread past decode sizes


def assert_row_zero_batch_invariant(op: IrOp, impl: Any, big: tuple[Any, ...]) -> None:
    """Row 0 of `big`'s batch gives bitwise the same outputs alone, in 7 rows and in all (and,
    where the op stores into caches, the same rows in its slot)."""
    results = []
    names = list(op.signature.parameters)
    for tokens in (1, 7, LARGEST_BATCH):
        args = clone_args(
            tuple(
                a[:tokens]
                if isinstance(a, torch.Tensor) and a.dim() >= 1 and a.shape[0] == LARGEST_BATCH
                else a
                for a in big
            )
        )
        out = impl.fn(*args)
        first = [o[:1] for o in (() if out is None else out if isinstance(out, tuple) else (out,))]
        if op.mutates:
            slot = int(args[names.index("slot_mapping")].reshape(-1)[0])
            for name in op.mutates:
                cache = args[names.index(name)]
                first.append(cache.view(-1, *cache.shape[2:])[slot])
        results.append([f.view(torch.uint8) if f.element_size() == 1 else f for f in first])
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gelu_is_accurate_in_the_negative_tail(dtype: torch.dtype) -> None:
    """Phi from its smaller tail (`activations.gated._normal_cdf`): relative accuracy down to
    a = -8, where the float32 erf form has lost every digit."""
    assert_gelu_accurate_in_the_negative_tail(ops.gelu_and_mul.impls["triton"].fn, dtype, DEVICE)


def _as_rotary(name: str, provider: str) -> Any:
    """Provider `provider`'s `name` (an op that fuses the rotary embedding) called as
    `rotary_embedding`: the QK norm without weights, the cache write into fresh caches with a
    slot a token. Returns its query and key."""
    fn = getattr(ops, name).impls[provider].fn
    if name == "rotary_embedding":
        return fn

    def rotate(
        positions: torch.Tensor,
        query: torch.Tensor,
        key: torch.Tensor,
        head_size: int,
        cache: torch.Tensor,
        is_neox_style: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if name == "qk_norm_rotary_embedding":
            norm = (None, None, 1e-6)
            return fn(positions, query, key, *norm, head_size, cache, is_neox_style)  # type: ignore[no-any-return]
        tokens, heads = positions.numel(), key.shape[-1] // head_size
        caches = [key.new_zeros(tokens, 1, heads, head_size) for _ in range(2)]
        slots = torch.arange(tokens, device=key.device)
        rotary = (head_size, cache, is_neox_style)
        return fn(positions, query, key, key.clone(), *rotary, *caches, slots)  # type: ignore[no-any-return]

    return rotate


#: (op, rotary_dim) of the positions-outside-the-table check: the QK norm changes the elements
#: past the rotary dimension, which the check compares with its input, so only whole heads.
ROTARY_TABLE_CASES = [
    (name, rotary_dim)
    for name in ("rotary_embedding", "qk_norm_rotary_embedding", "rotary_embedding_write_kv_cache")
    for rotary_dim in (64, 32)
    if rotary_dim == 64 or name != "qk_norm_rotary_embedding"
]


@pytest.mark.parametrize("is_neox_style", [True, False], ids=["neox", "pairs"])
@pytest.mark.parametrize(
    ("name", "rotary_dim"),
    ROTARY_TABLE_CASES,
    ids=[f"{n}-{'whole-head' if d == 64 else 'partial'}" for n, d in ROTARY_TABLE_CASES],
)
@pytest.mark.parametrize("positions_dtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("provider", ["triton", "triton_inplace"])
def test_rotary_positions_outside_the_table_give_nan(
    provider: str, positions_dtype: torch.dtype, name: str, rotary_dim: int, is_neox_style: bool
) -> None:
    """Negative positions and those past the table read nothing outside it: NaN where they
    rotate, the other tokens untouched, in the ops that fuse the rotary embedding too."""
    assert_rotary_reads_only_the_table(
        _as_rotary(name, provider),
        DTYPES[-1],
        DEVICE,
        positions_dtype=positions_dtype,
        rotary_dim=rotary_dim,
        is_neox_style=is_neox_style,
    )


#: Row widths of the non-finite checks: one vector, a tail, decode rows spread over a cluster
#: on Hopper (8192), rows streamed in blocks (past `max_single_pass`; under the interpreter
#: only for the ops that stream rows: the rotary kernels work a head, the cache write copies,
#: group quantization works a group).
NONFINITE_HIDDEN = [8, 769, 8192, 20000] if GPU else [8, 769, 16400]
NONFINITE_TOKENS = [1, 5, 64] if GPU else [1, 5]
NONFINITE_PROVIDERS = nonfinite_variants("triton")
UNSTREAMED_OPS = (
    "rotary_embedding",
    "qk_norm_rotary_embedding",
    "rotary_embedding_write_kv_cache",
    "write_kv_cache",
    "group_quant_fp8",
    "silu_and_mul_group_quant_fp8",
)
NONFINITE_SHAPES = [
    (op, p, options, hidden)
    for op, p, options in NONFINITE_PROVIDERS
    for hidden in NONFINITE_HIDDEN
    if GPU or hidden < 16384 or op.name not in UNSTREAMED_OPS
]


@pytest.mark.parametrize(("value", "column"), NONFINITE_CASES, ids=NONFINITE_CASE_IDS)
@pytest.mark.parametrize("tokens", NONFINITE_TOKENS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    ("op", "provider", "options", "hidden"),
    NONFINITE_SHAPES,
    ids=[f"{o.name}-{p}-{options}-{hidden}" for o, p, options, hidden in NONFINITE_SHAPES],
)
def test_nonfinite_inputs_give_what_native_gives(
    op: IrOp,
    provider: str,
    options: dict[str, Any],
    dtype: torch.dtype,
    hidden: int,
    tokens: int,
    value: float,
    column: float,
) -> None:
    """A NaN or an infinity in a row gives NaN and infinities where the native function does:
    a NaN makes a dynamic scale and its whole row (or group) NaN."""
    args = sample_inputs(op, spec_for(dtype, hidden, tokens, "contiguous", **options))
    assert_nonfinite_like_native(op, op.impls[provider].fn, args, value=value, column=column)


def _rotary_args(**overrides: Any) -> list[Any]:
    args = list(sample_inputs(ops.rotary_embedding, spec_for(torch.float16, 256, 7, "contiguous")))
    for index, value in overrides.items():
        args[int(index)] = value
    return args


def test_supports_args_rejections() -> None:
    x = torch.randn(8, 64, device=DEVICE)
    w = torch.ones(64, device=DEVICE)
    triton_impl = ops.rms_norm.impls["triton"]
    assert not triton_impl.accepts((x.t(), torch.ones(8, device=DEVICE), 1e-6, None))
    assert not triton_impl.accepts((x, torch.ones(128, device=DEVICE)[::2], 1e-6, None))
    permuted = torch.randn(4, 64, 3, device=DEVICE).permute(2, 0, 1)  # rows not one stride
    assert not triton_impl.accepts((permuted, w, 1e-6, None))
    too_wide = torch.randn(1, 32768, device=DEVICE)
    assert not ops.group_quant_fp8.impls["triton"].accepts((too_wide, 32768, False))
    q = torch.randn(7, 256, device=DEVICE)
    positions = torch.arange(14, device=DEVICE)[::2]
    rot = ops.rotary_embedding.impls["triton"]
    assert not rot.accepts(tuple(_rotary_args(**{"0": positions})))
    assert not rot.accepts(tuple(_rotary_args(**{"1": q.t().contiguous().t()})))
    if GPU:
        assert not triton_impl.accepts((x.cpu(), w.cpu(), 1e-6, None))


def _with(args: list[Any], index: int, value: Any) -> tuple[Any, ...]:
    """`args` with `value` at `index`."""
    return tuple(value if i == index else a for i, a in enumerate(args))


def _sample(name: str, **options: Any) -> list[Any]:
    op = getattr(ops, name)
    return list(sample_inputs(op, spec_for(torch.float16, 256, 7, "contiguous", **options)))


def test_supports_args_rejections_of_the_fused_ops() -> None:
    """The fused ops take what their kernels address: groups up to `MAX_GROUP_SIZE`, QK-norm
    heads up to `MAX_NORM_HEAD_SIZE` beside contiguous weights, contiguous slot mappings."""
    from ir_kernels_triton import impls

    group = 2 * impls.MAX_GROUP_SIZE
    wide, gated = (torch.randn(1, n * group, device=DEVICE) for n in (1, 2))
    grouped: list[tuple[str, tuple[Any, ...]]] = [
        ("rms_norm_group_quant_fp8", (wide, None, 1e-6, group, False)),
        ("fused_add_rms_norm_group_quant_fp8", (wide, wide, None, 1e-6, group, False)),
        ("silu_and_mul_group_quant_fp8", (gated, group, False)),
    ]
    for name, too_large in grouped:
        impl = getattr(ops, name).impls["triton"]
        assert not impl.accepts(too_large), name
        fits = tuple(
            impls.MAX_GROUP_SIZE if isinstance(a, int) and not isinstance(a, bool) else a
            for a in too_large
        )
        assert impl.accepts(fits), name
    qk = ops.qk_norm_rotary_embedding.impls["triton"]
    args = _sample("qk_norm_rotary_embedding")
    assert qk.accepts(tuple(args))
    weight: torch.Tensor = args[3]
    strided_weight = torch.ones(2 * weight.numel(), device=DEVICE, dtype=weight.dtype)[::2]
    assert not qk.accepts(_with(args, 3, strided_weight))
    head = impls.MAX_NORM_HEAD_SIZE * 2
    one_head = torch.randn(1, head, device=DEVICE)
    table = torch.randn(4, head, device=DEVICE)
    positions = torch.zeros(1, dtype=torch.int64, device=DEVICE)
    too_wide = (positions, one_head, one_head, None, None, 1e-6, head, table, True)
    assert not qk.accepts(too_wide)
    for name in ("write_kv_cache", "rotary_embedding_write_kv_cache"):
        impl = getattr(ops, name).impls["triton"]
        cache_args = _sample(name)
        assert impl.accepts(tuple(cache_args)), name
        slots: torch.Tensor = cache_args[-1]
        strided_slots = torch.empty(2 * slots.numel(), dtype=slots.dtype, device=DEVICE)[::2]
        last = len(cache_args) - 1
        assert not impl.accepts(_with(cache_args, last, strided_slots.copy_(slots))), name
        index = 1 if name == "write_kv_cache" else 3
        value: torch.Tensor = cache_args[index]
        columns = value.t().contiguous().t()  # rows not contiguous
        assert not impl.accepts(_with(cache_args, index, columns)), name


@pytest.mark.parametrize(("op", "provider"), PROVIDERS, ids=[f"{o.name}-{p}" for o, p in PROVIDERS])
def test_kernels_as_torch_ops(op: IrOp, provider: str) -> None:
    """Each implementation is also ``torch.ops.ir_triton.*``: opcheck passes, and tracing the
    implementation records that one opaque op (what ir-passes' lowering splices in)."""
    impl = op.impls[provider]
    args = sample_inputs(op, spec_for(torch.float32, 64, 7, "strided"))
    torch.library.opcheck(impl.fn.torch_op, clone_args(args))
    positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]

    def call(*tensors: torch.Tensor) -> Any:
        full = list(args)
        for i, t in zip(positions, tensors, strict=True):
            full[i] = t
        return impl.fn(*full)

    from torch.fx.experimental.proxy_tensor import make_fx

    graph = make_fx(call, tracing_mode="fake")(*clone_args([args[i] for i in positions])).graph
    called = [str(n.target) for n in graph.nodes if n.op == "call_function"]
    assert [c for c in called if c.startswith("ir_triton.")] == [str(impl.fn.torch_op)]
