"""The catalog's native semantics against independent float64 references."""

import math
from typing import Any

import pytest
import torch

from ir_spec import SampleSpec, ops
from ir_spec.catalog.quant import FP8_MAX, MIN_SCALE, saturate_fp8
from ir_spec.testing import ACTIVATION_DTYPES as DTYPES
from ir_spec.testing import (
    NONFINITE_CASE_IDS,
    NONFINITE_CASES,
    assert_close,
    assert_nonfinite_like_native,
    assert_rotary_reads_only_the_table,
    clone_args,
    results_of,
    sample_inputs,
    single_process_ops,
)

F64 = torch.float64
LAYOUTS = [
    (0, (7,)),
    (5, (7,)),
    (0, (2, 5)),
]  # (row padding, batch shape): contiguous, strided, 3-D
HIDDEN = [8, 769, 2048]


def ref_rms_norm(x: torch.Tensor, weight: Any, eps: float, variance_size: Any = None) -> Any:
    xd = x.to(F64)
    xv = xd if variance_size is None else xd[..., :variance_size]
    out = xd / torch.sqrt((xv * xv).mean(-1, keepdim=True) + eps)
    return out if weight is None else out * weight.to(F64)


def ref_quant(values: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return (values / scale).clamp(-FP8_MAX, FP8_MAX)


def close(op_name: str, actual: torch.Tensor, expected: torch.Tensor) -> None:
    tol = getattr(ops, op_name).tolerance(actual.dtype)
    torch.testing.assert_close(
        actual.to(F64), expected.to(actual.dtype).to(F64), atol=tol.atol, rtol=tol.rtol
    )


def fp8_close(q: torch.Tensor, expected_unrounded: torch.Tensor) -> None:
    """q is the e4m3 rounding of the expected values: within half a unit in the last place."""
    assert q.dtype == torch.float8_e4m3fn
    e = expected_unrounded.to(F64)
    # e4m3: 3 mantissa bits, so half an ulp is 1/16 relative (normal) or 2**-10 (subnormal).
    bound = torch.maximum(e.abs() / 16, torch.full_like(e, 2.0**-10)) * 1.0001
    assert ((q.to(F64) - e).abs() <= bound).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("padding", "batch"), LAYOUTS)
