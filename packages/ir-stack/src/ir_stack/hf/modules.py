"""The modules `convert_hf_model` puts into a transformers model, each running IR ops:
`IRRMSNorm`, `IRGatedMLP`, `IRJoinedGatedMLP` and `IRRotaryCache`."""

from typing import Any

import torch
from torch import Tensor, nn

from ir_spec import ops


class IRRMSNorm(nn.Module):
    """RMSNorm over the last dimension with ``ir_spec.ops.rms_norm``; `weight` None for a norm
    without one (Llama 4's query and key norms). With `offset` (Gemma's norms: 1) the op's
    weight is ``offset + weight`` in float32, computed here and again after every move or cast
    of the module (``.to``, ``.cuda``, ``.half``: never rounded to the model's dtype) and every
    ``load_state_dict``; the module keeps `weight` itself, so its state dict is the original's.
    The kept sum has no autograd history; when training (grad mode on and `weight` requiring
    grad) each call sums again, so that the gradient reaches `weight` as through the
    original norm."""

    weight: nn.Parameter | None
    scale: Tensor | None

    def __init__(self, weight: nn.Parameter | None, eps: float, offset: float = 0.0) -> None:
        super().__init__()
        if weight is None and offset:
            raise ValueError(
                f"IRRMSNorm: argument 'offset' got {offset!r} without a weight; expected 0"
            )
        self.weight = weight
        self.eps = eps
        self.offset = offset
        self.register_buffer("scale", None, persistent=False)
        self.refresh_scale()
        refresh = self.register_load_state_dict_post_hook  # torch leaves it untyped
        refresh(_refresh_scale_after_load)  # type: ignore[no-untyped-call]

    def refresh_scale(self) -> None:
        """Compute the op's weight, ``offset + weight`` in float32, from `weight` as it is."""
        if self.offset and self.weight is not None:
            with torch.no_grad():
                self.scale = self.weight.detach().float() + self.offset

    def _apply(self, fn: Any, recurse: bool = True) -> "IRRMSNorm":
        super()._apply(fn, recurse)  # type: ignore[no-untyped-call]
        self.refresh_scale()  # from the moved weight, so float32 again after a cast
        return self

    def forward(self, x: Tensor) -> Tensor:
        # (`offset` rather than `scale`: a float attribute is one guard under Dynamo, a buffer
        # looked up in `_buffers` two)
        weight = self.scale if self.offset else self.weight
        # grad mode first: under no_grad, Dynamo then reads (and guards) nothing more
        if self.offset and torch.is_grad_enabled():
            weight = self._scale_for_training()
        out: Tensor = ops.rms_norm(x, weight, self.eps)
        return out

    def _scale_for_training(self) -> Tensor | None:
        """``offset + weight`` made again with autograd where `weight` requires grad (so that
        its gradient flows as through the original norm), else the kept sum."""
        if self.weight is not None and self.weight.requires_grad:
            return self.weight.float() + self.offset
        return self.scale

    def extra_repr(self) -> str:
        offset = f", offset={self.offset}" if self.offset else ""
        width = "no weight" if self.weight is None else str(tuple(self.weight.shape))
        return f"{width}, eps={self.eps}{offset}"


def _refresh_scale_after_load(module: nn.Module, _keys: Any) -> None:
    """Load-state-dict post-hook of `IRRMSNorm` (a function of the module, not a lambda, so
    that a converted model pickles)."""
    assert isinstance(module, IRRMSNorm)
    module.refresh_scale()


#: the gated activations the IR has: name -> None for ``silu_and_mul``, else the
#: ``approximate`` argument of ``gelu_and_mul``
GATED_ACTIVATIONS: dict[str, str | None] = {"silu": None, "gelu": "none", "gelu_tanh": "tanh"}


def reference_gate(x: Tensor, approximate: str | None) -> Tensor:
    """The activation a `GATED_ACTIVATIONS` entry applies to the gate, in torch."""
    if approximate is None:
        return torch.nn.functional.silu(x)
    return torch.nn.functional.gelu(x, approximate=approximate)


