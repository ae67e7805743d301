"""The selection rule: priority order, support checks, fallbacks, fake tensors, explain."""

import logging
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import ir_dispatch
import ir_spec
from ir_dispatch import Verdict
from ir_spec import ops

pytestmark = pytest.mark.usefixtures("markers")


def value_of(out: torch.Tensor) -> float:
    return float(out.flatten()[0])


def args(dtype: torch.dtype = torch.float32) -> tuple[Any, ...]:
    return (torch.randn(4, 16, dtype=dtype), None, 1e-6)


def test_priority_order_for_direct_and_torch_op_calls() -> None:
    ir_dispatch.set_priority(rms_norm=["t_one", "t_two"])
    assert value_of(ops.rms_norm(*args())) == 1.0
    assert value_of(torch.ops.ir.rms_norm.default(*args())) == 1.0
    ir_dispatch.set_priority(rms_norm=["t_two", "t_one"])
    assert value_of(ops.rms_norm(*args())) == 2.0
    assert value_of(torch.ops.ir.rms_norm(*args())) == 2.0


def test_unsupported_skipped() -> None:
    ir_dispatch.set_priority(rms_norm=["t_off", "t_two"])
    assert ir_dispatch.select("rms_norm", *args()).provider == "t_two"


def test_supports_args_fallback_and_native_last_resort() -> None:
    ir_dispatch.set_priority(rms_norm=["t_fp16", "t_off"])
    assert value_of(ops.rms_norm(*args(torch.float16))) == 4.0
    x, w, eps = args(torch.float32)
    assert torch.equal(ops.rms_norm(x, w, eps), ops.rms_norm.native(x, w, eps))
    assert ir_dispatch.select(ops.rms_norm, x, w, eps).provider == "native"


def test_native_chosen_even_when_user_list_omits_it() -> None:
    ir_dispatch.set_priority(rms_norm=["t_off"])
    assert ir_dispatch.effective_priority("rms_norm") == ["t_off", "native"]
    assert ir_dispatch.select("rms_norm", *args()).provider == "native"


def test_selection_on_fake_tensors() -> None:
    ir_dispatch.set_priority(rms_norm=["t_fp16", "t_one"])
    with FakeTensorMode():
        fake16 = torch.empty(8, 16, dtype=torch.float16)
        fake32 = torch.empty(8, 16)
        assert ir_dispatch.select("rms_norm", fake16, None, 1e-6).provider == "t_fp16"
        assert ir_dispatch.select("rms_norm", fake32, None, 1e-6).provider == "t_one"


def test_explain_verdicts() -> None:
    ir_dispatch.set_priority(rms_norm=["t_off", "t_fp16", "t_one", "t_two"])
    explanation = ir_dispatch.explain("rms_norm", *args())
    verdicts = {v.provider: v.verdict for v in explanation}
    assert verdicts == {
        "t_off": Verdict.NOT_SUPPORTED,
        "t_fp16": Verdict.ARGS_REJECTED,
        "t_one": Verdict.SELECTED,
        "t_two": Verdict.NOT_REACHED,
        "native": Verdict.NOT_REACHED,
    }
    assert explanation.selected == "t_one"
    text = str(explanation)
    assert "fp16_only returned False" in text
    assert "supported=False" in text
    no_args = ir_dispatch.explain("rms_norm")
    assert no_args.selected is None
    assert {v.verdict for v in no_args} >= {Verdict.ELIGIBLE, Verdict.NOT_SUPPORTED}


def test_explain_not_registered_provider() -> None:
    ir_dispatch.set_priority(silu_and_mul=["t_one"])  # known name, no silu_and_mul impl
    explanation = ir_dispatch.explain("silu_and_mul", torch.randn(2, 8))
    assert next(iter(explanation)).verdict is Verdict.NOT_REGISTERED
    assert explanation.selected == "native"


def test_cache_invalidated_by_registration_and_priority() -> None:
    ir_dispatch.set_priority(rms_norm=["t_one"])
    assert value_of(ops.rms_norm(*args())) == 1.0
    assert ops.rms_norm.choices  # the choice was cached
    ir_dispatch.set_priority(rms_norm=["t_two"])
    assert not ops.rms_norm.choices
    assert value_of(ops.rms_norm(*args())) == 2.0

    ops.rms_norm.register_impl("t_late")(
        lambda x, weight, epsilon, variance_size=None: torch.full_like(x, 9.0)
    )
    try:
        ir_dispatch.set_priority(rms_norm=["t_late", "t_two"])
        assert value_of(ops.rms_norm(*args())) == 9.0
        ops.rms_norm.unregister_impl("t_late")
        assert value_of(ops.rms_norm(*args())) == 2.0
    finally:
        if "t_late" in ops.rms_norm.impls:
            ops.rms_norm.unregister_impl("t_late")


def test_batch_invariant_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    ir_dispatch.set_priority(rms_norm=["t_one", "t_two"])
    assert value_of(ops.rms_norm(*args())) == 1.0
    ir_dispatch.set_batch_invariant(True)
    assert ir_dispatch.batch_invariant()
    assert value_of(ops.rms_norm(*args())) == 2.0
    verdicts = {v.provider: v.verdict for v in ir_dispatch.explain("rms_norm", *args())}
    assert verdicts["t_one"] is Verdict.NOT_BATCH_INVARIANT
    ir_dispatch.set_priority(rms_norm=["t_one"])
    assert ir_dispatch.select("rms_norm", *args()).provider == "native"


def test_disabled_provider_not_eligible(monkeypatch: pytest.MonkeyPatch) -> None:
    ir_dispatch.set_priority(rms_norm=["t_one", "t_two"])
    monkeypatch.setenv("IR_DISABLE_PROVIDERS", "t_one")
    assert ir_dispatch.select("rms_norm", *args()).provider == "t_two"


