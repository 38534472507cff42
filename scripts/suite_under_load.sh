#!/usr/bin/env bash
# suite_under_load.sh: the whole test suite beside CPU-bound busy loops, as a course's shared
# lab machine or grading server runs it. A test that fails here judged the machine's speed,
# not the code (docs/measurements/setup_and_suite.md, "The suite on a busy machine", has the
# runs and what each test measures instead of wall-clock time).
#   bash scripts/suite_under_load.sh [--hogs N] [--nice K] [--runs R] [-- MESON_TEST_ARGS...]
# Starts N loops (`while :; do :; done`, default 2) at nice K (default 0), runs
# `meson test -C build --no-rebuild --num-processes $(nproc)` R times (default 3) without a
# timeout multiplier and without retries, stops the loops (also on Ctrl-C), and prints one
# line per run: its result, the closing count and its wall time. Build first
# (`bash scripts/setup.sh test`). Exit 0 only when every run passed.
set -uo pipefail
cd "$(dirname "$0")/.."
hogs=2 nice_level=0 runs=3
while [ $# -gt 0 ]; do
  case "$1" in
    --hogs) hogs=$2; shift 2 ;;
    --nice) nice_level=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: bash scripts/suite_under_load.sh [--hogs N] [--nice K] [--runs R] [-- MESON_TEST_ARGS...]" >&2
       exit 2 ;;
  esac
done
for v in "$hogs" "$runs"; do
  [[ $v =~ ^[0-9]+$ ]] || { echo "suite_under_load: --hogs and --runs take a count, got '$v'" >&2; exit 2; }
done
[[ $nice_level =~ ^-?[0-9]+$ ]] || { echo "suite_under_load: --nice takes -20..19, got '$nice_level'" >&2; exit 2; }
[ -f build/build.ninja ] || { echo "suite_under_load: no build/: run bash scripts/setup.sh test first" >&2; exit 2; }

pids=()
stop_hogs() { [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null; pids=(); }
trap 'stop_hogs; exit 130' INT TERM
trap stop_hogs EXIT
for _ in $(seq "$hogs"); do
  nice -n "$nice_level" sh -c 'while :; do :; done' &
  pids+=($!)
done
echo "== $hogs busy loop(s) at nice $nice_level on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"

failed=0
mkdir -p build/meson-logs/under_load
for run in $(seq "$runs"); do
  start=$(date +%s)
  meson test -C build --no-rebuild --num-processes "$(nproc)" --print-errorlogs "$@" \
    >"build/meson-logs/under_load/run$run.txt" 2>&1
  rc=$?
  wall=$(( $(date +%s) - start ))
  cp build/meson-logs/testlog.json "build/meson-logs/under_load/run$run.json"
  summary=$(grep -E "^(Ok|Fail|Timeout|Skipped):" "build/meson-logs/under_load/run$run.txt" | tr -s ' ' | paste -sd' ')
  echo "run $run: exit $rc, $summary, ${wall} s, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  if [ $rc -ne 0 ]; then
    failed=1
    grep -E "^ *[0-9]+/[0-9]+ .* (FAIL|TIMEOUT)" "build/meson-logs/under_load/run$run.txt" | sed 's/^/    /'
  fi
done
echo "== logs: build/meson-logs/under_load/"
exit $failed
