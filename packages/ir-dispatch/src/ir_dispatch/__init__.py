"""ir-dispatch: Kernel selection for ir-spec ops: priorities, platform defaults, explainable
choices.

It will hold the priority lists (code, CLI, environment), platform defaults per mode, the one
selection rule used by eager dispatch and compile-time lowering, provider discovery through the
ir.providers entry points, batch-invariant mode, and observability (explain, stats, python -m
ir_dispatch).
"""

from ._version import __version__

__all__ = ["__version__"]
