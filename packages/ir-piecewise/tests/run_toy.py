"""Compile the toy model piecewise in this process and save outputs and counters.

``python run_toy.py CACHE_DIR OUT_FILE``: used by the tests to check that a second process with
the same cache directory compiles nothing.
"""

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from toy_model import SPLITTING_OPS, ToyModel

import ir_dispatch  # noqa: F401  (installs the dispatcher)
import ir_piecewise
from ir_piecewise import traces
from ir_piecewise.backend import global_key

SIZES = (3, 4, 9)


def main(cache_dir: str, out_file: str) -> None:
    model = ToyModel().eval()
    config = ir_piecewise.CompilationConfig(
        splitting_ops=SPLITTING_OPS,
        compile_sizes=(4,),
        compile_ranges_endpoints=(8,),
        cache_dir=cache_dir,
    )
    compiled = ir_piecewise.compile(model, config)
    torch.manual_seed(1)
    outputs = {}
    with torch.no_grad():
        for n in SIZES:
            outputs[str(n)] = compiled(torch.randn(n, 64)).tolist()
    with torch.no_grad():  # the key of the trace the first call (3 tokens) made, as seen here
        key = traces.trace_key(global_key(config), model, {"x": torch.randn(3, 64)}, [("x", 0)])
    Path(out_file).write_text(
        json.dumps(
            {"outputs": outputs, "counters": ir_piecewise.counters.as_dict(), "trace_key": key}
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:3])
