#!/usr/bin/env bash
# netns_cluster.sh: K "machines" on one Linux host, each a network namespace with its own
# network stack (interfaces, loopback, ports, routes), joined by veth pairs to a bridge that
# lives in a namespace of its own, so nothing touches the host's network. Addresses come from
# 198.18.0.0/24 (RFC 2544's benchmarking range): node i is 198.18.0.(i+1); there is no
# default route and no NAT, so a node reaches the other nodes and nothing else. Optional
# shaping (tc tbf for the rate, netem for a delay where the kernel has it) sits on each
# node's link in both directions. Namespaces share the host's files and /dev/shm: they
# separate the network only. Documentation: docs/multinode_testbed.md.
#   netns_cluster.sh up K [--rate 1gbit [--burst BYTES]] [--delay 100us] [--cc reno] [--name PREFIX]
#   netns_cluster.sh run K [--rate ...] [--name PREFIX] -- CMD...   (up, CMD on this host, down)
#   netns_cluster.sh exec I CMD... | addr I | ns I | nodes | down      [--name PREFIX]
# Exit codes: 2 usage, 3 not root, 4 no ip/tc, 5 no network namespaces, 6 --delay without
# netem in the kernel; otherwise the command's own status.
# Read next: tests/multinode/bed_test.sh, tests/multinode/run_job.sh.
set -u

readonly SUBNET_PREFIX=198.18.0  # node i = 198.18.0.(i+1)/24; the bridge has no address
readonly MAX_NODES=200
E_USAGE=2 E_ROOT=3 E_TOOLS=4 E_NETNS=5 E_NETEM=6

die() { local code=$1; shift; echo "netns_cluster.sh: $*" >&2; exit "$code"; }

usage() {
  sed -n '10,14p' "$0" | sed 's/^# \{0,3\}//' >&2
  exit $E_USAGE
}

PREFIX=${NETNS_CLUSTER_NAME:-dplab}
RATE="" DELAY="" BURST="" CC=reno

check_prefix() {
  [[ $PREFIX =~ ^[a-z][a-z0-9]{0,9}$ ]] ||
    die $E_USAGE "--name must be 1-10 lowercase letters/digits starting with a letter, got '$PREFIX'"
}

check_host() {
  [[ $(id -u) -eq 0 ]] || die $E_ROOT "needs root (network namespaces, veth, tc); running as uid $(id -u)"
  command -v ip >/dev/null || die $E_TOOLS "needs 'ip' (iproute2), not found in PATH"
  command -v tc >/dev/null || die $E_TOOLS "needs 'tc' (iproute2), not found in PATH"
}

bridge_ns() { echo "${PREFIX}-br"; }
node_ns() { echo "${PREFIX}-n$1"; }
node_addr() { echo "${SUBNET_PREFIX}.$(($1 + 1))"; }

# The namespaces of this prefix that exist now, bridge last (deleting a node's namespace
# removes its veth pair, so the bridge goes empty before it goes).
our_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}-n[0-9]+$" || true
  ip netns list 2>/dev/null | awk '{print $1}' | grep -Fx "$(bridge_ns)" || true
}

node_count() { ip netns list 2>/dev/null | awk '{print $1}' | grep -cE "^${PREFIX}-n[0-9]+$"; }

cmd_down() {
  local ns
  for ns in $(our_namespaces); do ip netns del "$ns" 2>/dev/null; done
  # A namespace's deletion is asynchronous in the kernel; its name goes at once.
  [[ -z $(our_namespaces) ]] || die 1 "could not delete: $(our_namespaces | tr '\n' ' ')"
}

# "1gbit" -> bytes per second; tc takes the rate as given, this only sizes the burst.
rate_bytes() {
  [[ $1 =~ ^([0-9]+)(bit|kbit|mbit|gbit)$ ]] ||
    die $E_USAGE "--rate expects a number and bit/kbit/mbit/gbit (e.g. 1gbit, 100mbit), got '$1'"
  local n=${BASH_REMATCH[1]} mult=1
  case ${BASH_REMATCH[2]} in kbit) mult=1000 ;; mbit) mult=1000000 ;; gbit) mult=1000000000 ;; esac
  echo $((n * mult / 8))
}

