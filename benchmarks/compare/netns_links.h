// netns_links.h: `dplab-compare --links netns[:RATE]`, real links beside the emulated ones.
// Every DDP rank runs in a network namespace of its own (a "node", one rank per node) that
// scripts/netns_cluster.sh builds, behind a veth link shaped by tc tbf to RATE in each
// direction (the smallest bucket, two packets, 1-2 ms of RATE: never much faster, as a
// NIC). The ranks meet through a FileStore (namespaces share the file system) and run
// dplab's own algorithms on the node transport (gloo's TCP wire between the namespaces), so
// the parameter server's master really pushes (N-1)x a worker's bytes through one link.
// Each DDP mode then runs twice, on the emulated link (transport/link_model.h) and on the
// real one, and the report sets them side by side with the emulated model's error.
// Read next: netns_links.cpp, scripts/netns_cluster.sh, docs/multinode_testbed.md.
#pragma once
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "benchmarks/compare/alpha_beta.h"
#include "benchmarks/compare/compare.h"
#include "parallel/comm/process_group.h"

namespace dplab::compare {

// "emulated" -> nullopt; "netns" -> the emulated link's rate; "netns:RATE" (RATE like tc:
// 1gbit, 500mbit). Throws Error naming what was expected. `emulated_gbps`: what the
// emulated runs cross (link_gbps(cfg, "ring", 2)).
struct NetnsLinks {
  std::string rate;  // as tc takes it: "1gbit", "500mbit"
  double gbps = 0;
};
std::optional<NetnsLinks> parse_links(const std::string& spec, double emulated_gbps);
// "1gbit" -> 1.0, "500mbit" -> 0.5; Error for anything else.
double rate_to_gbps(const std::string& rate);

// The modes that also run on real links: the DDP ones that spawn() starts (not single and
// dp, which are one process, nor mpi and nccl, started by their own launchers / on GPUs).
bool runs_on_netns(const std::string& mode);

// The bed: `up` in the constructor (root only: otherwise an Error saying so), `down` in the
// destructor and, once, from a SIGINT / SIGTERM handler that then re-raises the signal.
class NetnsBed {
 public:
  NetnsBed(const std::string& script, int nodes, const std::string& rate);
  ~NetnsBed();
  NetnsBed(const NetnsBed&) = delete;
  NetnsBed& operator=(const NetnsBed&) = delete;
  const std::string& name() const { return name_; }

 private:
  std::string script_, name_;
};

// In a rank, before it builds its process group: moves this thread (and the threads it
// starts later: gloo's) into node `node` of bed `bed`, and says so to the group: one rank
// per node (LOCAL_WORLD_SIZE=1), gloo on the node's interface (GLOO_SOCKET_IFNAME=eth0).
void enter_node(const std::string& bed, int node);
// The bytes this process's node has sent and received on its link (eth0 in
// /proc/self/net/dev, which shows the namespace of the process's main thread).
struct LinkBytes {
  int64_t sent = 0, received = 0;
};
LinkBytes node_link_bytes();
// The same after a barrier: a collective returns on its sender while its last bytes still sit
// in the socket and in tbf's queue, not yet counted; once every rank is in the barrier, every
// byte sent before it has been received, so it has left its sender's eth0. (The barrier's own
// few bytes are counted: in the wire bytes, and in comm_stats' total, not in all_reduce's.)
LinkBytes link_bytes_settled(parallel::ProcessGroup& pg);
// A rank's link bytes over the timed steps, to runs/<label>_n<N>_rank<r>.link.
void write_link_bytes(const std::string& path, LinkBytes begin, LinkBytes end);

// The init_method of a run in the bed: a FileStore under <out>/runs, which the parent
// removes before the run (an old file's keys would look valid).
std::string netns_init_method(const Config& cfg, const std::string& label, int n);

// Parent side: the DDP run of `mode` on n ranks in the bed (the worker gets --worker-netns).
RunResult run_ddp_netns(const Config& cfg, const std::string& mode, int n, const NetnsLinks& links,
                        const std::string& bed, const std::string& self_exe,
                        const std::vector<std::string>& worker_args);
// The real links' alpha-beta: alpha from the fit (the small messages), beta from the largest
// message alone (16 MiB), the sustained rate. tbf's bucket (128 KiB at 1 Gbit/s) passes a message
// that fits it at memory speed after an idle round trip, so mid-sized messages look faster
// than the link, and a fit over all sizes would take that for the link's rate.
AlphaBeta fit_real_links(const std::vector<PingPongSample>& samples);
// The real-link rows' predictions (ring, star, co-located ps): dplab-project's step timeline
// on N nodes behind the real links' alpha-beta fit, with each run's own compute. For one
// master (star, ps S=1) the prediction is its pipelined step, as the bed's links send a
// master's replies in the order written (scripts/netns_cluster.sh), and predicted_fair_s its
// step on a link shared fairly among them. The emulated rows keep theirs, from the emulated
// ping-pong.
void add_real_link_predictions(std::vector<RunResult>& runs, const AlphaBeta& real, const Config& cfg);

// 100 (emulated step - real step) / real step for an emulated row that has a real-link twin
// (same mode and N); NAN otherwise.
double emulated_error_pct(const RunResult& r, const std::vector<RunResult>& runs);
// Gradient bytes a rank sends per step by the textbook formula: ring 2(N-1)/N S, star's
// master (N-1) S and its leaves S; NAN for modes without one here.
double formula_sent_bytes(const std::string& mode, int n, int rank, double grad_bytes);

// report.md's section "Emulated and real links side by side".
void write_netns_section(std::ostream& f, const NetnsLinks& links,
                         const std::vector<RunResult>& runs, const std::optional<AlphaBeta>& real);

}  // namespace dplab::compare
