#!/usr/bin/env bash
# launch_test.sh: dplab-run across two namespace "machines", with store_probe as the program
# (it meets the others through the store and needs no collective), 2 nodes x 2 ranks.
#   launch_test.sh NETNS_CLUSTER_SH DPLAB_RUN STORE_PROBE NETTOOL_PY CASE
# CASE rank_killed: rank 2 (node 1) gets SIGKILL; node 1's launcher names it, and node 0's
#   launcher stops its ranks and exits 1 naming node 1, rank 2 and its pid (from the failure
#   node 1 filed, not from node 1's silence, which would read "its dplab-run stopped").
# CASE launcher_killed: node 1's dplab-run gets SIGKILL; its ranks end with it (the
#   parent-death signal), and node 0's launcher exits 1 naming node 1 after a silence of at
#   least its --node-timeout (3 s here), and less than the default's 15 s (it took the option).
# CASE stranger: a third namespace, not in the job, connects to the store without the job's
#   token: the store closes it and logs the refusal with its address, the job keeps going and
#   every launcher exits 0.
# Every wait is for an event: the ranks write their pids once every launcher watches the
# others (store_probe.cpp), the probes run until this script says stop, and the waits for
# a launcher or rank to end are hang guards of GUARD seconds, never a verdict.
# Read next: store_probe.cpp, run_job.sh.
set -u
S=$1 RUN=$2 PROBE=$3 T=$4 CASE=$5
P=ln$$
DIR=$(mktemp -d)
# --node-timeout: only launcher_killed tests it (and waits it out); the other cases keep
# dplab-run's default, so a launcher a busy machine starves of a few heartbeats is no failure
DEFAULT_NODE_TIMEOUT=15
NODE_TIMEOUT=$DEFAULT_NODE_TIMEOUT
[[ $CASE == launcher_killed ]] && NODE_TIMEOUT=3
GUARD=30        # seconds an awaited event may take before the test calls it a hang
fail() {
  echo "FAIL: $*" >&2
  for f in "$DIR"/node*.log; do echo "---- $f"; cat "$f"; done >&2
  exit 1
}
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for f in "$DIR"/rank*.pid; do [[ -s $f ]] && kill -KILL "$(cat "$f")" 2>/dev/null; done
  "$S" --name $P down 2>/dev/null
  rm -rf "$DIR"
}
trap cleanup EXIT
nodes=2
[[ $CASE == stranger ]] && nodes=3
"$S" --name $P up $nodes
rc=$?
if [[ $rc -ge 3 && $rc -le 5 ]]; then echo "SKIP: the namespace bed cannot be built here (exit $rc)"; exit 77; fi
[[ $rc -eq 0 ]] || fail "up exited $rc"
A0=$("$S" --name $P addr 0)
token=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
for i in 0 1; do
  # ip netns exec execs: $! is dplab-run itself. The token goes in the environment, never on
  # a command line (`ps` shows those to everyone). The probes run until $DIR/stop (120 s at
  # most: a guard for a test that dies before saying stop).
  DPLAB_JOB_TOKEN="$token" "$S" --name $P exec $i "$RUN" --nnodes 2 --node-rank $i \
    --nproc-per-node 2 --master-addr "$A0" --master-port 29500 --node-timeout $NODE_TIMEOUT \
    --grace-period 2 "$PROBE" 120 "$DIR" >"$DIR/node$i.log" 2>&1 &
  pids+=($!)
done
# waits (2 GUARD at most) until every rank met the others, saw both launchers watching, and
# wrote its pid
all_started() { [[ -s $DIR/rank0.pid && -s $DIR/rank1.pid && -s $DIR/rank2.pid && -s $DIR/rank3.pid ]]; }
deadline=$((SECONDS + 2 * GUARD))
until all_started || ((SECONDS > deadline)); do sleep 0.05; done
all_started || fail "the ranks did not all start and see both launchers watching within $((2 * GUARD)) s"

# ends_within PID SECONDS: waits for the process to exit (a hang guard); returns its status
ends_within() {
  local deadline=$((SECONDS + $2))
  while kill -0 "$1" 2>/dev/null && ((SECONDS <= deadline)); do sleep 0.05; done
  kill -0 "$1" 2>/dev/null && fail "process $1 still running after $2 s"
  wait "$1"
}
ranks_gone() {
  for r in "$@"; do kill -0 "$(cat "$DIR/rank$r.pid")" 2>/dev/null && return 1; done
  return 0
}
since() { echo "$(date +%s.%N) - $1" | bc -l | cut -c1-5; }

