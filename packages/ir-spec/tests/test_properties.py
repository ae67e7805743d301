"""Property tests (hypothesis) over shapes, dtypes, layouts and scales."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ir_spec import SampleSpec, ops
from ir_spec.catalog.quant import FP8_MAX
from ir_spec.testing import ACTIVATION_DTYPES, sample_inputs

specs = st.builds(
    SampleSpec,
    batch_shape=st.one_of(
        st.tuples(st.integers(0, 9)), st.tuples(st.integers(1, 3), st.integers(1, 4))
    ),
    hidden_size=st.integers(1, 300),
    dtype=st.sampled_from(ACTIVATION_DTYPES),
    seed=st.integers(0, 2**16),
    row_padding=st.integers(0, 5),
)
settings.register_profile("ir", max_examples=40, deadline=None)
settings.load_profile("ir")


# powers of two from 1 up: scaling down would round float16 subnormals (below 6.1e-5, which
# random inputs do produce), so x * factor would no longer be exact
@given(specs, st.integers(0, 6).map(lambda k: 2.0**k))
def test_rms_norm_invariant_under_power_of_two_scaling(spec: SampleSpec, factor: float) -> None:
    x, w, _, _ = sample_inputs(ops.rms_norm, spec)
    assert torch.equal(ops.rms_norm(x * factor, w, 1e-30), ops.rms_norm(x, w, 1e-30))


@given(specs)
def test_rms_norm_rows_have_unit_rms(spec: SampleSpec) -> None:
    x, _, _, _ = sample_inputs(ops.rms_norm, spec)
    if x.numel() == 0:
        return
    out = ops.rms_norm(x, None, 1e-12).double()
    rms = out.pow(2).mean(-1).sqrt()
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}[spec.dtype]
    assert torch.allclose(rms, torch.ones_like(rms), atol=tol, rtol=0)


@given(specs)
def test_fused_add_is_add_then_norm(spec: SampleSpec) -> None:
    x, r, w, eps, _ = sample_inputs(ops.fused_add_rms_norm, spec)
    out, residual = ops.fused_add_rms_norm(x, r, w, eps)
    assert torch.equal(residual, x + r)
    assert torch.equal(out, ops.rms_norm(residual, w, eps))


@given(specs)
def test_dynamic_quant_roundtrip_within_e4m3(spec: SampleSpec) -> None:
    x, _ = sample_inputs(ops.dynamic_quant_fp8, spec)
    q, scale = ops.dynamic_quant_fp8(x)
    assert q.shape == x.shape
    assert scale.shape == (*x.shape[:-1], 1)
    deq = q.double() * scale.double()
    amax = x.double().abs().amax(-1, keepdim=True) if x.numel() else deq
    assert torch.all((deq - x.double()).abs() <= amax / 16 + 1e-12)
    assert torch.all(q.double().abs() <= FP8_MAX)


@given(specs.filter(lambda s: s.hidden_size % 2 == 0 or s.hidden_size > 0))
def test_silu_and_mul_shape_and_sign(spec: SampleSpec) -> None:
    (x,) = sample_inputs(ops.silu_and_mul, spec)
    out = ops.silu_and_mul(x)
    assert out.shape == (*x.shape[:-1], x.shape[-1] // 2)
    assert out.dtype == x.dtype
    d = x.shape[-1] // 2
    # silu(a) * b has the sign of a*b wherever both are clearly away from zero
    a, b = x[..., :d].double(), x[..., d:].double()
    mask = (a.abs() > 0.1) & (b.abs() > 0.1)
    assert torch.all(torch.sign(out.double())[mask] == torch.sign(a * b)[mask])
