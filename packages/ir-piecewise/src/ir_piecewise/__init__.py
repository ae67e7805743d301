"""ir-piecewise: Piecewise compilation: trace once, split at attention, compile per shape, replay
with CUDA graphs.

It will hold CompilationConfig, compile(), graph splitting at splitting ops, per-range and per-
size compilation, CUDA-graph capture and replay and the on-disk compile cache.
"""

from ._version import __version__

__all__ = ["__version__"]
