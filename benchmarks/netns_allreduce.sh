#!/usr/bin/env bash
# netns_allreduce.sh: one all-reduce across K namespace "machines" (one rank each) behind
# tbf-shaped links, on three engines: dplab's ring over gloo's TCP wire, gloo's own ring, and
# MPI_Allreduce over OpenMPI's TCP transport; the issue's yardstick for dplab's ring is >= 80%
# of the link, within 10% of gloo's and no slower than MPI's. Root only (the bed).
#   sudo bash benchmarks/netns_allreduce.sh [--rate 1gbit] [--nodes 2,3,4] [--trials 3] [--out DIR] [BYTES...]
# Prints a table and writes DIR/netns_allreduce.csv (engine,nodes,bytes,seconds,link_share):
# link_share is the ring's per-node bytes, 2(K-1)/K·S, over the time the link takes for them
# at its rate (1.0: the link's full rate). Each engine's time is the slowest rank's, best of
# the trials (allreduce_nodes.cpp and allreduce_mpi.cpp: bench_allreduce's timing rule).
# Read next: benchmarks/allreduce_nodes.cpp, tests/multinode/mpi_test.sh (mpirun in the bed).
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=1gbit NODES=2,3,4 TRIALS=3 OUT=results-netns-allreduce SIZES=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --rate) RATE=$2; shift 2 ;;
    --nodes) NODES=$2; shift 2 ;;
    --trials) TRIALS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h | --help) sed -n 2,11p "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --*) echo "netns_allreduce.sh: unknown option $1" >&2; exit 2 ;;
    *) [[ $1 =~ ^[0-9]+$ ]] || { echo "netns_allreduce.sh: expected BYTES as a number, got '$1'" >&2; exit 2; }
       SIZES+=("$1"); shift ;;
  esac
done
[[ ${#SIZES[@]} -gt 0 ]] || SIZES=(471040 940544 4194304)
[[ $(id -u) -eq 0 ]] || { echo "netns_allreduce.sh: needs root (network namespaces, tc)" >&2; exit 3; }
S=scripts/netns_cluster.sh B=build
for exe in $B/parallel/launch/exe/dplab-run $B/benchmarks/allreduce_nodes $B/benchmarks/allreduce_mpi; do
  [[ -x $exe ]] || { echo "netns_allreduce.sh: $exe is missing (bash scripts/setup.sh test builds it)" >&2; exit 4; }
done
command -v mpirun >/dev/null || { echo "netns_allreduce.sh: mpirun is missing (apt-get install openmpi-bin)" >&2; exit 4; }
bps=$(python3 -c "import re,sys; m=re.fullmatch(r'(\d+)(kbit|mbit|gbit)', sys.argv[1]); \
print(int(m[1]) * {'kbit': 1e3, 'mbit': 1e6, 'gbit': 1e9}[m[2]] / 8 if m else sys.exit('bad --rate'))" "$RATE")
mkdir -p "$OUT"
csv=$OUT/netns_allreduce.csv
echo "engine,nodes,bytes,seconds,link_share" >"$csv"
P=nar$$
trap '"$S" --name $P down >/dev/null 2>&1' EXIT INT TERM
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for K in ${NODES//,/ }; do
  log=$OUT/nodes$K.log
  # dplab's ring and gloo's: one dplab-run launcher per node, on a bed of its own
  bash tests/multinode/run_job.sh --rate "$RATE" --burst 0 --timeout 300 "$S" \
    $B/parallel/launch/exe/dplab-run "$K" 1 -- \
    $B/benchmarks/allreduce_nodes --engines ring,gloo --trials "$TRIALS" "${SIZES[@]}" \
    >"$OUT/nodes$K.dplab.log" 2>&1 || { cat "$OUT/nodes$K.dplab.log" >&2; exit 1; }
  grep -hE "^\[rank 0\] (ring|gloo) [0-9]+ " "$OUT/nodes$K.dplab.log" | awk '{print $3, $4, $5}' >"$log"
  "$S" --name $P up "$K" --rate "$RATE" --burst 0 >/dev/null
  # MPI_Allreduce over TCP: mpirun on node 0, the other nodes' daemons through the agent
  timeout 300 bash tests/multinode/netns_mpirun.sh "$S" $P 1 -- $B/benchmarks/allreduce_mpi "${SIZES[@]}" --trials "$TRIALS" >"$OUT/nodes$K.mpi.log" 2>&1 ||
    { cat "$OUT/nodes$K.mpi.log" >&2; exit 1; }
  grep -hE "^[0-9]+ [0-9.e+-]+$" "$OUT/nodes$K.mpi.log" | awk '{print "mpi", $1, $2}' >>"$log"
  "$S" --name $P down >/dev/null
  while read -r engine bytes secs; do
    share=$(python3 -c "import sys; k, s, t, b = map(float, sys.argv[1:]); print(f'{2*(k-1)/k*s/b/t:.3f}')" \
      "$K" "$bytes" "$secs" "$bps")
    echo "$engine,$K,$bytes,$secs,$share" >>"$csv"
  done <"$log"
done
python3 - "$csv" "$RATE" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print(f"all-reduce over {sys.argv[2]} namespace links, one rank per node (ms, share of the link)")
print(f"{'nodes':>5} {'MiB':>6} {'dplab ring':>16} {'gloo ring':>16} {'MPI (TCP)':>16}  ring/gloo")
keys = sorted({(int(r['nodes']), int(r['bytes'])) for r in rows})
for k, b in keys:
    cell, t = {}, {}
    for r in rows:
        if int(r['nodes']) == k and int(r['bytes']) == b:
            t[r['engine']] = float(r['seconds'])
            cell[r['engine']] = f"{1e3 * float(r['seconds']):.2f} ({100 * float(r['link_share']):.0f}%)"
    ratio = f"{t['ring'] / t['gloo']:.2f}" if 'ring' in t and 'gloo' in t else '-'
    print(f"{k:>5} {b / 2**20:>6.2f} {cell.get('ring', '-'):>16} {cell.get('gloo', '-'):>16} {cell.get('mpi', '-'):>16}  {ratio:>9}")
PY
echo "wrote $csv"