# Shapes the egress of `dev` inside namespace `ns`: tbf for the rate (a 10 ms burst, or
# --burst BYTES; --burst 0 for the smallest bucket, a link that never runs faster than its
# rate), netem for the delay (netem alone when both). The bucket is at least two of the
# largest packets a node sends (gso_max_size, set on every link): a packet larger than the
# bucket is cut into MTU segments by tbf itself, TCP sees them reordered and retransmits,
# and the link carries far less than its rate. A full bucket passes at memory speed after
# the link idles, which a NIC's wire cannot, so on slow links the packets are smaller: about
# 1 ms of the rate (as the kernel sizes TSO packets to a flow's pacing rate), 64 KiB at most
# (the kernel's own limit) and 16 KiB at least (smaller ones cost the two cores more than
# the link). At 1 Gbit/s: 64 KiB packets, a 128 KiB bucket (1 ms); at 250 Mbit/s 28 KiB, 56
# KiB (1.8 ms).
gso_max() {
  local g=65536
  if [[ -n $RATE ]]; then
    g=$(( $(rate_bytes "$RATE") / 1000 / 4096 * 4096 ))
    ((g > 65536)) && g=65536
    ((g < 16384)) && g=16384
  fi
  echo $g
}
shape() {
  local ns=$1 dev=$2
  if [[ -n $DELAY ]]; then
    local args=(delay "$DELAY")
    [[ -n $RATE ]] && args+=(rate "$RATE")
    tc -n "$ns" qdisc add dev "$dev" root netem "${args[@]}" limit 10000 ||
      die $E_NETEM "cannot add netem (delay) on $dev: this kernel lacks sch_netem? (--rate alone uses tbf)"
  elif [[ -n $RATE ]]; then
    local bytes burst
    bytes=$(rate_bytes "$RATE")
    burst=${BURST:-$((bytes / 100))}
    ((burst < 2 * $(gso_max))) && burst=$((2 * $(gso_max)))
    tc -n "$ns" qdisc add dev "$dev" root tbf rate "$RATE" burst "$burst" latency 100ms ||
      die 1 "tc tbf on $ns/$dev failed"
  fi
}

cmd_up() {
  local k=$1
  [[ $k =~ ^[0-9]+$ ]] && ((k >= 1 && k <= MAX_NODES)) ||
    die $E_USAGE "up expects a node count in 1..$MAX_NODES, got '$k'"
  [[ -n $RATE ]] && rate_bytes "$RATE" >/dev/null
  check_host
  cmd_down  # stale leftovers of this prefix (an earlier run killed with SIGKILL)
  # Half-built beds go away: on an error, Ctrl-C or kill during `up`.
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'cmd_down' EXIT
  local br
  br=$(bridge_ns)
  ip netns add "$br" 2>/dev/null || die $E_NETNS "cannot create network namespace '$br' (ip netns add failed)"
  ip -n "$br" link set lo up
  ip -n "$br" link add br0 type bridge || die 1 "cannot create a bridge"
  ip -n "$br" link set br0 up
  local i ns
  for ((i = 0; i < k; i++)); do
    ns=$(node_ns "$i")
    ip netns add "$ns" || die $E_NETNS "cannot create network namespace '$ns'"
    ip -n "$ns" link set lo up
    # The pair is born in the bridge's namespace and one end moves to the node: no
    # interface ever appears in the host's namespace.
    ip -n "$br" link add "v$i" type veth peer name eth0 netns "$ns" ||
      die 1 "cannot create veth v$i"
    ip -n "$br" link set "v$i" master br0 up
    ip -n "$ns" addr add "$(node_addr "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set dev eth0 gso_max_size "$(gso_max)" || die 1 "cannot set gso_max_size on $ns/eth0"
    ip -n "$br" link set dev "v$i" gso_max_size "$(gso_max)" || die 1 "cannot set gso_max_size on v$i"
    # TCP's congestion control, the same on every bed whatever the host's default (--cc; a
    # namespace may only pick one the host allows). bbr, which models the path's rate, paced
    # the flows that start after an idle gap (a parameter server's, one peer after another)
    # below the link's rate, by up to half and differently from run to run; reno, driven by
    # loss, sees none on these links and sends at the rate.
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_congestion_control="$CC" ||
      die $E_USAGE "--cc $CC: a namespace may use only the host's allowed ones ($(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control))"
    # A node's link sends what its program writes in the order written, as a NIC's one queue
    # does (and as the emulated link and dplab-project's pipelined step assume). With the
    # kernel's defaults it would not: a flow whose packets wait behind another flow's gets a
    # long round trip, TCP then lets it queue only about 1 ms of its own rate (the pacing rate,
    # ratio x window / round trip), and it holds a flow's next writes back while earlier ones
    # still queue (autocorking). So a server's replies to several peers took turns, unevenly
    # and differently from run to run. With autocorking off and the pacing ratio at its
    # maximum (10x) they go out one after another (bed_test.sh checks it; the measurements,
    # and what slower links keep of it: docs/multinode_testbed.md).
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_autocorking=0 net.ipv4.tcp_pacing_ss_ratio=1000 \
      net.ipv4.tcp_pacing_ca_ratio=1000 || die 1 "cannot set TCP's queueing sysctls in $ns"
    if [[ -n $RATE || -n $DELAY ]]; then
      shape "$ns" eth0     # node -> bridge
      shape "$br" "v$i"    # bridge -> node
    fi
  done
  trap - INT TERM EXIT
}

