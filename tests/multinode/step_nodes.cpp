// step_nodes.cpp: DDP's step across nodes, timed, with the compute a GPU would do replaced by
// sleeping, so the measured step is the network's and the step's shape, not how two shared
// cores time-slice the ranks: what dplab-project models (check_projection.py compares the
// two). Started by dplab-run on every node (run_job.sh).
//   step_nodes OUT_DIR GRAD_BYTES BUCKETS FORWARD_MS BACKWARD_MS STEPS ALGO...
// First the calibration: rank 0 ping-pongs rank 1 (on its node, when nodes hold 2 ranks or
// more) and the first rank of node 1; alpha from 8-byte messages, beta from 2 MiB ones, to
// OUT_DIR/calibration.csv (dplab-project's calibration file, benchmarks/project/links.h).
// Then each ALGO, one after the other, to OUT_DIR/ALGO.txt (rank 0: the median step in ms,
// the slowest rank's; an ALGO named twice runs twice, a line each):
//   ring | hierarchical   forward sleeps, then backward sleeps BACKWARD_MS / BUCKETS per
//       bucket and hands each bucket, once "computed", to an async all-reduce (in backward
//       order, on the group's one worker thread: DDP's reducer); the step ends when every
//       bucket is back.
//   star | ps:S   forward and backward, then one exchange of the whole gradient, as a
//       parameter server makes it: the star all-reduce, or the sharded server's push and
//       pull (S co-located servers: ps/parameter_server.h's exchange).
// What crossed the links goes to OUT_DIR/ALGO.links.csv, a line per node and run
// (node,payload_sent,payload_received,wire_sent,wire_received): the bytes per step its ranks
// sent to and received from other nodes as the engine counted them, and what the kernel
// counted on the node's eth0, headers and all. Every rank's counted bytes must equal cost.h's
// formula for its buckets, or step_nodes exits 1 naming the rank (after writing its files).
// STEP_NODES_VERBOSE=1 prints every rank's every step. Read next: check_projection.py.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include "framework/error.h"
#include "framework/ops/ops.h"
#include "parallel/algorithms/cost.h"
#include "parallel/algorithms/server_plan.h"
#include "parallel/comm/init.h"

using namespace dplab;
using namespace dplab::parallel;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
void sleep_ms(double ms) { std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms)); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// One way, seconds: the shortest half round trip of `bytes` between ranks a and b (others
// idle). The shortest, not the median: the link's own cost, without the waits for a core
// that other programs on the machine add to some rounds (the steps overlap those with
// their sleeps).
double one_way(ProcessGroup& pg, int a, int b, int64_t bytes, int rounds) {
  Tensor t = zeros({std::max<int64_t>(1, bytes / 4)});
  std::vector<double> times;
  for (int i = 0; i < rounds; ++i) {
    const auto t0 = Clock::now();
    if (pg.rank() == a) pg.send(t, b), pg.recv(t, b);
    else if (pg.rank() == b) pg.recv(t, a), pg.send(t, a);
    times.push_back(seconds_since(t0) / 2);
  }
  return *std::min_element(times.begin(), times.end());
}

void calibrate(ProcessGroup& pg, const std::string& out) {
  const int per_node = std::atoi(std::getenv("LOCAL_WORLD_SIZE"));
  DPLAB_CHECK(per_node >= 1 && pg.size() > per_node,
              "calibrate: expected at least two nodes, got {} ranks of {} per node", pg.size(), per_node);
  std::string csv = "level,alpha_us,gbps,source\n";
  auto level = [&](const char* name, int peer) {
    // large enough that the tbf bucket it gets free after each idle turn (1-2 ms of the rate,
    // netns_cluster.sh) is a few % of it
    const int64_t big = 2 << 20;
    one_way(pg, 0, peer, big, 1);  // warm the connection and TCP's window
    const double alpha = one_way(pg, 0, peer, 8, 30);
    const double large = one_way(pg, 0, peer, big, 3);
    const double gbps = 8e-9 * double(big) / std::max(1e-9, large - alpha);
    csv += fmt::format("{},{:.2f},{:.4f},step_nodes ping-pong rank 0 <-> {}\n", name, 1e6 * alpha, gbps, peer);
  };
  if (per_node > 1) level("intra", 1);
  level("inter", per_node);
  pg.barrier();
  if (pg.rank() == 0) {
    std::ofstream f(out);
    f << csv;
    DPLAB_CHECK(f.good(), "could not write {}", out);
    std::fputs(csv.c_str(), stdout);
  }
}

