"""The collective ops (`ir_spec.catalog.collective`) in worlds of two and four processes on
gloo: eager calls, the torch ops and Dynamo against results computed locally from every rank's
inputs; opcheck; subgroups by name; and the errors. gloo runs all three functional
collectives on the CPU (its reduce-scatter is an all-reduce of which each rank keeps its block,
twice the traffic of NCCL's, with the same result)."""

import operator
from typing import Any

import pytest
import torch
import torch.distributed as dist

from ir_spec import SampleSpec, ops, process_groups
from ir_spec.catalog.collective import rank_activation
from ir_spec.testing import (
    assert_close,
    clone_args,
    needs_process_group,
    run_in_world,
    sample_inputs,
    single_process_ops,
)

COLLECTIVES = [
    "all_reduce",
    "reduce_scatter",
    "all_gather",
    "all_reduce_rms_norm",
    "all_reduce_fused_add_rms_norm",
    "all_reduce_rms_norm_static_quant_fp8",
    "all_reduce_fused_add_rms_norm_static_quant_fp8",
]
SPECS = [
    {"batch_shape": (5,), "hidden_size": 64},
    {"batch_shape": (2, 3), "hidden_size": 40, "row_padding": 3},
    {"batch_shape": (0,), "hidden_size": 64},
]


def test_collectives_are_the_ops_that_need_a_process_group() -> None:
    assert sorted(op.name for op in ops if needs_process_group(op)) == sorted(COLLECTIVES)
    assert not set(COLLECTIVES) & {op.name for op in single_process_ops()}


def test_without_torch_distributed_the_errors_say_what_to_do() -> None:
    assert not dist.is_initialized()
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match=r"argument 'group_name'.*torch.distributed is not init"):
        ops.all_reduce(x, "0")
    with pytest.raises(ValueError, match=r"no process group: torch\.distributed is not init"):
        sample_inputs(ops.all_reduce, hidden_size=8)
    assert process_groups.world_key() == "world=1,rank=0"
    assert process_groups.known_group_names() == []


def expected(name: str, spec: SampleSpec, args: tuple[Any, ...], rank: int, world: int) -> Any:
    """What collective `name` gives rank `rank` for the sample `args` of `spec`, computed from
    every rank's input without communication (sums in float64, rounded once)."""
    rows = spec.batch_shape[0] * world if name == "reduce_scatter" else None
    inputs = [rank_activation(spec, r, rows=rows) for r in range(world)]
    assert torch.equal(inputs[rank], args[0])
    total = torch.stack([t.double() for t in inputs]).sum(0).to(args[0].dtype)
    if name == "all_reduce":
        return total
    if name == "reduce_scatter":
        return total.chunk(world)[rank] if total.numel() else total[:0]
    assert name == "all_gather"
    return torch.cat(inputs)


def composition(name: str, args: tuple[Any, ...]) -> Any:
    """A fused op's result as the unfused ops give it: `all_reduce`, then the norm (and the
    quantization). gloo sums half-precision rows in its own order, which can round a reduced
    element one unit apart from a float64 sum, and an fp8 result a whole step apart; the
    composition runs the same reduction."""
    unfused = getattr(ops, name.replace("all_reduce_", "", 1))
    return unfused(ops.all_reduce(args[0], args[-1]), *args[1:-1])


def check_ops(rank: int, world: int, *, opcheck: bool) -> None:
    """Each collective: eager and torch op against `expected` (the fused ops against their
    `composition`), for fp32 and bf16 rows, 3-D and strided rows and no rows; opcheck; one
    node under Dynamo (with `opcheck`)."""
    for name in COLLECTIVES:
        op = getattr(ops, name)
        for dtype in (torch.float32, torch.bfloat16):
            for fields in SPECS:
                spec = SampleSpec(dtype=dtype, seed=3, **fields)  # type: ignore[arg-type]
                args = sample_inputs(op, spec)
                if name in ("all_reduce", "reduce_scatter", "all_gather"):
                    want = expected(name, spec, args, rank, world)
                else:
                    want = composition(name, clone_args(args))
                msg = f"rank {rank}/{world}, {spec}"
                assert_close(op, op(*clone_args(args)), want, msg=msg)
                assert_close(op, op.torch_op.default(*clone_args(args)), want, msg=msg)
                if op.allow_inplace:
                    assert_close(op, op.maybe_inplace(*clone_args(args)), want, msg=msg)
        if not opcheck:
            continue
        args = sample_inputs(op, hidden_size=32, batch_shape=(2, 3))
        torch.library.opcheck(op.torch_op.default, args)
        if op.allow_inplace:
            torch.library.opcheck(op.torch_op.maybe_inplace, clone_args(args))
        check_one_node(op, args)


def check_one_node(op: Any, args: tuple[Any, ...]) -> None:
    torch._dynamo.reset()
    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(lambda *a: op(*a), backend=backend, fullgraph=True)
    assert_close(op, compiled(*clone_args(args)), op.native(*clone_args(args)))
    calls = [
        n.target
        for n in graphs[0].graph.nodes
        if n.op == "call_function" and n.target is not operator.getitem
    ]
    assert calls == [op.torch_op.default], calls


def check_groups_and_errors(rank: int, world: int) -> None:
    """A subgroup by its name sums its ranks only; unknown names and rows that do not divide
    among the ranks are refused with the known names / the group size."""
    pair = dist.new_group([0, 1])  # every rank calls new_group; the others get no group
    assert process_groups.known_group_names() == (["0", "1"] if rank < 2 else ["0"])
    assert process_groups.world_key() == f"world={world},rank={rank}"
    x = torch.full((3, 8), float(rank + 1))
    if rank < 2:
        assert pair.group_name == "1"
        torch.testing.assert_close(ops.all_reduce(x, "1"), torch.full((3, 8), 3.0))
        assert process_groups.group_rank("1") == rank
    total = world * (world + 1) / 2
    torch.testing.assert_close(ops.all_reduce(x, "0"), torch.full((3, 8), total))
    with pytest.raises(ValueError, match=r"argument 'group_name' got 'tp:9'.*known: '0'"):
        ops.all_reduce(x, "tp:9")
    with pytest.raises(ValueError, match=f"divisible by the group's {world} ranks"):
        ops.reduce_scatter(torch.randn(world + 1, 8), "0")
    with pytest.raises(ValueError, match="expected the shape, dtype and device of 'x'"):
        ops.all_reduce_fused_add_rms_norm(x, x[:2], None, 1e-6, "0")
    # fp8 rows are gathered as bytes
    q = (torch.randn(2, 16) * (rank + 1)).to(torch.float8_e4m3fn)
    gathered = ops.all_gather(q, "0")
    assert gathered.dtype == torch.float8_e4m3fn
    assert torch.equal(gathered[2 * rank : 2 * rank + 2].view(torch.uint8), q.view(torch.uint8))


def world_checks(rank: int, world: int) -> None:
    check_groups_and_errors(rank, world)
    # opcheck and Dynamo see the same thing at any size: four ranks check the results only
    check_ops(rank, world, opcheck=world == 2)


@pytest.mark.parametrize("world", [2, 4])
def test_collective_ops_in_a_gloo_world(world: int) -> None:
    run_in_world(world_checks, world)
