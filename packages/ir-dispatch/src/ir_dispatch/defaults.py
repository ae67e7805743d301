"""Platform default priorities, per selection mode.

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
* In-place variants (``triton_inplace``, ``cuda_inplace``) of ``fused_add_rms_norm`` and
  ``rotary_embedding`` come before the out-of-place ones when compiling: the lowering pass
  clones their activations and clone elimination removes the clones of donated buffers, so they
  save memory at no cost. In eager mode the out-of-place ones are used (a default-overload call
  of an in-place kernel must clone first).
* ROCm and XPU: ``triton`` then ``native`` in both modes (the ``cuda`` provider builds for
  NVIDIA GPUs only).
"""

from collections.abc import Mapping

from .platforms import Platform

EAGER = "eager"
INDUCTOR = "inductor"
MODES = (EAGER, INDUCTOR)

SIMPLE_OPS = (
    "rms_norm",
    "fused_add_rms_norm",
    "silu_and_mul",
    "gelu_and_mul",
    "static_quant_fp8",
    "rotary_embedding",
)
QUANT_OPS = (
    "dynamic_quant_fp8",
    "group_quant_fp8",
    "rms_norm_static_quant_fp8",
    "fused_add_rms_norm_static_quant_fp8",
    "rms_norm_dynamic_quant_fp8",
    "silu_and_mul_static_quant_fp8",
)

_KERNELS_FIRST = ["triton", "cuda", "native"]
_NATIVE_FIRST = ["native", "triton", "cuda"]
_TRITON_FIRST = ["triton", "native"]
#: Ops with in-place kernels: compiled graphs use them (clone elimination makes them free);
#: eager default calls prefer out-of-place kernels (an in-place one would need a clone first).
INPLACE_OPS = ("fused_add_rms_norm", "rotary_embedding")
_NATIVE_FIRST_INPLACE = ["native", "triton_inplace", "triton", "cuda_inplace", "cuda"]

_TABLE: dict[tuple[Platform, str], dict[str, list[str]]] = {
    (Platform.CUDA, EAGER): {op: _KERNELS_FIRST for op in SIMPLE_OPS + QUANT_OPS},
    (Platform.CUDA, INDUCTOR): {
        **{op: _NATIVE_FIRST for op in SIMPLE_OPS},
        **{op: _NATIVE_FIRST_INPLACE for op in INPLACE_OPS},
        **{op: _KERNELS_FIRST for op in QUANT_OPS},
    },
    (Platform.ROCM, EAGER): {op: _TRITON_FIRST for op in SIMPLE_OPS + QUANT_OPS},
    (Platform.ROCM, INDUCTOR): {op: _TRITON_FIRST for op in SIMPLE_OPS + QUANT_OPS},
    (Platform.XPU, EAGER): {op: _TRITON_FIRST for op in SIMPLE_OPS + QUANT_OPS},
    (Platform.XPU, INDUCTOR): {op: _TRITON_FIRST for op in SIMPLE_OPS + QUANT_OPS},
}


def default_priority(platform: Platform, mode: str, op_name: str) -> list[str]:
    """The platform's default list for `op_name` in `mode` (``["native"]`` when none)."""
    return list(_TABLE.get((platform, mode), {}).get(op_name, ["native"]))


def default_table(platform: Platform, mode: str) -> Mapping[str, list[str]]:
    """All explicit defaults of a platform and mode (ops not listed default to native)."""
    return {op: list(p) for op, p in _TABLE.get((platform, mode), {}).items()}
