#!/usr/bin/env bash
# On the GPU machine, from the repository root: build the ir_cuda kernels, run their tests,
# a compute-sanitizer memcheck pass over a subset (`sanitizer`, a minute) or the whole suite
# (`memcheck`: cuda_memcheck.sh, the caching allocator off; a few minutes on an H200), and/or the
# kernel benchmark with the triton provider and the anchors beside them.
# Usage: cuda_session.sh OUT [build] [tests] [sanitizer] [memcheck] [profile] [bench [kernel benchmark arguments...]]
# The full grid (12 ops x 18 shapes, Inductor compiling each shape) takes about 4 minutes on an
# H100; split it with --ops and --tag if needed, e.g. `bench --ops rms_norm --tag=-a`.
# `profile`: Nsight Compute counters of every cuda and triton kernel at a decode and a large
# shape (the name filter also catches torch's elementwise kernels that draw the inputs).
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
    memcheck)
      python3 -m ir_kernels_cuda build --programmatic > "$out/cuda-build-programmatic.log" 2>&1
      timeout "${MEMCHECK_TIMEOUT:-540}" bash benchmarks/gpu/cuda_memcheck.sh "$out/memcheck" | tail -4
      echo "memcheck exit ${PIPESTATUS[0]}" ;;
    profile)
      timeout "${PROFILE_TIMEOUT:-240}" ncu --csv --page raw -k 'regex:row_kernel|elementwise_kernel|rotary_kernel|norm_kernel|gated_kernel|quant_kernel' \
        --metrics gpu__time_duration.sum,smsp__inst_executed.sum,dram__bytes.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size,launch__block_size \
        python3 benchmarks/gpu/cuda_profile.py > "$out/cuda-profile.csv" 2> "$out/cuda-profile.err"
      echo "profile exit $?; $(grep -c . "$out/cuda-profile.csv") lines"
      # the machine code of every kernel, to count what a row costs
      cuobjdump -sass "$IR_KERNELS_CUDA_CACHE"/torch-*/*/*.so | gzip > "$out/cuda-sass.txt.gz" ;;
    bench)
      timeout "${BENCH_TIMEOUT:-480}" python3 -m ir_stack.bench.kernels --out "$out" \
        --providers triton,cuda "$@" 2>&1 | tee "$out/cuda-bench.log" | tail -30
      for result in "$out"/kernels-*.json; do
        python3 -m ir_stack.bench.kernel_report "$result" --ours cuda
      done
      shift $# ;;
  esac
done
