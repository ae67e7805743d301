"""Tutorial: compile a small model written with IR ops; read what the passes did."""

import torch
from torch import Tensor, nn

import ir_dispatch
import ir_passes
from ir_spec import ops


class Block(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.norm = nn.Parameter(torch.ones(hidden))
        self.up = nn.Linear(hidden, 4 * hidden, bias=False)
        self.down = nn.Linear(2 * hidden, hidden, bias=False)

    def forward(self, x: Tensor, residual: Tensor) -> tuple[Tensor, Tensor]:
        # the residual stream donates its buffers: in-place kernels may reuse them
        h, residual = ops.fused_add_rms_norm.maybe_inplace(x, residual, self.norm, 1e-6)
        return self.down(ops.silu_and_mul(self.up(h))), residual


model = Block(64).eval()
x, residual = torch.randn(8, 64), torch.randn(8, 64)
with torch.no_grad():
    expected = model(x.clone(), residual.clone())
    compiled = ir_passes.compile(model)
    out = compiled(x.clone(), residual.clone())
torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)

report = ir_passes.last_report()
assert report is not None
print(report)
if report.passes_ran:  # False on a warm start: Inductor's caches served the compiled code
    assert report.functionalized == 1  # maybe_inplace -> default before AOTAutograd
    assert "fused_add_rms_norm" in report.selected_impls  # lowered to the selected provider
print(ir_dispatch.effective_priority("fused_add_rms_norm"))
