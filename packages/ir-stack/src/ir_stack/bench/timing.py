"""Timing shared by every suite.

- `device_us`: a GPU function's time, replayed in a CUDA graph
  (``triton.testing.do_bench_cudagraph``: no launch cost between replays, what a graph-replayed
  model sees), or plainly with ``triton.testing.do_bench`` where capture fails; `Timing.method`
  says which.
- `plain_us`: the same with ``do_bench`` alone (each call launched from the host).
- `copy_bandwidth_gbps`: the device-to-device copy bandwidth of a 1 GiB buffer, bytes read
  plus written: the ceiling a memory-bound kernel is held against.
- `cpu_us`: a host function's time a call, the median of short `timeit` rounds (for CPU runs
  and the host side of eager calls).
- `host_us_per_call`: the host's time a call of a GPU function over many calls issued back to
  back, the device synchronized before and after (eager dispatch, where the host sets the pace).
- `mean_ms`: the mean of back-to-back calls between CUDA events (or `time.perf_counter` on the
  CPU), for whole-model steps.
- `gpu_time_fn` / `cpu_time_fn`: a suite's row fields for one candidate and its minimum
  traffic (`TimeFn`): replayed and plain times with GB/s and the fraction of the copy
  bandwidth on a GPU, host times on the CPU path.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
import timeit
from collections.abc import Callable
from typing import Any

import torch

#: Quantiles of the timings (the middle one is the median reported).
QUANTILES = (0.2, 0.5, 0.8)


@dataclasses.dataclass(frozen=True)
class Timing:
    """Median and 20 % / 80 % quantiles of a function's time, in µs, and how it was timed."""

    median_us: float
    p20_us: float
    p80_us: float
    method: str


def _quantiles(values: list[float], method: str) -> Timing:
    if not values:
        raise ValueError("no timings: expected at least one measured round")
    if len(values) == 1:
        return Timing(values[0], values[0], values[0], method)
    cuts = statistics.quantiles(values, n=10, method="inclusive")
    return Timing(statistics.median(values), cuts[1], cuts[7], method)


def cuda_graph_us(fn: Callable[[], Any], rep_ms: int = 25) -> Timing:
    """`fn` captured in a CUDA graph and replayed (``do_bench_cudagraph``), µs a call."""
    from triton.testing import do_bench_cudagraph

    low, mid, high = do_bench_cudagraph(fn, rep=rep_ms, quantiles=list(QUANTILES))
    return Timing(mid * 1e3, low * 1e3, high * 1e3, "cuda graph replay")


def plain_us(fn: Callable[[], Any], rep_ms: int = 25, warmup_ms: int = 5) -> Timing:
    """`fn` launched from the host call after call (``do_bench``), µs a call."""
    from triton.testing import do_bench

    low, mid, high = do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=list(QUANTILES))
    return Timing(mid * 1e3, low * 1e3, high * 1e3, "do_bench")


def device_us(fn: Callable[[], Any], rep_ms: int = 25) -> Timing:
    """`fn`'s time replayed in a CUDA graph, or plainly where it cannot be captured (a host
    synchronization inside it, for one)."""
    fn()
    torch.cuda.synchronize()
    try:
        return cuda_graph_us(fn, rep_ms)
    except RuntimeError:
        torch.cuda.synchronize()
        return plain_us(fn, rep_ms)


def copy_bandwidth_gbps(size: int = 1 << 30) -> float:
    """GB/s of a device-to-device copy of `size` bytes, counting bytes read and written."""
    from triton.testing import do_bench

    src = torch.empty(size, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = float(do_bench(lambda: dst.copy_(src), warmup=50, rep=400))
    return 2 * size / (ms * 1e-3) / 1e9


def cpu_us(fn: Callable[[], Any], budget_s: float = 0.3, round_us: float = 20.0) -> Timing:
    """`fn`'s time a call on the host, µs: many short rounds of about `round_us` each, over
    about `budget_s` seconds, and their median. Short rounds, as pytest-benchmark takes them:
    on a shared machine a long round includes the time the process waits for a core, which
    the median of short ones leaves out."""
    timer = timeit.Timer(fn)
    number, elapsed = timer.autorange()  # also the warm-up
    per_call = elapsed / number
    number = max(1, round(round_us * 1e-6 / per_call))
    rounds = max(5, round(budget_s / (number * per_call)))
    times = [t / number * 1e6 for t in timer.repeat(repeat=rounds, number=number)]
    return _quantiles(times, "timeit")


def host_us_per_call(fn: Callable[[], Any], calls: int = 3000, warmup: int = 50) -> float:
    """µs a call of `fn` over `calls` calls back to back, after `warmup` calls, the GPU (where
    one is used) synchronized before and after: the host's pace for kernels too small to keep
    the GPU busy."""
    for _ in range(warmup):
        fn()
    _synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    _synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def mean_ms(fn: Callable[[], Any], device: torch.device, iters: int, warmup: int = 3) -> float:
    """Mean milliseconds a call of `iters` back-to-back calls after `warmup` calls, between
    CUDA events on a GPU, by `time.perf_counter` on the CPU."""
    for _ in range(warmup):
        fn()
    if device.type != "cuda":
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - start) * 1e3 / iters
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return float(begin.elapsed_time(end)) / iters


def _synchronize() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


#: Times one benchmark candidate: (its call, its minimum traffic in bytes) -> the row's measured
#: fields (``us`` at least).
TimeFn = Callable[[Callable[[], Any], int], dict[str, Any]]


def gpu_time_fn(copy_gbps: float, quick: bool) -> TimeFn:
    """A `TimeFn` for a GPU: replayed in a CUDA graph (`device_us`) and plainly (`plain_us`),
    with GB/s and the fraction of `copy_gbps`; `quick` takes shorter repetitions."""
    rep = 10 if quick else 25

    def measure(fn: Callable[[], Any], traffic: int) -> dict[str, Any]:
        graph = device_us(fn, rep)
        plain = plain_us(fn, rep)
        gbps = traffic / (graph.median_us * 1e-6) / 1e9
        return {
            "us": graph.median_us,
            "us_p20": graph.p20_us,
            "us_p80": graph.p80_us,
            "timed_by": graph.method,
            "us_plain": plain.median_us,
            "gbps": gbps,
            "fraction_of_copy": gbps / copy_gbps,
            "copy_gbps": copy_gbps,
        }

    return measure


def cpu_time_fn(budget_s: float = 0.05) -> TimeFn:
    """A `TimeFn` for the host (`cpu_us`): a suite's CPU path, for tests."""

    def measure(fn: Callable[[], Any], traffic: int) -> dict[str, Any]:
        measured = cpu_us(fn, budget_s=budget_s)
        return {
            "us": measured.median_us,
            "us_p20": measured.p20_us,
            "us_p80": measured.p80_us,
            "timed_by": measured.method,
            "gbps": traffic / (measured.median_us * 1e-6) / 1e9,
            "fraction_of_copy": None,
        }

    return measure
