// 05_collectives: four processes, one shared-memory ring, the collectives DDP is built on.
// What you will learn:
//   - all_reduce: every rank ends with the sum of everyone's tensor (ring, then star)
//   - broadcast: rank 0's tensor everywhere; all_gather: everyone's tensor everywhere
//   - barrier: nobody passes until all have arrived
//   - what each pattern costs: bytes this rank sent / received, next to the textbook
//     formulas (ring: 2(N-1)/N * S per rank; star: (N-1) * S through rank 0)
// Run: ./05_collectives   (forks 4 ranks; see 05_collectives.md for what it prints)
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include <fmt/ranges.h>

#include "framework/tensor/tensor.h"
#include "parallel/rendezvous/file_store.h"
#include "parallel/comm/process_group.h"

using namespace dplab;
using namespace dplab::parallel;

namespace {

constexpr int kRanks = 4;

// Prints rank by rank: rank r prints, then all meet at a barrier, so lines never interleave.
void in_rank_order(ProcessGroup& pg, const std::function<std::string()>& line) {
  for (int r = 0; r < pg.size(); ++r) {
    if (pg.rank() == r) {
      std::printf("%s\n", line().c_str());
      std::fflush(stdout);
    }
    pg.barrier();
  }
}

// Rank r's tensors live on its own logical device cpu:r, as DDP's do (cuda:r on a GPU box).
TensorOptions on_rank(int rank) { return {.device = Device(DeviceKind::CPU, rank)}; }

Tensor ramp(int rank, int64_t n) {  // rank r holds [10r + 0, 10r + 1, ...]
  Tensor t = Tensor::empty({n}, on_rank(rank));
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>(10 * rank + i);
  return t;
}

void rank_main(ProcessGroup& pg) {
  const int r = pg.rank(), n = pg.size();
  auto say = [&](const std::string& s) {
    if (r == 0) std::printf("\n== %s ==\n", s.c_str());
    std::fflush(stdout);
    pg.barrier();
  };

  say("all_reduce (sum, ring): before");
  Tensor x = ramp(r, 4);
  in_rank_order(pg, [&] { return fmt::format("rank {}: {}", r, x); });
  pg.all_reduce(x, ReduceOp::Sum, Algorithm::Ring);
  say("all_reduce (sum, ring): after -- every rank holds the same sum");
  in_rank_order(pg, [&] { return fmt::format("rank {}: {}", r, x); });

  say("all_reduce (avg, star): after, from the same inputs");
  Tensor y = ramp(r, 4);
  pg.all_reduce(y, ReduceOp::Avg, Algorithm::Star);
  in_rank_order(pg, [&] { return fmt::format("rank {}: {}", r, y); });

  say("broadcast from rank 0: after");
  Tensor b = ramp(r, 3);
  pg.broadcast(b, 0);
  in_rank_order(pg, [&] { return fmt::format("rank {}: {}", r, b); });

  say("all_gather: rank r's [r, r] lands in slot r everywhere");
  std::vector<Tensor> slots;
  for (int i = 0; i < n; ++i) slots.push_back(Tensor::empty({2}, on_rank(r)));
  Tensor mine = Tensor::empty({2}, on_rank(r));
  mine.fill_(r);
  pg.all_gather(slots, mine);
  in_rank_order(pg, [&] {
    std::string s = fmt::format("rank {}:", r);
    for (auto& t : slots) s += fmt::format(" [{}]", fmt::join(t.to_vector<float>(), ", "));
    return s;
  });

  say("barrier: rank r sleeps 100*r ms first; all leave together");
  auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(100 * r));
  pg.barrier();
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  in_rank_order(pg, [&] { return fmt::format("rank {}: left the barrier after {:.0f} ms", r, waited * 1e3); });

  // Traffic: one all-reduce of S = 1 MiB each way, counters reset before each.
  say("traffic of one all_reduce of S = 1 MiB (1048576 bytes)");
  const int64_t S = 1 << 20;
  Tensor g = Tensor::empty({S / 4}, on_rank(r));
  g.fill_(1.0);
  for (Algorithm a : {Algorithm::Ring, Algorithm::Star}) {
    pg.reset_comm_stats();
    pg.all_reduce(g, ReduceOp::Sum, a);
    CollectiveStats s = pg.comm_stats().per_collective.at("all_reduce");
    in_rank_order(pg, [&] {
      int64_t expect = a == Algorithm::Ring ? 2 * (n - 1) * S / n : (r == 0 ? (n - 1) * S : S);
      return fmt::format("{} rank {}: sent {:>8} received {:>8} bytes   formula {:>8} ({})",
                         algorithm_name(a), r, s.bytes_sent, s.bytes_received, expect,
                         a == Algorithm::Ring ? "2(N-1)/N*S"
                                              : (r == 0 ? "(N-1)*S, the server" : "S, a worker"));
    });
  }
}

}  // namespace

int main() {
  const std::string store_path = fmt::format("/tmp/dplab-tutorial05-{}", getpid());
  std::filesystem::remove(store_path);
  std::fflush(stdout);
  std::vector<pid_t> children;
  for (int r = 0; r < kRanks; ++r) {
    pid_t pid = fork();  // no CUDA in this program, so fork is safe
    if (pid == 0) {
      int code = 0;
      try {
        auto store = std::make_shared<FileStore>(store_path, kRanks);
        auto pg = create_process_group(store, r, kRanks, {.engine = "ring"});
        rank_main(*pg);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 1;
      }
      std::fflush(stdout);
      _exit(code);
    }
    children.push_back(pid);
  }
  int failed = 0;
  for (pid_t p : children) {
    int status = 0;
    waitpid(p, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::filesystem::remove(store_path);
  return failed ? 1 : 0;
}