# up, then CMD on this host (it reaches the nodes through `exec`), then down: also when CMD
# fails, or the script gets SIGINT/SIGTERM (CMD runs in the background so the trap runs at
# once instead of after CMD).
cmd_run() {
  local k=$1
  shift
  [[ ${1:-} == -- ]] && shift
  [[ $# -gt 0 ]] || die $E_USAGE "run expects a command after --"
  cmd_up "$k" || exit $?
  local child
  trap 'kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; cmd_down; exit 130' INT
  trap 'kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; cmd_down; exit 143' TERM
  trap 'cmd_down' EXIT
  NETNS_CLUSTER_NAME=$PREFIX "$@" &
  child=$!
  wait "$child"
  local rc=$?
  exit $rc
}

check_node() {
  [[ $1 =~ ^[0-9]+$ ]] || die $E_USAGE "expected a node index, got '$1'"
  ip netns list 2>/dev/null | awk '{print $1}' | grep -qFx "$(node_ns "$1")" ||
    die $E_USAGE "no node $1 in bed '$PREFIX' ($(node_count) nodes up)"
}

# Options may come anywhere before a command's own arguments (exec's CMD is left alone).
cmd="" args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --name) PREFIX=${2:-}; shift 2 || usage ;;
    --rate) RATE=${2:-}; shift 2 || usage ;;
    --burst)
      BURST=${2:-}; shift 2 || usage
      [[ $BURST =~ ^[0-9]+$ ]] || die $E_USAGE "--burst expects bytes (0: the smallest bucket, two packets), got '$BURST'" ;;
    --delay) DELAY=${2:-}; shift 2 || usage ;;
    --cc) CC=${2:-}; shift 2 || usage
      [[ $CC =~ ^[a-z0-9_]+$ ]] || die $E_USAGE "--cc expects a congestion control's name (reno, cubic, bbr), got '$CC'" ;;
    -h | --help) usage ;;
    *)
      if [[ -z $cmd ]]; then
        cmd=$1; shift
      elif [[ $cmd == exec || $cmd == run ]] && { [[ $cmd == exec && ${#args[@]} -ge 1 ]] || [[ $1 == -- ]]; }; then
        args+=("$@"); break
      else
        args+=("$1"); shift
      fi ;;
  esac
done
check_prefix

case $cmd in
  up) [[ ${#args[@]} -eq 1 ]] || usage; cmd_up "${args[0]}" ;;
  run) [[ ${#args[@]} -ge 2 ]] || usage; check_host; cmd_run "${args[@]}" ;;
  down) check_host; cmd_down ;;
  exec)
    [[ ${#args[@]} -ge 2 ]] || usage
    check_host; check_node "${args[0]}"
    exec ip netns exec "$(node_ns "${args[0]}")" "${args[@]:1}" ;;
  addr) [[ ${#args[@]} -eq 1 ]] || usage; check_host; check_node "${args[0]}"; node_addr "${args[0]}" ;;
  ns) [[ ${#args[@]} -eq 1 ]] || usage; check_host; check_node "${args[0]}"; node_ns "${args[0]}" ;;
  nodes) check_host; node_count ;;
  *) usage ;;
esac
