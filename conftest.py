"""Repository-wide pytest hooks.

``IR_TEST_SHARD=i/n`` keeps every n-th selected test starting at i (0-based), so a long suite
(the GPU matrix) can run in n processes that compile kernels in parallel. It runs after ``-k`` and
``-m`` have deselected, so the shards of a selection are even.
"""

import os

import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shard = os.environ.get("IR_TEST_SHARD")
    if not shard:
        return
    index, _, count = shard.partition("/")
    i, n = int(index), int(count)
    if not 0 <= i < n:
        raise pytest.UsageError(f"IR_TEST_SHARD={shard!r}: expected i/n with 0 <= i < n")
    keep = [item for k, item in enumerate(items) if k % n == i]
    config.hook.pytest_deselected(items=[item for k, item in enumerate(items) if k % n != i])
    items[:] = keep
