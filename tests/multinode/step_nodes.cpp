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
//       pull (S co-located servers: ddp/parameter_server.h's exchange).
// STEP_NODES_VERBOSE=1 prints every rank's every step. Read next: check_projection.py.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include "framework/error.h"
#include "framework/ops/ops.h"
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

// One ALGO's steps; returns the median step of the slowest rank, seconds.
double time_steps(ProcessGroup& pg, const std::string& algo, int64_t elems, int buckets,
                  double forward_ms, double backward_ms, int steps) {
  const bool ps = algo.rfind("ps:", 0) == 0;
  if (ps || algo == "star") buckets = 1;  // both exchange the whole gradient after backward
  std::vector<Tensor> grads;  // backward fills the last layers first: bucket 0 first
  for (int j = 0; j < buckets; ++j)
    grads.push_back(full({elems / buckets + (j < elems % buckets ? 1 : 0)}, 1.0));
  ServerPlan plan;
  if (ps) plan = make_server_plan(elems, pg.size(), std::stoi(algo.substr(3)), /*colocated=*/true);
  const Algorithm all_reduce = ps ? Algorithm::Ring : algorithm_of(algo);
  const int warmup = 2;
  std::vector<double> times;
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
  if (std::getenv("STEP_NODES_VERBOSE")) {  // every step, to see a bimodal run for what it is
    std::string all;
    for (double t : times) all += fmt::format(" {:.1f}", 1e3 * t);
    std::printf("rank %d %s steps ms:%s\n", pg.rank(), algo.c_str(), all.c_str());
  }
  Tensor slowest = full({1}, median(times));
  pg.all_reduce(slowest, ReduceOp::Max);
  return slowest.to_vector<float>()[0];
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
    std::map<std::string, std::string> runs;  // ALGO -> its runs' steps, a line each
    for (size_t i = 6; i < a.size(); ++i) {
      const double s = time_steps(*pg, a[i], elems, buckets, std::stod(a[3]), std::stod(a[4]), steps);
      runs[a[i]] += fmt::format("{:.3f}\n", 1e3 * s);
      if (pg->rank() == 0) std::printf("%s: median step %.3f ms over %d steps\n", a[i].c_str(), 1e3 * s, steps);
    }
    for (const auto& [algo, lines] : runs) {
      if (pg->rank() != 0) break;
      std::ofstream f(dir + "/" + algo + ".txt");
      f << lines;
      DPLAB_CHECK(f.good(), "could not write {}/{}.txt", dir, algo);
    }
    destroy_process_group();
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "step_nodes: %s\n", e.what());
    return 1;
  }
}
