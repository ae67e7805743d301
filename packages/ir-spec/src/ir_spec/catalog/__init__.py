"""The op catalog: every op of DESIGN.md with its native semantics.

Importing this package declares the ops; `ir_spec` imports it, so ``ir_spec.ops.rms_norm`` and
the others always exist.
"""

from . import activation, collective, fused, kv_cache, norm, qk_norm, quant, rotary

__all__ = ["activation", "collective", "fused", "kv_cache", "norm", "qk_norm", "quant", "rotary"]
