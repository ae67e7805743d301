"""Does compiling a transformers family with Inductor on the CPU corrupt the heap, and is it ours?

Runs `test_hf.py`'s residual-add compile test for each family in its own process, in three
modes, many processes at once (the load of a sharded test run), each under glibc's
``MALLOC_CHECK_=3`` so that a corrupted heap aborts at once rather than some calls later:

- ``ir``: the converted model through ``ir_stack.compile`` with the fusion forced (the test);
- ``plain``: the converted model through stock ``torch.compile``;
- ``orig``: the original model through stock ``torch.compile``: no code of ours runs.

A family that aborts in ``orig`` as in ``ir`` is torch's or transformers', not ours. Run from the
repository root (``benchmarks/gpu/env.sh`` first on the GPU machine, whose host it was made for):

    python benchmarks/cpu/inductor_heap_probe.py --families falcon_h1,llama --repeat 3 --jobs 12

It prints one line a process (family, mode, repeat, exit status, glibc's message if any) and a
tally. ``--one FAMILY MODE`` is the child: one family, one mode, three compiled forwards.
"""

import argparse
import collections
import itertools
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2] / "packages" / "ir-stack" / "tests"
MODES = ("ir", "plain", "orig")
GLIBC_MESSAGE = re.compile(r"(free\(\)|malloc\(\)|double free|corrupted)[^\n]*")


def run_one(family: str, mode: str) -> None:
    """Build `family` as `test_hf.build` does, compile it in `mode`, run three forwards, and
    check the last against eager."""
    import torch

    sys.path.insert(0, str(TESTS))
    import test_hf  # type: ignore[import-not-found]  # packages/ir-stack/tests, put on the path above

    import ir_passes
    import ir_stack

    model = test_hf.build(family)
    ids, mask = test_hf.prompt()
    if mode != "orig":
        test_hf.convert_hf_model(model)
    with (
        torch.no_grad(),
        torch._inductor.config.patch(fx_graph_cache=False),
        torch._functorch.config.patch(enable_autograd_cache=False),
    ):
        eager = model(ids, attention_mask=mask, use_cache=False).logits
        if mode == "ir":
            config = ir_stack.Config(passes=ir_passes.PassConfig(force_fusion=True))
            forward = ir_stack.compile(model, config)
        else:
            forward = torch.compile(model)
        for _ in range(3):
            out = forward(ids, attention_mask=mask, use_cache=False).logits
    torch.testing.assert_close(out, eager, atol=1e-4, rtol=1e-4)


def spawn(family: str, mode: str, repeat: int) -> tuple[str, str, int, int, str]:
    """One child process under ``MALLOC_CHECK_=3``: its exit status and glibc's message."""
    env = {**os.environ, "MALLOC_CHECK_": "3", "PYTHONFAULTHANDLER": "1"}
    done = subprocess.run(
        [sys.executable, __file__, "--one", family, mode],
        env=env,
        capture_output=True,
        text=True,
    )
    found = GLIBC_MESSAGE.search(done.stdout + done.stderr)
    return family, mode, repeat, done.returncode, found.group(0) if found else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="falcon_h1", help="comma-separated test_hf names")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=12, help="processes at once")
    parser.add_argument("--one", nargs=2, metavar=("FAMILY", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        family, mode = args.one
        if mode not in MODES:
            parser.error(f"--one: mode {mode!r}; expected one of {', '.join(MODES)}")
        run_one(family, mode)
        return
    modes = args.modes.split(",")
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"--modes: {', '.join(unknown)}; expected some of {', '.join(MODES)}")
    if args.repeat < 1 or args.jobs < 1:
        parser.error(f"--repeat {args.repeat} and --jobs {args.jobs}: expected at least 1 each")
    runs = list(itertools.product(range(1, args.repeat + 1), args.families.split(","), modes))
    tally: collections.Counter[tuple[str, str, str]] = collections.Counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        for family, mode, repeat, status, message in pool.map(
            lambda run: spawn(run[1], run[2], run[0]), runs
        ):
            print(f"{family} {mode} {repeat}: exit {status} {message}", flush=True)
            tally[family, mode, "ok" if status == 0 else "failed"] += 1
    for (family, mode, outcome), count in sorted(tally.items()):
        print(f"{family} {mode}: {count} {outcome}")


if __name__ == "__main__":
    main()
