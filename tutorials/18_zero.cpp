// Tutorial 18: ZeRO, the optimizer state (and the gradients) split across ranks.
// What you will learn:
//   - what each rank holds in plain DDP with Adam, byte by byte: parameters 4P, gradients 4P,
//     DDP's buckets 4P, Adam's two moments 8P; and what ZeRO stage 1 and 2 take away;
//   - that ZeRO moves the same bytes as DDP's all-reduce (a reduce-scatter + an all-gather),
//     but in more, smaller collectives: free in bandwidth, not in latency;
//   - a wide MLP (20M parameters, Adam) under a per-device memory cap: plain DDP runs out of
//     memory, ZeRO-2 trains.
// Ranks are threads on logical devices cpu:0..N-1 (each with its own memory counters).
// Run: 18_zero [--ranks 4] [--cap 320M] [--no-wide]. Read 18_zero.md.
#include <fmt/core.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "framework/dplab.h"
#include "framework/tensor/memory_cap.h"
#include "models/mlp.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/rendezvous/hash_store.h"
#include "parallel/zero/zero_redundancy_optimizer.h"

using namespace dplab;
namespace par = dplab::parallel;

namespace {

// N ranks as threads, one process group each; the first rank's exception is rethrown.
void run_ranks(int n, const std::function<void(par::ProcessGroup&)>& body) {
  auto store = std::make_shared<par::HashStore>(par::Seconds(30.0));
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        auto pg = par::create_process_group(store, r, n, {.timeout = par::Seconds(30.0)});
        body(*pg);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)  // out of memory first: the others may only have waited for that rank
    if (e) try {
        std::rethrow_exception(e);
      } catch (const OutOfMemoryError&) {
        throw;
      } catch (...) {
      }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

struct Held {
  int64_t params = 0, grads = 0, state = 0, buckets = 0, allocated = 0, peak = 0, sent = 0, calls = 0;
};

// One training step of `init`'s model on rank pg.rank() with stage 0 (DDP + Adam), 1 or 2
// (ZeRO + Adam, no DDP); returns what the rank's device holds after optimizer.step().
// cap > 0: the rank's device is capped once its model has moved there (models are built on
// cpu:0, rank 0's device, before they move).
Held one_step(par::ProcessGroup& pg, const StateDict& init, const std::vector<int64_t>& hidden, int stage,
              int64_t batch, int64_t cap = 0) {
  const Device dev(DeviceKind::CPU, pg.rank());
  auto model = std::make_shared<models::MLP>(784, hidden, 10);
  model->load_state_dict(init);
  model->to(dev);
  pg.barrier();  // every model has left cpu:0
  set_memory_cap(dev, cap);
  std::shared_ptr<par::ProcessGroup> group(&pg, [](par::ProcessGroup*) {});
  std::shared_ptr<nn::Module> net = model;
  std::shared_ptr<par::DistributedDataParallel> ddp;
  std::unique_ptr<optim::Optimizer> opt;
  par::ZeroRedundancyOptimizer* zero = nullptr;
  if (stage == 0) {
    net = ddp = std::make_shared<par::DistributedDataParallel>(model, par::DDPOptions{.process_group = group});
    opt = std::make_unique<optim::Adam>(net->parameters(), optim::AdamOptions{.lr = 1e-3});
  } else {
    auto z = std::make_unique<par::ZeroRedundancyOptimizer>(model->parameters(), optim::AdamOptions{.lr = 1e-3},
                                                           par::ZeroOptions{.stage = stage, .process_group = group});
    zero = z.get();
    opt = std::move(z);
  }
  Generator g(pg.rank());
  Tensor x = randn({batch, 784}, {}, &g).to(dev);
  Tensor y = full({batch}, 3.0, {.dtype = DType::Int64}).to(dev);
  pg.reset_comm_stats();
  reset_peak_memory_stats(dev);
  cross_entropy(net->forward(x), y).backward();
  opt->step();
  Held h;
  for (const Tensor& p : model->parameters()) {
    h.params += p.nbytes();
    if (p.grad().defined()) h.grads += p.grad().nbytes();
  }
  if (zero) {
    h.grads += zero->gradient_shard_bytes();
    h.state = zero->optimizer_state_bytes();
  } else {
    StateDict sd;
    Metadata meta;
    opt->state_dict(sd, meta);
    for (const auto& [k, t] : sd) h.state += t.nbytes();
    for (const par::Bucket& b : ddp->reducer().buckets()) h.buckets += b.flat.nbytes();
  }
  h.allocated = memory_stats(dev).allocated_bytes;
  h.peak = memory_stats(dev).peak_bytes;
  h.sent = pg.comm_stats().total.bytes_sent;
  for (const auto& [name, s] : pg.comm_stats().per_collective) h.calls += s.calls;
  return h;
}

// On cpu:63, a device no rank uses, so the ranks' counters hold only their own bytes.
StateDict initial_weights(const std::vector<int64_t>& hidden) {
  manual_seed(0);
  models::MLP m(784, hidden, 10);
  m.to(Device(DeviceKind::CPU, 63));
  return m.state_dict();
}

}  // namespace

