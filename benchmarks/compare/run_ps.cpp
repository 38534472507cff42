// run_ps.cpp: mode `ps`, the sharded parameter server (parallel/ps/parameter_server.h), one
// process per rank over the same shm group and emulated links as star and ring.
//   --servers S (a list; "N" means S = N) and --ps-placement colocated|separate (a list):
//   every pair is one run, labelled ps-s<S> (co-located: N ranks, each trains, S of them
//   also serve) or ps-s<S>-sep (N training ranks plus S server processes, ranks N..N+S-1).
// A rank's step: forward and backward on its G/N rows (workers), then ParameterServer::step:
// push, the servers' optimizer step on their shards, pull. The push waits for the whole
// backward (no buckets overlap it, unlike DDP), so the table's comm and wait are the step's
// push + pull time (medians, as the step's), as for ZeRO. Per-device figures: the push and
// pull bytes as weight traffic; memory: a worker's model and gradients, a server's shard (its
// float32 master weights and their optimizer state, as optimizer state) and, separate, the
// shard's sum buffer as gradients.
// Read next: ps_report.cpp (where the sharded PS matches the ring and where it loses).
#include <fmt/core.h>

#include <filesystem>

#include "benchmarks/compare/compare.h"
#include "benchmarks/compare/netns_links.h"
#include "benchmarks/compare/trace.h"
#include "benchmarks/compare/training.h"
#include "framework/backend/cuda/virtual_gpus.h"
#include "framework/error.h"
#include "framework/ops/ops.h"
#include "framework/tensor/allocator.h"
#include "parallel/comm/init.h"
#include "parallel/launch/spawn.h"
#include "parallel/ps/parameter_server.h"