case $CASE in
  rank_killed)
    victim=$(cat "$DIR/rank2.pid")
    t0=$(date +%s.%N)
    kill -KILL "$victim"
    ends_within "${pids[0]}" $GUARD
    rc0=$?
    took=$(since "$t0")
    ends_within "${pids[1]}" $GUARD
    rc1=$?
    cat "$DIR/node0.log" "$DIR/node1.log"
    [[ $rc0 -eq 1 && $rc1 -eq 1 ]] || fail "launchers exited $rc0 $rc1, expected 1 1"
    grep -q "dplab-run: node 1: rank 2 (pid $victim) was killed by signal 9" "$DIR/node0.log" ||
      fail "node 0's launcher did not name node 1's rank 2 (pid $victim)"
    grep -q "dplab-run: node 1: rank 2 (pid $victim) was killed by signal 9" "$DIR/node1.log" ||
      fail "node 1's launcher did not name rank 2"
    ranks_gone 0 1 2 3 || fail "a rank outlived its launcher"
    echo "node 0's launcher named rank 2 of node 1 after $took s"
    ;;
  launcher_killed)
    t0=$(date +%s.%N)
    kill -KILL "${pids[1]}"
    deadline=$((SECONDS + GUARD))
    until ranks_gone 2 3 || ((SECONDS > deadline)); do sleep 0.05; done
    ranks_gone 2 3 || fail "node 1's ranks outlived their launcher by $GUARD s"
    ends_within "${pids[0]}" $((NODE_TIMEOUT + GUARD))
    rc0=$?
    took=$(since "$t0")
    cat "$DIR/node0.log"
    [[ $rc0 -eq 1 ]] || fail "node 0's launcher exited $rc0, expected 1"
    grep -q "dplab-run: node 1: its dplab-run stopped" "$DIR/node0.log" ||
      fail "node 0's launcher did not name node 1"
    ranks_gone 0 1 || fail "node 0's ranks outlived their launcher"
    # the silence the launcher measured itself: never shorter than --node-timeout (a node is
    # not declared dead early), and short of the default's 15 s (the option was taken)
    silence=$(sed -n 's/.*its dplab-run stopped (no heartbeat for \([0-9.]*\) s.*/\1/p' "$DIR/node0.log" | head -1)
    awk -v s="${silence:-0}" -v t=$NODE_TIMEOUT -v d=$DEFAULT_NODE_TIMEOUT 'BEGIN { exit !(s >= t && s < d) }' ||
      fail "node 0's launcher reported ${silence:-no} s of silence, expected at least --node-timeout $NODE_TIMEOUT s and less than the default's $DEFAULT_NODE_TIMEOUT"
    echo "node 0's launcher named node 1 after $took s (a silence of $silence s; --node-timeout $NODE_TIMEOUT)"
    ;;
  stranger)
    out=$("$S" --name $P exec 2 timeout $GUARD python3 "$T" stranger "$A0" 29500) ||
      fail "the stranger's probe failed"
    echo "$out"
    kill -0 "${pids[0]}" && kill -0 "${pids[1]}" || fail "the job did not keep running"
    touch "$DIR/stop"  # the probes finish: a last round trip each, through the same store
    ends_within "${pids[0]}" $GUARD
    rc0=$?
    ends_within "${pids[1]}" $GUARD
    rc1=$?
    cat "$DIR/node0.log" "$DIR/node1.log"
    [[ $rc0 -eq 0 && $rc1 -eq 0 ]] || fail "launchers exited $rc0 $rc1, expected 0 0"
    grep -q "refused a connection from 198.18.0.3:[0-9]*: it did not prove the job token" \
      "$DIR/node0.log" || fail "rank 0's store did not log the stranger's refusal"
    for r in 0 1 2 3; do
      grep -qE "rank $r made [1-9][0-9]* store round trips" "$DIR"/node*.log ||
        fail "rank $r did not finish its store round trips"
    done
    ;;
  *) echo "launch_test.sh: unknown case '$CASE'" >&2; exit 2 ;;
esac
echo "$CASE: ok"
