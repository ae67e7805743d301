"""``python -m ir_kernels_cuda build [--programmatic]``: compile the kernels now (what the first
use would do); with ``--programmatic`` also the build that `ir_kernels_cuda.launch` turns on."""

import argparse
import logging
import sys

from .build import BuildUnavailable, build


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ir_kernels_cuda", description=__doc__)
    parser.add_argument("command", choices=["build"])
    parser.add_argument("-v", "--verbose", action="store_true", help="show the compiler output")
    parser.add_argument(
        "--programmatic",
        action="store_true",
        help="also build the kernels launched as programmatic dependent launches",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(message)s")
    try:
        directories = [build()]
        if args.programmatic:
            directories.append(build(programmatic=True))
    except BuildUnavailable as exc:
        print(f"ir-kernels-cuda: cannot build here: {exc}", file=sys.stderr)
        return 1
    for directory in directories:
        print(f"ir-kernels-cuda: kernels ready in {directory}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
