"""Collectives over a process group, and the norms they feed fused with them.

- `all_reduce`: the sum of ``x`` over the group's ranks;
- `reduce_scatter`: that sum, each rank keeping its block of rows (dimension 0);
- `all_gather`: every rank's ``x`` stacked in rank order along dimension 0;
- `all_reduce_rms_norm`, `all_reduce_fused_add_rms_norm` and their static-fp8 forms: the
  all-reduce followed by `rms_norm` / `fused_add_rms_norm` (then `static_quant_fp8`), the
  pattern after every row-parallel projection of a tensor-parallel model. Each native function
  is exactly the composition, so a kernel that reduces and normalizes in one pass (over
  symmetric memory) is tested against the numbers the unfused graph gives.

The native semantics are torch's functional collectives (``torch.ops._c10d_functional``,
followed by ``wait_tensor``): Dynamo records each op as one ``torch.ops.ir.<name>`` node, and the
native implementation lowers to the functional collectives Inductor schedules. The group is
named by a string, ``group_name`` (`ir_spec.process_groups`), so traced, compiled and cached
graphs hold a name, which every rank resolves to its own group when the op runs.

Every op here needs an initialised process group, which ir-spec's single-process tests do not
have: `ir_spec.testing.needs_process_group` marks them, and their tests run in several
processes (`ir_spec.testing.run_in_world`). The input generators draw each rank's activation
from its own seed (the spec's seed offset by the rank, or by the ``rank`` option), so a
reduction sums different tensors and a test can build every rank's input to compute the
expected result locally; norm weights, residuals and scales are the same on every rank.
Options: ``group_name`` (default: the default group's), ``rank`` (default: this process's rank
in the group).
"""

from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from .. import checks, process_groups
from ..dispatch_key import tensor_summary
from ..errors import argument_error
from ..op import register_op
from ..sampling import SampleSpec
from .norm import _check_fused_add_rms_norm, _check_rms_norm, fused_add_rms_norm, rms_norm
from .quant import sample_scale, static_quant_fp8

_functional = torch.ops._c10d_functional

#: dtypes `all_gather` moves besides the activation dtypes: it copies bytes, so an fp8
#: activation (sequence parallelism gathers quantized rows) goes through as raw bytes.
_GATHER_BYTE_DTYPES = frozenset({torch.float8_e4m3fn})


@register_op
def all_reduce(x: Tensor, group_name: str) -> Tensor:
    """The elementwise sum of `x` over the ranks of the process group `group_name`, in
    ``x.dtype``; the same shape on every rank. A fresh row-major tensor, `x` unchanged."""
    out: Tensor = _functional.wait_tensor(_functional.all_reduce(x, "sum", group_name))
    return out


@all_reduce.register_fake
def _all_reduce_fake(x: Tensor, group_name: str) -> Tensor:
    return x.new_empty(x.shape)


@all_reduce.register_checker
def _check_all_reduce(x: Any, group_name: Any) -> None:
    checks.activation("all_reduce", "x", x)
    process_groups.resolve("all_reduce", group_name)


@register_op
def reduce_scatter(x: Tensor, group_name: str) -> Tensor:
    """The sum of `x` over the ranks of group `group_name`, split into as many equal blocks of
    rows (dimension 0) as the group has ranks; rank ``r`` gets block ``r``, of
    ``x.shape[0] // world_size`` rows. ``x.shape[0]`` must be a multiple of the group's size."""
    world = process_groups.group_size(group_name, "reduce_scatter")
    out: Tensor = _functional.wait_tensor(
        _functional.reduce_scatter_tensor(x, "sum", world, group_name)
    )
    return out


