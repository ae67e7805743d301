"""ir-passes: FX passes over ir-spec ops inside torch.compile: functionalize, fuse, lower,
eliminate clones.

It will hold InplaceFunctionalizationPass, the fusion passes, LoweringPass and
CloneEliminationPass, their hook-up to Inductor (PassConfig, inductor_options, compile,
last_report) and debug dumps.
"""

from ._version import __version__

__all__ = ["__version__"]
