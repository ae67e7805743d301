"""ir-kernels-triton: Provider triton: Triton kernels for every ir-spec catalog op.

It will register provider triton implementations for all twelve catalog ops, with exact
supports_args, in-place variants and batch-invariance declarations, tested in the Triton
interpreter here and on the GPU.
"""

from ._version import __version__

__all__ = ["__version__"]
