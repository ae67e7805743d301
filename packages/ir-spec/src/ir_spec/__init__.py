"""ir-spec: declare LLM-inference operators once, with their native PyTorch semantics.

A model library depends on this package alone: it calls ``ir_spec.ops.<name>(...)`` and runs on
the native implementations; kernel providers register faster ones with
``ir_spec.ops.<name>.register_impl(...)``; a dispatcher (``ir_dispatch``) picks among them.
"""

from . import catalog as _catalog  # noqa: F401  (declares the catalog ops)
from ._version import __version__
from .dispatcher import (
    Dispatcher,
    NativeDispatcher,
    choice_scope,
    forget_all_choices,
    get_dispatcher,
    set_dispatcher,
    use_choice_scope,
    use_op_choice_caches,
)
from .impl import Impl
from .layout import empty_rows, row_view, shares_memory
from .op import NAMESPACE, RESERVED_PROVIDERS, IrOp, register_op
from .registry import OpNamespace, ops
from .sampling import SampleSpec
from .tolerance import DEFAULT_TOLERANCES, Tolerance

__all__ = [
    "DEFAULT_TOLERANCES",
    "NAMESPACE",
    "RESERVED_PROVIDERS",
    "Dispatcher",
    "Impl",
    "IrOp",
    "NativeDispatcher",
    "OpNamespace",
    "SampleSpec",
    "Tolerance",
    "__version__",
    "choice_scope",
    "empty_rows",
    "forget_all_choices",
    "get_dispatcher",
    "ops",
    "register_op",
    "row_view",
    "set_dispatcher",
    "shares_memory",
    "use_choice_scope",
    "use_op_choice_caches",
]
