"""ir-kernels-triton: provider ``triton`` (and ``triton_inplace``) for every ir-spec catalog op.

Importing the package registers the implementations; ir-dispatch imports it through the
``ir.providers`` entry point. The implementations are ``supported`` only where Triton can run:
on a GPU it targets, or with ``TRITON_INTERPRET=1`` (set before the import) on CPU tensors.

Two switches change how the kernels launch, never what they compute:

- `set_programmatic_launch` (or the scoped `programmatic_launch`) launches the kernels
  programmatically on compute capability 9.0 and later; it is off by default.
- Eager launches are replayed from launch plans after the first of each layout;
  `set_launch_plans` (or the scoped `launch_plans`, or ``IR_TRITON_LAUNCH_PLANS=0``) turns
  that off, `launch_plans_enabled` tells whether it is on, and `clear_launch_plans` drops them.

The kernels are grouped by family: `norms`, `activations`, `quant`, `rotary`, `kv_cache`;
`launch` holds what they share (device queries, row layout, programmatic launch, launch plans,
clusters, the torch ops) and the launch table, `launch.tuning`.
"""

from ._version import __version__
from .impls import INPLACE_PROVIDER, PROVIDER, SUPPORTED
from .launch.device import interpreting, triton_supported
from .launch.plans import clear_launch_plans, launch_plans, launch_plans_enabled, set_launch_plans
from .launch.programmatic import programmatic_launch, set_programmatic_launch

__all__ = [
    "INPLACE_PROVIDER",
    "PROVIDER",
    "SUPPORTED",
    "__version__",
    "clear_launch_plans",
    "interpreting",
    "launch_plans",
    "launch_plans_enabled",
    "programmatic_launch",
    "set_launch_plans",
    "set_programmatic_launch",
    "triton_supported",
]
