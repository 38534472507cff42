// test_all_reduce_algorithms.cpp: recursive doubling, halving-doubling (Rabenseifner),
// one-shot and auto beside the ring, ranks as threads, N = 1..8 (powers of two and the folded cases):
// every rank ends with the serial reference and with exactly what the ring gives, for sizes
// 0, 1, N-1, primes and several transport segments, float32 / int64 / float16, sum, avg,
// max and min; the traffic counters equal cost.cpp's formulas and the textbook volumes;
// the alpha-beta model's times and auto's choice follow the formulas of cost.h; and an
// all-reduce on one rank, and DDP on one rank, cost nothing.
// Read next: test_collectives_threads.cpp (the other collectives).
#include <doctest/doctest.h>

#include <cmath>

#include "framework/nn/layers.h"
#include "framework/ops/ops.h"
#include "framework/tensor/random.h"
#include "framework/tensor/tensor.h"
#include "parallel/algorithms/collectives.h"
#include "parallel/algorithms/cost.h"
#include "parallel/comm/process_group.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/transport/mailbox_transport.h"
#include "tests/parallel/collective_test_util.h"
#include "tests/parallel/rank_harness.h"

using namespace dplab;
using namespace dplab::parallel;
using dplab::parallel::testing::make;
using dplab::parallel::testing::reference;
using dplab::parallel::testing::run_threads;

namespace {

const Algorithm kNew[] = {Algorithm::RecursiveDoubling, Algorithm::HalvingDoubling,
                          Algorithm::OneShot, Algorithm::Auto};

// Sizes for n ranks: empty, one element, n-1 (fewer than ranks: some chunks empty), primes,
// and more than two transport segments (the prime 98317 floats = 3 segments + a bit).
std::vector<int64_t> sizes_for(int n) { return {0, 1, n - 1, 13, 1009, 98317}; }

// make<float> in dtype d (small integers: exact in float16 too, so sums compare with ==).
Tensor input(int rank, int64_t n, DType d, int salt) {
  Tensor t = d == DType::Int64 ? make<int64_t>(rank, n, salt) : make<float>(rank, n, salt);
  return d == DType::Float16 ? t.to(DType::Float16) : t;
}
std::vector<double> values(const Tensor& t) {
  std::vector<double> out;
  if (t.dtype() == DType::Int64)
    for (int64_t v : t.to_vector<int64_t>()) out.push_back(double(v));
  else
    for (float v : (t.dtype() == DType::Float16 ? t.to(DType::Float32) : t).to_vector<float>())
      out.push_back(double(v));
  return out;
}
std::vector<double> expected(DType d, ReduceOp op, int n, int64_t size, int salt) {
  std::vector<double> out;
  if (d == DType::Int64)
    for (int64_t v : reference<int64_t>(op, n, size, salt)) out.push_back(double(v));
  else
    for (float v : reference<float>(op, n, size, salt)) out.push_back(double(v));
  return out;
}

}  // namespace

TEST_CASE("power_of_two_below and the fold: P ranks remain, each real rank once") {
  CHECK(power_of_two_below(1) == 1);
  CHECK(power_of_two_below(7) == 4);
  CHECK(power_of_two_below(8) == 8);
  for (int n = 1; n <= 9; ++n) {
    CAPTURE(n);
    const int p = power_of_two_below(n);
    std::vector<int> seen(n, 0);
    for (int v = 0; v < p; ++v) {
      const int r = unfolded_rank(v, n);
      REQUIRE(r >= 0);
      REQUIRE(r < n);
      CHECK(folded_rank(r, n) == v);
      ++seen[r];
    }
    int away = 0;
    for (int r = 0; r < n; ++r) away += folded_rank(r, n) < 0 ? 1 : 0;
    CHECK(away == n - p);  // the even ones of the N-P pairs wait
  }
}

