"""ir-spec: declare LLM-inference operators once, with their native PyTorch semantics.

A model library depends on this package alone: it calls ``ir_spec.ops.<name>(...)`` and runs on
the native implementations; kernel providers register faster ones with
``ir_spec.ops.<name>.register_impl(...)``; a dispatcher (``ir_dispatch``) picks among them.

The contract (``__all__``): `register_op`, `ops`, `IrOp` and `Impl`; the dispatcher hook
(`Dispatcher`, its default `NativeDispatcher`, `get_dispatcher`, `set_dispatcher`,
`use_op_choice_caches`). Provider test helpers are in `ir_spec.testing`, the tolerances in
`ir_spec.tolerance`, the row layouts kernels take in `ir_spec.layout`.
"""

# Names imported ``as`` themselves stay importable here for existing callers but are outside
# the contract: import them from their modules.
from . import catalog as _catalog  # noqa: F401  (declares the catalog ops)
from ._version import __version__
from .dispatcher import (
    Dispatcher,
    NativeDispatcher,
    get_dispatcher,
    set_dispatcher,
    use_op_choice_caches,
)
from .dispatcher import choice_scope as choice_scope
from .dispatcher import forget_all_choices as forget_all_choices
from .dispatcher import use_choice_scope as use_choice_scope
from .impl import Impl
from .layout import empty_rows as empty_rows
from .layout import row_view as row_view
from .layout import shares_memory as shares_memory
from .op import NAMESPACE as NAMESPACE
from .op import RESERVED_PROVIDERS as RESERVED_PROVIDERS
from .op import IrOp, register_op
from .registry import OpNamespace as OpNamespace
from .registry import ops
from .sampling import SampleSpec as SampleSpec
from .tolerance import DEFAULT_TOLERANCES as DEFAULT_TOLERANCES
from .tolerance import Tolerance as Tolerance

__all__ = [
    "Dispatcher",
    "Impl",
    "IrOp",
    "NativeDispatcher",
    "__version__",
    "get_dispatcher",
    "ops",
    "register_op",
    "set_dispatcher",
    "use_op_choice_caches",
]
