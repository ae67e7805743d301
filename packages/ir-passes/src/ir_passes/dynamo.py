"""The Dynamo backend ``ir_passes``: ``torch.compile(model, backend="ir_passes")`` runs Inductor
with the IR passes installed, and nothing needs importing first.

ir-passes declares it in the entry point group ``torch_dynamo_backends``, through which
torch finds a backend named by a string::

    [project.entry-points.torch_dynamo_backends]
    ir_passes = "ir_passes.dynamo:backend"

Options (``torch.compile(..., options=...)``): none (the default `PassConfig`), a
`PassConfig`, or a mapping whose keys are `PassConfig` fields (``{"level": 1}``) or Inductor
options (``{"max_autotune": True}``, as the stock ``inductor`` backend takes them); an unknown
key raises `ValueError` naming it. ``mode=`` takes Inductor's modes (``"max-autotune"``).

Dynamo compiles a graph once per guard set, with the priorities, registrations and platform
in force then: a later `ir_dispatch.set_priority` reaches graphs compiled afterwards (after
``torch._dynamo.reset()``, say), not those compiled already. `ir_passes.compile` recompiles
by itself instead.
"""

import dataclasses
import difflib
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import fx

from .config import PassConfig
from .inductor import inductor_options
from .report import new_report

#: the Inductor options that install the IR passes: never set by a user's options
IR_HOOKS = ("pre_grad_custom_pass", "post_grad_custom_post_pass")
_PASS_FIELDS = frozenset(f.name for f in dataclasses.fields(PassConfig))


def checked_inductor_options(
    options: Mapping[str, Any], origin: str, *, also: Sequence[str] = ()
) -> dict[str, Any]:
    """`options` as Inductor config patches (``-`` in a key read as ``_``), each key checked
    against Inductor's configuration; an unknown key or one of the IR hooks raises
    `ValueError` naming `origin` and the key (and the close matches among Inductor's options
    and the names `also` accepted beside them)."""
    from torch._inductor import config

    known = config.get_config_copy()
    patches: dict[str, Any] = {}
    for key, value in options.items():
        name = str(key).replace("-", "_")
        if name in IR_HOOKS:
            raise ValueError(
                f"{origin}: {key!r} installs the IR passes and cannot be set; add passes "
                "through a platform (ir_dispatch.Platform.passes)"
            )
        if name not in known:
            close = difflib.get_close_matches(name, [*also, *known], n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            what = "option" if also else "Inductor option"
            raise ValueError(
                f"{origin}: unknown {what} {key!r}{hint} (Inductor's options: "
                "torch._inductor.list_options())"
            )
        patches[name] = value
    return patches


def split_options(options: object, origin: str) -> tuple[PassConfig, dict[str, Any]]:
    """The `PassConfig` and the Inductor options in `options` (None, a `PassConfig` or a
    mapping of either's keys); anything else raises `ValueError` naming `origin`."""
    if options is None:
        return PassConfig(), {}
    if isinstance(options, PassConfig):
        return options, {}
    if not isinstance(options, Mapping):
        raise ValueError(
            f"{origin}: got {options!r}; expected an ir_passes.PassConfig or a mapping of "
            "PassConfig fields and Inductor options"
        )
    fields = {k: v for k, v in options.items() if k in _PASS_FIELDS}
    try:
        passes = PassConfig(**fields)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{origin}: {error}") from None
    rest = {k: v for k, v in options.items() if k not in _PASS_FIELDS}
    return passes, checked_inductor_options(rest, origin, also=sorted(_PASS_FIELDS))


def compile_graph(
    gm: fx.GraphModule,
    example_inputs: Sequence[Any],
    passes: PassConfig,
    inductor: Mapping[str, Any] | None = None,
    mode: str | None = None,
) -> Any:
    """`gm` compiled by Inductor with the IR passes of `passes` installed, Inductor's options of
    `mode` and then `inductor` applied; starts a new `PassReport` (`ir_passes.last_report`)."""
    from torch._inductor.compile_fx import compile_fx

    patches: dict[str, Any] = {}
    if mode not in (None, "default"):
        patches.update(torch._inductor.list_mode_options(mode))
    patches.update(inductor or {})
    patches.update(inductor_options(passes))
    new_report()
    return compile_fx(gm, list(example_inputs), config_patches=patches)


def backend(
    gm: fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    options: PassConfig | Mapping[str, Any] | None = None,
    mode: str | None = None,
) -> Any:
    """The ``ir_passes`` Dynamo backend: `gm` compiled by Inductor with the IR passes; see the
    module docstring for `options` and `mode`."""
    passes, inductor = split_options(options, "torch.compile(backend='ir_passes') options")
    return compile_graph(gm, example_inputs, passes, inductor, mode)