int run(int argc, char** argv) {
  int n = 4;
  std::string cap = "320M";
  bool wide = true;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--ranks") && i + 1 < argc) n = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--cap") && i + 1 < argc) cap = argv[++i];
    else if (!std::strcmp(argv[i], "--no-wide")) wide = false;
  }
  bool ok = true;
  // ---- 1. the memory table: MLP 784-256-128-10, Adam, N ranks ----
  const std::vector<int64_t> hidden{256, 128};
  const StateDict init = initial_weights(hidden);
  int64_t P = 0;
  for (const auto& [k, t] : init) P += t.numel();
  fmt::print("MLP 784-256-128-10: P = {} parameters, {} bytes; Adam; N = {} ranks\n\n", P, 4 * P, n);
  fmt::print("{:<7} {:>4} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>6}\n", "stage", "rank", "params", "grads",
             "adam m+v", "buckets", "allocated", "sent", "calls");
  std::vector<std::vector<Held>> held(3, std::vector<Held>(n));
  for (int stage = 0; stage <= 2; ++stage) {
    std::mutex mu;
    run_ranks(n, [&](par::ProcessGroup& pg) {
      Held h = one_step(pg, init, hidden, stage, 8);
      std::lock_guard lock(mu);
      held[stage][pg.rank()] = h;
    });
    for (int r = 0; r < n; ++r) {
      const Held& h = held[stage][r];
      fmt::print("{:<7} {:>4} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>6}\n",
                 stage == 0 ? "DDP" : stage == 1 ? "ZeRO-1" : "ZeRO-2", r, h.params, h.grads, h.state, h.buckets,
                 h.allocated, h.sent, h.calls);
      // the claims of 18_zero.md, checked: Adam's state is 8 bytes per parameter this rank steps
      int64_t shard = 0;
      for (const auto& [k, t] : init) shard += par::chunk_elems(t.numel(), n, r);
      const int64_t state = stage == 0 ? 8 * P : 8 * shard, grads = stage == 2 ? 4 * shard : 4 * P;
      ok = ok && h.params == 4 * P && h.state == state && h.grads == grads;
    }
  }
  // ---- 2. traffic: the same bytes ----
  const int64_t textbook = 2 * (n - 1) * 4 * P / n;
  fmt::print("\nsent per rank per step: DDP {} bytes, ZeRO-1 {}, ZeRO-2 {}; 2(N-1)/N x 4P = {}\n",
             held[0][0].sent, held[1][0].sent, held[2][0].sent, textbook);
  fmt::print("collectives per step: DDP {} (one bucket), ZeRO {} (a reduce-scatter and an all-gather per "
             "parameter tensor)\n", held[0][0].calls, held[2][0].calls);
  for (int stage = 1; stage <= 2; ++stage)
    ok = ok && std::abs(held[stage][0].sent - held[0][0].sent) <= 4 * 2 * (n - 1) * 6;  // <= one element per tensor
  // ---- 3. a wide MLP under a memory cap ----
  if (wide) {
    const std::vector<int64_t> wide_hidden{4096, 4096};
    const StateDict wide_init = initial_weights(wide_hidden);
    int64_t W = 0;
    for (const auto& [k, t] : wide_init) W += t.numel();
    const int64_t cap_bytes = parse_memory_size(cap);
    fmt::print("\nMLP 784-4096-4096-10: {} parameters ({}), Adam, batch 16 per rank; cpu:0..{} {}\n", W,
               format_bytes(4 * W), n - 1, cap_bytes ? "each capped at " + format_bytes(cap_bytes) : "not capped");
    for (int stage : {0, 2}) {
      const char* name = stage == 0 ? "plain DDP" : "ZeRO-2";
      try {
        std::vector<int64_t> peaks(n);
        run_ranks(n, [&](par::ProcessGroup& pg) { peaks[pg.rank()] = one_step(pg, wide_init, wide_hidden, stage, 16, cap_bytes).peak; });
        fmt::print("{}: trains; peak per rank {}\n", name, format_bytes(*std::max_element(peaks.begin(), peaks.end())));
        ok = ok && (stage == 2 || cap_bytes == 0);
      } catch (const OutOfMemoryError& e) {
        std::string what = e.what();
        fmt::print("{}: {}\n", name, what.substr(what.find("cpu:")));
        ok = ok && stage == 0;
      }
      for (int r = 0; r < n; ++r) set_memory_cap(Device(DeviceKind::CPU, r), 0);  // models are built on cpu:0
    }
  }
  fmt::print("\n{}\n", ok ? "every claim above checked" : "SOME CLAIM FAILED");
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // bad arguments, DPLAB_DEVICE_MEMORY too small, ...
    fmt::print(stderr, "18_zero: {}\n", e.what());
    return 1;
  }
}
