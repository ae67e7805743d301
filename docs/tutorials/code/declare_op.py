"""Tutorial: declare an op with its native semantics, call it, and see it under torch.compile."""

import torch
from torch import Tensor

import ir_spec


@ir_spec.register_op(name="tutorial_scaled_tanh", allow_inplace=True)
def scaled_tanh(x: Tensor, scale: float = 1.0) -> Tensor:
    """``tanh(x) * scale``, computed in float32 and rounded once to ``x.dtype``."""
    return (torch.tanh(x.float()) * scale).to(x.dtype)


@scaled_tanh.register_checker
def _check(x: Tensor, scale: float = 1.0) -> None:
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"ir.tutorial_scaled_tanh: argument 'x' has dtype {x.dtype}")


x = torch.randn(4, 8)
y = ir_spec.ops.tutorial_scaled_tanh(x, 2.0)  # eager: dispatches in Python (native here)
assert torch.equal(y, scaled_tanh.native(x, 2.0))
print(torch.ops.ir.tutorial_scaled_tanh.default._schema)

# Under torch.compile the call is one node of the graph: torch.ops.ir.tutorial_scaled_tanh
graphs = []
compiled = torch.compile(
    lambda t: ir_spec.ops.tutorial_scaled_tanh(t, 2.0),
    backend=lambda gm, _: graphs.append(gm) or gm.forward,
    fullgraph=True,
)
torch.testing.assert_close(compiled(x), y)
assert "ir.tutorial_scaled_tanh.default" in str(graphs[0].code)
