"""Routed experts of transformers' mixtures of experts, gating with the IR op: through their
``_apply_gate`` hook where it computes transformers' default gate, or, for Llama 4's, which
gate inline on batched products, through a forward of their own. Each form is checked on a
probe before it converts; experts that gate another way stay as they are."""

import functools
import math
from typing import Any

import torch
from torch import Tensor, nn

from .forward import with_forward
from .mlp import is_gated_mlp
from .modules import GATED_ACTIVATIONS, act_and_mul, reference_gate
from .probes import close, gated_activation, input_dtype, probe


def convert_experts(experts: Any) -> str:
    """Make the routed `experts` gate with the IR op, through their ``_apply_gate`` hook
    (`_experts_gating`, an instance attribute) or, for Llama 4's, their forward
    (`_batched_experts_gating`; `forward.with_forward`), so the class and every other
    model's experts keep theirs. Return why not, or ``""``."""
    if getattr(type(experts), "_apply_gate", None) is not None:
        activation, why = _experts_gating(experts)
        if activation is not None:
            experts._apply_gate = functools.partial(act_and_mul, activation=activation)
        return why
    activation, why = _batched_experts_gating(experts)
    if activation is not None:
        experts.ir_activation = activation
        with_forward(experts, _batched_experts_forward)
    return why


def is_mixture_of_experts(module: nn.Module) -> bool:
    """A routed block whose experts are not separate gated MLPs: transformers 5 holds them as
    one tensor per projection (a list of gated MLPs would convert one by one)."""
    experts = getattr(module, "experts", None)
    return (
        isinstance(experts, nn.Module)
        and (hasattr(module, "gate") or hasattr(module, "router"))
        and not any(is_gated_mlp(m) for m in experts.children())
    )


def _batched_experts_forward(self: Any, hidden_states: Tensor) -> Tensor:
    """The forward of converted Llama 4 routed experts: `_batched_experts` with the activation
    the conversion found (``ir_activation``)."""
    return _batched_experts(self, self.ir_activation, hidden_states)


def _batched_experts(experts: Any, activation: str, hidden_states: Tensor) -> Tensor:
    """Llama 4's routed experts' forward, gating with the IR op: the rows of each expert in
    turn (``[experts x rows, hidden]``) through its slice of ``gate_up_proj`` ``[experts,
    hidden, 2 x width]`` (gate columns first), `act_and_mul`, and its ``down_proj``."""
    experts_count, hidden, _ = experts.gate_up_proj.shape
    rows = hidden_states.view(experts_count, -1, hidden)
    gated = act_and_mul(torch.bmm(rows, experts.gate_up_proj), activation)
    out: Tensor = torch.bmm(gated, experts.down_proj).view(-1, hidden)
    return out


def _batched_experts_gating(experts: nn.Module) -> tuple[str | None, str]:
    """The `GATED_ACTIVATIONS` name of routed experts without an ``_apply_gate`` hook that
    gate inline in their own forward on batched products with one gate-up tensor per layer
    (Llama 4's), where that forward computes `_batched_experts`'s (run both on a
    probe); else ``(None, why)``."""
    gate_up, down = (getattr(experts, name, None) for name in ("gate_up_proj", "down_proj"))
    if not all(isinstance(w, nn.Parameter) and w.dim() == 3 for w in (gate_up, down)):
        return None, "mixture of experts: its routed experts have no _apply_gate hook"
    assert isinstance(gate_up, nn.Parameter)
    if gate_up.device.type == "meta":
        return None, "mixture of experts: its routed experts are on the meta device"
    activation = gated_activation(experts)
    if activation is None:
        return None, "mixture of experts: its experts' activation is not silu or gelu"
    rows = probe((2 * gate_up.shape[0], gate_up.shape[1]), gate_up.device).to(input_dtype(experts))
    try:
        with torch.no_grad():
            want = experts(rows)
            got = _batched_experts(experts, activation, rows)
    except Exception as error:
        return None, f"mixture of experts: its experts failed on a probe ({error})"
    if not close(got, want):
        return None, "mixture of experts: its routed experts gate in their own way"
    return activation, ""


def _experts_gating(experts: nn.Module) -> tuple[str | None, str]:
    """The `GATED_ACTIVATIONS` name the routed `experts` gate with, where the IR op can do it
    through their ``_apply_gate`` hook; else ``(None, why)``. The hook must compute
    transformers' default (gate rows first, then up rows: ``silu_and_mul``'s layout): be it, or
    be a model's own found to compute it (`_own_gate_is_plain`; GPT-OSS's clamped one keeps
    it), and be called: the ``"eager"`` implementation gates inline."""
    own_way = "mixture of experts: its routed experts gate in their own way"
    hook = getattr(type(experts), "_apply_gate", None)
    from transformers.integrations import moe

    default = getattr(moe, "_default_apply_gate", None)  # private: absent, nothing converts
    if default is None or hook is None or not getattr(experts, "is_concatenated", False):
        return None, own_way
    activation = gated_activation(experts)
    if hook is not default and (activation is None or not _own_gate_is_plain(experts, activation)):
        return None, own_way
    config = getattr(experts, "config", None)
    implementation = getattr(config, "_experts_implementation", None)
    if implementation in (None, "eager"):
        return None, (
            f"mixture of experts: experts implementation {implementation!r} gates inline; "
            "'grouped_mm' or 'batched_mm' gate through the IR op"
        )
    if activation is None:
        return None, "mixture of experts: its experts' activation is not silu or gelu"
    return activation, ""


#: How far the columns of the probe of a model's own gate hook are scaled up (to about 3e4):
#: past the limits models clip their gates to (GPT-OSS 7; Ling 2.5's per-layer limits).
OWN_GATE_PROBE_SCALE = 1e4


def _own_gate_is_plain(experts: nn.Module, activation: str) -> bool:
    """Whether routed experts' own ``_apply_gate`` computes ``act(gate) * up`` on rows of gate
    columns, then up columns, as transformers' default does (Ling 2.5's does where its config
    sets no clipping limit). Checked element by element on a probe in the experts' dtype
    whose columns span magnitudes from 3 to about 3e4 (`OWN_GATE_PROBE_SCALE`), so that a
    clip at any smaller limit shows."""
    weight = next(experts.parameters(), None)
    if weight is None or weight.device.type == "meta":
        return False
    width = getattr(experts, "intermediate_dim", None)
    width = width if isinstance(width, int) and width > 0 else 64
    scales = torch.logspace(0, math.log10(OWN_GATE_PROBE_SCALE), width)
    rows = probe((8, 2 * width), weight.device) * scales.repeat(2).to(weight.device)
    rows = rows.to(input_dtype(experts))
    gate, up = rows.float().chunk(2, dim=-1)
    want = reference_gate(gate, GATED_ACTIVATIONS[activation]) * up
    try:
        with torch.no_grad():
            got = experts._apply_gate(rows)  # type: ignore[operator]
    except Exception:  # a hook of other arguments or layout: not this form
        return False
    return (
        isinstance(got, Tensor)
        and got.shape == want.shape
        and torch.allclose(got.float(), want, rtol=2e-2, atol=1e-2)
    )
