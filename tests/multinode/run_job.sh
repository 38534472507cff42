#!/usr/bin/env bash
# run_job.sh: one dplab job across K namespace "machines", torchrun-style: dplab-run on every
# node with --nnodes K --node-rank i --nproc-per-node N --master-addr <node 0's address>, and
# the same DPLAB_JOB_TOKEN; waits for every launcher (bounded), prints each node's output,
# and exits 0 only if every launcher exited 0 and, with --min-link-bytes, every node's link
# carried at least that many bytes (the job did cross the links, not /dev/shm).
#   run_job.sh [--rate R [--burst BYTES]] [--min-link-bytes B] [--skip-if REGEX] \
#              [--timeout SECONDS] NETNS_CLUSTER_SH DPLAB_RUN K N -- PROGRAM ARGS...
# --timeout: how long each launcher may run (default 150 s), a hang guard that ends a stuck
# job while meson's timeout (longer) still lets this script print every node's output.
# The launchers watch each other with dplab-run's default --node-timeout (15 s): the
# gradients that saturate the shaped links also carry the heartbeats (node_watch.h).
# --skip-if: a launcher that failed with output matching REGEX (an engine that refuses to
# span nodes, or that this build lacks) makes the run exit 77 (SKIP) with that line; a run
# that succeeds is checked in full whatever REGEX says, so a skip never hides a pass.
# Read next: launch_test.sh, ddp_nodes.cpp.
set -u
RATE=() MIN_BYTES=0 SKIP_RE="" LIMIT=150
while [[ ${1:-} == --* ]]; do
  case $1 in
    --rate) RATE+=(--rate "$2"); shift 2 ;;
    --burst) RATE+=(--burst "$2"); shift 2 ;;  # tbf's bucket (netns_cluster.sh)
    --min-link-bytes) MIN_BYTES=$2; shift 2 ;;
    --skip-if) SKIP_RE=$2; shift 2 ;;
    --timeout) LIMIT=$2; shift 2 ;;
    *) echo "run_job.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
S=$1 RUN=$2 K=$3 N=$4
shift 4
[[ ${1:-} == -- ]] && shift
[[ $# -ge 1 ]] || { echo "run_job.sh: expected -- PROGRAM ARGS..." >&2; exit 2; }
P=job$$
LOGS=$(mktemp -d)
fail() { echo "FAIL: $*" >&2; exit 1; }
trap '"$S" --name $P down 2>/dev/null; rm -rf "$LOGS"' EXIT
"$S" --name $P up "$K" "${RATE[@]}"
rc=$?
if [[ $rc -ge 3 && $rc -le 5 ]]; then echo "SKIP: the namespace bed cannot be built here (exit $rc)"; exit 77; fi
[[ $rc -eq 0 ]] || fail "up $K exited $rc"
A0=$("$S" --name $P addr 0)
link_bytes() {  # rx + tx of node $1's link
  "$S" --name $P exec "$1" cat /sys/class/net/eth0/statistics/rx_bytes \
    /sys/class/net/eth0/statistics/tx_bytes | awk '{ s += $1 } END { printf "%.0f\n", s }'
}
token=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
pids=()
for ((i = 0; i < K; i++)); do
  # the token in the environment, never on a command line (`ps` shows those to everyone)
  DPLAB_JOB_TOKEN="$token" DPLAB_TIMEOUT=${DPLAB_TIMEOUT:-30} "$S" --name $P exec $i \
    timeout "$LIMIT" "$RUN" --nnodes "$K" --node-rank $i --nproc-per-node "$N" --master-addr "$A0" \
    --master-port 29500 --tee "$@" >"$LOGS/node$i.log" 2>&1 &
  pids+=($!)
done
rcs=()
for ((i = 0; i < K; i++)); do wait "${pids[$i]}"; rcs+=($?); done
for ((i = 0; i < K; i++)); do
  echo "---- node $i ($("$S" --name $P addr $i)): dplab-run exited ${rcs[$i]}"
  cat "$LOGS/node$i.log"
done
bad=0
for rc in "${rcs[@]}"; do [[ $rc -eq 0 ]] || bad=1; done
if ((bad)); then
  line=""
  [[ -n $SKIP_RE ]] && line=$(grep -hE "$SKIP_RE" "$LOGS"/node*.log | head -1)
  if [[ -n $line ]]; then
    echo "SKIP: the job was refused: $line"
    exit 77
  fi
  fail "a launcher failed: exit codes ${rcs[*]}"
fi
for ((i = 0; i < K; i++)); do
  b=$(link_bytes $i)
  echo "node $i's link carried $b bytes"
  ((b >= MIN_BYTES)) || fail "node $i's link carried $b bytes, fewer than $MIN_BYTES: the job did not cross it"
done
echo "job of $K nodes x $N ranks: ok"
