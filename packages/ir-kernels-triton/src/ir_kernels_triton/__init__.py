"""ir-kernels-triton: provider ``triton`` (and ``triton_inplace``) for every ir-spec catalog op.

Importing the package registers the implementations; ir-dispatch imports it through the
``ir.providers`` entry point. The implementations are ``supported`` only where Triton can run:
on a GPU it targets, or with ``TRITON_INTERPRET=1`` (set before the import) on CPU tensors.
"""

from ._version import __version__
from .impls import INPLACE_PROVIDER, PROVIDER, SUPPORTED
from .platform import MAX_SINGLE_PASS, interpreting, row_stride, triton_supported

__all__ = [
    "INPLACE_PROVIDER",
    "MAX_SINGLE_PASS",
    "PROVIDER",
    "SUPPORTED",
    "__version__",
    "interpreting",
    "row_stride",
    "triton_supported",
]
