"""Cold and warm start of the tiny reference model compiled piecewise.

``python benchmarks/piecewise/warm_start.py [--runs N]``: starts N+1 processes on one fresh
compile cache and Inductor cache (the first cold, the others warm); each builds the model,
compiles it with ``ir_stack.compile(model, Config(piecewise=...))`` and runs a prefill and a
decode step. Prints, per process, the wall time of the process and of its first two calls,
the CPU time of those calls in the process itself (less sensitive to other load on the machine
than wall time), and the counters (traces loaded, pieces loaded and compiled).

``--child CACHE_DIR`` is one such process (prints one JSON line).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def child(cache_dir: str) -> None:
    import torch

    import ir_stack
    from ir_piecewise import CompilationConfig, counters
    from ir_stack.config import Config
    from ir_stack.models import TINY, LlamaModel

    torch.manual_seed(0)
    model = LlamaModel(TINY).eval()
    start, cpu = time.perf_counter(), time.process_time()
    compiled = ir_stack.compile(model, Config(piecewise=CompilationConfig(cache_dir=cache_dir)))
    ids = torch.randint(0, TINY.vocab_size, (2, 16))
    cache = model.new_kv_cache(2)
    with torch.no_grad():
        logits = compiled(ids, torch.arange(16).repeat(2, 1), cache)
        step = logits.view(2, 16, -1)[:, -1].argmax(-1, keepdim=True)
        compiled(step, torch.full((2, 1), 16), cache)
    first_calls, first_calls_cpu = time.perf_counter() - start, time.process_time() - cpu
    print(
        json.dumps(
            {"first_calls_s": first_calls, "first_calls_cpu_s": first_calls_cpu}
            | counters.as_dict()
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2, help="warm processes after the cold one")
    parser.add_argument("--child", metavar="CACHE_DIR")
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    with tempfile.TemporaryDirectory(prefix="ir-warm-start-") as tmp:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(Path(tmp) / "inductor")}
        print(
            "| process | wall s | first calls s | first calls CPU s | traces loaded | "
            "pieces loaded | compiled |"
        )
        print("|---|---|---|---|---|---|---|")
        for run in range(args.runs + 1):
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, __file__, "--child", str(Path(tmp) / "cache")],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            )
            wall = time.perf_counter() - start
            result = json.loads(done.stdout.strip().splitlines()[-1])
            print(
                f"| {'cold' if run == 0 else f'warm {run}'} | {wall:.1f} | "
                f"{result['first_calls_s']:.1f} | {result['first_calls_cpu_s']:.1f} | "
                f"{result['num_traces_loaded']} | "
                f"{result['num_cache_hits']} | {result['num_backend_compilations']} |"
            )


if __name__ == "__main__":
    main()
