#!/usr/bin/env bash
# launch_test.sh: dplab-run across two namespace "machines", with store_probe as the program
# (it meets the others through the store and needs no collective), 2 nodes x 2 ranks.
#   launch_test.sh NETNS_CLUSTER_SH DPLAB_RUN STORE_PROBE NETTOOL_PY CASE
# CASE rank_killed: rank 2 (node 1) gets SIGKILL; node 1's launcher names it, and node 0's
#   launcher stops its ranks and exits 1 naming node 1 and rank 2 within 5 s.
# CASE launcher_killed: node 1's dplab-run gets SIGKILL; its ranks end within 3 s (the
#   parent-death signal), and node 0's launcher exits 1 naming node 1 within its
#   --node-timeout (3 s) plus 5 s.
# CASE stranger: a third namespace, not in the job, connects to the store without the job's
#   token: the store closes it and logs the refusal with its address, the job keeps going and
#   every launcher exits 0.
# Read next: store_probe.cpp, run_job.sh.
set -u
S=$1 RUN=$2 PROBE=$3 T=$4 CASE=$5
P=ln$$
DIR=$(mktemp -d)
fail() {
  echo "FAIL: $*" >&2
  for f in "$DIR"/node*.log; do echo "---- $f"; cat "$f"; done >&2
  exit 1
}
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
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
seconds=30
[[ $CASE == stranger ]] && seconds=4
for i in 0 1; do
  # ip netns exec and env exec: $! is dplab-run itself
  "$S" --name $P exec $i env DPLAB_JOB_TOKEN="$token" "$RUN" --nnodes 2 --node-rank $i \
    --nproc-per-node 2 --master-addr "$A0" --master-port 29500 --node-timeout 3 \
    --grace-period 2 "$PROBE" $seconds "$DIR" >"$DIR/node$i.log" 2>&1 &
  pids+=($!)
done
# until (bounded) every rank met the others and wrote its pid
for _ in $(seq 400); do
  [[ -s $DIR/rank0.pid && -s $DIR/rank1.pid && -s $DIR/rank2.pid && -s $DIR/rank3.pid ]] && break
  sleep 0.05
done
[[ -s $DIR/rank3.pid && -s $DIR/rank2.pid && -s $DIR/rank0.pid ]] || fail "the ranks did not all start within 20 s"
sleep 0.3  # the launchers' watch connects on its next tick (250 ms)

# ends_within PID SECONDS: waits for the launcher to exit; prints its status, or fails
ends_within() {
  local deadline=$((SECONDS + $2))
  while kill -0 "$1" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.05; done
  kill -0 "$1" 2>/dev/null && fail "launcher $1 still running after $2 s"
  wait "$1"
}
ranks_gone() {
  for r in "$@"; do kill -0 "$(cat "$DIR/rank$r.pid")" 2>/dev/null && return 1; done
  return 0
}

case $CASE in
  rank_killed)
    victim=$(cat "$DIR/rank2.pid")
    t0=$(date +%s.%N)
    kill -KILL "$victim"
    ends_within "${pids[0]}" 5
    rc0=$?
    t1=$(date +%s.%N)
    ends_within "${pids[1]}" 5
    rc1=$?
    cat "$DIR/node0.log" "$DIR/node1.log"
    [[ $rc0 -eq 1 && $rc1 -eq 1 ]] || fail "launchers exited $rc0 $rc1, expected 1 1"
    grep -q "dplab-run: node 1: rank 2 (pid $victim) was killed by signal 9" "$DIR/node0.log" ||
      fail "node 0's launcher did not name node 1's rank 2 (pid $victim)"
    grep -q "dplab-run: node 1: rank 2 (pid $victim) was killed by signal 9" "$DIR/node1.log" ||
      fail "node 1's launcher did not name rank 2"
    ranks_gone 0 1 2 3 || fail "a rank outlived its launcher"
    echo "node 0's launcher named rank 2 of node 1 after $(echo "$t1 - $t0" | bc -l | cut -c1-5) s"
    ;;
  launcher_killed)
    t0=$(date +%s.%N)
    kill -KILL "${pids[1]}"
    for _ in $(seq 60); do ranks_gone 2 3 && break; sleep 0.05; done
    ranks_gone 2 3 || fail "node 1's ranks outlived their launcher by 3 s"
    ends_within "${pids[0]}" 8
    rc0=$?
    t1=$(date +%s.%N)
    cat "$DIR/node0.log"
    [[ $rc0 -eq 1 ]] || fail "node 0's launcher exited $rc0, expected 1"
    grep -q "dplab-run: node 1: its dplab-run stopped" "$DIR/node0.log" ||
      fail "node 0's launcher did not name node 1"
    ranks_gone 0 1 || fail "node 0's ranks outlived their launcher"
    echo "node 0's launcher named node 1 after $(echo "$t1 - $t0" | bc -l | cut -c1-5) s"
    ;;
  stranger)
    out=$("$S" --name $P exec 2 timeout 20 python3 "$T" stranger "$A0" 29500) ||
      fail "the stranger's probe failed"
    echo "$out"
    kill -0 "${pids[0]}" && kill -0 "${pids[1]}" || fail "the job did not keep running"
    ends_within "${pids[0]}" 15
    rc0=$?
    ends_within "${pids[1]}" 15
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
