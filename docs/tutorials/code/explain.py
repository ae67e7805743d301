"""Tutorial: find out why a kernel was or was not chosen."""

import logging

import torch

import ir_dispatch

x = torch.randn(4, 4096, dtype=torch.float16)
ir_dispatch.set_priority(rms_norm=["cuda", "triton", "native"])

explanation = ir_dispatch.explain("rms_norm", x, None, 1e-6)
print(explanation)
# On a CPU: cuda is not registered (ir-kernels-cuda not installed or not built here), triton is
# registered but not supported on this platform, native is selected.
assert explanation.selected is not None
verdicts = {v.provider: v.verdict for v in explanation}
assert verdicts[explanation.selected] is ir_dispatch.Verdict.SELECTED

# Every first-time choice is logged with the reasons at DEBUG:
logging.basicConfig()
logging.getLogger("ir_dispatch").setLevel(logging.DEBUG)
from ir_spec import ops  # noqa: E402

ops.rms_norm(x, None, 1e-6)
ir_dispatch.set_priority()