TEST_CASE("recursive doubling, halving-doubling, one-shot, auto: equal to the reference and to the "
          "ring, N = 1..8") {
  for (int n = 1; n <= 8; ++n)
    for (DType d : {DType::Float32, DType::Int64, DType::Float16}) {
      CAPTURE(n);
      CAPTURE(dtype_name(d));
      std::vector<ReduceOp> ops{ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min};
      if (d == DType::Float32) ops.push_back(ReduceOp::Avg);
      // got[rank][case] for the ring and for each new algorithm, in the same case order
      std::vector<std::vector<std::vector<double>>> ring(n), other(n);
      std::vector<std::string> cases;
      run_threads(n, [&](ProcessGroup& pg) {
        const int r = pg.rank();
        for (int64_t size : sizes_for(n))
          for (ReduceOp op : ops) {
            const int salt = int(size % 7);
            Tensor t = input(r, size, d, salt);
            pg.all_reduce(t, op, Algorithm::Ring);
            for (Algorithm a : kNew) {
              Tensor u = input(r, size, d, salt);
              pg.all_reduce(u, op, a);
              ring[r].push_back(values(t));
              other[r].push_back(values(u));
              if (r == 0)
                cases.push_back(
                    fmt::format("{} {} size {}", algorithm_name(a), reduce_op_name(op), size));
            }
          }
      });
      size_t k = 0;
      for (int64_t size : sizes_for(n))
        for (ReduceOp op : ops) {
          const auto want = expected(d, op, n, size, int(size % 7));
          for (size_t a = 0; a < std::size(kNew); ++a, ++k)
            for (int r = 0; r < n; ++r) {
              CAPTURE(cases[k]);
              CAPTURE(r);
              CHECK(ring[r][k] == want);
              CHECK(other[r][k] == ring[r][k]);
            }
        }
    }
}

TEST_CASE("the new algorithms on general floats: every rank ends with the same bits") {
  // Non-integer values: the sum depends on its order, but each algorithm reduces every
  // element in one order that all ranks share (a + b == b + a), so the ranks agree exactly.
  for (int n : {3, 4, 6}) {
    std::vector<std::vector<std::vector<float>>> got(n);
    run_threads(n, [&](ProcessGroup& pg) {
      for (Algorithm a : kNew) {
        Tensor t = Tensor::empty({40001});
        float* p = t.data<float>();
        for (int64_t i = 0; i < t.numel(); ++i)
          p[i] = std::sin(0.37f * float(i) + float(pg.rank()));
        pg.all_reduce(t, ReduceOp::Sum, a);
        got[pg.rank()].push_back(t.to_vector<float>());
      }
    });
    for (int r = 1; r < n; ++r) CHECK(got[r] == got[0]);
  }
}

TEST_CASE("counters: each algorithm moves exactly cost.cpp's bytes, and the textbook's") {
  for (int n = 1; n <= 8; ++n)
    for (int64_t elems : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{12001}, int64_t{8 * 3000}}) {
      CAPTURE(n);
      CAPTURE(elems);
      const int64_t S = elems * 4;
      std::vector<std::map<std::string, Traffic>> got(n);
      std::vector<std::string> auto_ran(n);
      run_threads(n, [&](ProcessGroup& pg) {
        for (Algorithm a : kNew) {
          Tensor t = make<float>(pg.rank(), elems);
          pg.reset_comm_stats();
          pg.all_reduce(t, ReduceOp::Sum, a);
          // a copy: comm_stats() returns its stats by value, a reference would dangle
          const CollectiveStats s = pg.comm_stats().per_collective.at("all_reduce");
          got[pg.rank()][algorithm_name(a)] = {s.bytes_sent, s.bytes_received};
        }
        auto_ran[pg.rank()] = pg.all_reduce_algorithm(S, Algorithm::Auto);
      });
      const int p = power_of_two_below(n), steps = int(std::lround(std::log2(p)));
      const Algorithm picked = choose_all_reduce(n, double(S), shm_link_cost(cpu_cores()));
      for (int r = 0; r < n; ++r) {
        CAPTURE(r);
        const Traffic rd = got[r].at("recursive_doubling"), hd = got[r].at("halving_doubling");
        const Traffic au = got[r].at("auto"), os = got[r].at("one_shot");
        CHECK(rd.sent == recursive_doubling_cost(S, r, n).sent);
        CHECK(rd.received == recursive_doubling_cost(S, r, n).received);
        CHECK(hd.sent == halving_doubling_cost(S, 4, r, n).sent);
        CHECK(hd.received == halving_doubling_cost(S, 4, r, n).received);
        CHECK(os.sent == one_shot_cost(S, n).sent);
        CHECK(os.received == one_shot_cost(S, n).received);
        CHECK(os.sent == (n - 1) * S);  // the textbook: my buffer to each of the others
        CHECK(os.received == (n - 1) * S);
        CHECK(au.sent == all_reduce_cost(picked, S, 4, r, n).sent);
        CHECK(au.received == all_reduce_cost(picked, S, 4, r, n).received);
        CHECK(auto_ran[r] == "auto:" + algorithm_name(picked));
        // the textbook: log2(P)·S per rank; the fold's pairs: S (even), (log2 P + 1)·S (odd)
        const bool pair = r < 2 * (n - p);
        const int64_t rd_book = n == 1 ? 0 : !pair ? steps * S : r % 2 == 0 ? S : (steps + 1) * S;
        CHECK(rd.sent == rd_book);
        CHECK(rd.received == rd_book);
        // Rabenseifner: 2(P-1)/P·S when P divides the elements, plus S for the fold's pairs
        if (elems % p == 0 && n > 1) {
          const int64_t hd_book = !pair        ? 2 * (p - 1) * S / p
                                  : r % 2 == 0 ? S
                                               : 2 * (p - 1) * S / p + S;
          CHECK(hd.sent == hd_book);
          CHECK(hd.received == hd_book);
        }
      }
    }
}

