"""Each test starts with Dynamo's caches empty: the tests compile the same model forward many
times, and Dynamo's per-code-object recompile limit counts across tests."""

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
