#!/usr/bin/env bash
# Usage: gpu_suite.sh LOGDIR SECONDS PATH...  (on the GPU machine, from the repository root,
# after `source benchmarks/gpu/env.sh`)
# The GPU tests of PATH... in one pytest session over 8 processes, stopped after SECONDS with
# SIGINT, so that pytest still prints its summary. `-v` makes xdist log each test's id as it
# ends, so a run cut short still names its failures: LOGDIR/failed.txt lists each failed or
# errored test once, LOGDIR/pytest.log is the whole output. The packaging tests are left out
# (they compare installed metadata, which a source tree has none of). Exits with pytest's
# status, or 124 where the time ran out.
set -u
logdir=$1; seconds=$2; shift 2
mkdir -p "$logdir"
ignore=()
for path in "$@"; do
  [ -f "$path/test_packaging.py" ] && ignore+=("--ignore=$path/test_packaging.py")
done
start=$(date +%s)
timeout -s INT -k 30 "$seconds" python3 -m pytest "$@" "${ignore[@]}" -n 8 -v -rfE \
  -p no:cacheprovider > "$logdir/pytest.log" 2>&1
status=$?
grep -oE "(FAILED|ERROR) [^ ]+::[^ ]+" "$logdir/pytest.log" | sort -u > "$logdir/failed.txt"
echo "pytest exit $status after $(( $(date +%s) - start )) s; $(wc -l < "$logdir/failed.txt") failed or errored"
grep -E "^(=+ .*(passed|failed).*|[0-9]+ (passed|failed).*)$" "$logdir/pytest.log" | tail -n 1
head -n 40 "$logdir/failed.txt"
exit $status