namespace dplab::compare {

namespace {

struct PsLabel {
  int servers = 0;
  bool separate = false;
};

PsLabel parse_label(const std::string& label) {
  PsLabel l;
  int consumed = 0;
  const bool ok = std::sscanf(label.c_str(), "ps-s%d%n", &l.servers, &consumed) == 1;
  const std::string rest = ok ? label.substr(static_cast<size_t>(consumed)) : "";
  DPLAB_CHECK(ok && l.servers >= 1 && (rest.empty() || rest == "-sep"),
              "--worker: expected ps-s<S> or ps-s<S>-sep, got '{}'", label);
  l.separate = rest == "-sep";
  return l;
}

void ps_rank(const Config& cfg, const std::string& label, int n, int rank) {
  const PsLabel l = parse_label(label);
  const int world = l.separate ? n + l.servers : n;
  if (cfg.device == "cuda" && cuda_logical_device_count() < world) set_virtual_gpus(world);
  // --links netns: this rank is node `rank` of the bed, behind a real link (netns_links.h)
  const bool netns = !cfg.netns_bed.empty();
  const std::string files = netns ? label + "_netns" : label;  // its files' name
  if (netns) enter_node(cfg.netns_bed, rank);
  auto pg = parallel::init_process_group(
      {.engine = "ring",
       .init_method = netns ? netns_init_method(cfg, files, n) : "env://",
       .link_gbps = netns ? 0.0 : link_gbps(cfg, label, n)});
  const std::unique_ptr<Workload> work = make_workload(cfg);
  const Device dev = device_of(cfg, rank);
  auto model = initial_model(cfg);
  model->to(dev);
  parallel::InnerOptions inner = optim::SGDOptions{.lr = cfg.lr, .momentum = cfg.momentum};
  if (cfg.optimizer == "adam") inner = optim::AdamOptions{.lr = cfg.lr};
  parallel::ParameterServer ps(
      model->parameters(), inner,
      {.servers = l.servers, .colocated = !l.separate, .process_group = pg});
  const bool worker = ps.is_worker();
  const int64_t param_count = [&] {
    int64_t c = 0;
    for (const Tensor& p : model->parameters()) c += p.numel();
    return c;
  }();
  if (!worker) model.reset();  // a separate server keeps only its shard
  ActivationMeter activations({dev});
  TraceRecorder trace(cfg.trace);
  TimedSteps timing(cfg, fmt::format("{} N={}", label, n), rank == 0);
  std::vector<double> exchange_times;  // push + server step + pull, per timed step
  RunResult r{.mode = label, .n = n, .steps = cfg.steps, .global_batch = cfg.global_batch};
  LinkBytes link_at_start;  // --links netns: the node's link counters when timing starts
  for (int64_t step = 0; step < cfg.steps; ++step) {
    if (timing.is_first_timed(step)) {
      if (netns) link_at_start = link_bytes_settled(*pg);
      pg->reset_comm_stats();
      reset_peak_memory_stats(dev);
    }
    const auto t0 = Clock::now();
    float loss_value = 0;
    if (worker) {
      ps.zero_grad();
      const int w = ps.worker_index();
      const Batch b = work->batch(step, w, n, dev);
      activations.before_forward();
      Tensor loss = work->loss(model->forward(b.x), b.y);
      loss_value = loss.item();
      if (timing.is_timed(step)) activations.after_forward();
      loss.backward();
    }
    const auto t1 = Clock::now();
    ps.step();  // every rank, servers included
    const auto t2 = Clock::now();
    if (worker) trace.add("forward + backward", rank, to_us(t0), to_us(t1));
    trace.add("push, server step, pull", rank, to_us(t1), to_us(t2));
    if (timing.is_timed(step)) exchange_times.push_back(seconds_between(t1, t2));
    timing.end_step(step, seconds_between(t0, t2), loss_value);
  }
  r.timed_steps = timing.count();
  r.seconds = timing.finish();
  if (netns)
    write_link_bytes(run_file(cfg, files, n, rank, "link"), link_at_start, link_bytes_settled(*pg));
  // medians, as the step's: the step waits for all of the exchange
  r.comm_s = r.wait_s = median(exchange_times);
  r.compute_s = std::max(0.0, r.step_s() - r.wait_s);
  const parallel::CommStats stats = pg->comm_stats();
  r.devices.assign(static_cast<size_t>(world), {});
  DeviceFigures& mine = r.devices[static_cast<size_t>(rank)];
  mine.peak_bytes = memory_stats(dev).peak_bytes;
  mine.bytes_sent = stats.total.bytes_sent;
  mine.bytes_received = stats.total.bytes_received;
  for (const char* c : {"ps_push", "ps_pull"})
    if (auto it = stats.per_collective.find(c); it != stats.per_collective.end()) {
      mine.weight_bytes_sent += it->second.bytes_sent;
      mine.weight_bytes_received += it->second.bytes_received;
    }
  const int64_t shard_state = ps.shard_weight_bytes() + ps.optimizer_state_bytes();
  if (worker) {
    fill_memory(mine, model->parameters(), shard_state, 0);
    mine.activation_bytes = activations.bytes(0);
  } else {
    mine.optim_state_bytes = shard_state;
    mine.grad_bytes = ps.shard_weight_bytes();  // the buffer the workers' gradients sum into
  }
  r.param_count = param_count;
  if (rank == 0) {  // rank 0 always trains: separate servers are the last ranks
    const Evaluation ev = work->evaluate(*model, dev);
    r.test_accuracy = ev.accuracy;
    r.test_loss = ev.loss;
    write_params(run_file(cfg, files, n, -1, "params"), flat_params(*model));
  }
  trace.write_fragment(run_file(cfg, files, n, rank, "trace"));
  write_rank_file(run_file(cfg, files, n, rank, "txt"), r, rank);
  parallel::destroy_process_group();
}

}  // namespace

std::string ps_label(int servers, bool separate) {
  return fmt::format("ps-s{}{}", servers, separate ? "-sep" : "");
}

int resolve_servers(const std::string& spec, int n) {
  if (spec == "N") return n;
  char* end = nullptr;
  const long s = std::strtol(spec.c_str(), &end, 10);
  DPLAB_CHECK(end != spec.c_str() && *end == '\0' && s >= 1,
              "--servers: expected counts >= 1 or N, got '{}'", spec);
  return static_cast<int>(s);
}

bool is_ps_label(const std::string& mode) { return mode.rfind("ps-s", 0) == 0; }

int ps_world(const std::string& label, int n) {
  const PsLabel l = parse_label(label);
  return l.separate ? n + l.servers : n;
}

void ps_worker_main(const Config& cfg, const std::string& label, int n) {
  parallel::spawn([&](int rank) { ps_rank(cfg, label, n, rank); }, ps_world(label, n));
}

RunResult run_ps(const Config& cfg, int n, int servers, bool separate, const std::string& self_exe,
                 const std::vector<std::string>& worker_args) {
  const std::string label = ps_label(servers, separate);
  // the plan's own checks, here, so a bad --servers fails before any process starts
  DPLAB_CHECK(separate || servers <= n,
              "--servers {}: expected 1 to N = {} co-located servers (--ps-placement colocated), "
              "got {}",
              servers, n, servers);
  const int world = separate ? n + servers : n;
  for (int r = 0; r < world; ++r) std::filesystem::remove(run_file(cfg, label, n, r, "txt"));
  std::vector<std::string> args = worker_args;
  for (const char* a : {"--worker", label.c_str(), "--worker-n"}) args.emplace_back(a);
  args.push_back(std::to_string(n));
  run_worker_process(self_exe, args, fmt::format("{} N={}", label, n));
  RunResult r{.mode = label, .n = n, .global_batch = cfg.global_batch};
  r.devices.resize(static_cast<size_t>(world));
  for (int rank = 0; rank < world; ++rank)
    read_rank_file(run_file(cfg, label, n, rank, "txt"), r, rank);
  r.servers = servers;
  r.separate_servers = separate;
  return r;
}

}  // namespace dplab::compare
