"""The kernel benchmark; it lives in `ir_stack.bench.kernels` (also run by ``ir-stack bench``)."""

from ir_stack.bench.kernels import main

if __name__ == "__main__":
    raise SystemExit(main())
