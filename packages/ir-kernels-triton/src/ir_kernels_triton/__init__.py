"""ir-kernels-triton: provider ``triton`` (and ``triton_inplace``) for every ir-spec catalog op.

Importing the package registers the implementations; ir-dispatch imports it through the
``ir.providers`` entry point. The implementations are ``supported`` only where Triton can run:
on a GPU it targets, or with ``TRITON_INTERPRET=1`` (set before the import) on CPU tensors.
`set_programmatic_launch` (`launch`) turns on programmatic dependent launch of the kernels on
compute capability 9.0 and later; it is off by default. Eager launches are replayed from
launch plans (`plans`) after the first of each layout; `set_launch_plans` or
``IR_TRITON_LAUNCH_PLANS=0`` turns that off.
"""

from ._version import __version__
from .impls import INPLACE_PROVIDER, PROVIDER, SUPPORTED
from .launch import programmatic_launch, set_programmatic_launch
from .plans import clear_launch_plans, launch_plans, launch_plans_enabled, set_launch_plans
from .platform import MAX_SINGLE_PASS, interpreting, row_stride, triton_supported

__all__ = [
    "INPLACE_PROVIDER",
    "MAX_SINGLE_PASS",
    "PROVIDER",
    "SUPPORTED",
    "__version__",
    "clear_launch_plans",
    "interpreting",
    "launch_plans",
    "launch_plans_enabled",
    "programmatic_launch",
    "row_stride",
    "set_launch_plans",
    "set_programmatic_launch",
    "triton_supported",
]
