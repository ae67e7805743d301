#!/usr/bin/env bash
# Usage: whole_suite.sh first|second OUT  (on the GPU machine, from the repository root)
# The whole GPU test suite in two device calls, each inside the 600 s a command may run:
#   first   build the ir_cuda kernels (its own time, logged to OUT/cuda-build.log), then the
#           ir-spec, ir-dispatch and ir-kernels-cuda tests (the build runs apart: inside the
#           tests' time limit the two do not fit together)
#   second  the ir-kernels-triton tests beside the ir-passes, ir-piecewise, ir-stack and
#           integration tests, two 8-process sessions at once, with nvidia-smi sampling
#           memory every 2 s
# Each session's log and failures land under OUT/<session>/ (see gpu_suite.sh). Exits non-zero
# when the build or a session did.
set -u
part=${1:-}; out=${2:-}
if [[ $part != first && $part != second ]] || [ -z "$out" ]; then
  echo "usage: whole_suite.sh first|second OUT (PART was '$part')" >&2
  exit 2
fi
mkdir -p "$out"
source benchmarks/gpu/env.sh
export IR_KERNELS_CUDA_CACHE=${IR_KERNELS_CUDA_CACHE:-/tmp/irc}
seconds=${SUITE_SECONDS:-540}
suite=benchmarks/gpu/gpu_suite.sh
case $part in
  first)
    /usr/bin/time -f "build wall %e s" python3 -m ir_kernels_cuda build > "$out/cuda-build.log" 2>&1
    build_status=$?
    tail -n 2 "$out/cuda-build.log"
    # a failed build would leave the cuda tests testing the unsupported path: stop here instead
    if [ $build_status -ne 0 ]; then
      echo "whole_suite.sh: the cuda build failed (exit $build_status), see $out/cuda-build.log" >&2
      exit $build_status
    fi
    bash $suite "$out/first" "$seconds" packages/ir-spec/tests packages/ir-dispatch/tests \
      packages/ir-kernels-cuda/tests ;;
  second)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -l 2 > "$out/gpu-memory.txt" &
    sampler=$!
    bash $suite "$out/triton" "$seconds" packages/ir-kernels-triton/tests > "$out/triton.txt" &
    triton=$!
    bash $suite "$out/rest" "$seconds" packages/ir-passes/tests packages/ir-piecewise/tests \
      packages/ir-stack/tests tests-integration > "$out/rest.txt"
    rest_status=$?
    wait $triton; triton_status=$?
    kill $sampler 2>/dev/null
    cat "$out/triton.txt" "$out/rest.txt"
    echo "GPU memory in use peaked at $(sort -n "$out/gpu-memory.txt" | tail -n 1) MiB"
    [ $rest_status -eq 0 ] && [ $triton_status -eq 0 ] ;;
esac
