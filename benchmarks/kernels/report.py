"""The kernel report; it lives in `ir_stack.bench.kernel_report`."""

from ir_stack.bench.kernel_report import main

if __name__ == "__main__":
    raise SystemExit(main())