class IRGatedMLP(nn.Module):
    """``down(act_and_mul(gate_up(x)))``: the gate and up projections as one matrix, then
    ``ir_spec.ops.silu_and_mul`` or ``gelu_and_mul`` (`activation`, a `GATED_ACTIVATIONS`
    name). `gate_scale` multiplies the gate before the activation (folded into the joined
    copy of its rows), `output_scale` the output: Falcon-H1's ``mlp_multipliers``.

    `names`: the original layers' names, gate, up and down (``("w1", "w3", "w2")`` for
    LFM2's). The down layer keeps its name, and the state dict shows the joined matrix as the
    original gate and up layers (the gate's rows divided by `gate_scale` again), so saving
    writes the original model's checkpoint and ``load_state_dict`` takes one, joining the
    two as the conversion did. Without a `gate_scale` the split weights are views of the
    joined one, so a state dict costs no memory."""

    def __init__(
        self,
        gate_proj: nn.Linear,
        up_proj: nn.Linear,
        down_proj: nn.Linear,
        activation: str = "silu",
        *,
        gate_scale: float = 1.0,
        output_scale: float = 1.0,
        names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj"),
    ) -> None:
        super().__init__()
        _check_activation("IRGatedMLP", activation)
        if len(set(names)) != 3 or "gate_up" in names:
            raise ValueError(
                f"IRGatedMLP: argument 'names' got {names!r}; expected three distinct layer "
                "names other than 'gate_up'"
            )
        self.activation = activation
        self.gate_scale = gate_scale
        self.output_scale = output_scale
        self.names = names
        self.gate_rows = gate_proj.out_features
        bias = gate_proj.bias is not None
        # built on the meta device, so that no initialisation runs (most of a conversion's
        # time on a CPU) and the joined tensors are the only new memory
        self.gate_up = nn.Linear(
            gate_proj.in_features,
            gate_proj.out_features + up_proj.out_features,
            bias=bias,
            device="meta",
        )
        kinds = ("weight", "bias") if bias else ("weight",)
        with torch.no_grad():
            for kind in kinds:
                gate, up = getattr(gate_proj, kind), getattr(up_proj, kind)
                joined = torch.cat([gate if gate_scale == 1.0 else gate * gate_scale, up])
                setattr(self.gate_up, kind, nn.Parameter(joined, gate.requires_grad))
        setattr(self, names[2], down_proj)
        # (torch leaves both registrations untyped)
        self.register_state_dict_post_hook(_split_gate_up)  # type: ignore[no-untyped-call]
        self.register_load_state_dict_pre_hook(_join_gate_up)  # type: ignore[no-untyped-call]

    def forward(self, x: Tensor) -> Tensor:
        down: nn.Module = getattr(self, self.names[2])
        out: Tensor = down(act_and_mul(self.gate_up(x), self.activation))
        return out if self.output_scale == 1.0 else out * self.output_scale

    def extra_repr(self) -> str:
        if (self.gate_scale, self.output_scale) == (1.0, 1.0):
            return f"activation={self.activation}"
        return (
            f"activation={self.activation}, gate_scale={self.gate_scale}, "
            f"output_scale={self.output_scale}"
        )


def _split_gate_up(
    module: nn.Module, state_dict: dict[str, Any], prefix: str, _metadata: Any
) -> None:
    """State-dict post-hook of `IRGatedMLP`: its joined ``gate_up`` entries become the
    original gate and up layers' (in their place, so the order stays the original's)."""
    assert isinstance(module, IRGatedMLP)
    joined = prefix + "gate_up."
    if not any(key.startswith(joined) for key in state_dict):
        return
    gate_name, up_name, _ = module.names
    # this module's entries were added last: take them out and put them back in order
    own = [key for key in state_dict if key.startswith(prefix)]
    entries = {key: state_dict.pop(key) for key in own}
    for key, value in entries.items():
        if not key.startswith(joined):
            state_dict[key] = value
            continue
        kind = key[len(joined) :]
        gate, up = value[: module.gate_rows], value[module.gate_rows :]
        if module.gate_scale != 1.0:
            gate = gate / module.gate_scale
        state_dict[f"{prefix}{gate_name}.{kind}"] = gate
        state_dict[f"{prefix}{up_name}.{kind}"] = up


def _join_gate_up(module: nn.Module, state_dict: dict[str, Any], prefix: str, *_args: Any) -> None:
    """Load-state-dict pre-hook of `IRGatedMLP`: the original gate and up layers' entries,
    where both are there, become the joined ``gate_up`` entry, made as the conversion made it
    (the gate's rows times `gate_scale`, in the joined layer's dtype)."""
    assert isinstance(module, IRGatedMLP)
    gate_name, up_name, _ = module.names
    for kind in ("weight", "bias"):
        gate_key, up_key = f"{prefix}{gate_name}.{kind}", f"{prefix}{up_name}.{kind}"
        if gate_key not in state_dict or up_key not in state_dict:
            continue
        target: Tensor = getattr(module.gate_up, kind)
        gate, up = (state_dict.pop(key) for key in (gate_key, up_key))
        with torch.no_grad():
            gate = gate.to(target.dtype)
            if module.gate_scale != 1.0:
                gate = gate * module.gate_scale
            state_dict[f"{prefix}gate_up.{kind}"] = torch.cat([gate, up.to(target.dtype)])