TEST_CASE("the alpha-beta model: the formulas of cost.h, time-sharing, and auto's choice") {
  const LinkCost wide{.alpha = 2e-6, .beta = 1e-9, .cores = 64};  // a core per rank
  const double S = 1 << 20;
  auto near = [](double a, double b) { return std::fabs(a - b) <= 1e-12 + 1e-9 * std::fabs(b); };
  for (int n : {2, 4, 8}) {
    CAPTURE(n);
    const double k = std::log2(n);
    CHECK(near(all_reduce_seconds(Algorithm::Ring, n, S, wide),
               2 * (n - 1) * 2e-6 + 2.0 * (n - 1) / n * S * 1e-9));
    CHECK(
        near(all_reduce_seconds(Algorithm::RecursiveDoubling, n, S, wide), k * (2e-6 + S * 1e-9)));
    CHECK(near(all_reduce_seconds(Algorithm::HalvingDoubling, n, S, wide),
               2 * k * 2e-6 + 2.0 * (n - 1) / n * S * 1e-9));
    CHECK(near(all_reduce_seconds(Algorithm::Star, n, S, wide), 2 * (n - 1) * (2e-6 + S * 1e-9)));
    CHECK(near(all_reduce_seconds(Algorithm::OneShot, n, S, wide), (n - 1) * (2e-6 + S * 1e-9)));
  }
  // the fold: N = 3 is P = 2 plus a fold and an unfold on the critical path
  CHECK(near(all_reduce_seconds(Algorithm::RecursiveDoubling, 3, S, wide), 3 * (2e-6 + S * 1e-9)));
  // more ranks than cores: a ring whose ranks all work every step slows by N / cores ...
  LinkCost two = wide;
  two.cores = 2;
  CHECK(near(all_reduce_seconds(Algorithm::Ring, 4, S, two),
             2 * all_reduce_seconds(Algorithm::Ring, 4, S, wide)));
  CHECK(near(all_reduce_seconds(Algorithm::Ring, 3, S, two),
             1.5 * all_reduce_seconds(Algorithm::Ring, 3, S, wide)));
  // ... while the star's leaves idle and leave the cores to rank 0: its path stays the bound
  CHECK(near(all_reduce_seconds(Algorithm::Star, 4, S, two),
             all_reduce_seconds(Algorithm::Star, 4, S, wide)));
  // ... and on a wire (a NIC, an emulated link) the bytes' time is the wire's: only the
  // hand-offs time-share, 4 ranks x 6 steps x alpha over 2 cores, here below the path
  LinkCost wired = two;
  wired.wire = true;
  CHECK(near(all_reduce_seconds(Algorithm::Ring, 4, S, wired),
             all_reduce_seconds(Algorithm::Ring, 4, S, wide)));
  wired.alpha = 1e-3;  // hand-offs that cost more than the bytes: the cores bound again
  CHECK(near(all_reduce_seconds(Algorithm::Ring, 4, S, wired), 4 * 6 * 1e-3 / 2));
  CHECK(all_reduce_seconds(Algorithm::Ring, 1, S, two) == 0);
  CHECK(all_reduce_seconds(Algorithm::Ring, 4, 0, two) == 0);
  // gamma: the bytes each rank adds in, (N-1)/N·S for the ring, log2(P)·S for recursive doubling
  LinkCost reducing = wide;
  reducing.gamma = 0.5e-9;
  CHECK(near(all_reduce_seconds(Algorithm::Ring, 4, S, reducing),
             all_reduce_seconds(Algorithm::Ring, 4, S, wide) + 0.75 * S * 0.5e-9));
  CHECK(near(all_reduce_seconds(Algorithm::RecursiveDoubling, 4, S, reducing),
             all_reduce_seconds(Algorithm::RecursiveDoubling, 4, S, wide) + 2 * S * 0.5e-9));
  // wake-ups: with more ranks than cores, each hand-off (a segment of a step) in which more
  // ranks must run than there are cores costs `wake`, and every call at least one
  LinkCost waking = two;
  waking.wake = 30e-6;
  const double seg_S = S / waking.segment;  // 8 segments of 128 KiB
  auto extra = [&](Algorithm a, int n, double bytes) {
    return all_reduce_seconds(a, n, bytes, waking) - all_reduce_seconds(a, n, bytes, two);
  };
  CHECK(near(extra(Algorithm::Ring, 4, S), 6 * 2 * 30e-6));  // 6 steps of S/4: 2 segments each
  CHECK(near(extra(Algorithm::Ring, 3, S), 4 * 3 * 30e-6));  // 4 steps of S/3: 3 segments each
  CHECK(
      near(extra(Algorithm::RecursiveDoubling, 4, S), 2 * seg_S * 30e-6));  // 2 swaps of S, 4 ranks
  CHECK(near(extra(Algorithm::RecursiveDoubling, 3, S), 30e-6));  // P = 2 and the pair fit: the one
  CHECK(near(extra(Algorithm::HalvingDoubling, 3, S), 30e-6));    // wake-up every call has
  CHECK(near(extra(Algorithm::HalvingDoubling, 4, S),
             (2 * 4 + 2 * 2) * 30e-6));                             // S/2 and S/4, twice
  CHECK(near(extra(Algorithm::OneShot, 4, S), 3 * seg_S * 30e-6));  // a wait on each of 3 peers
  CHECK(near(extra(Algorithm::Star, 4, S), 2 * seg_S * 30e-6));
  CHECK(near(extra(Algorithm::OneShot, 4, 4096), 3 * 30e-6));
  CHECK(extra(Algorithm::Ring, 2, S) == 0);  // a core per rank: no wake-ups
  // auto with a core per rank: small messages at N = 3 take the one-shot (2 waits against the
  // fold's 3 steps), at N = 4 recursive doubling (2 steps against 3 waits)
  CHECK(choose_all_reduce(3, 4096, wide) == Algorithm::OneShot);
  CHECK(choose_all_reduce(4, 4096, wide) == Algorithm::RecursiveDoubling);
  // without wake-ups on 2 cores: large ones at N = 3 the ring (the fold costs 2 S); at N = 4
  // halving-doubling (the ring's bytes in fewer steps)
  CHECK(choose_all_reduce(4, 4096, two) == Algorithm::RecursiveDoubling);
  CHECK(choose_all_reduce(3, 64 << 20, two) == Algorithm::Ring);
  CHECK(choose_all_reduce(4, 64 << 20, two) == Algorithm::HalvingDoubling);
  CHECK(choose_all_reduce(4, 4096, waking) == Algorithm::RecursiveDoubling);  // 2 waits, not 3
  CHECK(choose_all_reduce(4, 64 << 20, waking) == Algorithm::HalvingDoubling);
  // the shm transport's constants on 2 cores: at N = 2, recursive doubling for small sizes
  // and, once reducing S costs more than a step, the ring (it reduces S/2, not S); with 3
  // or 4 ranks recursive doubling for small sizes (fewer crowded waits than the one-shot's
  // N-1); at N = 3 halving-doubling for large ones, whose core steps run 2 ranks on 2 cores
  // where the ring's 3 wait for a core 4 times a segment
  LinkCost shm = shm_link_cost(2);  // 2 cores
  CHECK(choose_all_reduce(2, 4096, shm) == Algorithm::RecursiveDoubling);
  CHECK(choose_all_reduce(2, 64 << 20, shm) == Algorithm::Ring);
  CHECK(choose_all_reduce(3, 4096, shm) == Algorithm::RecursiveDoubling);
  CHECK(choose_all_reduce(4, 4096, shm) == Algorithm::RecursiveDoubling);
  CHECK(choose_all_reduce(3, 64 << 20, shm) == Algorithm::HalvingDoubling);
  CHECK_THROWS_WITH_AS(all_reduce_seconds(Algorithm::Auto, 2, S, two),
                       doctest::Contains("resolve auto"), Error);
}

