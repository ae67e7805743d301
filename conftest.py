"""Repository-wide pytest hooks.

``IR_TEST_SHARD=i/n`` keeps every n-th selected test starting at i (0-based), so a long suite
(the GPU matrix) can run in n processes that compile kernels in parallel. It runs after ``-k`` and
``-m`` have deselected, so the shards of a selection are even.

After each test, a process holding more than `GPU_CACHE_KEPT` bytes in torch's CUDA caching
allocator gives the cached blocks back to the driver. Under ``pytest -n 8`` on one GPU, each
worker otherwise keeps the peak of the largest case it has run (a few GiB for the 65536-wide
matrix cells), and together they left the next large case no memory (Triton's launch failing
with "out of memory").
"""

import os
import sys

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


#: Bytes of cached GPU memory a test process may keep between tests.
GPU_CACHE_KEPT = 4 << 30


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    torch = sys.modules.get("torch")  # never import it (nor start CUDA) for a test that did not
    if torch is None or not torch.cuda.is_initialized():
        return
    if torch.cuda.memory_reserved() > GPU_CACHE_KEPT:
        torch.cuda.empty_cache()