class IRJoinedGatedMLP(nn.Module):
    """A gated MLP whose gate and up projections are one layer already, gate rows first (Phi-3's
    ``gate_up_proj`` and ``down_proj``; Granite MoE's shared expert's ``input_linear`` and
    ``output_linear``): ``down(act_and_mul(gate_up(x)))``. It holds the original layers under
    their own `names`, so its state dict is the original's."""

    def __init__(
        self,
        gate_up: nn.Linear,
        down: nn.Linear,
        activation: str,
        names: tuple[str, str] = ("gate_up_proj", "down_proj"),
    ) -> None:
        super().__init__()
        _check_activation("IRJoinedGatedMLP", activation)
        self.activation = activation
        self.names = names
        setattr(self, names[0], gate_up)
        setattr(self, names[1], down)

    def forward(self, x: Tensor) -> Tensor:
        gate_up, down = (getattr(self, name) for name in self.names)
        out: Tensor = down(act_and_mul(gate_up(x), self.activation))
        return out

    def extra_repr(self) -> str:
        return f"activation={self.activation}"


def _check_activation(owner: str, activation: str) -> None:
    if activation not in GATED_ACTIVATIONS:
        raise ValueError(
            f"{owner}: argument 'activation' got {activation!r}; expected one of "
            f"{list(GATED_ACTIVATIONS)}"
        )


def act_and_mul(h: Tensor, activation: str) -> Tensor:
    """``act(h[..., :d]) * h[..., d:]`` with the IR op of `activation`."""
    approximate = GATED_ACTIVATIONS[activation]
    out: Tensor = ops.silu_and_mul(h) if approximate is None else ops.gelu_and_mul(h, approximate)
    return out


