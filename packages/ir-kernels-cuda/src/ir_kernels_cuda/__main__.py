"""``python -m ir_kernels_cuda build``: compile the kernels now (what the first use would do)."""

import argparse
import logging
import sys

from .build import BuildUnavailable, build


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ir_kernels_cuda", description=__doc__)
    parser.add_argument("command", choices=["build"])
    parser.add_argument("-v", "--verbose", action="store_true", help="show the compiler output")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(message)s")
    try:
        directory = build()
    except BuildUnavailable as exc:
        print(f"ir-kernels-cuda: cannot build here: {exc}", file=sys.stderr)
        return 1
    print(f"ir-kernels-cuda: kernels ready in {directory}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
