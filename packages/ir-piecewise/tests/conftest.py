"""Each test starts with zeroed counters and empty Dynamo caches: the tests compile the same
toy model many times and assert on what one compilation did."""

from collections.abc import Iterator

import pytest
import torch

from ir_piecewise import counters


@pytest.fixture(autouse=True)
def fresh_state() -> Iterator[None]:
    counters.reset()
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
