#!/usr/bin/env bash
# netns_cluster.sh: K "machines" on one Linux host, each a network namespace with its own
# network stack (interfaces, loopback, ports, routes), joined by veth pairs to a bridge that
# lives in a namespace of its own, so nothing touches the host's network. Addresses come from
# 198.18.0.0/24 (RFC 2544's benchmarking range): node i is 198.18.0.(i+1); there is no
# default route and no NAT, so a node reaches the other nodes and nothing else. Optional
# shaping (tc tbf for the rate, netem for a delay where the kernel has it) sits on each
# node's link in both directions. Namespaces share the host's files and /dev/shm: they
# separate the network only. Documentation: docs/multinode_testbed.md.
#   netns_cluster.sh up K [--rate 1gbit [--burst BYTES]] [--delay 100us] [--cc reno] [--name PREFIX] [--replace]
#   netns_cluster.sh run K [--rate ...] [--name PREFIX] [--replace] -- CMD...   (up, CMD on this host, down)
#   netns_cluster.sh exec I CMD... | addr I | ns I | nodes | down      [--name PREFIX]
# When a bed ends (run's command exits, run gets SIGINT/SIGTERM, down, up --replace), all
# started in it ends: SIGTERM, then SIGKILL after NETNS_CLUSTER_GRACE seconds (10). `up`
# refuses a bed in use (its owner alive, or processes in it) unless told --replace.
# Exit codes: 2 usage, 3 not root, 4 no ip/tc, 5 no network namespaces, 6 --delay without
# netem in the kernel, 7 the bed is in use; otherwise the command's own status.
# Read next: tests/multinode/bed_test.sh, tests/multinode/run_job.sh.
set -u

readonly SUBNET_PREFIX=198.18.0  # node i = 198.18.0.(i+1)/24; the bridge has no address
readonly MAX_NODES=200
E_USAGE=2 E_ROOT=3 E_TOOLS=4 E_NETNS=5 E_NETEM=6 E_INUSE=7

# Messages go to stderr (SAY_FD: a copy of it while `run` ends, when bash's own notices of
# the jobs it reaps, "Killed", go nowhere).
say() { echo "netns_cluster.sh: $*" >&"${SAY_FD:-2}"; }
die() { local code=$1; shift; say "$*"; exit "$code"; }

