"""Host-side timing shared by the eager-cost scripts beside this one (run from the repository
root as ``python3 benchmarks/gpu/<script>.py``, which puts this folder on the path)."""

import time
from collections.abc import Callable
from typing import Any

import torch


def per_call_us(fn: Callable[[], Any], calls: int = 3000) -> float:
    """µs a call of `fn` over `calls` calls back to back, after 50 to warm up, the GPU
    synchronized before and after."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6
