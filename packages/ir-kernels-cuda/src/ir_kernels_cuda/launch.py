"""How the ``cuda`` provider's kernels are launched: plainly (the default) or as programmatic
dependent launches.

A programmatic dependent launch (compute capability 9.0 and later) lets a kernel's blocks become
resident while the kernel before it on the stream still runs; each kernel waits for that one to
finish (``griddepcontrol.wait``) before it touches memory, and a kernel of one wave lets the
next start early (``griddepcontrol.launch_dependents``). Results are the same either way.

The kernels built for it are a second build of the same sources, ``torch.ops.ir_cuda_programmatic``
(`build.build(programmatic=True)`, compiled on first use and cached like the plain one), so the
plain kernels carry no trace of it: even as no-ops, the two instructions slowed plain launches
at some shapes inside the L2. Turning it on points the provider's implementations
(`impls.KERNELS`) at that build.

It pays only where the kernel before lets its dependents start early, as these kernels do: a
decode-size op behind one of them takes less time, but behind a plain kernel more. So it is off
by default: turn it on where the kernels around these ops launch programmatically too. A
function compiled or a CUDA graph captured keeps the kernels it was traced or captured with.
"""

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from . import impls
from .build import PROGRAMMATIC_NAMESPACE, build

_lock = threading.Lock()
#: The namespace the implementations called before programmatic launch was turned on (None
#: while it is off).
_plain_kernels: Any = None


def programmatic_launch_enabled() -> bool:
    """Whether the ``cuda`` implementations launch their kernels programmatically."""
    return _plain_kernels is not None


def set_programmatic_launch(enabled: bool) -> bool:
    """Launch the ``cuda`` provider's kernels as programmatic dependent launches from now on, or
    plainly (the default); returns the previous setting. Turning it on builds or loads the
    programmatic kernels: `build.BuildUnavailable` where they cannot be built (no GPU, or one
    older than compute capability 9.0)."""
    global _plain_kernels
    if not isinstance(enabled, bool):
        raise TypeError(f"set_programmatic_launch: enabled must be a bool, got {enabled!r}")
    with _lock:
        previous = _plain_kernels is not None
        if enabled and not previous:
            build(programmatic=True)
            impls.register_fakes(PROGRAMMATIC_NAMESPACE)
            _plain_kernels = impls.KERNELS
            impls.KERNELS = getattr(torch.ops, PROGRAMMATIC_NAMESPACE)
        elif not enabled and previous:
            impls.KERNELS = _plain_kernels
            _plain_kernels = None
        return previous


@contextmanager
def programmatic_launch(enabled: bool) -> Iterator[None]:
    """`set_programmatic_launch(enabled)` inside the block, the previous setting after it."""
    previous = set_programmatic_launch(enabled)
    try:
        yield
    finally:
        set_programmatic_launch(previous)
