"""ir-dispatch's own platforms: CUDA, ROCm, XPU and CPU, declared as any platform package
declares its own (`ir_dispatch.Platform`, entry point group ``ir.platforms``).

A user's list for an op comes first; the entries below that it does not name follow. ``native``
closes every list, and selection falls back to it in any case.

Why each entry (the kernel benchmark, ``ir-stack bench --only kernels``, measures them):

* CPU: only ``native`` runs (no CPU kernels are shipped); Inductor fuses it with its neighbours.
* CUDA, eager: ``triton`` first, then the hand-written ``cuda`` kernels, then ``native``
  (several kernels per op in eager mode). The ``cuda`` kernels are correct on every op but
  faster than ``triton`` at few shapes: the activations match it at large sizes and rotary
  embedding wins at decode sizes, while the row kernels (``rms_norm`` and its kin) trail it,
  at one token and at copy bandwidth alike; they move ahead where they win.
* CUDA, compiled with Inductor, simple ops (``rms_norm``, ``fused_add_rms_norm``,
  ``silu_and_mul``, ``gelu_and_mul``, ``static_quant_fp8``, ``rotary_embedding``): ``native``
  first. Inductor generates a kernel that reaches copy bandwidth at large sizes for these and,
  unlike an opaque kernel, fuses them with their neighbours. The kernels follow for users who
  move native later.
* CUDA, compiled, quantization and fused norm/activation + quant ops: ``triton`` then ``cuda``
  before ``native``: Inductor's kernels for per-token and per-group absmax reach only 0.60 to
  0.77 of copy bandwidth (two passes over the row), a fused kernel reads the row once.
* CUDA, both modes, the KV-cache writes (``write_kv_cache``, ``rotary_embedding_write_kv_cache``):
  kernels first. An op that stores into its arguments stays an opaque call in a compiled graph,
  so its native implementation runs as a dozen ATen kernels (gathers, a scatter, the padding
  logic); a kernel writes each row once in one launch.
* CUDA, both modes, ``qk_norm_rotary_embedding``: kernels first; the fused kernel beats both
  the unfused ops and Inductor's code of the composition at every token count (``ir-stack
  bench --only fusions``).
* In-place variants (``triton_inplace``, ``cuda_inplace``) of ``fused_add_rms_norm``,
  ``rotary_embedding`` and ``qk_norm_rotary_embedding`` come before the out-of-place ones when
  compiling: the lowering pass clones their activations and clone elimination removes the
  clones of donated buffers, so they save memory at no cost. In eager mode the out-of-place
  ones are used (a default-overload call of an in-place kernel must clone first). The cache
  writes take the out-of-place kernels in both modes: an op that stores into its arguments
  keeps its own call in a compiled graph, and an in-place kernel there runs on clones that no
  pass removes (a copy of the query and the key a layer).
* ROCm and XPU: ``triton`` then ``native`` in both modes (the ``cuda`` provider builds for
  NVIDIA GPUs only).
"""

import torch

from .defaults import (
    CACHE_OPS,
    EAGER,
    INDUCTOR,
    INPLACE_OPS,
    KERNEL_INPLACE_OPS,
    QUANT_OPS,
    ROTARY_FUSED_OPS,
    SIMPLE_OPS,
)
from .platforms import Platform

_KERNEL_OPS = QUANT_OPS + CACHE_OPS + ROTARY_FUSED_OPS
_KERNELS_FIRST = ["triton", "cuda", "native"]
_NATIVE_FIRST = ["native", "triton", "cuda"]
_TRITON_FIRST = ["triton", "native"]
_NATIVE_FIRST_INPLACE = ["native", "triton_inplace", "triton", "cuda_inplace", "cuda"]
_KERNELS_FIRST_INPLACE = ["triton_inplace", "triton", "cuda_inplace", "cuda", "native"]
_TRITON_EVERYWHERE = {op: _TRITON_FIRST for op in SIMPLE_OPS + _KERNEL_OPS}


def _cuda() -> bool:
    return torch.cuda.is_available() and not torch.version.hip


def _rocm() -> bool:
    return torch.cuda.is_available() and bool(torch.version.hip)


def _xpu() -> bool:
    xpu = getattr(torch, "xpu", None)
    return xpu is not None and bool(xpu.is_available())


CUDA = Platform(
    "cuda",
    _cuda,
    {
        EAGER: {op: _KERNELS_FIRST for op in SIMPLE_OPS + _KERNEL_OPS},
        INDUCTOR: {
            **{op: _NATIVE_FIRST for op in SIMPLE_OPS},
            **{op: _NATIVE_FIRST_INPLACE for op in INPLACE_OPS},
            **{op: _KERNELS_FIRST for op in _KERNEL_OPS},
            **{op: _KERNELS_FIRST_INPLACE for op in KERNEL_INPLACE_OPS},
        },
    },
    detect_rank=20,
    description="NVIDIA GPUs (torch.cuda without HIP)",
)
ROCM = Platform(
    "rocm",
    _rocm,
    {EAGER: _TRITON_EVERYWHERE, INDUCTOR: _TRITON_EVERYWHERE},
    detect_rank=20,
    description="AMD GPUs (torch.cuda on HIP)",
)
XPU = Platform(
    "xpu",
    _xpu,
    {EAGER: _TRITON_EVERYWHERE, INDUCTOR: _TRITON_EVERYWHERE},
    detect_rank=10,
    description="Intel GPUs (torch.xpu)",
)
CPU = Platform(
    "cpu",
    lambda: True,
    {},
    detect_rank=0,
    description="no accelerator: native everywhere",
)
#: in the order they are registered
BUILTIN = (CUDA, ROCM, XPU, CPU)
