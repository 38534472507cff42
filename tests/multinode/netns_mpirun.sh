#!/usr/bin/env bash
# netns_mpirun.sh: mpirun across a namespace bed, with no ssh. mpirun runs on node 0 and
# starts the other nodes' daemons through netns_agent.sh (plm_rsh_agent), which enters each
# node's namespace; --host names the nodes by their addresses, PER_NODE slots each, and
# OpenMPI's TCP BTL and its out-of-band channel are held to the bed's range.
#   netns_mpirun.sh NETNS_CLUSTER_SH BED PER_NODE -- PROGRAM ARGS...
# BED: the --name of a bed that is up. MASTER_ADDR (node 0's address: where rank 0's store
# binds across nodes, docs/store.md) goes to every rank; MPIRUN names another mpirun.
# Used by mpi_test.sh and benchmarks/netns_allreduce.sh. Read next: netns_agent.sh.
set -u
S=${1:?"usage: netns_mpirun.sh NETNS_CLUSTER_SH BED PER_NODE -- PROGRAM ARGS..."} BED=${2:?} PER=${3:?}
shift 3
[[ ${1:-} == -- ]] && shift
[[ $PER =~ ^[1-9][0-9]*$ ]] || { echo "netns_mpirun.sh: PER_NODE must be a count >= 1, got '$PER'" >&2; exit 2; }
K=$("$S" --name "$BED" nodes) || exit
((K >= 1)) || { echo "netns_mpirun.sh: the bed '$BED' has no nodes (is it up?)" >&2; exit 2; }
hosts=""
for ((i = 0; i < K; i++)); do hosts+="$("$S" --name "$BED" addr $i):$PER,"; done
range="$("$S" --name "$BED" addr 0 | cut -d. -f1-3).0/24"
export NETNS_CLUSTER_NAME=$BED MASTER_ADDR=$("$S" --name "$BED" addr 0)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec "$S" --name "$BED" exec 0 "${MPIRUN:-mpirun}" --oversubscribe --bind-to none \
  --host "${hosts%,}" -np $((K * PER)) -x MASTER_ADDR \
  --mca plm_rsh_agent "$(dirname "$(readlink -f "$0")")/netns_agent.sh" \
  --mca btl self,vader,tcp --mca btl_tcp_if_include "$range" --mca oob_tcp_if_include "$range" \
  "$@"
