"""Compile the toy model piecewise with autotuning and save what it decided.

``python run_autotune.py CACHE_DIR OUT_FILE``: a provider of ``silu_and_mul`` that sleeps is
registered first in the priority; the tests run this twice on one cache directory (a cold and
a warm start) and compare.
"""

import json
import sys
import time
from pathlib import Path

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).parent))

from toy_model import SPLITTING_OPS, ToyModel

import ir_dispatch
import ir_passes
import ir_piecewise
from ir_passes import PassConfig, autotune
from ir_spec import ops

SIZES = (5, 12, 300)  # one in each compile range


@torch.library.custom_op("ir_piecewise_autotune_test::slow", mutates_args=())
def _slow(x: Tensor) -> Tensor:
    time.sleep(20e-3)
    out: Tensor = ops.silu_and_mul.native(x)
    return out


@_slow.register_fake
def _slow_fake(x: Tensor) -> Tensor:
    return x.new_empty(*x.shape[:-1], x.shape[-1] // 2)


def slow(x: Tensor) -> Tensor:
    """A provider slower than any other: what autotuning must not keep."""
    out: Tensor = torch.ops.ir_piecewise_autotune_test.slow(x)
    return out


def main(cache_dir: str, out_file: str) -> None:
    ops.silu_and_mul.register_impl("t_pw_slow")(slow)
    ir_dispatch.set_priority(silu_and_mul=["t_pw_slow"])
    model = ToyModel().eval()
    config = ir_piecewise.CompilationConfig(
        splitting_ops=SPLITTING_OPS,
        compile_ranges_endpoints=(8,),
        cache_dir=cache_dir,
        passes=PassConfig(autotune=True),
    )
    compiled = ir_piecewise.compile(model, config)
    torch.manual_seed(1)
    errors = []
    with torch.no_grad():
        for n in SIZES:
            x = torch.randn(n, 64)
            out = compiled(x)
            with ir_dispatch.priority({op.name: ["native"] for op in ops}):
                errors.append(float((out - model(x)).abs().max()))
    report = ir_passes.last_report()
    counters = ir_piecewise.counters
    result = {
        "errors": errors,
        "timed": autotune.stats.timed,
        "compilations": counters.num_backend_compilations,
        "cache_hits": counters.num_cache_hits,
        "decisions": {
            label: {name: d.as_dict() for name, d in decisions.items()}
            for label, decisions in counters.autotune_decisions.items()
        },
        "report": None
        if report is None
        else {"passes_ran": report.passes_ran, "changed": sorted(report.autotune_changed)},
    }
    Path(out_file).write_text(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:3])
