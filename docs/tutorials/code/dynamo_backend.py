"""torch.compile's own door: ``backend="ir_passes"`` (the IR passes on Inductor) and
``backend="ir_stack"`` (the whole pipeline), found through their entry points: nothing of
ir-stack is imported before the compiled function first runs."""

import sys

import torch

from ir_spec import ops


@torch.library.custom_op("tutorial::mix", mutates_args=())
def mix(x: torch.Tensor) -> torch.Tensor:
    """Stands in for attention: the op piecewise compilation splits at."""
    return x.flip(0).cumsum(0)


@mix.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def block(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = ops.rms_norm(x + r, w, 1e-6)
    h = torch.ops.tutorial.mix(h)
    return ops.silu_and_mul(torch.cat([h, 2 * h], dim=-1))


assert "ir_passes" not in sys.modules
assert "ir_stack" not in sys.modules
w = torch.randn(64)

# 1. the IR passes on Inductor; options: PassConfig fields and Inductor options alike
passes = torch.compile(block, backend="ir_passes", options={"level": 1, "force_fusion": True})
x, r = torch.randn(8, 64), torch.randn(8, 64)
torch.testing.assert_close(passes(x, r, w), block(x, r, w))

import ir_passes  # noqa: E402  (imported by the backend already; here for its report)

print("fusions:", dict(ir_passes.last_report().fusions))  # type: ignore[union-attr]

# 2. the whole pipeline: options in the shape of the TOML file (IR_STACK_CONFIG without them)
torch._dynamo.reset()
options = {
    "passes": {"level": 2},
    "piecewise": {"splitting_ops": ["tutorial::mix"], "compile_ranges_endpoints": [16]},
}
stack = torch.compile(block, backend="ir_stack", dynamic=True, options=options)
for tokens in (4, 32, 9):
    x, r = torch.randn(tokens, 64), torch.randn(tokens, 64)
    torch.testing.assert_close(stack(x, r, w), block(x, r, w))

from ir_piecewise import counters  # noqa: E402

print("pieces:", counters.num_piecewise_graphs_seen, "ranges:", sorted(counters.fusions_enabled))
