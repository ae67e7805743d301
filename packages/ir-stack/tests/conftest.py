"""Each test starts with Dynamo's caches empty: the tests compile the same model forward many
times, and Dynamo's per-code-object recompile limit counts across tests."""

import pytest
import torch


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    torch._dynamo.reset()
