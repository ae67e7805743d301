"""Each test starts with Dynamo's caches empty: the tests compile the same model forward many
times, and Dynamo's per-code-object recompile limit counts across tests. `bench_record` builds
rows of the ``kernels`` suite for the report tests."""

from collections.abc import Callable
from typing import Any

import pytest
import torch

BenchRecord = Callable[..., dict[str, Any]]


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    torch._dynamo.reset()


@pytest.fixture
def bench_record() -> BenchRecord:
    """A builder of one row of the ``kernels`` suite (a provider at a shape, one run), as
    `ir_stack.bench.kernels` writes it: ``(op, provider, tokens, hidden, us, frac=0.5)``."""

    def record(
        op: str, provider: str, tokens: int, hidden: int, us: float, frac: float = 0.5
    ) -> dict[str, Any]:
        return {
            "op": op,
            "provider": provider,
            "tokens": tokens,
            "hidden": hidden,
            "us_graph": us,
            "us_plain": us + 1,
            "fraction_of_copy": frac,
            "gbps_graph": frac * 1000,
            "run": 0,
        }

    return record
