"""Selection modes and the platform default priorities per mode.

The defaults themselves belong to each platform (`ir_dispatch.Platform.defaults`;
ir-dispatch's own, with the reasons for each entry, in `ir_dispatch.builtin_platforms`).
"""

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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
    "fused_add_rms_norm_dynamic_quant_fp8",
    "rms_norm_group_quant_fp8",
    "fused_add_rms_norm_group_quant_fp8",
    "silu_and_mul_group_quant_fp8",
)
#: Ops that store into a KV cache: compiled graphs call them as opaque ops (Inductor cannot
#: fuse a native implementation that writes into its arguments), so only a kernel helps.
CACHE_OPS = ("write_kv_cache", "rotary_embedding_write_kv_cache")
#: Fused rotary ops whose kernels beat Inductor's code of their native composition.
ROTARY_FUSED_OPS = ("qk_norm_rotary_embedding",)
#: Ops with in-place kernels: compiled graphs use them (clone elimination makes them free);
#: eager default calls prefer out-of-place kernels (an in-place one would need a clone first).
INPLACE_OPS = ("fused_add_rms_norm", "rotary_embedding")
#: Kernel-first ops with in-place kernels too (compiled graphs take those first). Not the
#: cache writes: a compiled graph calls an in-place kernel of an op that stores into its
#: arguments on clones of its activations (`ir_passes.mutating`), which no pass removes.
KERNEL_INPLACE_OPS = ("qk_norm_rotary_embedding",)


def default_priority(platform: "Platform", mode: str, op_name: str) -> list[str]:
    """The platform's default list for `op_name` in `mode` (``["native"]`` when none)."""
    return platform.default_priority(mode, op_name)


def default_table(platform: "Platform", mode: str) -> Mapping[str, list[str]]:
    """All explicit defaults of a platform and mode (ops not listed default to native)."""
    return {op: list(p) for op, p in platform.defaults.get(mode, {}).items()}


def default_provider_names() -> set[str]:
    """Every provider name some installed platform's defaults list."""
    from .platforms import installed_platforms

    return {name for platform in installed_platforms() for name in platform.provider_names()}
