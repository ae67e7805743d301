"""Tutorial: use the out-of-tree provider package ``ir-oot-example`` (installed with pip; its
entry point in group ``ir.providers`` makes ir-dispatch load it on first use)."""

import subprocess
import sys

import torch

import ir_dispatch
from ir_spec import ops

# Chosen from the command line, as an application would pass its own argv:
ir_dispatch.set_priority(ir_dispatch.parse_priority_args(["--ir-op-priority.rms_norm=oot_example"]))
x = torch.randn(4, 64)
assert ir_dispatch.select("rms_norm", x, None, 1e-6).provider == "oot_example"
ops.rms_norm(x, None, 1e-6)

import ir_oot_example  # noqa: E402  (only to read its call counter)

assert ir_oot_example.CALLS["rms_norm"] >= 1
ir_dispatch.set_priority()

# The same from a fresh process: python -m ir_dispatch lists the entry point as loaded.
table = subprocess.run(
    [sys.executable, "-m", "ir_dispatch"],
    capture_output=True,
    text=True,
    check=True,
    env={"COLUMNS": "200", **__import__("os").environ},
).stdout
assert "provider entry point 'oot_example' (ir_oot_example): loaded" in table
