"""One matrix for a converted attention layer's query, key and value projections.

Three projections of the same input are three matrix products, each reading the input and
launching a kernel of its own; at decode the key's and value's are small enough that the launch,
not the weights, sets their time. `join_qkv` puts the three weights (and biases) into one
``qkv_proj`` layer, as the reference models hold them, and the converted forward splits its
output into views (`attention.AttentionPlan.qkv_rows`), which the rotary kernels take.

Only plain ``nn.Linear`` layers join, of one input width, dtype and device, all with biases or
none, all trained or all frozen, with no hooks of their own: a quantized layer, an adapter, a
layer that a device map moves inputs for or one sharded by tensor parallelism keeps its own
forward, and its attention keeps the three layers. The joined result is checked on a probe
against the three before it stays.

The attention's state dict still shows the three layers (hooks split the joined entries in
their place and join them again on ``load_state_dict``), so a converted model saves the
original's checkpoint.
"""

import dataclasses
import logging
from typing import Any

import torch
from torch import Tensor, nn

from .attention import AttentionPlan
from .probes import close, probe

logger = logging.getLogger("ir_stack")

#: the attention's layers that `join_qkv` joins, in the order of their rows
QKV_PROJECTIONS = ("q_proj", "k_proj", "v_proj")
#: the joined layer's name, which the converted forward recognizes (Phi-3's layers hold one)
JOINED_QKV = "qkv_proj"


def _plain_linear(layer: Any) -> bool:
    """A ``nn.Linear`` whose product is its weight's: its class's own forward, no hooks, no
    accelerate hook moving its inputs, a weight that is a plain tensor off the meta device."""
    return (
        type(layer) is nn.Linear
        and "forward" not in layer.__dict__
        and not (layer._forward_hooks or layer._forward_pre_hooks)
        and not hasattr(layer, "_hf_hook")
        and type(layer.weight.data) is Tensor
        and layer.weight.device.type != "meta"
    )


def qkv_join_refusal(attention: nn.Module, plan: AttentionPlan) -> str:
    """Why `attention`'s projections cannot join (`join_qkv`), or ``""`` where they can."""
    if "reuses_shared_kv" in plan.features:
        return "it projects only its queries"
    layers = [attention._modules.get(name) for name in QKV_PROJECTIONS]
    if not all(isinstance(layer, nn.Linear) for layer in layers):
        return "it holds no separate query, key and value layers"
    if not all(_plain_linear(layer) for layer in layers):
        return "a projection is not a plain nn.Linear (quantized, hooked or sharded)"
    linears = [layer for layer in layers if isinstance(layer, nn.Linear)]
    if len({(m.in_features, m.weight.dtype, m.weight.device) for m in linears}) > 1:
        return "its projections differ in input width, dtype or device"
    if len({m.bias is None for m in linears}) > 1:
        return "some projections have a bias and some not"
    if len({p.requires_grad for m in linears for p in m.parameters()}) > 1:
        return "some of its projections' parameters are trained and some frozen"
    return ""


def join_qkv(attention: nn.Module, plan: AttentionPlan) -> AttentionPlan | str:
    """Join `attention`'s query, key and value layers into one ``qkv_proj`` (in the place of
    the query's among its modules) and return `plan` with the rows of each; or, leaving the
    layer as it is, why not (`qkv_join_refusal`, or a probe that disagrees)."""
    why = qkv_join_refusal(attention, plan)
    if why:
        return why
    layers: list[nn.Linear] = [attention._modules[name] for name in QKV_PROJECTIONS]  # type: ignore[misc]
    query, key, value = (layer.out_features for layer in layers)
    rows = (query, key, value)
    first = layers[0]
    bias = first.bias is not None
    # built on the meta device, so no initialisation runs and the joined tensors are the only
    # new memory (the three layers' are freed with them)
    joined = nn.Linear(first.in_features, sum(rows), bias=bias, device="meta")
    with torch.no_grad():
        for kind in ("weight", "bias") if bias else ("weight",):
            tensor = torch.cat([getattr(layer, kind) for layer in layers])
            setattr(joined, kind, nn.Parameter(tensor, first.weight.requires_grad))
        x = probe((3, first.in_features), first.weight.device).to(first.weight.dtype)
        parts = joined(x).split(rows, dim=-1)
        if not all(close(part, layer(x)) for part, layer in zip(parts, layers, strict=True)):
            return "the joined projection differs from the three on a probe"
    modules = list(attention._modules.items())
    # the order of the original layers, in which the state dict shows them
    attention.__dict__["ir_qkv_module_order"] = tuple(name for name, _ in modules)
    attention._modules.clear()
    for name, module in modules:
        if name == QKV_PROJECTIONS[0]:
            attention._modules[JOINED_QKV] = joined
        elif name not in QKV_PROJECTIONS:
            attention._modules[name] = module
    attention.register_state_dict_post_hook(_split_qkv)
    attention.register_load_state_dict_pre_hook(_join_qkv)
    return dataclasses.replace(plan, qkv_rows=rows)


def _joined_rows(module: nn.Module) -> tuple[int, int, int] | None:
    plan = getattr(module, "ir_attention_plan", None)
    return getattr(plan, "qkv_rows", None)


def _split_qkv(module: nn.Module, state_dict: dict[str, Any], prefix: str, _metadata: Any) -> None:
    """State-dict post-hook of a joined attention: its ``qkv_proj`` entries become the query,
    key and value layers' (weight, then bias), in the order of the original layers."""
    rows = _joined_rows(module)
    joined = f"{prefix}{JOINED_QKV}."
    if rows is None or not any(key.startswith(joined) for key in state_dict):
        return
    # this module's entries were added last: take them out and put them back in order (its
    # own parameters and buffers, then its layers')
    own = [key for key in state_dict if key.startswith(prefix)]
    entries = {key: state_dict.pop(key) for key in own}
    order: tuple[str, ...] = module.ir_qkv_module_order  # type: ignore[assignment]
    by_layer: dict[str, list[str]] = {}
    for key in entries:
        layer = key[len(prefix) :].split(".", 1)[0] if "." in key[len(prefix) :] else ""
        by_layer.setdefault(layer if layer in module._modules else "", []).append(key)
    for key in by_layer.pop("", []):
        state_dict[key] = entries[key]
    split = {key[len(joined) :]: entries[key].split(rows) for key in by_layer.pop(JOINED_QKV, [])}
    for layer in order:
        if layer in QKV_PROJECTIONS:
            index = QKV_PROJECTIONS.index(layer)
            for kind in ("weight", "bias"):
                if kind in split:
                    state_dict[f"{prefix}{layer}.{kind}"] = split[kind][index]
        for key in by_layer.get(layer, []):
            state_dict[key] = entries[key]


def _join_qkv(module: nn.Module, state_dict: dict[str, Any], prefix: str, *_args: Any) -> None:
    """Load-state-dict pre-hook of a joined attention: the query, key and value layers'
    entries, where all three are there, become the joined ``qkv_proj`` entry (in its dtype)."""
    joined = module._modules.get(JOINED_QKV)
    if _joined_rows(module) is None or joined is None:
        return
    for kind in ("weight", "bias"):
        keys = [f"{prefix}{name}.{kind}" for name in QKV_PROJECTIONS]
        if not all(key in state_dict for key in keys):
            continue
        target: Tensor = getattr(joined, kind)
        parts = [state_dict.pop(key).to(target.dtype) for key in keys]
        state_dict[f"{prefix}{JOINED_QKV}.{kind}"] = torch.cat(parts)
