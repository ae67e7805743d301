"""What selection costs outside the eager fast path: ``ir_dispatch.select`` (the one rule,
walked afresh), ``ir_dispatch.explain`` (every provider's verdict) and
``ir_dispatch.effective_priority``."""

from typing import Any

import pytest
from torch import Tensor

import ir_dispatch

#: the trivial provider the conftest registers
TRIVIAL = "bench_trivial"

NormArgs = tuple[Tensor, Tensor, float]


@pytest.mark.benchmark(group="selection")
def test_select(benchmark: Any, norm_args: NormArgs) -> None:
    assert benchmark(ir_dispatch.select, "rms_norm", *norm_args).provider == TRIVIAL


@pytest.mark.benchmark(group="selection")
def test_explain(benchmark: Any, norm_args: NormArgs) -> None:
    assert benchmark(ir_dispatch.explain, "rms_norm", *norm_args).selected == TRIVIAL


@pytest.mark.benchmark(group="selection")
def test_effective_priority(benchmark: Any) -> None:
    assert benchmark(ir_dispatch.effective_priority, "rms_norm")[0] == TRIVIAL
