#!/usr/bin/env bash
# On the GPU machine, from the repository root: the GPU tests of ir-stack and ir-piecewise,
# then the end-to-end benchmark. Usage: stack_session.sh OUT [e2e arguments...]
set -u
out=$1; shift
source benchmarks/gpu/env.sh
python3 -c "import transformers; print('transformers', transformers.__version__)" 2>&1 | tail -1
timeout "${TEST_TIMEOUT:-300}" python3 -m pytest -q -p no:cacheprovider -s tests-integration/test_gpu_models.py \
  packages/ir-piecewise/tests/test_cudagraphs_gpu.py 2>&1 | tee "$out/stack-gpu-tests.log" | tail -25
timeout "${E2E_TIMEOUT:-420}" python3 -m ir_stack.bench.e2e --out "$out" "$@" 2>&1 | tee "$out/e2e.log" | tail -40
