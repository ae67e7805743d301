#!/usr/bin/env bash
# The CUDA kernels' emulated build (ir_kernels_cuda.build.build_emulated) instrumented with
# AddressSanitizer, under its full CPU test suite: an out-of-bounds read or write by any kernel
# stops the run with a report. Needs gcc's libasan and the CUDA toolkit's headers; no GPU.
# Usage: benchmarks/cpu/asan_emulated.sh [pytest arguments...]
set -euo pipefail
cd "$(dirname "$0")/../.."
report=${ASAN_REPORT:-/tmp/ir-cuda-asan}
rm -f "$report".*
export IR_CUDA_EMULATION_ASAN=1
export ASAN_OPTIONS="detect_leaks=0:alloc_dealloc_mismatch=0:log_path=$report"
status=0
# the argument-check test throws C++ exceptions, which a preloaded ASan runtime cannot
# intercept (its __cxa_throw hook is unresolved): that test runs in the plain suite
LD_PRELOAD="$(gcc -print-file-name=libasan.so)" \
  python -m pytest packages/ir-kernels-cuda/tests/test_emulated.py -q -p no:cacheprovider \
  -k "not check_their_arguments" "$@" || status=$?
# the emulation's fibers switch stacks with swapcontext, for which ASan logs a warning once
# (their switches are annotated for it): only its error reports fail the run
if grep -l "ERROR: AddressSanitizer" "$report".* >/dev/null 2>&1; then
  echo "AddressSanitizer reports:"; head -n 40 $(grep -l "ERROR: AddressSanitizer" "$report".*)
  exit 1
fi
echo "no AddressSanitizer error report (pytest exit $status)"
exit $status
