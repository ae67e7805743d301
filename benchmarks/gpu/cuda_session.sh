#!/usr/bin/env bash
# On the GPU machine, from the repository root: build the ir_cuda kernels, run their tests,
# a compute-sanitizer memcheck pass over a subset, and/or the kernel benchmark with the triton
# provider and the anchors beside them.
# Usage: cuda_session.sh OUT [build] [tests] [sanitizer] [bench [kernel benchmark arguments...]]
# The full grid (12 ops x 18 shapes, Inductor compiling each shape) may not fit one 10-minute
# call: split it with --ops and --tag, e.g. `bench --ops rms_norm,fused_add_rms_norm --tag -a`.
# The report (`kernel_report --ours cuda`) is written beside each JSON.
set -u
out=$1; shift
source benchmarks/gpu/env.sh
export IR_KERNELS_CUDA_CACHE=${IR_KERNELS_CUDA_CACHE:-/tmp/irc}
while [ $# -gt 0 ]; do
  step=$1; shift
  case $step in
    build)
      /usr/bin/time -f "build wall %e s" python3 -m ir_kernels_cuda build 2>&1 | tee "$out/cuda-build.log" | tail -5 ;;
    tests)
      timeout "${TEST_TIMEOUT:-420}" python3 -m pytest -q -p no:cacheprovider --maxfail=30 \
        packages/ir-kernels-cuda/tests/test_kernels.py 2>&1 | tee "$out/cuda-tests.log" | tail -15 ;;
    sanitizer)
      # memcheck multiplies the cost of every launch: odd widths (scalar heads and tails, the
      # scalar path), rows wider than a tile (streamed), every op, dtype and layout
      timeout "${SANITIZER_TIMEOUT:-300}" compute-sanitizer --tool memcheck --error-exitcode 3 \
        python3 -m pytest -q -p no:cacheprovider packages/ir-kernels-cuda/tests/test_kernels.py \
        -k "(test_matches_native and (769 or 65536) and not 4096) or test_variants or wider" \
        2>&1 | tee "$out/cuda-sanitizer.log" | tail -15
      echo "sanitizer exit ${PIPESTATUS[0]}" | tee -a "$out/cuda-sanitizer.log" ;;
    bench)
      timeout "${BENCH_TIMEOUT:-480}" python3 -m ir_stack.bench.kernels --out "$out" \
        --providers triton,cuda "$@" 2>&1 | tee "$out/cuda-bench.log" | tail -30
      for result in "$out"/kernels-*.json; do
        python3 -m ir_stack.bench.kernel_report "$result" --ours cuda
      done
      shift $# ;;
  esac
done
