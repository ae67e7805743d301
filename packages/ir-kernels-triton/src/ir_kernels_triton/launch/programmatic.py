"""Programmatic dependent launch of the Triton kernels, on or off.

On compute capability 9.0 and later, with a Triton that has ``launch_pdl``, each kernel is
launched programmatically when turned on: its programs may become resident while the kernel
before it on the stream is still running, and each first waits for that kernel to finish
(`await_previous_grid`) before it reads or writes memory, then lets the kernel after it start
launching. Only launches of one wave are programmatic (`tuning.Programmatic`): larger ones
launch plainly, since an early start behind them hides no latency worth having and their
programmatic launches were found to read data that sat in the L2 as if from DRAM. Results are
the same either way. It pays only behind a kernel that lets its dependents start early, and
costs a little behind one that does not, so it is off by default. Never in the interpreter.
"""

import dataclasses
import functools
import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import triton
import triton.language as tl

from . import tuning
from .device import interpreting, sm90_or_newer

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


def launch_options(t: torch.Tensor, grid: tuple[int, ...], num_warps: int) -> dict[str, bool]:
    """Keyword arguments for a launch of `grid` programs of `num_warps` warps on `t`'s device:
    ``PDL`` (the kernel's constexpr) and ``launch_pdl`` where it launches programmatically, none
    otherwise (off, no such launch here, or more threads than
    `tuning.Programmatic.max_threads`)."""
    if not _enabled or interpreting() or not t.is_cuda:
        return {}
    if math.prod(grid) * num_warps * 32 > tuning.COMMON.programmatic.max_threads:
        return {}
    index = t.device.index if t.device.index is not None else torch.cuda.current_device()
    if not _device_launches_programmatically(index):
        return {}
    return {"PDL": True, "launch_pdl": True}