@pytest.mark.parametrize("hidden", HIDDEN)
class TestAgainstFloat64:
    def spec(
        self, dtype: torch.dtype, padding: int, batch: tuple[int, ...], hidden: int, **options: Any
    ) -> SampleSpec:
        return SampleSpec(
            batch_shape=batch,
            hidden_size=hidden,
            dtype=dtype,
            row_padding=padding,
            seed=hidden + padding,
            options=options,
        )

    def test_rms_norm(self, dtype: torch.dtype, padding: int, batch: Any, hidden: int) -> None:
        x, w, eps, _ = sample_inputs(ops.rms_norm, self.spec(dtype, padding, batch, hidden))
        assert x.is_contiguous() == (padding == 0)
        close("rms_norm", ops.rms_norm(x, w, eps), ref_rms_norm(x, w, eps))
        close(
            "rms_norm",
            ops.rms_norm(x, w, eps, hidden // 2 or 1),
            ref_rms_norm(x, w, eps, hidden // 2 or 1),
        )

    def test_fused_add_rms_norm(
        self, dtype: torch.dtype, padding: int, batch: Any, hidden: int
    ) -> None:
        x, r, w, eps, _ = sample_inputs(
            ops.fused_add_rms_norm, self.spec(dtype, padding, batch, hidden)
        )
        out, residual = ops.fused_add_rms_norm(x, r, w, eps)
        assert torch.equal(residual, x + r)
        close("fused_add_rms_norm", out, ref_rms_norm(residual, w, eps))

    def test_gated(self, dtype: torch.dtype, padding: int, batch: Any, hidden: int) -> None:
        (x,) = sample_inputs(ops.silu_and_mul, self.spec(dtype, padding, batch, hidden))
        a, b = x[..., :hidden].to(F64), x[..., hidden:].to(F64)
        close("silu_and_mul", ops.silu_and_mul(x), a * torch.sigmoid(a) * b)
        close("gelu_and_mul", ops.gelu_and_mul(x), 0.5 * a * (1 + torch.erf(a / math.sqrt(2))) * b)
        tanh = 0.5 * a * (1 + torch.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3)))
        close("gelu_and_mul", ops.gelu_and_mul(x, "tanh"), tanh * b)

    def test_static_quant(self, dtype: torch.dtype, padding: int, batch: Any, hidden: int) -> None:
        x, scale = sample_inputs(ops.static_quant_fp8, self.spec(dtype, padding, batch, hidden))
        q = ops.static_quant_fp8(x, scale)
        fp8_close(q, ref_quant(x.to(F64), scale.to(F64)))
        # the sample scale saturates the largest values: they land exactly on the maximum
        assert q.to(F64).abs().max() == FP8_MAX

    def test_dynamic_quant(self, dtype: torch.dtype, padding: int, batch: Any, hidden: int) -> None:
        x, _ = sample_inputs(ops.dynamic_quant_fp8, self.spec(dtype, padding, batch, hidden))
        q, scale = ops.dynamic_quant_fp8(x)
        amax = x.to(F64).abs().amax(-1, keepdim=True)
        expected_scale = (amax / FP8_MAX).clamp(min=MIN_SCALE)
        assert scale.shape == (*batch, 1)
        assert scale.dtype == torch.float32
        torch.testing.assert_close(scale.to(F64), expected_scale, rtol=1e-6, atol=0)
        fp8_close(q, ref_quant(x.to(F64), scale.to(F64)))
        # dequantized error within e4m3 precision of the row's range
        err = (q.to(F64) * scale.to(F64) - x.to(F64)).abs()
        assert (err <= amax / 16 + 1e-12).all()
        ub = torch.tensor([0.5])
        _, capped = ops.dynamic_quant_fp8(x, ub)
        torch.testing.assert_close(
            capped.to(F64), (amax.clamp(max=0.5) / FP8_MAX).clamp(min=MIN_SCALE), rtol=1e-6, atol=0
        )

    def test_group_quant(self, dtype: torch.dtype, padding: int, batch: Any, hidden: int) -> None:
        spec = self.spec(dtype, padding, batch, hidden)
        x, group, _ = sample_inputs(ops.group_quant_fp8, spec)
        for column_major in (False, True):
            q, scale = ops.group_quant_fp8(x, group, column_major)
            groups = x.to(F64).reshape(*batch, hidden // group, group)
            amax = groups.abs().amax(-1)
            assert scale.shape == (*batch, hidden // group)
            torch.testing.assert_close(
                scale.to(F64), (amax / FP8_MAX).clamp(min=MIN_SCALE), rtol=1e-6, atol=0
            )
            fp8_close(q, ref_quant(groups, scale.to(F64).unsqueeze(-1)).reshape(x.shape))
            if column_major and len(batch) == 1:
                assert scale.stride() == (1, batch[0])

    @pytest.mark.parametrize("neox", [True, False])
    @pytest.mark.parametrize("partial", [False, True])
    def test_rotary(
        self, dtype: torch.dtype, padding: int, batch: Any, hidden: int, neox: bool, partial: bool
    ) -> None:
        options: dict[str, Any] = {"is_neox_style": neox}
        if partial:
            options["rotary_dim"] = 4
        spec = self.spec(dtype, padding, batch, hidden, **options)
        pos, q, k, head, cache, style = sample_inputs(ops.rotary_embedding, spec)
        out_q, out_k = ops.rotary_embedding(pos, q, k, head, cache, style)
        rd = cache.shape[-1]
        cos, sin = cache.to(F64)[pos].chunk(2, dim=-1)

        def ref(t: torch.Tensor) -> torch.Tensor:
            h = t.to(F64).reshape(*t.shape[:-1], -1, head).clone()
            r = h[..., :rd]
            c, s = cos.unsqueeze(-2), sin.unsqueeze(-2)
            if neox:
                x1, x2 = r[..., : rd // 2].clone(), r[..., rd // 2 :].clone()
                r[..., : rd // 2], r[..., rd // 2 :] = x1 * c - x2 * s, x2 * c + x1 * s
            else:
                x1, x2 = r[..., 0::2].clone(), r[..., 1::2].clone()
                r[..., 0::2], r[..., 1::2] = x1 * c - x2 * s, x2 * c + x1 * s
            return h.reshape(t.shape)

        close("rotary_embedding", out_q, ref(q))
        close("rotary_embedding", out_k, ref(k))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_scale_invariant(dtype: torch.dtype) -> None:
    x, w, _, _ = sample_inputs(ops.rms_norm, hidden_size=769, dtype=dtype)
    # 2x is exact in every float format; epsilon negligible
    assert torch.equal(ops.rms_norm(2 * x, w, 1e-30), ops.rms_norm(x, w, 1e-30))


@pytest.mark.parametrize("dtype", DTYPES)
def test_weight_none_is_ones(dtype: torch.dtype) -> None:
    x, _, eps, _ = sample_inputs(ops.rms_norm, hidden_size=769, dtype=dtype)
    ones = torch.ones(769, dtype=dtype)
    assert torch.equal(ops.rms_norm(x, None, eps), ops.rms_norm(x, ones, eps))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_float32_weight_beside_half_rows(dtype: torch.dtype) -> None:
    """A float32 weight multiplies unrounded: Gemma's ``1 + w`` (w near zero) keeps the digits
    that the rows' dtype would drop, and both norms take it."""
    x, _, eps, _ = sample_inputs(ops.rms_norm, hidden_size=769, dtype=dtype)
    w = 1.0 + 1e-3 * torch.randn(769, generator=torch.Generator().manual_seed(5))
    assert not torch.equal(w.to(dtype).float(), w)  # the half weight would be another one
    out = ops.rms_norm(x, w, eps)
    close("rms_norm", out, ref_rms_norm(x, w, eps))
    assert torch.equal(
        out, (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, True) + eps) * w).to(dtype)
    )
    r = torch.randn(x.shape).to(dtype)
    normed, residual = ops.fused_add_rms_norm(x, r, w, eps)
    assert torch.equal(residual, x + r)
    assert torch.equal(normed, ops.rms_norm(x + r, w, eps))


def test_fp8_saturates_at_format_maximum() -> None:
    x = torch.tensor([[1e6, -1e6, 448.0, 500.0, 1.0]])
    q = ops.static_quant_fp8(x, torch.ones(1))
    assert q.to(torch.float32).tolist() == [[448.0, -448.0, 448.0, 448.0, 1.0]]
    assert not torch.isnan(q.to(torch.float32)).any()


def test_dynamic_quant_zero_row_uses_minimum_scale() -> None:
    x = torch.zeros(2, 16)
    q, scale = ops.dynamic_quant_fp8(x)
    assert torch.all(scale == torch.tensor(MIN_SCALE, dtype=torch.float32))
    assert torch.all(q.to(torch.float32) == 0)


COMPOSITES = [
    (
        "rms_norm_static_quant_fp8",
        lambda x, w, eps, s: ops.static_quant_fp8(ops.rms_norm(x, w, eps), s),
    ),
    (
        "fused_add_rms_norm_static_quant_fp8",
        lambda x, r, w, eps, s: (lambda o: (ops.static_quant_fp8(o[0], s), o[1]))(
            ops.fused_add_rms_norm(x, r, w, eps)
        ),
    ),
    (
        "rms_norm_dynamic_quant_fp8",
        lambda x, w, eps, ub: ops.dynamic_quant_fp8(ops.rms_norm(x, w, eps), ub),
    ),
    ("silu_and_mul_static_quant_fp8", lambda x, s: ops.static_quant_fp8(ops.silu_and_mul(x), s)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("name", "composition"), COMPOSITES)
def test_composites_bitwise_equal_compositions(
    name: str, composition: Any, dtype: torch.dtype
) -> None:
    op = getattr(ops, name)
    args = sample_inputs(op, hidden_size=769, dtype=dtype, row_padding=3)
    fused = op(*args)
    unfused = composition(*args)
    fused_t = fused if isinstance(fused, tuple) else (fused,)
    unfused_t = unfused if isinstance(unfused, tuple) else (unfused,)
    for a, b in zip(fused_t, unfused_t, strict=True):
        assert a.dtype == b.dtype
        assert torch.equal(
            a.view(torch.uint8) if a.dtype == torch.float8_e4m3fn else a,
            b.view(torch.uint8) if b.dtype == torch.float8_e4m3fn else b,
        )


@pytest.mark.parametrize("op", single_process_ops(), ids=lambda op: op.name)
def test_results_are_fresh_and_close_to_torch_op(op: Any) -> None:
    args = sample_inputs(op, hidden_size=64, dtype=torch.float32)
    eager_args, torch_args = clone_args(args), clone_args(args)
    eager = op(*eager_args)
    via_torch = op.torch_op.default(*torch_args)
    assert_close(op, results_of(op, eager_args, eager), results_of(op, torch_args, via_torch))
    outs = () if eager is None else eager if isinstance(eager, tuple) else (eager,)
    for out in outs:
        for a in args:
            if isinstance(a, torch.Tensor):
                assert out.untyped_storage().data_ptr() != a.untyped_storage().data_ptr()


def _rotary_outside_as(fill: str) -> Any:
    """The native rotation with each position outside the table read as row 0, its rotated
    elements then NaN (`fill="nan"`, what a kernel must do) or left as row 0 gave them."""

    def rotary(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, *rest: Any) -> Any:
        head_size, cache, is_neox_style = rest
        outside = (positions < 0) | (positions >= cache.shape[0])
        q, k = ops.rotary_embedding.native(
            positions.masked_fill(outside, 0), q, k, head_size, cache, is_neox_style
        )
        if fill == "nan":
            rot = cache.shape[1]
            for t in (q, k):
                t.unflatten(-1, (-1, head_size))[outside, :, :rot] = math.nan
        return q, k

    return rotary


@pytest.mark.parametrize("positions_dtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("rotary_dim", [64, 32])
def test_rotary_table_check_knows_a_kernel_that_stays_in_the_table(
    positions_dtype: torch.dtype, rotary_dim: int
) -> None:
    """`assert_rotary_reads_only_the_table`, which the kernels' tests run, passes the
    behaviour it describes and refuses others: the native function's (torch's indexing
    fails) and a clamped lookup's (plausible values)."""
    check = dict(positions_dtype=positions_dtype, rotary_dim=rotary_dim, is_neox_style=True)
    assert_rotary_reads_only_the_table(_rotary_outside_as("nan"), torch.float16, "cpu", **check)
    with pytest.raises(IndexError):
        assert_rotary_reads_only_the_table(
            ops.rotary_embedding.native, torch.float16, "cpu", **check
        )
    with pytest.raises(AssertionError, match="not NaN"):
        assert_rotary_reads_only_the_table(
            _rotary_outside_as("row 0"), torch.float16, "cpu", **check
        )


def _dynamic_quant_dropping_nan(
    x: torch.Tensor, scale_ub: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic quantization whose row peak leaves a NaN out, as a hardware maximum does."""
    xf = x.float()
    amax = torch.where(xf.isnan(), 0.0, xf.abs()).amax(dim=-1, keepdim=True)
    scale = torch.clamp(amax / FP8_MAX, min=MIN_SCALE)
    return saturate_fp8(xf / scale), scale


@pytest.mark.parametrize(("value", "column"), NONFINITE_CASES, ids=NONFINITE_CASE_IDS)
@pytest.mark.parametrize("op", single_process_ops(), ids=lambda op: op.name)
def test_nonfinite_check_passes_the_native_functions(op: Any, value: float, column: float) -> None:
    """`assert_nonfinite_like_native`, which the kernels' tests run, passes every native
    function against itself, NaN and infinities included."""
    args = sample_inputs(op, SampleSpec(batch_shape=(3,), hidden_size=64))
    assert_nonfinite_like_native(op, op.native, args, value=value, column=column)


def test_nonfinite_check_knows_a_peak_that_drops_nan() -> None:
    """The native dynamic quantization makes a row holding a NaN all NaN, its scale too; a peak
    that leaves the NaN out (a finite scale, one NaN output) is refused, and so is a value that
    is finite."""
    op = ops.dynamic_quant_fp8
    args = sample_inputs(op, SampleSpec(batch_shape=(3,), hidden_size=64))
    x = args[0].clone()
    x[2, 7] = math.nan
    q, scale = op.native(x)
    assert q[2].float().isnan().all()
    assert scale[2].isnan().all()
    assert not q[:2].float().isnan().any()
    with pytest.raises(AssertionError):
        assert_nonfinite_like_native(
            op, _dynamic_quant_dropping_nan, args, value=math.nan, column=0.5
        )
    assert_nonfinite_like_native(op, _dynamic_quant_dropping_nan, args, value=math.inf, column=0.5)
    with pytest.raises(ValueError, match="expected NaN or inf"):
        assert_nonfinite_like_native(op, op.native, args, value=1.0, column=0.5)


def _stored_by_mask(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """`write_kv_cache` as its docstring reads: real tokens' rows into their slots."""
    slots = slot_mapping.reshape(-1)
    real = slots >= 0
    for new, cache in ((key, key_cache), (value, value_cache)):
        flat = cache.view(-1, cache.shape[2], cache.shape[3])
        flat[slots[real]] = new.reshape(-1, cache.shape[2], cache.shape[3])[real]


@pytest.mark.parametrize("batch", [(0,), (1,), (7,), (2, 3)], ids=str)
@pytest.mark.parametrize("padding", [False, True, "all"], ids=["real", "padding", "all-padding"])
def test_write_kv_cache_stores_real_tokens_only(batch: tuple[int, ...], padding: Any) -> None:
    op = ops.write_kv_cache
    args = list(
        sample_inputs(
            op, hidden_size=64, batch_shape=batch, options={"padding_slots": bool(padding)}
        )
    )
    if padding == "all":
        args[4] = torch.full_like(args[4], -1)
    stored, expected = clone_args(args), clone_args(args)
    op.native(*stored)
    _stored_by_mask(*expected)
    for got, want in zip(results_of(op, stored, None), results_of(op, expected, None), strict=True):
        assert torch.equal(got, want)


def test_write_kv_cache_needs_no_value_from_the_device() -> None:
    """Traced on fake tensors, as a compiler traces it: no size depends on the slots' values,
    so the store never waits on the device and stays capturable in a CUDA graph."""
    from torch.fx.experimental.proxy_tensor import make_fx

    args = sample_inputs(ops.write_kv_cache, hidden_size=64, options={"padding_slots": True})
    make_fx(ops.write_kv_cache.native, tracing_mode="fake")(*args)
