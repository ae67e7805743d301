"""The end-to-end benchmark; it lives in `ir_stack.bench.e2e` (also run by ``ir-stack bench``).

python benchmarks/e2e/bench_e2e.py --model 1b --out benchmarks/results
"""

from ir_stack.bench.e2e import main

if __name__ == "__main__":
    raise SystemExit(main())