def test_defaults_merge_after_user_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IR_PLATFORM", "cuda")
    ir_dispatch.detect_platform.cache_clear()
    assert ir_dispatch.effective_priority("rms_norm") == ["triton", "cuda", "native"]
    with ir_dispatch.mode("inductor"):
        assert ir_dispatch.effective_priority("rms_norm") == ["native", "triton", "cuda"]
        assert ir_dispatch.effective_priority("dynamic_quant_fp8") == ["triton", "cuda", "native"]
    ir_dispatch.set_priority(rms_norm=["triton", "t_one"])
    assert ir_dispatch.effective_priority("rms_norm") == ["triton", "t_one", "cuda", "native"]
    monkeypatch.setenv("IR_PLATFORM", "cpu")
    ir_dispatch.detect_platform.cache_clear()
    assert ir_dispatch.effective_priority("rms_norm") == ["triton", "t_one", "native"]


def test_bad_platform_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IR_PLATFORM", "tpu")
    ir_dispatch.detect_platform.cache_clear()
    with pytest.raises(ValueError, match=r"IR_PLATFORM=.tpu.*cpu, cuda, rocm, (\w+, )*xpu"):
        ir_dispatch.detect_platform()


def test_unknown_names_raise_listing_valid() -> None:
    with pytest.raises(ValueError, match=r"unknown op 'rms_nrom'; known ops: .*rms_norm"):
        ir_dispatch.set_priority(rms_nrom=["native"])
    with pytest.raises(ValueError, match=r"unknown provider 'tritn'; known providers: .*triton"):
        ir_dispatch.set_priority(rms_norm=["tritn"])
    with pytest.raises(ValueError, match="unknown op"):
        ir_dispatch.select("nope")
    with pytest.raises(ValueError, match="unknown op"):
        ir_dispatch.explain("nope")
    with pytest.raises(ValueError, match="unknown op"):
        ir_dispatch.effective_priority("nope")
    with pytest.raises(ValueError, match="listed twice"):
        ir_dispatch.set_priority(rms_norm=["t_one", "t_one"])
    with pytest.raises(ValueError, match="empty"):
        ir_dispatch.set_priority(rms_norm=[])
    with pytest.raises(ValueError, match="expected a list"):
        ir_dispatch.set_priority(rms_norm="t_one")
    with pytest.raises(ValueError, match="unknown op"), ir_dispatch.priority(bogus=["native"]):
        pass


def test_set_priority_mapping_and_keywords() -> None:
    ir_dispatch.set_priority({"rms_norm": ["t_one"]}, silu_and_mul=["native"])
    assert ir_dispatch.user_priority() == {"rms_norm": ["t_one"], "silu_and_mul": ["native"]}
    with pytest.raises(ValueError, match="both in the mapping and as keyword"):
        ir_dispatch.set_priority({"rms_norm": ["t_one"]}, rms_norm=["t_two"])
    ir_dispatch.set_priority()
    assert ir_dispatch.user_priority() == {}


def test_first_choice_logged_with_reasons(caplog: pytest.LogCaptureFixture) -> None:
    ir_dispatch.set_priority(rms_norm=["t_off", "t_fp16", "t_two"])
    with caplog.at_level(logging.DEBUG, logger="ir_dispatch"):
        ops.rms_norm(*args())
        ops.rms_norm(*args())
    lines = [r.getMessage() for r in caplog.records if "ir.rms_norm ->" in r.getMessage()]
    assert len(lines) == 1  # the second call hit the cache
    assert "t_two" in lines[0]
    assert "t_off: not supported" in lines[0]
    assert "t_fp16: arguments rejected" in lines[0]


def test_stats_count_calls() -> None:
    ir_dispatch.set_priority(rms_norm=["t_one"])
    ir_dispatch.reset_stats()
    ir_dispatch.collect_stats(True)
    for _ in range(3):
        ops.rms_norm(*args())
    ops.rms_norm(*args(torch.float16))
    ir_dispatch.collect_stats(False)
    ops.rms_norm(*args())
    assert ir_dispatch.stats()[("rms_norm", "t_one")] == 4


def test_replaced_dispatcher_is_loud() -> None:
    ir_spec.set_dispatcher(None)
    with pytest.raises(RuntimeError, match=r"ir_dispatch.install\(\)"):
        ir_dispatch.set_priority(rms_norm=["t_one"])
    with pytest.raises(RuntimeError, match="not ir_spec's dispatcher"):
        ir_dispatch.select("rms_norm", *args())
    ir_dispatch.install()
    ir_dispatch.set_priority(rms_norm=["t_one"])
    assert value_of(ops.rms_norm(*args())) == 1.0


def test_explain_shows_why_a_provider_is_unsupported() -> None:
    def ident(
        x: torch.Tensor,
        weight: torch.Tensor | None,
        epsilon: float,
        variance_size: int | None = None,
    ) -> torch.Tensor:
        return x

    ops.rms_norm.register_impl(
        "t_no_toolkit", supported=False, unsupported_reason="no CUDA toolkit (nvcc) found"
    )(ident)
    try:
        ir_dispatch.set_priority(rms_norm=["t_no_toolkit"])
        explanation = ir_dispatch.explain("rms_norm", *args())
        verdict = next(v for v in explanation if v.provider == "t_no_toolkit")
        assert verdict.verdict is Verdict.NOT_SUPPORTED
        assert "no CUDA toolkit (nvcc) found" in str(explanation)
    finally:
        ir_dispatch.set_priority()
        ops.rms_norm.unregister_impl("t_no_toolkit")
