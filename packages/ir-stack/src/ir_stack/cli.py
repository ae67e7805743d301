"""The ``ir-stack`` command: ``demo [--tp N]`` (the main job), ``explain [OP]`` and ``bench``.

Every command takes ``--ir-op-priority.<op>=<p1>,<p2>`` flags, ``-O0`` .. ``-O3`` (the pass
optimization level) and ``--pass.<field>=<value>`` flags (any `ir_passes.PassConfig` field:
``--pass.enable_qk_norm_rope_fusion=true``, ``--pass.rope_kvcache_max_tokens=none``).
"""

import argparse
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

import ir_dispatch

from .config import Config
from .pass_flags import split_pass_args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ir-stack`` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="ir-stack", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo_command = commands.add_parser(
        "demo",
        help="run the tiny model in every mode and compare them",
        description="Run the tiny model in every mode (eager native, eager with the selected "
        "kernels, ir_stack.compile, piecewise) and compare them. With --tp N, the "
        "tensor-parallel model over N ranks against the single-device model: N processes "
        "started here (gloo on the CPU, NCCL with one GPU each), or the processes of "
        "torchrun --nproc-per-node N -m ir_stack.cli demo --tp N.",
    )
    demo_command.add_argument(
        "--tp", type=int, default=1, metavar="N", help="tensor-parallel ranks (default: 1)"
    )
    explain = commands.add_parser(
        "explain",
        help="which implementation each op uses, and why",
        description="The platform in force (set by IR_PLATFORM or detected) and where its "
        "default priorities come from (ir-dispatch, or the entry point and distribution of an "
        "out-of-tree platform); then each op (or OP alone), then its providers: their place in "
        "the op's "
        "effective priority list and their verdict (the one used, or why not: a provider not "
        "supported here says why); then the fusions the pass configuration in force turns on "
        "(-O<level>, --pass.<field>=<value>), with their token thresholds.",
    )
    explain.add_argument("op", nargs="?", help="one op (default: all)")
    commands.add_parser(
        "bench",
        help="benchmark suites, their results (JSON, markdown, plots) and comparisons; see "
        "ir-stack bench -h",
        add_help=False,
    )
    # --ir-op-priority flags (and the value of one without "="), -O<level> and --pass.* flags
    # are read by Config.load
    try:
        others = split_pass_args(ir_dispatch.split_priority_args(argv)[1])[1]
        args, rest = parser.parse_known_args(others)
        if args.command != "bench" and rest:
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
    except ValueError as error:  # a priority flag naming an unknown op or provider
        parser.error(str(error))
    try:
        # the environment and the configuration file: not a usage error, so no usage line
        ir_dispatch.read_environment()
        config = Config.load(argv)
        config.apply()
    except ValueError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    console = Console()
    if args.command == "demo":
        from .demo import main as demo

        return demo(console, config, tp=args.tp)
    if args.command == "bench":
        from .bench import main as bench

        return bench(rest, console)
    from ir_dispatch.report import providers_table

    try:
        table = providers_table([args.op] if args.op else None)
    except ValueError as error:  # an unknown op, named with the known ones
        parser.error(str(error))
    for plugin in ir_dispatch.platform_loads():
        if plugin.status == "failed":
            console.print(f"platform entry point {plugin.name!r} skipped: {plugin.error}")
    console.print(f"platform: {ir_dispatch.platform_origin()}")
    console.print(table)
    console.print(fusions_table(config))
    return 0


def fusions_table(config: Config) -> Table:
    """The fusions of `config`'s passes: on or off and why, token threshold, what they fuse."""
    passes = config.passes
    table = Table(title=f"fusions at -O{passes.level} (force_fusion={passes.force_fusion})")
    for column in ("switch", "on", "from", "tokens", "fuses"):
        table.add_column(column)
    for row in passes.describe():
        limit = row["max_tokens"]
        bound = ">=" if row["lower_bound"] else "<="
        table.add_row(
            row["switch"],
            "on" if row["on"] else "off",
            row["source"],
            "no limit" if limit is None else f"{bound} {limit}",
            row["fuses"],
        )
    return table


if __name__ == "__main__":
    raise SystemExit(main())
