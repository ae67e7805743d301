"""An out-of-tree platform for the tests: ``test_npu``, detected where ``IR_TEST_NPU=1``.

It brings its own kernels (provider ``test_npu``, `ir_test_platform.kernels`), default
priorities that put them first in eager mode and after native under Inductor, and one extra
pass, `count_ir_ops`, which records the IR ops of every post-grad graph it sees.
"""

import os
from collections import Counter
from typing import Any

import torch

from ir_dispatch import Platform

#: IR op name -> how many nodes `count_ir_ops` saw calling it
SEEN: Counter[str] = Counter()


def count_ir_ops(graph: Any) -> None:
    """The platform's extra pass: count the ``torch.ops.ir`` calls of `graph` in `SEEN`."""
    for node in graph.nodes:
        target = node.target
        op = isinstance(target, torch._ops.OpOverload) and node.op == "call_function"
        if op and target.namespace == "ir":
            SEEN[target._schema.name.split("::")[1]] += 1


PLATFORM = Platform(
    "test_npu",
    lambda: os.environ.get("IR_TEST_NPU") == "1",
    {
        "eager": {"rms_norm": ["test_npu", "native"], "silu_and_mul": ["test_npu", "native"]},
        "inductor": {"rms_norm": ["native", "test_npu"]},
    },
    passes=[count_ir_ops],
    description="the tests' out-of-tree device",
)

IMPOSTOR = Platform("cuda", lambda: False, description="claims a name ir-dispatch owns")
