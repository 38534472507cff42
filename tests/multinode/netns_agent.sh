#!/usr/bin/env bash
# netns_agent.sh: OpenMPI's launch agent for the namespace bed, in place of ssh
# (mpirun --mca plm_rsh_agent netns_agent.sh). mpirun calls it as ssh would be called,
#   netns_agent.sh [-x] [-n] HOST COMMAND-WORDS...
# with HOST a node's address (198.18.0.(i+1), as given to --host): it runs the words through
# `sh -c`, as ssh's remote shell would, inside node i's namespace of the bed named by
# NETNS_CLUSTER_NAME, under the host name <namespace>. Nothing else is reachable: an address outside the bed is refused.
# Read next: mpi_test.sh.
set -u
while [[ ${1:-} == -* ]]; do shift; done  # ssh options mpirun may add (-x: no X11)
host=${1:?"netns_agent.sh: expected HOST COMMAND..."}
shift
prefix=${NETNS_CLUSTER_NAME:?netns_agent.sh: NETNS_CLUSTER_NAME (the --name of the bed) is not set}
if [[ $host =~ ^198\.18\.0\.([0-9]+)$ ]] && ((BASH_REMATCH[1] >= 1)); then
  ns="$prefix-n$((BASH_REMATCH[1] - 1))"
else
  echo "netns_agent.sh: '$host' is not a node of the bed (198.18.0.1, 198.18.0.2, ...)" >&2
  exit 255  # ssh's code for "could not connect"
fi
# A host name of its own too (a UTS namespace): OpenMPI names per-node files after the host
# (/dev/shm/vader_segment.<host>.<job>.<local rank>), and two "machines" that share /dev/shm
# and a host name would open each other's segments.
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0"; exec sh -c "$1"' "$ns" "$*"
