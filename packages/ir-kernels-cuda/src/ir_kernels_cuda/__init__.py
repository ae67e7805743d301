"""ir-kernels-cuda: provider ``cuda``, hand-written CUDA kernels for ir-spec ops, built on
first use.

The CUDA C++ sources (``csrc/``) are compiled with ``torch.utils.cpp_extension`` for the running
GPU's architecture, cached per source hash, torch version and architecture (`build`), and
registered as ``torch.ops.ir_cuda.*``; `impls` registers them as provider `PROVIDER` (importing it
builds; ir-dispatch imports it through the ``ir.providers`` entry point) for every catalog op,
with `INPLACE_PROVIDER` for ``fused_add_rms_norm`` and ``rotary_embedding``.
``python -m ir_kernels_cuda build`` builds ahead of time; `build.build_emulated` builds the same
kernels for host emulation (tests without a GPU). `set_programmatic_launch` turns on
programmatic dependent launch (a second build, ``torch.ops.ir_cuda_programmatic``).

Importing the package builds nothing: `SUPPORTED` and `REASON` (whether the kernels built here,
and why not) and the programmatic launch switches import `impls` on first access.
"""

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__
from .build import BuildUnavailable

#: The provider name of every implementation.
PROVIDER = "cuda"
#: The provider name of the implementations that overwrite their activations.
INPLACE_PROVIDER = "cuda_inplace"

if TYPE_CHECKING:
    from .impls import REASON, SUPPORTED
    from .launch import programmatic_launch, programmatic_launch_enabled, set_programmatic_launch

#: The names whose first access imports their module (importing `impls` builds the kernels).
_ON_ACCESS = {
    "SUPPORTED": "impls",
    "REASON": "impls",
    "programmatic_launch": "launch",
    "programmatic_launch_enabled": "launch",
    "set_programmatic_launch": "launch",
}

__all__ = [
    "INPLACE_PROVIDER",
    "PROVIDER",
    "REASON",
    "SUPPORTED",
    "BuildUnavailable",
    "__version__",
    "programmatic_launch",
    "programmatic_launch_enabled",
    "set_programmatic_launch",
]


def __getattr__(name: str) -> Any:
    module = _ON_ACCESS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
