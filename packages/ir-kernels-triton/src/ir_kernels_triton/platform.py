"""Where Triton kernels can run, and the layout rules every kernel shares."""

import functools
import os
from typing import Any

import torch

from ir_spec import row_view

try:
    import triton

    HAVE_TRITON = True
except ImportError:  # pragma: no cover - triton is a declared dependency
    HAVE_TRITON = False

#: Largest row the single-pass kernels hold in registers; longer rows take the looped kernels.
MAX_SINGLE_PASS = 16384
#: Chunk width of the looped kernels.
LOOP_BLOCK = 4096


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
    bus width torch reports (None off the GPU, or where the driver reports no clock). An H100
    SXM has about 25, an H200 about 37: the latter needs more loads in flight per SM to keep
    its memory busy. Worked out once per device."""
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


#: DRAM bandwidth per SM (GB/s) from which a card takes the launches measured for deep loads
#: (more loads in flight per SM): between the H100 SXM's 25 and the H200's 37, the two cards
#: measured.
DEEP_LOADS_GBPS_PER_SM = 30.0


def deep_loads(gbps_per_sm: float | None) -> bool:
    """A card of `DEEP_LOADS_GBPS_PER_SM` or more of DRAM bandwidth per SM (None, unknown: no)."""
    return gbps_per_sm is not None and gbps_per_sm >= DEEP_LOADS_GBPS_PER_SM


def tensor_bytes(*tensors: torch.Tensor | None) -> int:
    """Bytes of the given tensors (None counts nothing): an op's footprint when each is read or
    written once; pass a tensor twice for one read and one write in place."""
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def footprint_share(t: torch.Tensor, footprint: int) -> float | None:
    """`footprint` bytes as a multiple of the L2 size of the GPU holding `t` (None off it)."""
    l2 = l2_cache_bytes(t)
    return None if l2 is None else footprint / l2


def streams_from_dram(t: torch.Tensor, footprint: int) -> bool:
    """An op on `t` reading and writing `footprint` bytes cannot keep them in L2 between calls."""
    share = footprint_share(t, footprint)
    return share is not None and share > 1.0


def on_kernel_device(*tensors: torch.Tensor | None) -> bool:
    """All given tensors live where the kernels run (the GPU; the CPU when interpreting)."""
    want_cuda = not interpreting()
    return all(t is None or t.is_cuda == want_cuda for t in tensors)


def row_stride(t: torch.Tensor) -> int | None:
    """The stride between rows when `t`'s leading dimensions collapse into one row index and
    its last dimension is contiguous (`ir_spec.row_view`); None when the kernels cannot
    address it."""
    view = row_view(t)
    if view is None:
        return None
    return t.shape[-1] if t.dim() == 1 else int(view.stride(0))


def rows(t: torch.Tensor) -> torch.Tensor:
    """`t` viewed as ``[rows, hidden]`` (callers checked `row_stride` first)."""
    return t.view(-1, t.shape[-1])


def rows_aligned(*tensors: torch.Tensor) -> bool:
    """Whether Triton specializes the rows of every tensor as 16-byte aligned (its address
    and row stride, in elements, multiples of 16): only such rows may be shared among programs
    or blocks (the norms' split and clusters, dynamic quant's clusters)."""
    return all((t2 := rows(t)).data_ptr() % 16 == 0 and t2.stride(0) % 16 == 0 for t in tensors)


def num_rows(t: torch.Tensor) -> int:
    """Number of rows (product of the leading dimensions)."""
    return t.numel() // t.shape[-1] if t.shape[-1] else 0


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= max(n, 1)."""
    return 1 << max(n - 1, 0).bit_length()


def warps_for(block: int) -> int:
    """Warps per program for a row block of `block` elements (depends on the width only, so
    results never depend on the batch)."""
    return max(1, min(16, block // 512))


__all__ = ["HAVE_TRITON", "triton"]
