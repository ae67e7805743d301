#!/usr/bin/env bash
# Usage: sharded_pytest.sh N LOGDIR pytest-args...  Runs N pytest processes (IR_TEST_SHARD),
# each writing LOGDIR/shard-i.log and a JUnit file; exits non-zero if any shard failed.
set -u
n=$1; logdir=$2; shift 2
mkdir -p "$logdir"
pids=()
for i in $(seq 0 $((n - 1))); do
  IR_TEST_SHARD="$i/$n" python3 -m pytest "$@" -q -p no:cacheprovider \
    --junitxml="$logdir/junit-$i.xml" > "$logdir/shard-$i.log" 2>&1 &
  pids+=($!)
done
status=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || status=1
  tail -n 3 "$logdir/shard-$i.log"
done
exit $status
