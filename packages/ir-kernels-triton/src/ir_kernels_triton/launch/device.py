"""Where Triton kernels can run, and what the launchers ask of the GPU that runs them.

Each question about a device is asked of torch once per device and cached; the launchers still
ask only where their rule reads the answer, since even a cached answer costs a visible share of
a decode-size launch.
"""

import functools
import os
from typing import Any

import torch

try:
    import triton

    HAVE_TRITON = True
except ImportError:  # pragma: no cover - triton is a declared dependency
    HAVE_TRITON = False


@functools.cache
def interpreting() -> bool:
    """True under ``TRITON_INTERPRET=1`` when the package was imported (kernels run on CPU
    tensors, in numpy). Read once: Triton decides at decoration time how kernels run."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def triton_version() -> tuple[int, int]:
    """The installed Triton's (major, minor), a local suffix ignored ("3.6.0+git1234": (3, 6));
    read at each call."""
    major, minor = (
        int("".join(c for c in part if c.isdigit()) or 0)
        for part in [*triton.__version__.split("."), "0"][:2]
    )
    return major, minor


@functools.cache
def sm90_or_newer(device_index: int) -> bool:
    """Whether GPU `device_index` is an NVIDIA GPU of compute capability 9.0 or later (thread-block
    clusters, programmatic dependent launch)."""
    return torch.version.hip is None and torch.cuda.get_device_capability(device_index)[0] >= 9


@functools.cache
def triton_supported() -> bool:
    """Triton can run here: a CUDA/ROCm GPU it targets, or the interpreter."""
    return not unsupported_reason()


def unsupported_reason() -> str:
    """Why Triton cannot run here (`triton_supported`), or ``""`` where it can."""
    if not HAVE_TRITON:
        return "the triton package is not installed"
    if interpreting() or torch.cuda.is_available():
        return ""
    return (
        "no GPU visible to torch (torch.cuda.is_available() is False); set TRITON_INTERPRET=1 "
        "before importing ir_kernels_triton to run the kernels on CPU tensors in Triton's "
        "interpreter"
    )


@functools.cache
def several_gpus() -> bool:
    """More than one GPU is visible: a tensor may then live on another than the current one,
    where Triton would launch."""
    return torch.cuda.device_count() > 1


def on_kernel_device(*tensors: torch.Tensor | None) -> bool:
    """All given tensors live where the kernels run (the GPU; the CPU when interpreting)."""
    want_cuda = not interpreting()
    return all(t is None or t.is_cuda == want_cuda for t in tensors)


@functools.cache
def _device_properties(device_index: int) -> Any:
    return torch.cuda.get_device_properties(device_index)


def _gpu_index(t: torch.Tensor) -> int | None:
    """The index of the GPU holding `t` (None off the GPU)."""
    if not t.is_cuda:
        return None
    return t.device.index if t.device.index is not None else 0


def _gpu_properties(t: torch.Tensor) -> Any | None:
    """The properties of the GPU holding `t`, asked once per device (None off the GPU)."""
    index = _gpu_index(t)
    return None if index is None else _device_properties(index)


def l2_cache_bytes(t: torch.Tensor) -> int | None:
    """Size of the L2 cache of the GPU holding `t` (None off the GPU)."""
    properties = _gpu_properties(t)
    return None if properties is None else int(properties.L2_cache_size)


def sm_count(t: torch.Tensor) -> int | None:
    """Number of SMs of the GPU holding `t` (None off the GPU)."""
    properties = _gpu_properties(t)
    return None if properties is None else int(properties.multi_processor_count)


def dram_gbps_per_sm(t: torch.Tensor) -> float | None:
    """Peak DRAM bandwidth of the GPU holding `t` in GB/s per SM, from the memory clock and
    bus width torch reports (None off the GPU, or where the driver reports no clock): how many
    loads an SM must keep in flight to keep the memory busy, which picks the card's
    `tuning.DeviceClass`. Worked out once per device."""
    index = _gpu_index(t)
    return None if index is None else _device_dram_gbps_per_sm(index)


@functools.cache
def _device_dram_gbps_per_sm(device_index: int) -> float | None:
    return gbps_per_sm_of(_device_properties(device_index))


def gbps_per_sm_of(properties: Any) -> float | None:
    """`dram_gbps_per_sm` of a device with these properties (``memory_clock_rate`` in kHz,
    ``memory_bus_width`` in bits, ``multi_processor_count``)."""
    memory_khz = getattr(properties, "memory_clock_rate", 0)
    bus_bits = getattr(properties, "memory_bus_width", 0)
    if not (memory_khz and bus_bits):
        return None
    gbps = 2 * memory_khz * 1e3 * bus_bits / 8 / 1e9  # double data rate
    return gbps / int(properties.multi_processor_count)