usage() {
  sed -n '10,17p' "$0" | sed 's/^# \{0,3\}//' >&2
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

# --- Everything started inside a bed ends with it -------------------------------------------
# A process in a namespace keeps it alive after `ip netns del` (reaching nobody), and a job a
# `run` started would run on without its bed. So the bed's end finds its processes four ways,
# for no single one finds all: the bed's namespaces (`ip netns pids`: what `exec` started,
# whoever asked), and for a `run` its command's cgroup v2 (which no fork, setsid or double
# fork leaves; cgroup.kill ends it at once), the processes whose environment carries the
# run's mark (where there is no cgroup), and the command's descendants.
readonly STATE_DIR=/run/netns_cluster  # PREFIX.owner: who made each bed; lock: one `up` at a time
GRACE=${NETNS_CLUSTER_GRACE:-10}       # SIGTERM -> SIGKILL; above dplab-run's own 5 s grace
REPLACE=0
# Who asks for the bed (the owner `up` records) and, in a `run`, where its command's
# processes are; SWEEP_NAMESPACES=0 once the bed's name belongs to another.
OWNER_PID="" OWNER_KIND=up OWNER_CMD="" RUN_MARK="" CGROUP="" CHILD="" SWEEP_NAMESPACES=1

# A field of /proc/PID/stat counted after the command's name, which may hold spaces: 0 the
# state, 1 the parent's pid, 19 the start time (a pid reused by another process has another).
proc_field() {
  local stat fields
  { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
  read -ra fields <<<"${stat##*) }"
  echo "${fields[$2]}"
}
proc_alive() { local state; state=$(proc_field "$1" 0) && [[ $state != [ZX] ]]; }
proc_cmdline() { local c; c=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null); c=${c% }; echo "${c:0:160}"; }
# This script and every process above it: never signalled, whatever namespace they are in
# (a `down` asked from inside a node, a `run`'s command that takes its own bed down).
lineage() { local p=$$; while [[ $p =~ ^[0-9]+$ ]] && ((p > 1)); do echo "$p"; p=$(proc_field "$p" 1) || break; done; }
# "4711 dplab-run, 4712 python3, ...": the first 8 of a list of pids.
describe() {
  local p n=0 comm out=""
  for p in "$@"; do
    { read -r comm <"/proc/$p/comm"; } 2>/dev/null || comm="?"
    ((n++ < 8)) && out+="$p $comm, "
  done
  ((n > 8)) && out+="and $((n - 8)) more, "
  echo "${out%, }"
}

# Every live process started inside the bed, one pid a line.
bed_pids() {
  local ns p
  {
    if ((SWEEP_NAMESPACES)); then for ns in $(our_namespaces); do ip netns pids "$ns" 2>/dev/null; done; fi
    [[ -n $CGROUP && -d $CGROUP ]] && find "$CGROUP" -name cgroup.procs -exec cat {} + 2>/dev/null
    [[ -n $RUN_MARK ]] && grep -lzxF "NETNS_CLUSTER_RUN=$RUN_MARK" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3
    [[ -n $CHILD ]] && ps -e -o pid=,ppid= | awk -v root="$CHILD" '{ up[$1] = $2 }
      END { for (p in up) { q = p; while (q != root && (q in up) && q > 1) q = up[q]; if (q == root) print p } }'
  } | sort -un | grep -vxF -f <(lineage) | while read -r p; do proc_alive "$p" && echo "$p"; done
}

# SIGTERM to everything started inside the bed, SIGKILL to what still runs GRACE seconds later
# (at once on a second SIGINT or SIGTERM); what starts meanwhile gets the same. It says why
# and whom on stderr, where the job's own messages go: $1 is the reason.
end_bed_processes() {
  local why=$1 pids p termed=" " deadline
  pids=$(bed_pids)
  [[ -n $pids ]] || return 0
  say "$why: ending what runs in bed '$PREFIX' (SIGTERM, SIGKILL after $GRACE s): $(describe $pids)"
  HURRY=${HURRY:-0}
  trap 'HURRY=1' INT TERM
  deadline=$((SECONDS + GRACE))
  while [[ -n $pids ]] && ((SECONDS < deadline && !HURRY)); do
    for p in $pids; do
      [[ $termed == *" $p "* ]] || { kill -TERM "$p" 2>/dev/null; termed+="$p "; }
    done
    sleep 0.2
    pids=$(bed_pids)
  done
  [[ -n $pids ]] || return 0
  say "still running in bed '$PREFIX' after SIGTERM, SIGKILL: $(describe $pids)"
  deadline=$((SECONDS + 30))  # a hang guard: SIGKILL ends all but a process stuck in the kernel
  while [[ -n $pids ]] && ((SECONDS < deadline)); do
    [[ -n $CGROUP && -e $CGROUP/cgroup.kill ]] && { echo 1 >"$CGROUP/cgroup.kill"; } 2>/dev/null
    kill -KILL $pids 2>/dev/null
    sleep 0.2
    pids=$(bed_pids)
  done
  [[ -z $pids ]] || say "could not end: $(describe $pids)"
}

# `run`'s cgroup: a child of this script's own in the cgroup v2 hierarchy, used where the
# kernel has cgroup.kill (Linux 5.14); NETNS_CLUSTER_CGROUP=off does without (tests use it).
cgroup_path() {
  [[ ${NETNS_CLUSTER_CGROUP:-on} != off ]] || return 0
  local mnt cur
  mnt=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
  cur=$(sed -n 's/^0:://p' /proc/self/cgroup)
  [[ -n $mnt && -n $cur ]] && echo "$mnt${cur%/}/netns_cluster.$PREFIX.$$"
}
make_cgroup() {
  [[ -n $CGROUP ]] || return 0
  mkdir "$CGROUP" 2>/dev/null && [[ -e $CGROUP/cgroup.kill ]] && return 0
  rmdir "$CGROUP" 2>/dev/null
  CGROUP=""
}
remove_cgroup() {  # $1: a cgroup whose processes have ended
  [[ -n $1 && -d $1 ]] || return 0
  local _
  for _ in 1 2 3 4 5 6 7 8 9 10; do  # a hang guard while the kernel lets the last ones go
    find "$1" -depth -type d -exec rmdir {} + 2>/dev/null && return 0
    sleep 0.2
  done
  say "could not remove the cgroup $1"
}

# --- Who owns a bed --------------------------------------------------------------------------
# `up` records its owner in STATE_DIR/PREFIX.owner: pid, start time, kind (up or run), command
# line, and for a run its mark and cgroup (what a `down` needs after a SIGKILL of the run).
# The owner is whoever asks: `run` itself, or the caller of `up` past sudo, timeout and the
# like, which end when `up` does.
owner_file() { echo "$STATE_DIR/$PREFIX.owner"; }
caller() {
  local p=$PPID comm
  while { read -r comm <"/proc/$p/comm"; } 2>/dev/null && [[ $comm =~ ^(sudo|su|doas|timeout|flock)$ ]]; do
    p=$(proc_field "$p" 1) || break
  done
  echo "$p"
}
write_owner() {
  printf '%s %s %s\n%s\n%s\n%s\n' "$OWNER_PID" "$(proc_field "$OWNER_PID" 19)" "$OWNER_KIND" \
    "$OWNER_CMD" "$RUN_MARK" "$CGROUP" >"$(owner_file)"
}
read_owner() {  # sets O_PID, O_START, O_KIND, O_CMD, O_MARK, O_CGROUP; fails without a record
  O_PID="" O_START="" O_KIND="" O_CMD="" O_MARK="" O_CGROUP=""
  [[ -f $(owner_file) ]] || return 1
  { read -r O_PID O_START O_KIND; read -r O_CMD; read -r O_MARK; read -r O_CGROUP; } <"$(owner_file)"
  [[ $O_PID =~ ^[0-9]+$ ]]
}
owner_alive() { proc_alive "$O_PID" && [[ $(proc_field "$O_PID" 19) == "$O_START" ]]; }

# Why the bed is in use, when it is: its owner (not the one asking now) is alive, or processes
# run in its namespaces. Fails when it is free.
in_use() {
  local reasons=() pids
  read_owner && owner_alive && [[ $O_PID != "$OWNER_PID" ]] &&
    reasons+=("its owner, pid $O_PID ($O_CMD), is running")
  pids=$(bed_pids)
  [[ -n $pids ]] && reasons+=("processes run in its namespaces ($(describe $pids))")
  ((${#reasons[@]})) || return 1
  echo "${reasons[0]}${reasons[1]:+, and ${reasons[1]}}"
}

# The bed's end: a `run` that owns it is stopped with SIGTERM (it then ends its own job and
# says why); what else runs in the bed ends, and so does what a run killed with SIGKILL left
# anywhere (its mark and cgroup are in the record); the namespaces go and the record with them.
cmd_down() {
  local why=${1:-down} RUN_MARK=$RUN_MARK CGROUP=$CGROUP CHILD=$CHILD ns
  if read_owner && [[ $O_KIND == run ]] && ! grep -qxF "$O_PID" <(lineage); then
    if owner_alive; then
      say "$why: bed '$PREFIX' belongs to pid $O_PID ($O_CMD): stopping it with SIGTERM"
      kill -TERM "$O_PID" 2>/dev/null
      local deadline=$((SECONDS + GRACE + 30))  # a hang guard: the run ends its job within GRACE
      while owner_alive && ((SECONDS < deadline)); do sleep 0.2; done
    else
      RUN_MARK=$O_MARK CGROUP=$O_CGROUP CHILD=""
    fi
  fi
  end_bed_processes "$why"
  remove_cgroup "$CGROUP"
  for ns in $(our_namespaces); do ip netns del "$ns" 2>/dev/null; done
  rm -f "$(owner_file)"
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
  if [[ -z $OWNER_PID ]]; then OWNER_PID=$(caller); OWNER_CMD=$(proc_cmdline "$OWNER_PID"); fi
  mkdir -p "$STATE_DIR" || die 1 "cannot create $STATE_DIR (where beds record their owners)"
  # One `up` at a time: two of one name would each find it free and build over the other.
  local lock
  exec {lock}>"$STATE_DIR/lock"
  if command -v flock >/dev/null; then
    flock -w 300 "$lock" || die 1 "another netns_cluster.sh up held $STATE_DIR/lock for 300 s"
  fi
  local busy
  if [[ -n $(our_namespaces) ]] && busy=$(in_use); then
    ((REPLACE)) || die $E_INUSE "bed '$PREFIX' is in use: $busy; choose another --name, or --replace to end what runs in it and build it anew"
    cmd_down "--replace"
  else
    [[ -n $(our_namespaces) ]] || rm -f "$(owner_file)"  # the bed it names was deleted by hand
    cmd_down "up, clearing an earlier bed whose owner is gone"  # killed with SIGKILL, say
  fi
  write_owner
  # Half-built beds go away: on an error, Ctrl-C or kill during `up`.
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'cmd_down "up failed"' EXIT
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
  exec {lock}>&-
}

# up, then CMD on this host (it reaches the nodes through `exec`), then down, ending everything
# CMD started: also when CMD fails, or the script gets SIGINT/SIGTERM (CMD runs in the
# background so the trap runs at once instead of after CMD).
cmd_run() {
  local k=$1
  shift
  [[ ${1:-} == -- ]] && shift
  [[ $# -gt 0 ]] || die $E_USAGE "run expects a command after --"
  OWNER_PID=$$ OWNER_KIND=run OWNER_CMD="netns_cluster.sh run $k -- $*"
  OWNER_CMD=${OWNER_CMD:0:160}
  RUN_MARK="$PREFIX.$$.$(proc_field $$ 19)"
  CGROUP=$(cgroup_path)
  cmd_up "$k" || exit $?
  make_cgroup
  trap 'finish_run SIGINT 130' INT
  trap 'finish_run SIGTERM 143' TERM
  trap 'finish_run "netns_cluster.sh is exiting" 1' EXIT
  (
    if [[ -n $CGROUP ]]; then { echo "$BASHPID" >"$CGROUP/cgroup.procs"; } 2>/dev/null; fi
    export NETNS_CLUSTER_NAME=$PREFIX NETNS_CLUSTER_RUN=$RUN_MARK
    exec "$@"
  ) &
  CHILD=$!
  wait "$CHILD"
  local rc=$?
  finish_run "its command exited with status $rc" "$rc"
}

# The end of a `run`: all its command started ends, then the bed goes down, unless its name
# has passed to another bed meanwhile (`up --replace` and `down` stop this run first, and wait).
finish_run() {
  local why=$1 code=$2
  trap - EXIT
  trap 'HURRY=1' INT TERM  # a second signal hurries the end (end_bed_processes), never restarts it
  exec {SAY_FD}>&2 2>/dev/null
  if ! { read_owner && [[ $O_PID == "$$" ]]; }; then
    SWEEP_NAMESPACES=0
    say "bed '$PREFIX' is no longer this run's${O_PID:+ (pid $O_PID owns it now)}: leaving its namespaces alone"
  fi
  end_bed_processes "$why"
  wait "$CHILD" 2>/dev/null
  remove_cgroup "$CGROUP"
  ((SWEEP_NAMESPACES)) && cmd_down "$why"
  exit "$code"
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
    --replace) REPLACE=1; shift ;;
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
[[ $GRACE =~ ^[0-9]+$ ]] || die $E_USAGE "NETNS_CLUSTER_GRACE expects whole seconds (SIGTERM to SIGKILL), got '$GRACE'"

case $cmd in
  up) [[ ${#args[@]} -eq 1 ]] || usage; cmd_up "${args[0]}" ;;
  run) [[ ${#args[@]} -ge 2 ]] || usage; check_host; cmd_run "${args[@]}" ;;
  down) check_host; cmd_down down ;;
  exec)
    [[ ${#args[@]} -ge 2 ]] || usage
    check_host; check_node "${args[0]}"
    exec ip netns exec "$(node_ns "${args[0]}")" "${args[@]:1}" ;;
  addr) [[ ${#args[@]} -eq 1 ]] || usage; check_host; check_node "${args[0]}"; node_addr "${args[0]}" ;;
  ns) [[ ${#args[@]} -eq 1 ]] || usage; check_host; check_node "${args[0]}"; node_ns "${args[0]}" ;;
  nodes) check_host; node_count ;;
  *) usage ;;
esac
