"""Programmatic dependent launch of the Triton kernels, on or off.

On compute capability 9.0 and later, with a Triton that has ``launch_pdl``, each kernel is
launched programmatically when turned on: its programs may become resident while the kernel
before it on the stream is still running, and each first waits for that kernel to finish
(`await_previous_grid`) before it reads or writes memory, then lets the kernel after it start
launching. Only launches of one wave are programmatic (`PROGRAMMATIC_THREADS`): larger ones
launch plainly. Results are the same either way. It pays only behind a kernel that lets its
dependents start early (on an H200, a median 0.43 µs less a decode-size op behind our own
kernels, 0.44 µs more behind a plain one: `benchmarks/results/programmatic-launch-H200.md`), so
it is off by default. Never in the interpreter.
"""

import dataclasses
import functools
import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import triton
import triton.language as tl

from .platform import interpreting, sm90_or_newer

try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    _HAVE_GRID_CONTROL = True
except ImportError:  # Triton before 3.4
    _HAVE_GRID_CONTROL = False

_enabled = False

if _HAVE_GRID_CONTROL:

    @triton.jit
    def await_previous_grid(PDL: tl.constexpr):
        """The first step of every kernel: under programmatic launch (`PDL`), wait until the
        kernel before has finished and its writes are visible, then let the next launch."""
        if PDL:
            gdc_wait()
            gdc_launch_dependents()

else:

    @triton.jit
    def await_previous_grid(PDL: tl.constexpr):
        """Nothing to wait for: this Triton never launches programmatically."""
        pass


def set_programmatic_launch(enabled: bool) -> bool:
    """Launch the Triton kernels programmatically from now on (where the GPU and Triton can) or
    not (the default); returns the previous setting."""
    global _enabled
    if not isinstance(enabled, bool):
        raise TypeError(f"set_programmatic_launch: enabled must be a bool, got {enabled!r}")
    previous, _enabled = _enabled, enabled
    return previous


def programmatic_launch_enabled() -> bool:
    """Whether programmatic launch is turned on (`set_programmatic_launch`)."""
    return _enabled


@contextmanager
def programmatic_launch(enabled: bool) -> Iterator[None]:
    """`set_programmatic_launch(enabled)` inside the block, the previous setting after it."""
    previous = set_programmatic_launch(enabled)
    try:
        yield
    finally:
        set_programmatic_launch(previous)


@functools.cache
def triton_launches_programmatically() -> bool:
    """This Triton has the grid dependency controls and the ``launch_pdl`` launch option."""
    if not _HAVE_GRID_CONTROL:
        return False
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
    except ImportError:
        return False
    return "launch_pdl" in {f.name for f in dataclasses.fields(CUDAOptions)}


@functools.cache
def _device_launches_programmatically(device_index: int) -> bool:
    return triton_launches_programmatically() and sm90_or_newer(device_index)


#: Launches of at most this many threads are programmatic: one wave of 1024 threads an SM on a
#: card of 128 SMs or more (an H100 or H200 has 132). A larger grid launches plainly: an early
#: start behind it hides no latency worth having, and on an H200 its programmatic launches read
#: 24 MB that sat in the L2 as if from DRAM (static quant 1024 x 8192: 5.54 µs, plainly 3.87;
#: `benchmarks/results/programmatic-launch-mid-H200.md`).
PROGRAMMATIC_THREADS = 128 * 1024


def launch_options(t: torch.Tensor, grid: tuple[int, ...], num_warps: int) -> dict[str, bool]:
    """Keyword arguments for a launch of `grid` programs of `num_warps` warps on `t`'s device:
    ``PDL`` (the kernel's constexpr) and ``launch_pdl`` where it launches programmatically, none
    otherwise (off, no such launch here, or more than `PROGRAMMATIC_THREADS` threads)."""
    if not _enabled or interpreting() or not t.is_cuda:
        return {}
    if math.prod(grid) * num_warps * 32 > PROGRAMMATIC_THREADS:
        return {}
    index = t.device.index if t.device.index is not None else torch.cuda.current_device()
    if not _device_launches_programmatically(index):
        return {}
    return {"PDL": True, "launch_pdl": True}
