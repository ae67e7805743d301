"""Tutorial: steer which implementation runs, from code, the command line and the environment."""

import os
import subprocess
import sys

import torch
from torch import Tensor

import ir_dispatch
from ir_spec import ops


# A provider of our own (out-of-tree providers register the same way, see the next tutorial).
@ops.silu_and_mul.register_impl("tutorial_halves")
def silu_and_mul_halves(x: Tensor) -> Tensor:
    d = x.shape[-1] // 2
    return torch.nn.functional.silu(x[..., :d]) * x[..., d:]


x = torch.randn(4, 16)

# 1. From code, for the whole process ...
ir_dispatch.set_priority(silu_and_mul=["tutorial_halves", "native"])
assert ir_dispatch.select("silu_and_mul", x).provider == "tutorial_halves"

# ... or for a block (nested, restored on exceptions, local to the thread or task).
with ir_dispatch.priority(silu_and_mul=["native"]):
    assert ir_dispatch.select("silu_and_mul", x).provider == "native"
assert ir_dispatch.select("silu_and_mul", x).provider == "tutorial_halves"

# 2. From the command line of your application:
argv = ["serve", "--ir-op-priority.silu_and_mul=native", "--port=8000"]
ir_dispatch.set_priority(ir_dispatch.parse_priority_args(argv))
assert ir_dispatch.effective_priority("silu_and_mul")[0] == "native"
ir_dispatch.set_priority()

# 3. From the environment, read when ir_dispatch is imported:
code = "import ir_dispatch; print(ir_dispatch.effective_priority('rms_norm'))"
env = {**os.environ, "IR_OP_PRIORITY": "rms_norm=triton,native"}
printed = subprocess.run(
    [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
).stdout
assert printed.startswith("['triton', 'native'"), printed
