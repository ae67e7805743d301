"""``ir-stack bench``: the benchmark suites, their results and their comparison.

    ir-stack bench [--only SUITE[,SUITE]] [--out DIR] [--quick] [--model tiny|1b] [-- ARGS]
    ir-stack bench compare OLD.json NEW.json [--threshold PCT] [--where FIELD=V1,V2]
    ir-stack bench render RESULT.json [RESULT.json ...]
    ir-stack bench list

Each suite (`ir_stack.bench.suites`) runs in a process of its own (``python -m
ir_stack.bench.<suite>``, which takes the suite's own options, given after ``--``) and writes
``<suite>-<device>.json``, ``.md`` and ``.png`` under ``--out`` (`ir_stack.bench.results`).
Without ``--only`` every suite that can run here runs; a suite named with ``--only`` that
cannot (a GPU-only suite on the CPU, a missing library) is refused with exit status 2.
``compare`` exits with status 1 where a metric of the new result is worse than the old one's
by more than the threshold.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from rich.console import Console

from . import results
from .suites import SUITES

#: Exit status of a comparison that found a regression beyond the threshold.
REGRESSED = 1


def main(argv: Sequence[str], console: Console | None = None) -> int:
    """``ir-stack bench ...`` (see the module's docstring); returns the exit status."""
    console = console or Console()
    argv = list(argv)
    actions = {"compare": compare_main, "render": render_main, "list": list_main}
    if argv and argv[0] in actions:
        return actions[argv[0]](argv[1:], console)
    return run_main(argv, console)


def run_main(argv: list[str], console: Console) -> int:
    extra: list[str] = []
    if "--" in argv:
        argv, extra = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    parser = argparse.ArgumentParser(
        prog="ir-stack bench",
        description="Run benchmark suites; `ir-stack bench compare|render|list -h` for the "
        "other actions. Options after `--` go to the suite's own command line (one suite).",
    )
    parser.add_argument(
        "--only",
        help=f"comma-separated suites: {', '.join(SUITES)} (default: every suite that runs here)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("bench-results"),
        help="directory for the results (default: %(default)s)",
    )
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    parser.add_argument(
        "--model", choices=["tiny", "1b"], help="e2e and startup: the reference model"
    )
    args = parser.parse_args(argv)
    named = args.only.split(",") if args.only else []
    unknown = [name for name in named if name not in SUITES]
    if unknown:
        parser.error(f"--only: unknown suite(s) {unknown}; expected some of {list(SUITES)}")
    if extra and len(named) != 1:
        parser.error(f"options after `--` ({' '.join(extra)}) need exactly one suite in --only")
    status = 0
    for suite in SUITES.values():
        if named and suite.name not in named:
            continue
        reason = cannot_run(suite.name)
        if reason:
            if named:  # asked for by name: a skip would read as success to a script
                console.print(f"{suite.name}: {reason}")
                return 2
            console.print(f"{suite.name}: skipped, {reason}")
            continue
        command = [sys.executable, "-m", suite.runner, "--out", str(args.out)]
        command += ["--quick"] if args.quick else []
        command += ["--model", args.model] if args.model and suite.takes_model else []
        console.print(f"{suite.name}: {suite.question}", highlight=False)
        done = subprocess.run([*command, *extra], check=False)
        if done.returncode != 0:
            console.print(f"{suite.name}: failed (exit status {done.returncode})")
            status = max(status, done.returncode)
    return status


def cannot_run(name: str) -> str:
    """Why suite `name` cannot run here, or an empty string."""
    suite = SUITES[name]
    if suite.gpu_only and not torch.cuda.is_available():
        return "no CUDA GPU here; this suite runs on one only"
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if 0 < gpus < suite.ranks:
        return f"needs {suite.ranks} GPUs (one a rank); {gpus} visible"
    missing = [module for module in suite.needs if importlib.util.find_spec(module) is None]
    if missing:
        return f"needs {', '.join(missing)}, which is not installed"
    return ""


def parse_where(parser: argparse.ArgumentParser, items: list[str]) -> dict[str, set[str]]:
    where: dict[str, set[str]] = {}
    for item in items:
        field, sep, values = item.partition("=")
        if not sep or not field or not values:
            parser.error(f"--where {item!r}: expected FIELD=VALUE[,VALUE...]")
        where.setdefault(field, set()).update(values.split(","))
    return where


def compare_main(argv: list[str], console: Console) -> int:
    parser = argparse.ArgumentParser(
        prog="ir-stack bench compare",
        description="Compare two results of one suite row by row; exit status 1 where a "
        "metric is worse by more than the threshold.",
    )
    parser.add_argument("old", type=Path, help="the baseline result (JSON)")
    parser.add_argument("new", type=Path, help="the result to judge (JSON)")
    parser.add_argument(
        "--threshold",
        type=float,
        default=10.0,
        help="percent a metric may worsen before it counts as a regression (default %(default)s)",
    )
    parser.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="FIELD=V1,V2",
        help="compare only the rows whose FIELD holds one of the values (repeatable), e.g. "
        "provider=triton,cuda",
    )
    parser.add_argument("--out", type=Path, help="also write the comparison's markdown here")
    args = parser.parse_args(argv)
    if args.threshold < 0:
        parser.error(f"--threshold {args.threshold}: expected a percentage >= 0")
    where = parse_where(parser, args.where)
    try:
        old, new = results.load(args.old), results.load(args.new)
        comparison = results.compare(old, new, args.threshold / 100, where)
    except ValueError as error:
        parser.error(str(error))
    text = comparison.markdown()
    if new.suite == "kernels":
        from .kernel_compare import details

        text += "\n" + "\n".join(details(old, new)).rstrip("\n") + "\n"
    console.print(text, markup=False, highlight=False, soft_wrap=True)
    if args.out:
        args.out.write_text(text)
    return REGRESSED if comparison.regressions else 0


def render_main(argv: list[str], console: Console) -> int:
    parser = argparse.ArgumentParser(
        prog="ir-stack bench render",
        description="Write the markdown and plot of results again (beside each JSON).",
    )
    parser.add_argument("result", type=Path, nargs="+", help="result JSON files")
    args = parser.parse_args(argv)
    for path in args.result:
        try:
            table = results.render(results.load(path), path)
        except ValueError as error:
            parser.error(str(error))
        console.print(f"{path}: {table}", highlight=False)
    return 0


def list_main(argv: list[str], console: Console) -> int:
    argparse.ArgumentParser(prog="ir-stack bench list", description="The suites.").parse_args(argv)
    for suite in SUITES.values():
        where = "GPU" if suite.gpu_only else "CPU or GPU"
        reason = cannot_run(suite.name)
        here = f"cannot run here: {reason}" if reason else "runs here"
        console.print(f"[bold]{suite.name}[/bold] ({where}; {here}): {suite.question}")
    return 0
