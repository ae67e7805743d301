"""`compile`: a model with the configuration's priorities, the IR passes and, if configured,
piecewise compilation with CUDA graphs."""

import dataclasses
from collections.abc import Callable
from typing import Any

from torch import Tensor

import ir_passes
import ir_piecewise

from .config import Config

#: the splitting ops of the reference models: attention, and the host read its prompts share
ATTENTION_OPS = ("ir_stack::attention", "ir_stack::decode_attention", "ir_stack::prompt_plan")


def passes_per_length(passes: ir_passes.PassConfig, tokens: int) -> ir_passes.PassConfig:
    """`passes` for a trace of `tokens` tokens a sequence, whose dynamic dimension (the one
    ir-piecewise's compile ranges count) is the number of sequences: a fusion's threshold of
    N tokens becomes ``N // tokens`` sequences, and a fusion whose threshold is below one
    sequence is off (a 2048-token prompt is past a threshold of 256 at any batch); a lower
    bound of N tokens (``sp_min_token_num``) becomes the sequences that reach N."""
    if tokens == 1:
        return passes
    changes: dict[str, Any] = {}
    for fusion in ir_passes.FUSIONS:
        limit = passes.max_tokens(fusion.switch)
        if limit is None or not passes.fusion_on(fusion.switch):
            continue
        if fusion.lower_bound:  # from `limit` tokens up: from the sequences that reach it
            changes[fusion.max_tokens_field] = -(-limit // tokens)
        elif limit < tokens:
            changes[fusion.switch] = False
        else:
            changes[fusion.max_tokens_field] = limit // tokens
    return dataclasses.replace(passes, **changes) if changes else passes


class PiecewisePerLength:
    """Piecewise compilation of a reference model, whose inputs are ``[batch, tokens]``.

    The batch is the dynamic dimension; each distinct number of tokens per sequence (the
    prefill length, 1 for decode) gets its own trace, because ir-piecewise drops guards after
    tracing and a trace holds for one token count only. The compile ranges, sizes and
    capture sizes count sequences; each trace's fusion thresholds are converted from tokens
    to sequences (`passes_per_length`), so a fusion runs where the tokens of a call are
    within its threshold.
    """

    def __init__(self, model: Callable[..., Any], config: ir_piecewise.CompilationConfig) -> None:
        self.model = model
        self.config = config
        self.by_length: dict[int, ir_piecewise.PiecewiseCompiled] = {}

    def __call__(self, input_ids: Tensor, positions: Tensor, kv_cache: Any) -> Any:
        tokens = int(input_ids.shape[1])
        compiled = self.by_length.get(tokens)
        if compiled is None:
            config = dataclasses.replace(
                self.config, passes=passes_per_length(self.config.passes, tokens)
            )
            compiled = ir_piecewise.compile(
                self.model,
                config,
                dynamic_arg_dims={"input_ids": 0, "positions": 0},
                # padding rows write nothing into the KV cache (their slots may be in use)
                pad_values={"positions": -1},
            )
            self.by_length[tokens] = compiled
        out = compiled(input_ids, positions, kv_cache)
        # logits are [batch * tokens, vocab]: rows of padding sequences come last
        rows = int(input_ids.shape[0]) * tokens
        if isinstance(out, Tensor) and out.dim() > 0 and out.shape[0] > rows:
            out = out[:rows]
        return out


def compile(model: Callable[..., Any], config: Config | None = None) -> Callable[..., Any]:
    """Apply `config`'s priorities, where it names any, and compile `model` with the IR passes.

    A config without priorities (``Config()``, the default) leaves the priority in force as it
    is: what ``ir_dispatch.set_priority`` or the command's flags set is not cleared. With
    ``config.piecewise`` set, the model (a reference model from `ir_stack.models`) is
    compiled piecewise: split at attention unless other splitting ops are configured, pieces
    compiled per range and size with the IR passes, CUDA graphs as configured.
    """
    config = config or Config()
    if config.priority:
        config.apply()
    if config.piecewise is None:
        return ir_passes.compile(model, config=config.passes)
    return PiecewisePerLength(model, piecewise_config(config))


def piecewise_config(config: Config) -> ir_piecewise.CompilationConfig:
    """`config.piecewise` with `config.passes` and, where it names no splitting ops, the
    reference models' attention ops."""
    assert config.piecewise is not None
    return dataclasses.replace(
        config.piecewise,
        passes=config.passes,
        splitting_ops=config.piecewise.splitting_ops or ATTENTION_OPS,
    )
