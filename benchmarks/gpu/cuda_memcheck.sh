#!/usr/bin/env bash
# Usage: cuda_memcheck.sh LOGDIR
# The whole ir-kernels-cuda test suite under compute-sanitizer memcheck (run after
# `source benchmarks/gpu/env.sh`, from the repository root, with both builds made:
# `python3 -m ir_kernels_cuda build --programmatic`).
# - torch's caching allocator is off (PYTORCH_NO_CUDA_MEMORY_CACHING=1): each tensor is its own
#   cudaMalloc, so memcheck knows its bounds. With the cache on, an access past a tensor lands in
#   the cached segment around it and goes unreported.
# - Many pytest processes (IR_TEST_SHARD), a few at a time: the sanitizer's device memory grows
#   with every test and returns only when its process exits, so one process for the whole suite
#   runs out part way. The widest rows (4096 x 16384 and up) run in 10 shards three at a time,
#   the rest in 24 shards six at a time: the largest shards that fit in the GPU's memory.
#   LOGDIR/memory.txt samples the GPU's used memory every 5 s.
# - The CUDA-graph tests run apart, with the cache on: a stream capture cannot cudaMalloc.
# Writes LOGDIR/{rest,wide}-i.log, LOGDIR/graph.log and LOGDIR/summary.txt; exits 1 if any run
# reported a memcheck error or a failed test.
set -u
logdir=$1
wide="(16384-4096 or 65536-4096)"
tests=packages/ir-kernels-cuda/tests/test_kernels.py
mkdir -p "$logdir"

memcheck() {
  compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m pytest -q -p no:cacheprovider "$@"
}

# shard NAME I N SELECTION: the I-th of N shards of the tests SELECTION picks, to LOGDIR/NAME-I.log
shard() {
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 IR_TEST_SHARD="$2/$3" memcheck "$TESTS" -k "$4" \
    > "$LOGDIR/$1-$2.log" 2>&1
  echo "exit $?" >> "$LOGDIR/$1-$2.log"
}
export -f memcheck shard
export LOGDIR=$logdir TESTS=$tests

start=$(date +%s)
(while true; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; sleep 5; done) \
  > "$logdir/memory.txt" 2>/dev/null &
sampler=$!
seq 0 23 | xargs -P 6 -I{} bash -c "shard rest {} 24 'not graph and not $wide'"
seq 0 9 | xargs -P 3 -I{} bash -c "shard wide {} 10 'not graph and $wide'"
memcheck "$tests" -k "graph" > "$logdir/graph.log" 2>&1
echo "exit $?" >> "$logdir/graph.log"
kill "$sampler"

status=0
for log in "$logdir"/rest-*.log "$logdir"/wide-*.log "$logdir"/graph.log; do
  result=$(grep -E "[0-9]+ (passed|failed|skipped|deselected)" "$log" | tail -n 1)
  errors=$(grep -E "ERROR SUMMARY" "$log" | head -n 1)
  echo "$(basename "$log"): $result | $errors | $(tail -n 1 "$log")"
  grep -E "^FAILED" "$log"
  [ "$(tail -n 1 "$log")" = "exit 0" ] || status=1
done > "$logdir/summary.txt"
for word in passed skipped failed; do
  total=$(grep -ohE "[0-9]+ $word" "$logdir"/{rest,wide}-*.log "$logdir"/graph.log | awk '{n += $1} END {print n + 0}')
  echo "$word $total"
done | paste -sd ' ' >> "$logdir/summary.txt"
echo "memcheck over 34 shards and the graph tests: $(($(date +%s) - start)) s," \
  "peak GPU memory $(sort -n "$logdir/memory.txt" | tail -n 1) MiB" >> "$logdir/summary.txt"
cat "$logdir/summary.txt"
exit $status
