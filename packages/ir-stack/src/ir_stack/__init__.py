"""ir-stack: The ir-stack meta-package: every layer, one configuration, the ir-stack command and
reference models.

It will hold ir_stack.Config, ir_stack.compile, the ir-stack command (demo, explain, bench) and
the reference models.
"""

from ._version import __version__

__all__ = ["__version__"]
