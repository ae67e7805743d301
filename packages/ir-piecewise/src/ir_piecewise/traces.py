"""The trace cache: Dynamo's trace of a module saved beside its compiled pieces, so that a
later process starts without tracing (Dynamo's ahead-of-time compilation,
``torch.compile(...).aot_compile``, whose result is saved with the split graph in it).

A saved trace is used only for what it was made for. Its key covers the compile cache's global
key (configuration, torch and Triton versions, IR selection state), the module's class, each
submodule's plain attributes (numbers, strings, dataclasses such as a model config) and the
shapes, dtypes and devices of its parameters, buffers and tensor attributes, and the inputs'
static signature (`ir_piecewise.signature`: structure, sizes but the dynamic dims, layouts,
dtypes, devices, plain values). On load, every function Dynamo traced must still have the source
it had; anything else is traced again. Only modules are cached: what a plain function reads from
closures and globals cannot be described.
"""

import hashlib
import importlib
import inspect
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ._version import __version__
from .cache import CompileCache
from .serialized import PiecewiseGraph
from .signature import is_plain, static_signature

logger = logging.getLogger("ir_piecewise")
#: bumped when what a saved trace holds changes
TRACE_FORMAT = 1


def _describe_tensor(value: Tensor, dynamic_dims: tuple[int, ...] = ()) -> str:
    sizes = ["*" if d in dynamic_dims else str(s) for d, s in enumerate(value.shape)]
    layout = "contiguous" if value.is_contiguous() else str(value.stride())
    return f"T[{','.join(sizes)}]{value.dtype}:{value.device.type}:{layout}:{value.requires_grad}"


def _describe_value(value: Any) -> str:
    if isinstance(value, Tensor):
        return _describe_tensor(value)
    if is_plain(value):
        return repr(value)
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


def describe_module(module: nn.Module) -> str:
    """What a trace of `module` depends on besides code and inputs, as text."""
    lines = []
    for name, sub in module.named_modules(remove_duplicate=False):
        kind = f"{type(sub).__module__}.{type(sub).__qualname__}"
        attrs = sorted(
            (k, _describe_value(v))
            for k, v in vars(sub).items()
            if not k.startswith("_") and not isinstance(v, nn.Module)
        )
        lines.append(f"{name}: {kind} {attrs}")
    for name, tensor in module.named_parameters(remove_duplicate=False):
        lines.append(f"param {name}: {_describe_tensor(tensor)}")
    for name, buffer in module.named_buffers(remove_duplicate=False):
        lines.append(f"buffer {name}: {_describe_tensor(buffer)}")
    return "\n".join(lines)


def trace_key(
    global_key: str, module: nn.Module, arguments: dict[str, Any], dynamic: list[tuple[str, int]]
) -> str:
    """The trace cache key of `module` called with `arguments` (see the module docstring)."""
    text = "\n".join(
        (
            f"format {TRACE_FORMAT}, ir-piecewise {__version__}, python {sys.version_info[:2]}",
            global_key,
            describe_module(module),
            repr(static_signature(arguments, dynamic)),
            f"grad {torch.is_grad_enabled()}, inference {torch.is_inference_mode_enabled()}",
        )
    )
    return hashlib.sha256(text.encode()).hexdigest()


def changed_sources(compiled: Any) -> list[str]:
    """The traced functions of an ahead-of-time compiled function whose source has changed
    since it was traced (``module:line``); all of them if the record cannot be read."""
    try:
        sources = compiled._artifacts.source_info.inlined_sources
    except AttributeError:
        return ["<no source record>"]
    changed = []
    for source in sources:
        text = source_text(source.module, source.firstlineno, source.lastlineno)
        if hashlib.sha256(text.encode()).hexdigest() != source.checksum:
            changed.append(f"{source.module}:{source.firstlineno}")
    return changed


def source_text(module_name: str, first: int, end: int) -> str:
    """Lines ``first`` to ``end - 1`` of a module's current source ("" if unreadable)."""
    try:
        lines = inspect.getsourcelines(importlib.import_module(module_name))[0]
    except (ImportError, OSError, TypeError):
        return ""
    return "".join(lines[first - 1 : end - 1])


def load_trace(cache: CompileCache, key: str, f_globals: dict[str, Any]) -> Any | None:
    """The saved trace for `key` (an ahead-of-time compiled function whose `PiecewiseGraph` is
    not built yet), or None if there is none or it is stale (then it is removed)."""

    def deserialize(path: Path) -> Any:
        from torch._dynamo.aot_compile import AOTCompiledFunction

        return AOTCompiledFunction.deserialize(path.read_bytes(), f_globals)

    compiled = cache.load(key, deserialize)
    if compiled is None:
        return None
    changed = changed_sources(compiled)
    if changed or not isinstance(traced_graph(compiled), PiecewiseGraph):
        logger.info(
            "ir_piecewise: saved trace %s is stale (source changed: %s); tracing again",
            key[:12],
            ", ".join(changed) or "none",
        )
        cache.remove(key)
        return None
    return compiled


def traced_graph(compiled: Any) -> Any:
    """The backend's result inside an ahead-of-time compiled function."""
    artifacts = getattr(compiled, "_artifacts", None)
    return getattr(artifacts, "compiled_fn", None)


def save_trace(cache: CompileCache, key: str, compiled: Any) -> None:
    """Save an ahead-of-time compiled function under `key`; a failure only logs a warning
    (later processes trace again)."""
    try:
        data: bytes = type(compiled).serialize(compiled).serialized_data

        def write(path: Path) -> None:
            path.write_bytes(data)

        cache.store(key, write)
    except Exception as exc:  # the compiled function still runs; it is just not saved
        logger.warning(
            "ir_piecewise: could not save the trace (%s: %s); later processes trace again",
            type(exc).__name__,
            exc,
        )


def forward_globals(module: nn.Module) -> dict[str, Any]:
    """The globals of `module`'s forward, which a loaded trace runs in."""
    forward: Callable[..., Any] = type(module).forward
    return forward.__globals__
