#!/usr/bin/env bash
# mpi_test.sh: mpirun across two namespace "machines" with no ssh (netns_mpirun.sh: mpirun on
# node 0 starts node 1's daemon through netns_agent.sh, which enters node 1's namespace). The
# program is tests/ddp's DDP test on
# the mpi engine at 2 nodes x 2 ranks; it compares every rank's parameters with one process
# trained on the whole batch. Asserts: it passes, ranks 0-1 ran in node 0's namespace and
# 2-3 in node 1's, OpenMPI saw 2 ranks per node, and node 1's link carried > 16 KiB.
#   mpi_test.sh NETNS_CLUSTER_SH NETNS_MPIRUN_SH MPIRUN TEST_DDP_MPI
# Read next: netns_mpirun.sh, tests/ddp/test_ddp_mpi.cpp.
set -u
S=$1 NETNS_MPIRUN=$2 PROG=$4
export MPIRUN=$3
P=mpi$$
fail() { echo "FAIL: $*" >&2; exit 1; }
trap '"$S" --name $P down 2>/dev/null' EXIT
"$S" --name $P up 2
rc=$?
if [[ $rc -ge 3 && $rc -le 5 ]]; then echo "SKIP: the namespace bed cannot be built here (exit $rc)"; exit 77; fi
[[ $rc -eq 0 ]] || fail "up 2 exited $rc"
link_bytes() {
  "$S" --name $P exec 1 cat /sys/class/net/eth0/statistics/rx_bytes /sys/class/net/eth0/statistics/tx_bytes |
    awk '{ s += $1 } END { print s }'
}
before=$(link_bytes)
out=$(mktemp)
# each rank says where it runs, then becomes the test (150 s: a hang guard, well inside
# meson's timeout, so the output below is still printed)
timeout 150 bash "$NETNS_MPIRUN" "$S" $P 2 -- bash -c 'echo "rank $OMPI_COMM_WORLD_RANK runs in $(ip netns identify) with $OMPI_COMM_WORLD_LOCAL_SIZE local ranks"; exec "$0" "$@"' "$PROG" \
  >"$out" 2>&1
rc=$?
after=$(link_bytes)
cat "$out"
[[ $rc -eq 0 ]] || fail "mpirun across the nodes exited $rc"
grep -q "Status: SUCCESS" "$out" || fail "no doctest success line"
# OpenMPI sees two nodes of two ranks (so only the pairs on one node use shared memory)
for r in 0 1; do grep -qx "rank $r runs in $P-n0 with 2 local ranks" "$out" || fail "rank $r not on node 0"; done
for r in 2 3; do grep -qx "rank $r runs in $P-n1 with 2 local ranks" "$out" || fail "rank $r not on node 1"; done
moved=$((after - before))
echo "node 1's link carried $moved bytes"
# mpirun's control channel, the store and MPI's own traffic: ~75 kB on this test; a
# link nothing crossed carries ~2 kB in its first seconds (IPv6 neighbour discovery)
((moved > 16384)) || fail "node 1's link carried only $moved bytes: the job did not cross it"
echo "DDP on mpi at 2 nodes x 2 ranks through the launch agent: ok"