TEST_CASE("algorithms by name: engines and per-call names; a bad name lists the good ones") {
  for (Algorithm a : kAlgorithms) CHECK(algorithm_from_name(algorithm_name(a)) == a);
  CHECK_THROWS_WITH_AS(algorithm_from_name("tree"),
                       doctest::Contains("halving_doubling, one_shot, hierarchical or auto"),
                       Error);
  for (const char* engine : {"recursive_doubling", "halving_doubling", "one_shot", "auto"}) {
    CAPTURE(engine);
    std::vector<std::vector<float>> got(3);
    std::vector<std::string> ran(3);
    run_threads(
        3,
        [&](ProcessGroup& pg) {
      CHECK(pg.engine() == engine);
      Tensor t = make<float>(pg.rank(), 77);
      pg.all_reduce(t);  // the group's algorithm
      got[pg.rank()] = t.to_vector<float>();
      ran[pg.rank()] = pg.all_reduce_algorithm(t.nbytes());
        },
        {.engine = engine});
    for (int r = 0; r < 3; ++r) {
      CHECK(got[r] == reference<float>(ReduceOp::Sum, 3, 77));
      CHECK(ran[r].find(std::string(engine) == "auto" ? "auto:" : engine) == 0);
    }
  }
}

TEST_CASE("an all-reduce on one rank costs nothing: no bytes, the tensor untouched, even for avg") {
  run_threads(1, [](ProcessGroup& pg) {
    for (Algorithm a : kAlgorithms) {
      Tensor t = make<float>(0, 1000);
      const void* before = t.raw_data();
      pg.all_reduce(t, ReduceOp::Avg, a);
      CHECK(t.raw_data() == before);
      CHECK(t.to_vector<float>() == make<float>(0, 1000).to_vector<float>());
    }
    CHECK(pg.comm_stats().total.bytes_sent == 0);
    CHECK(pg.comm_stats().total.bytes_received == 0);
  });
}

