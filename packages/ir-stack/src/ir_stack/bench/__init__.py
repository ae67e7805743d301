"""``ir-stack bench``: the kernel benchmark (`ir_stack.bench.kernels`, CUDA GPUs only) and the
end-to-end benchmark (`ir_stack.bench.e2e`), each writing JSON, a markdown table and a plot
(`kernel_report` and `e2e_report` redo the table and plot from a JSON)."""

import argparse
from collections.abc import Sequence
from pathlib import Path

import torch
from rich.console import Console


def main(argv: Sequence[str], console: Console | None = None) -> int:
    """Run the benchmarks selected by `argv` (``ir-stack bench --help``)."""
    console = console or Console()
    parser = argparse.ArgumentParser(prog="ir-stack bench", description=__doc__)
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("bench-results"),
        help="directory for the results (default: %(default)s)",
    )
    parser.add_argument(
        "--only",
        choices=["kernels", "e2e"],
        help="run one benchmark (default: both; without a GPU the kernels are skipped)",
    )
    parser.add_argument(
        "--model", choices=["tiny", "1b"], help="e2e model (default: 1b on a GPU, tiny on CPU)"
    )
    parser.add_argument("--quick", action="store_true", help="fewer shapes and repetitions")
    args = parser.parse_args(argv)
    on_gpu = torch.cuda.is_available()
    status = 0
    if args.only in (None, "kernels"):
        if not on_gpu:
            if args.only == "kernels":
                # asked for by name: a skip would read as success to a script
                console.print("kernels: no CUDA GPU here; the kernel benchmark runs on one only")
                return 2
            console.print("kernels: skipped, they run on a CUDA GPU only")
        else:
            from . import kernel_report, kernels

            grid = ["--tokens", "1,16,1024,16384", "--hidden", "4096"] if args.quick else []
            status |= kernels.main(["--out", str(args.out), *grid])
            for result in sorted(args.out.glob("kernels-*.json")):
                console.print(f"kernels: {kernel_report.write_report(result)}")
    if args.only in (None, "e2e"):
        from . import e2e

        model = args.model or ("1b" if on_gpu else "tiny")
        sizes = ["--batches", "1,8", "--prefill", "256", "--iters", "5"] if args.quick else []
        if model == "tiny" and not args.quick:
            sizes = ["--batches", "1,8,32", "--prefill", "64", "--context", "64"]
        status |= e2e.main(["--out", str(args.out), "--model", model, *sizes])
    return status
