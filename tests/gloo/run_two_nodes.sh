#!/bin/bash
# run_two_nodes.sh: a two-node job on one machine: two dplab-run launchers (--nnodes 2,
# --node-rank 0 and 1) meeting at 127.0.0.1, as two machines meet at node 0's address.
#   run_two_nodes.sh NPROC_PER_NODE EXPECT RANK_PROGRAM ARGS...
# EXPECT: "pass" (both launchers exit 0 and every rank prints PASS), or "rank0-pass" (node 0's
# rank 0 prints PASS; node 1's launcher reports its dead or hung rank and may fail).
# "fail:TEXT": both launchers fail and their output holds TEXT.
# Also: "refuse-no-token" checks that dplab-run refuses --nnodes 2 without DPLAB_JOB_TOKEN.
# Exits 77 (skip) when dplab was built without gloo (GLOO_BUILT=0).
# Each launcher is ended after 60 s (a hang), and stops its ranks with SIGTERM, then SIGKILL
# after a grace period of 20 s (rank 0 of gloo_rank's failure modes holds SIGTERM until it has
# its verdict); both well inside meson's 90 s, so that a hang still prints both nodes' output.
# Read next: gloo_rank.cpp, docs/gloo.md.
set -u
[ "${GLOO_BUILT:-1}" = 1 ] || { echo "built without gloo: skipped"; exit 77; }
RUN=${DPLAB_RUN:?DPLAB_RUN must name dplab-run}
NPROC=$1; EXPECT=$2; shift 2
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

if [ "$EXPECT" = refuse-no-token ]; then
  env -u DPLAB_JOB_TOKEN timeout 20 "$RUN" --nnodes 2 --node-rank 0 --nproc-per-node 1 \
    --master-addr 127.0.0.1 --master-port "$port" /bin/true >"$out/o" 2>&1
  rc=$?
  cat "$out/o"
  [ $rc -ne 0 ] || { echo "FAIL: dplab-run started a 2-node job without DPLAB_JOB_TOKEN"; exit 1; }
  grep -q "DPLAB_JOB_TOKEN" "$out/o" || { echo "FAIL: the refusal does not name DPLAB_JOB_TOKEN"; exit 1; }
  echo "PASS refused without a token"; exit 0
fi

export DPLAB_JOB_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
pids=()
for node in 0 1; do
  timeout 60 "$RUN" --nnodes 2 --node-rank $node --nproc-per-node "$NPROC" --grace-period 20 \
    --master-addr 127.0.0.1 --master-port "$port" "$@" >"$out/node$node" 2>&1 &
  pids+=($!)
done
wait "${pids[0]}"; rc0=$?
# rank0-pass: node 0 has its answer; node 1's launcher (a rank that sleeps or died) is stopped
# rather than waited for (dplab-run stops its ranks on SIGTERM)
[ "$EXPECT" = rank0-pass ] && kill -TERM "${pids[1]}" 2>/dev/null
wait "${pids[1]}"; rc1=$?
for node in 0 1; do echo "---- node $node (exit ${rc0}/${rc1})"; cat "$out/node$node"; done
case $EXPECT in
  pass)
    [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || { echo "FAIL: a launcher failed"; exit 1; }
    n=$(cat "$out/node0" "$out/node1" | grep -c '^PASS')
    [ "$n" -eq $((2 * NPROC)) ] || { echo "FAIL: $n of $((2 * NPROC)) ranks passed"; exit 1; } ;;
  rank0-pass)
    grep -q '^PASS' "$out/node0" || { echo "FAIL: rank 0 did not pass"; exit 1; } ;;
  fail:*)
    [ $rc0 -ne 0 ] && [ $rc1 -ne 0 ] || { echo "FAIL: a launcher succeeded"; exit 1; }
    grep -qF "${EXPECT#fail:}" "$out/node0" "$out/node1" ||
      { echo "FAIL: no '${EXPECT#fail:}' in the output"; exit 1; } ;;
esac
echo "PASS"