Algorithm algorithm_of(const std::string& name) {
  if (name == "ring") return Algorithm::Ring;
  if (name == "star") return Algorithm::Star;
  if (name == "hierarchical") return Algorithm::Hierarchical;
  DPLAB_FAIL("expected ALGO ring, star, hierarchical or ps:S, got '{}'", name);
}

// What this node's link carried so far, each way: the kernel's count for eth0 in this rank's
// network namespace (/proc/net/dev is the reader's namespace's), headers and all.
struct LinkBytes {
  double sent = 0, received = 0;
};
LinkBytes link_bytes() {
  std::ifstream f("/proc/net/dev");
  for (std::string line; std::getline(f, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::istringstream name(line.substr(0, colon)), counts(line.substr(colon + 1));
    std::string dev;
    name >> dev;
    if (dev != "eth0") continue;
    double v[9];  // receive: bytes packets errs drop fifo frame compressed multicast; transmit: bytes
    for (double& x : v) counts >> x;
    return {.sent = v[8], .received = v[0]};
  }
  DPLAB_FAIL("no eth0 in /proc/net/dev: expected to run in a node of the namespace bed (run_job.sh)");
}

// What one step must move for this rank: cost.h's formula for each bucket's all-reduce, or
// for the parameter server's push and pull (all of it across nodes at one rank per node).
Traffic step_traffic(const std::string& algo, const std::vector<Tensor>& grads, const ServerPlan& plan,
                     int rank, int size, int per_node) {
  Traffic t;
  auto add = [&t](const Traffic& x) {
    t.sent += x.sent, t.received += x.received;
    t.sent_inter_node += x.sent_inter_node, t.received_inter_node += x.received_inter_node;
  };
  if (algo.rfind("ps:", 0) == 0) {
    DPLAB_CHECK(per_node == 1, "step_nodes: ps:S runs on one rank per node, got {} per node", per_node);
    for (const Traffic& x : {ps_push_cost(plan, 4, rank, size), ps_pull_cost(plan, 4, rank, size)})
      add({x.sent, x.received, x.sent, x.received});
  } else {
    for (const Tensor& g : grads) add(all_reduce_cost(algorithm_of(algo), g.nbytes(), 4, rank, size, per_node));
  }
  return t;
}

struct StepResult {
  double seconds = 0;     // the median step of the slowest rank
  std::string links_csv;  // rank 0: a line per node (node,payload_sent,payload_received,wire_sent,wire_received)
  std::string off_formula;  // this rank's counted bytes against the formula's, when they differ
};

// One ALGO's steps.
StepResult time_steps(ProcessGroup& pg, const std::string& algo, int64_t elems, int buckets,
                      double forward_ms, double backward_ms, int steps) {
  const bool ps = algo.rfind("ps:", 0) == 0;
  if (ps || algo == "star") buckets = 1;  // both exchange the whole gradient after backward
  std::vector<Tensor> grads;  // backward fills the last layers first: bucket 0 first
  for (int j = 0; j < buckets; ++j)
    grads.push_back(full({elems / buckets + (j < elems % buckets ? 1 : 0)}, 1.0));
  ServerPlan plan;
  if (ps) plan = make_server_plan(elems, pg.size(), std::stoi(algo.substr(3)), /*colocated=*/true);
  const Algorithm all_reduce = ps ? Algorithm::Ring : algorithm_of(algo);
  const int per_node = std::atoi(std::getenv("LOCAL_WORLD_SIZE"));
  const bool counts_link = pg.rank() % per_node == 0;  // one rank per node reads its link
  const int warmup = 2;
  std::vector<double> times;
  // the link's count before the barrier: no rank starts its steps before every rank is in it
  const LinkBytes link_before = counts_link ? link_bytes() : LinkBytes{};
  pg.barrier();
  pg.reset_comm_stats();
  for (int s = 0; s < warmup + steps; ++s) {
    const auto t0 = Clock::now();
    sleep_ms(forward_ms);
    if (ps) {
      sleep_ms(backward_ms);
      pg.ps_push(grads[0], plan);
      pg.ps_pull(grads[0], plan);
    } else {
      std::vector<WorkPtr> works;
      for (Tensor& g : grads) {
        sleep_ms(backward_ms / buckets);
        works.push_back(pg.all_reduce_async(g, ReduceOp::Sum, all_reduce));
      }
      for (WorkPtr& w : works) w->wait();
    }
    if (s >= warmup) times.push_back(seconds_since(t0));
  }
  const CollectiveStats counted = pg.comm_stats().total;
  pg.barrier();  // every byte of the steps has arrived: the links' counts hold them all
  const LinkBytes link_after = counts_link ? link_bytes() : LinkBytes{};
  if (std::getenv("STEP_NODES_VERBOSE")) {  // every step, to see a bimodal run for what it is
    std::string all;
    for (double t : times) all += fmt::format(" {:.1f}", 1e3 * t);
    std::printf("rank %d %s steps ms:%s\n", pg.rank(), algo.c_str(), all.c_str());
  }
  StepResult out;
  const int n = warmup + steps;
  const Traffic want = step_traffic(algo, grads, plan, pg.rank(), pg.size(), per_node);
  if (counted.bytes_sent != n * want.sent || counted.bytes_received != n * want.received ||
      counted.bytes_sent_inter_node != n * want.sent_inter_node ||
      counted.bytes_received_inter_node != n * want.received_inter_node)
    out.off_formula = fmt::format(
        "rank {} {}: {} steps sent {} and received {} bytes ({} and {} across nodes); cost.h's formula: {} and {} "
        "({} and {})", pg.rank(), algo, n, counted.bytes_sent, counted.bytes_received, counted.bytes_sent_inter_node,
        counted.bytes_received_inter_node, n * want.sent, n * want.received, n * want.sent_inter_node,
        n * want.received_inter_node);
  // per node: [payload sent, payload received, wire sent, wire received] per step, summed
  // over its ranks (floats hold these integers exactly: a step moves far less than 2^24 bytes)
  const int nodes = pg.size() / per_node, node = pg.rank() / per_node;
  std::vector<float> per_node_bytes(4 * nodes, 0.0f);
  per_node_bytes[4 * node + 0] = float(counted.bytes_sent_inter_node / n);
  per_node_bytes[4 * node + 1] = float(counted.bytes_received_inter_node / n);
  per_node_bytes[4 * node + 2] = float((link_after.sent - link_before.sent) / n);
  per_node_bytes[4 * node + 3] = float((link_after.received - link_before.received) / n);
  Tensor table = from_vector(per_node_bytes, {4 * int64_t(nodes)});
  pg.all_reduce(table, ReduceOp::Sum);
  const std::vector<float> sums = table.to_vector<float>();
  for (int k = 0; k < nodes; ++k)
    out.links_csv += fmt::format("{},{:.0f},{:.0f},{:.0f},{:.0f}\n", k, sums[4 * k], sums[4 * k + 1], sums[4 * k + 2],
                                 sums[4 * k + 3]);
  Tensor slowest = full({1}, median(times));
  pg.all_reduce(slowest, ReduceOp::Max);
  out.seconds = slowest.to_vector<float>()[0];
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  if (a.size() < 7) {
    std::fprintf(stderr, "usage: step_nodes OUT_DIR GRAD_BYTES BUCKETS FORWARD_MS BACKWARD_MS STEPS "
                         "ALGO... (ALGO: ring, star, hierarchical, ps:S)\n");
    return 2;
  }
  try {
    auto pg = init_process_group({.engine = "ring"});
    const std::string dir = a[0];
    const int64_t elems = std::stoll(a[1]) / 4;
    const int buckets = std::stoi(a[2]), steps = std::stoi(a[5]);
    DPLAB_CHECK(buckets >= 1 && elems >= buckets && steps >= 1,
                "expected GRAD_BYTES >= 4 x BUCKETS, BUCKETS >= 1 and STEPS >= 1, got {}, {} and {}", a[1],
                a[2], a[5]);
    calibrate(*pg, dir + "/calibration.csv");
    std::map<std::string, std::string> runs, links;  // ALGO -> its runs' steps / link lines
    std::string off_formula;
    for (size_t i = 6; i < a.size(); ++i) {
      const StepResult r = time_steps(*pg, a[i], elems, buckets, std::stod(a[3]), std::stod(a[4]), steps);
      runs[a[i]] += fmt::format("{:.3f}\n", 1e3 * r.seconds);
      links[a[i]] += r.links_csv;
      if (!r.off_formula.empty()) off_formula += r.off_formula + "\n";
      if (pg->rank() == 0) std::printf("%s: median step %.3f ms over %d steps\n", a[i].c_str(), 1e3 * r.seconds, steps);
    }
    for (const auto& [algo, lines] : runs) {
      if (pg->rank() != 0) break;
      for (const auto& [suffix, text] : {std::pair{".txt", lines}, std::pair{".links.csv", links[algo]}}) {
        std::ofstream f(dir + "/" + algo + suffix);
        f << text;
        DPLAB_CHECK(f.good(), "could not write {}/{}{}", dir, algo, suffix);
      }
    }
    destroy_process_group();
    if (!off_formula.empty()) std::fprintf(stderr, "step_nodes: off cost.h's formula: %s", off_formula.c_str());
    return off_formula.empty() ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "step_nodes: %s\n", e.what());
    return 1;
  }
}
