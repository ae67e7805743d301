"""One process of the cache invalidation tests (``test_invalidation.py``).

``python run_invalidation.py OP_DIR CACHE_DIR OUT_FILE [--bump DIST] [--no-fuse]
[--priority PROVIDER]``: imports the module ``inval_op`` from OP_DIR (an op whose native
function calls a helper that the tests edit, and ``OneOp``, a model calling it), compiles the
model piecewise with the compile cache in CACHE_DIR (Inductor's own caches in
``TORCHINDUCTOR_CACHE_DIR``, set by the test) and saves, as JSON, the largest difference from
the eager call and what was compiled and loaded. ``--bump ir-spec`` makes `importlib.metadata`
report another version of that distribution, as an upgrade would; ``--no-fuse`` turns a pass
switch off; ``--priority`` puts a provider of the op first.
"""

import argparse
import importlib
import importlib.metadata
import json
import sys
from pathlib import Path
from typing import Any

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("op_dir")
    parser.add_argument("cache_dir")
    parser.add_argument("out_file")
    parser.add_argument("--bump")
    parser.add_argument("--no-fuse", action="store_true")
    parser.add_argument("--priority")
    args = parser.parse_args()
    if args.bump:
        real_version = importlib.metadata.version

        def bumped(distribution_name: str) -> str:
            version = real_version(distribution_name)
            return version + ".post1" if distribution_name == args.bump else version

        importlib.metadata.version = bumped  # what an upgrade of that distribution reports

    import ir_dispatch
    import ir_passes
    import ir_piecewise

    sys.path.insert(0, args.op_dir)
    inval_op = importlib.import_module("inval_op")  # ir.inval_scale and a model calling it

    if args.priority:
        ir_dispatch.set_priority(inval_scale=[args.priority])

    model = inval_op.OneOp().eval()
    config = ir_piecewise.CompilationConfig(
        cache_dir=args.cache_dir, passes=ir_passes.PassConfig(fuse=not args.no_fuse)
    )
    x = torch.randn(6, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        compiled = ir_piecewise.compile(model, config)(x)
        expected = model(x)
    inductor: dict[str, Any] = dict(torch._dynamo.utils.counters["inductor"])
    Path(args.out_file).write_text(
        json.dumps(
            {
                "error": (compiled - expected).abs().max().item(),
                "counters": ir_piecewise.counters.as_dict(),
                "fx_graph_cache_hits": inductor.get("fxgraph_cache_hit", 0),
                "fx_graph_cache_misses": inductor.get("fxgraph_cache_miss", 0),
            }
        )
    )


if __name__ == "__main__":
    main()