TEST_CASE(
    "DDP on one rank stands aside: no bucket copies, no hook, the single device's gradients") {
  run_threads(1, [](ProcessGroup& pg) {
    manual_seed(3);
    auto plain = std::make_shared<nn::Linear>(7, 5);
    manual_seed(3);
    auto wrapped = std::make_shared<nn::Linear>(7, 5);
    int hook_calls = 0;
    DistributedDataParallel ddp(wrapped, {.process_group = testing::borrow(pg),
                                          .comm_hook = [&](ProcessGroup& g, Tensor& b) {
                                            ++hook_calls;
                                            return g.all_reduce_async(b, ReduceOp::Avg);
                                          }});
    Tensor x = randn({4, 7});
    plain->forward(x).sum().backward();
    ddp.forward(x).sum().backward();
    CHECK(hook_calls == 0);
    CHECK(ddp.reducer().reductions_launched() == 0);
    const auto a = plain->parameters(), b = wrapped->parameters();
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i)
      CHECK(a[i].grad().to_vector<float>() == b[i].grad().to_vector<float>());
  });
}

TEST_CASE("waits spin long only while every rank has a core of its own") {
  if (std::getenv("DPLAB_WAIT") != nullptr) return;  // the user's policy, for measuring
  const WaitPolicy alone = wait_policy(1), crowded = wait_policy(1 << 20);
  CHECK(alone.spin_us > crowded.spin_us);
  CHECK(crowded.spin_us <= 5);
  CHECK(crowded.yield_us > 0);  // yields (until a yield loses the core to another program)
}
