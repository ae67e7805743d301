"""Give one module of a transformers model another forward, as its class's method.

`convert_hf_model` changes the forward of single modules (an attention layer, Llama 4's routed
experts), never of their class, which other models share. An instance attribute would do that,
but Dynamo then guards on it at every call of a compiled forward: the attribute itself, and,
for a `functools.partial`, its function, code, arguments and keywords. A transformers
``generate`` compiled with a static cache checks those guards at each decoding step, a dozen
more a layer. So the module's class becomes a subclass of its own that holds the new forward
(`with_forward`): Dynamo then checks the module's type, as for any module.

The subclass keeps the original's name (a model prints as before) and is made once per
(class, forward) pair. A module of it pickles and deep-copies as the original class and the
forward, and is rebuilt with the same subclass, so a converted model saved whole loads whole.
"""

from collections.abc import Callable
from typing import Any

from torch import nn

#: The subclass made for each (original class, forward) pair.
_SUBCLASSES: dict[tuple[type, Callable[..., Any]], type] = {}


def _rebuild(base: type, forward: Callable[..., Any]) -> Any:
    """An empty instance of the subclass of `base` with `forward` (pickle then sets its state)."""
    cls: Any = forward_subclass(base, forward)
    return cls.__new__(cls)


def _reduce_ex(self: nn.Module, protocol: int) -> tuple[Any, ...]:
    # by the original class and the forward, both found by name, never by the subclass's own
    key: tuple[type, Callable[..., Any]] = type(self).ir_forward_of  # type: ignore[attr-defined]
    return _rebuild, key, self.__getstate__()


def forward_subclass(base: type, forward: Callable[..., Any]) -> type:
    """The subclass of `base` whose ``forward`` is `forward` (a module-level function taking the
    module first), made on the first call for this pair."""
    key = (base, forward)
    cls = _SUBCLASSES.get(key)
    if cls is None:
        namespace = {
            "forward": forward,
            "ir_forward_of": key,
            "__reduce_ex__": _reduce_ex,
            "__module__": base.__module__,
            "__qualname__": base.__qualname__,
            "__doc__": base.__doc__,
        }
        cls = _SUBCLASSES[key] = type(base.__name__, (base,), namespace)
    return cls


def with_forward(module: nn.Module, forward: Callable[..., Any]) -> None:
    """Make `forward` the forward of `module` alone: its class becomes `forward_subclass` of
    the class it has (of the original class where `module` already had another forward)."""
    name = getattr(forward, "__qualname__", "<none>")
    if not callable(forward) or "<" in name or "." in name:
        raise TypeError(
            f"with_forward: argument 'forward' got {forward!r}; expected a module-level "
            "function (found by name when the model is pickled)"
        )
    base = getattr(type(module), "ir_forward_of", (type(module),))[0]
    module.__dict__.pop("forward", None)  # an instance's own forward would hide the class's
    module.__class__ = forward_subclass(base, forward)