@reduce_scatter.register_fake
def _reduce_scatter_fake(x: Tensor, group_name: str) -> Tensor:
    world = process_groups.group_size(group_name, "reduce_scatter")
    return x.new_empty((x.shape[0] // world, *x.shape[1:]))


def _check_rows_divisible(op: str, x: Tensor, world: int) -> None:
    if x.shape[0] % world:
        raise argument_error(
            op,
            "x",
            x,
            f"a first dimension divisible by the group's {world} ranks (each rank receives "
            "an equal block of rows)",
        )


@reduce_scatter.register_checker
def _check_reduce_scatter(x: Any, group_name: Any) -> None:
    checks.activation("reduce_scatter", "x", x)
    group = process_groups.resolve("reduce_scatter", group_name)
    _check_rows_divisible("reduce_scatter", x, group.size())


@reduce_scatter.register_dispatch_key
def _reduce_scatter_key(x: Any, group_name: Any) -> tuple[Any, ...]:
    # the check reads whether the rows divide among the ranks: record that, not their number
    world = process_groups.group_size(group_name, "reduce_scatter")
    return (tensor_summary(x), group_name, x.shape[0] % world == 0)


@register_op
def all_gather(x: Tensor, group_name: str) -> Tensor:
    """Every rank's `x` of group `group_name`, concatenated in rank order along dimension 0:
    ``[world_size * x.shape[0], *x.shape[1:]]``, the same on every rank. `x` has the same shape
    and dtype on every rank; an fp8 (``float8_e4m3fn``) `x` is gathered as its bytes."""
    world = process_groups.group_size(group_name, "all_gather")
    raw = x.view(torch.uint8) if x.dtype in _GATHER_BYTE_DTYPES else x
    out: Tensor = _functional.wait_tensor(
        _functional.all_gather_into_tensor(raw, world, group_name)
    )
    return out if raw is x else out.view(x.dtype)


@all_gather.register_fake
def _all_gather_fake(x: Tensor, group_name: str) -> Tensor:
    world = process_groups.group_size(group_name, "all_gather")
    return x.new_empty((world * x.shape[0], *x.shape[1:]))


@all_gather.register_checker
def _check_all_gather(x: Any, group_name: Any) -> None:
    if isinstance(x, torch.Tensor) and x.dtype in _GATHER_BYTE_DTYPES:
        if x.dim() < 1:
            raise argument_error("all_gather", "x", x, "a tensor of rank >= 1")
    else:
        checks.activation("all_gather", "x", x)
    process_groups.resolve("all_gather", group_name)


@register_op
def all_reduce_rms_norm(
    x: Tensor, weight: Tensor | None, epsilon: float, group_name: str
) -> Tensor:
    """``rms_norm(all_reduce(x, group_name), weight, epsilon)``."""
    normed: Tensor = rms_norm.native(all_reduce.native(x, group_name), weight, epsilon)
    return normed


@all_reduce_rms_norm.register_fake
def _all_reduce_rms_norm_fake(
    x: Tensor, weight: Tensor | None, epsilon: float, group_name: str
) -> Tensor:
    return x.new_empty(x.shape)


@all_reduce_rms_norm.register_checker
def _check_all_reduce_rms_norm(x: Any, weight: Any, epsilon: Any, group_name: Any) -> None:
    _check_rms_norm(x, weight, epsilon)
    process_groups.resolve("all_reduce_rms_norm", group_name)


@register_op(allow_inplace=True)
def all_reduce_fused_add_rms_norm(
    x: Tensor, x_residual: Tensor, weight: Tensor | None, epsilon: float, group_name: str
) -> tuple[Tensor, Tensor]:
    """``fused_add_rms_norm(all_reduce(x, group_name), x_residual, weight, epsilon)``: returns
    ``(out, residual_out)`` with ``residual_out = all_reduce(x) + x_residual`` rounded to
    ``x.dtype`` and ``out = rms_norm(residual_out)``. `x_residual` is the same on every rank
    (the residual stream of a tensor-parallel model is replicated). ``maybe_inplace`` lets a
    kernel write its results over `x` and `x_residual`."""
    result: tuple[Tensor, Tensor] = fused_add_rms_norm.native(
        all_reduce.native(x, group_name), x_residual, weight, epsilon
    )
    return result


@all_reduce_fused_add_rms_norm.register_fake
def _all_reduce_fused_add_rms_norm_fake(
    x: Tensor, x_residual: Tensor, weight: Tensor | None, epsilon: float, group_name: str
) -> tuple[Tensor, Tensor]:
    return x.new_empty(x.shape), x.new_empty(x.shape)


@all_reduce_fused_add_rms_norm.register_checker
def _check_all_reduce_fused_add_rms_norm(
    x: Any, x_residual: Any, weight: Any, epsilon: Any, group_name: Any
) -> None:
    _check_fused_add_rms_norm(x, x_residual, weight, epsilon)
    process_groups.resolve("all_reduce_fused_add_rms_norm", group_name)


@all_reduce_fused_add_rms_norm.register_dispatch_key
def _all_reduce_fused_add_rms_norm_key(
    x: Any, x_residual: Any, weight: Any, epsilon: Any, group_name: Any
) -> tuple[Any, ...]:
    return (*_residual_key(x, x_residual, weight, epsilon), group_name)


def _residual_key(x: Any, x_residual: Any, weight: Any, epsilon: Any) -> tuple[Any, ...]:
    # the check compares the whole shapes of x and x_residual: record whether they agree
    return (
        tensor_summary(x),
        tensor_summary(x_residual),
        x.shape == x_residual.shape,
        None if weight is None else tensor_summary(weight),
        epsilon,
    )


@register_op
def all_reduce_rms_norm_static_quant_fp8(
    x: Tensor, weight: Tensor | None, epsilon: float, scale: Tensor, group_name: str
) -> Tensor:
    """``static_quant_fp8(all_reduce_rms_norm(x, weight, epsilon, group_name), scale)``."""
    q: Tensor = static_quant_fp8.native(
        all_reduce_rms_norm.native(x, weight, epsilon, group_name), scale
    )
    return q


@all_reduce_rms_norm_static_quant_fp8.register_fake
def _all_reduce_rms_norm_static_quant_fp8_fake(
    x: Tensor, weight: Tensor | None, epsilon: float, scale: Tensor, group_name: str
) -> Tensor:
    return x.new_empty(x.shape, dtype=torch.float8_e4m3fn)


@all_reduce_rms_norm_static_quant_fp8.register_checker
def _check_all_reduce_rms_norm_static_quant_fp8(
    x: Any, weight: Any, epsilon: Any, scale: Any, group_name: Any
) -> None:
    _check_rms_norm(x, weight, epsilon)
    checks.scalar_scale("all_reduce_rms_norm_static_quant_fp8", "scale", scale, x)
    process_groups.resolve("all_reduce_rms_norm_static_quant_fp8", group_name)


@register_op
def all_reduce_fused_add_rms_norm_static_quant_fp8(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    scale: Tensor,
    group_name: str,
) -> tuple[Tensor, Tensor]:
    """``(static_quant_fp8(out, scale), residual_out)`` of ``all_reduce_fused_add_rms_norm``."""
    out, residual_out = all_reduce_fused_add_rms_norm.native(
        x, x_residual, weight, epsilon, group_name
    )
    return static_quant_fp8.native(out, scale), residual_out


@all_reduce_fused_add_rms_norm_static_quant_fp8.register_fake
def _all_reduce_fused_add_rms_norm_static_quant_fp8_fake(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    scale: Tensor,
    group_name: str,
) -> tuple[Tensor, Tensor]:
    return x.new_empty(x.shape, dtype=torch.float8_e4m3fn), x.new_empty(x.shape)


@all_reduce_fused_add_rms_norm_static_quant_fp8.register_checker
def _check_all_reduce_fused_add_rms_norm_static_quant_fp8(
    x: Any, x_residual: Any, weight: Any, epsilon: Any, scale: Any, group_name: Any
) -> None:
    op = "all_reduce_fused_add_rms_norm_static_quant_fp8"
    _check_fused_add_rms_norm(x, x_residual, weight, epsilon)
    checks.scalar_scale(op, "scale", scale, x)
    process_groups.resolve(op, group_name)


@all_reduce_fused_add_rms_norm_static_quant_fp8.register_dispatch_key
def _all_reduce_fused_add_rms_norm_static_quant_fp8_key(
    x: Any, x_residual: Any, weight: Any, epsilon: Any, scale: Any, group_name: Any
) -> tuple[Any, ...]:
    return (*_residual_key(x, x_residual, weight, epsilon), tensor_summary(scale), group_name)


# ------------------------------------------------------------------------- sample inputs
def sample_group(spec: SampleSpec) -> tuple[str, int, int]:
    """(group name, rank, world size) of a sample: the ``group_name`` option or the default
    group, and the ``rank`` option or this process's rank in that group."""
    name = spec.options.get("group_name") or process_groups.default_group_name()
    world = process_groups.group_size(name, "sample_group")
    rank = spec.options.get("rank")
    if rank is None:
        rank = process_groups.group_rank(name, "sample_group")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world:
        raise ValueError(f"SampleSpec.options['rank']: got {rank!r}; expected 0..{world - 1}")
    return name, rank, world


def rank_activation(spec: SampleSpec, rank: int, rows: int | None = None) -> Tensor:
    """Rank `rank`'s activation of `spec` (its seed offset by the rank), ``spec.batch_shape``
    with ``rows`` as the first dimension where given."""
    shape = spec.batch_shape if rows is None else (rows, *spec.batch_shape[1:])
    ranked = replace(spec, seed=spec.seed + 7919 * (rank + 1), batch_shape=shape)
    return ranked.randn(ranked.generator(), spec.hidden_size)


def summed_activation(spec: SampleSpec, world: int) -> Tensor:
    """Every rank's `rank_activation` of `spec` summed in float32, rounded to the spec's dtype:
    the reduced activation, computed without communication (to choose a scale, or check)."""
    total = sum(rank_activation(spec, r).float() for r in range(world))
    assert isinstance(total, Tensor)
    return total.to(spec.dtype)


def _weight(spec: SampleSpec) -> Tensor | None:
    gen = spec.generator()
    gen.manual_seed(spec.seed + 1)
    return spec.weight(gen, spec.hidden_size) if spec.options.get("weight", True) else None


def _residual(spec: SampleSpec) -> Tensor:
    gen = spec.generator()
    gen.manual_seed(spec.seed + 2)
    return spec.randn(gen, spec.hidden_size)


@all_reduce.register_input_generator
def _all_reduce_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    name, rank, _ = sample_group(spec)
    return (rank_activation(spec, rank), name)


@reduce_scatter.register_input_generator
def _reduce_scatter_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    """The first dimension is ``batch_shape[0]`` times the group's size: each rank receives
    ``batch_shape[0]`` rows."""
    name, rank, world = sample_group(spec)
    return (rank_activation(spec, rank, rows=spec.batch_shape[0] * world), name)


@all_gather.register_input_generator
def _all_gather_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    name, rank, _ = sample_group(spec)
    return (rank_activation(spec, rank), name)


@all_reduce_rms_norm.register_input_generator
def _all_reduce_rms_norm_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    name, rank, _ = sample_group(spec)
    return (rank_activation(spec, rank), _weight(spec), spec.options.get("epsilon", 1e-6), name)


@all_reduce_fused_add_rms_norm.register_input_generator
def _all_reduce_fused_add_rms_norm_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    name, rank, _ = sample_group(spec)
    eps = spec.options.get("epsilon", 1e-6)
    return (rank_activation(spec, rank), _residual(spec), _weight(spec), eps, name)


@all_reduce_rms_norm_static_quant_fp8.register_input_generator
def _all_reduce_rms_norm_static_quant_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    """The scale is chosen from the reduced activation (`summed_activation`), the same on
    every rank."""
    name, rank, world = sample_group(spec)
    weight, eps = _weight(spec), spec.options.get("epsilon", 1e-6)
    scale = sample_scale(rms_norm.native(summed_activation(spec, world), weight, eps))
    return (rank_activation(spec, rank), weight, eps, scale, name)


@all_reduce_fused_add_rms_norm_static_quant_fp8.register_input_generator
def _all_reduce_fused_add_rms_norm_static_quant_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    name, rank, world = sample_group(spec)
    residual, weight, eps = _residual(spec), _weight(spec), spec.options.get("epsilon", 1e-6)
    summed = summed_activation(spec, world) + residual
    scale = sample_scale(rms_norm.native(summed, weight, eps))
    return (rank_activation(spec, rank), residual, weight, eps, scale, name)