class IRRotaryCache(nn.Module):
    """Stands in for the model's rotary module: returns ``(cos_sin_cache, positions)`` instead
    of ``(cos, sin)``; converted attention layers take that pair.

    `tables` maps a layer type to its ``(inv_freq, attention_scaling)``; a model with one rope
    for every layer has the single type None. Gemma 3's module is asked per layer type
    (``"sliding_attention"`` and ``"full_attention"`` have their own frequencies): each type
    gets its own table, ``<type>_cos_sin_cache`` (``cos_sin_cache`` for None).

    `sliced_by_token`: the model slices the pair by token, ``[:, a:b, :]``, before some layers
    (Gemma 4's, before the layers that reuse earlier keys and values): the pair is then
    ``([positions, 1, width] table, [batch, tokens, 1] positions)``, so a slice keeps the whole
    table and the kept tokens' positions.

    `per_token`: the model's rotary module, where a token's angles depend on more than one
    position (Qwen 3.5's multimodal rope takes a time, a height and a width position per
    token, and mixes their frequencies): the module computes each call's float32 cosines and
    sines, whose rows become the table (a row a token: ``[batch x tokens, width]``, positions
    ``0 .. batch x tokens - 1``) in place of one built ahead. `per_token_pairs`: that module
    gives each frequency's cosine twice in a row (GLM-4.1V's, for its rotation of pairs), not
    the frequencies' in two equal halves.

    `gather_rows`: the pair is ``([batch, tokens, width] rows of the table, [batch, tokens]
    positions)``, the rows of the call's tokens gathered. For a model spread over several
    devices (``device_map``): accelerate moves each layer's arguments to the layer's device,
    which would copy the whole table to every layer on another device at every call."""

    def __init__(
        self,
        tables: dict[str | None, tuple[Tensor, float]],
        max_positions: int,
        *,
        sliced_by_token: bool = False,
        per_token: nn.Module | None = None,
        per_token_pairs: bool = False,
        gather_rows: bool = False,
    ) -> None:
        super().__init__()
        if per_token is not None and (sliced_by_token or list(tables) != [None]):
            raise ValueError(
                "IRRotaryCache: argument 'per_token' takes a single rope (layer type None), "
                "not sliced by token"
            )
        if gather_rows and (sliced_by_token or per_token is not None):
            raise ValueError(
                "IRRotaryCache: argument 'gather_rows' got True for a rope sliced by token or "
                "computed at each call; expected False there"
            )
        if per_token_pairs and per_token is None:
            raise ValueError(
                "IRRotaryCache: argument 'per_token_pairs' got True without 'per_token'; it says "
                "how a rope computed at each call lays out its angles"
            )
        self.layer_types = list(tables)
        self.max_positions = max_positions
        self.sliced_by_token = sliced_by_token
        self.per_token = per_token
        self.per_token_pairs = per_token_pairs
        self.gather_rows = gather_rows
        if per_token is not None:
            return
        for layer_type, (inv_freq, scaling) in tables.items():
            positions = torch.arange(max_positions, dtype=torch.float32, device=inv_freq.device)
            freqs = torch.outer(positions, inv_freq.float())
            cache = torch.cat([freqs.cos(), freqs.sin()], dim=-1) * scaling
            self.register_buffer(self._buffer_name(layer_type), cache, persistent=False)

    @staticmethod
    def _buffer_name(layer_type: str | None) -> str:
        return "cos_sin_cache" if layer_type is None else f"{layer_type}_cos_sin_cache"

    def cache_for(self, layer_type: str | None = None) -> Tensor:
        """The ``cat(cos, sin)`` table of `layer_type`'s rope (none where it is `per_token`)."""
        if self.per_token is not None:
            raise ValueError("IRRotaryCache: a per-token rope has no table ahead of a call")
        if layer_type not in self.layer_types:
            raise ValueError(
                f"IRRotaryCache: argument 'layer_type' got {layer_type!r}; expected one of "
                f"{self.layer_types}"
            )
        table: Tensor = getattr(self, self._buffer_name(layer_type))
        return table

    def forward(
        self, x: Tensor, position_ids: Tensor, layer_type: str | None = None
    ) -> tuple[Tensor, Tensor]:
        if self.per_token is not None:
            return self._per_token_pair(x, position_ids)
        # transformers passes one row of positions for a whole batch; the rotary kernels read
        # a dense position per token (a broadcast one sent them to the native function), so
        # the rows are copied out once here rather than in every layer
        # (Gemma 3n hands it its stacked streams, [streams, batch, tokens, hidden])
        positions = position_ids.expand(x.shape[-3:-1] if x.dim() > 2 else x.shape[:-1])
        positions = positions.contiguous()
        if self.sliced_by_token:
            return self.cache_for(layer_type)[:, None], positions[..., None]
        table = self.cache_for(layer_type)
        if self.gather_rows:  # on the caller's device (a probe's may be another layer's)
            return table[positions.to(table.device)].to(x.device), positions.to(x.device)
        return table, positions

    @staticmethod
    def plain_pair(table: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """A pair this module returned, as ``([rows, width] table, [batch, tokens] dense
        positions)`` for ``rotary_embedding``: the `sliced_by_token` form squeezed back (its
        positions made dense again after a slice), the `gather_rows` form's rows flattened
        (its positions then the rows' indices), the plain form as it is."""
        if positions.dim() == 3:
            return table.squeeze(1), IRRotaryCache.token_positions(table, positions)
        if table.dim() == 3:
            rows = torch.arange(positions.numel(), device=table.device).view(positions.shape)
            return table.flatten(0, 1), rows
        return table, positions

    @staticmethod
    def token_positions(table: Tensor, positions: Tensor) -> Tensor:
        """The ``[batch, tokens]`` positions of the tokens a pair this module returned
        rotates (a `per_token` pair's are its rows' indices)."""
        if positions.dim() == 3:
            return positions.squeeze(-1).contiguous()
        return positions

    def _per_token_pair(self, x: Tensor, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        assert self.per_token is not None
        # the module reads only the device and the dtype of its first argument
        like = x.new_empty(0, dtype=torch.float32)
        # [batch, tokens, cat(f, f)]; a row of positions for the whole batch, broadcast
        cos, sin = (t.expand(*x.shape[:-1], -1) for t in self.per_token(like, position_ids))
        if self.per_token_pairs:
            cos, sin = cos[..., 0::2], sin[..., 0::2]
        else:
            half = cos.shape[-1] // 2
            cos, sin = cos[..., :half], sin[..., :half]
        table = torch.cat([cos, sin], dim=-1).flatten(0, -2)
        positions = torch.arange(table.shape[0], device=table.device).view(cos.shape[:-1])
        return table, positions
