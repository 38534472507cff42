// test_collectives_threads.cpp: every collective, ranks as threads (thread transport),
// against a serial reference computed in the test: N = 1..4, sizes that do not divide by N,
// zero size, several transport segments, float32 and int64, async handles, the exact
// traffic counters of ring and star, and a failing rank. Fast: the protocol, not the memory.
// Read next: test_collectives_shm.cpp (the same over real processes).
#include <doctest/doctest.h>

#include <chrono>

#include "framework/tensor/tensor.h"
#include "parallel/algorithms/cost.h"
#include "parallel/comm/process_group.h"
#include "parallel/engines/collective_engine.h"
#include "parallel/transport/mailbox_transport.h"
#include "tests/parallel/collective_test_util.h"
#include "tests/parallel/rank_harness.h"

using namespace dplab;
using namespace dplab::parallel;
using dplab::parallel::testing::run_threads;

using dplab::parallel::testing::GatherScatterBuffers;
using dplab::parallel::testing::make;
using dplab::parallel::testing::reference;
using dplab::parallel::testing::value;

namespace {

// Sizes: empty, one element, fewer elements than ranks, odd, and > 2 segments per chunk.
const int64_t kSizes[] = {0, 1, 3, 1001, 3 * static_cast<int64_t>(kSegmentBytes / 4) + 17};

template <typename T>
void check_all_reduce(int n, Algorithm algo, ReduceOp op) {
  for (int64_t size : kSizes) {
    CAPTURE(n);
    CAPTURE(size);
    CAPTURE(algorithm_name(algo));
    CAPTURE(reduce_op_name(op));
    std::vector<std::vector<T>> got(n);
    run_threads(n, [&](ProcessGroup& pg) {
      Tensor t = make<T>(pg.rank(), size);
      pg.all_reduce(t, op, algo);
      got[pg.rank()] = t.to_vector<T>();
    });
    auto ref = reference<T>(op, n, size);
    for (int r = 0; r < n; ++r) CHECK(got[r] == ref);
  }
}

}  // namespace

TEST_CASE("chunk split: the first n % parts chunks are one element longer") {
  CHECK(chunk_elems(10, 4, 0) == 3);
  CHECK(chunk_elems(10, 4, 1) == 3);
  CHECK(chunk_elems(10, 4, 2) == 2);
  CHECK(chunk_elems(10, 4, 3) == 2);
  CHECK(chunk_offset(10, 4, 2) == 6);
  CHECK(chunk_offset(10, 4, 3) == 8);
  CHECK(chunk_offset(2, 4, 3) == 2);
  CHECK(chunk_elems(2, 4, 3) == 0);
}

TEST_CASE("all_reduce ring and star, sum/avg/max/min, float32, N = 1..4") {
  for (int n = 1; n <= 4; ++n)
    for (Algorithm a : {Algorithm::Ring, Algorithm::Star})
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min})
        check_all_reduce<float>(n, a, op);
}

TEST_CASE("all_reduce ring and star on int64; avg on int64 is refused") {
  for (int n = 1; n <= 4; ++n)
    for (Algorithm a : {Algorithm::Ring, Algorithm::Star})
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min})
        check_all_reduce<int64_t>(n, a, op);
  run_threads(1, [](ProcessGroup& pg) {
    Tensor t = make<int64_t>(0, 4);
    CHECK_THROWS_WITH_AS(pg.all_reduce(t, ReduceOp::Avg), doctest::Contains("avg needs float32"),
                         Error);
  });
}

TEST_CASE("broadcast from every root, and reduce to every root") {
  for (int n = 1; n <= 4; ++n)
    for (int root = 0; root < n; ++root)
      for (int64_t size : kSizes) {
        CAPTURE(n);
        CAPTURE(root);
        CAPTURE(size);
        std::vector<std::vector<float>> bcast(n), red(n);
        run_threads(n, [&](ProcessGroup& pg) {
          Tensor t = make<float>(pg.rank(), size);
          pg.broadcast(t, root);
          bcast[pg.rank()] = t.to_vector<float>();
          Tensor u = make<float>(pg.rank(), size, 1);
          pg.reduce(u, root, ReduceOp::Sum);
          red[pg.rank()] = u.to_vector<float>();
        });
        for (int r = 0; r < n; ++r) {
          CHECK(bcast[r] == make<float>(root, size).to_vector<float>());
          if (r == root) CHECK(red[r] == reference<float>(ReduceOp::Sum, n, size, 1));
          else CHECK(red[r] == make<float>(r, size, 1).to_vector<float>());  // untouched
        }
      }
}

TEST_CASE(
    "reduce with the average at every root: the root divides by N, the others are untouched") {
  for (int n = 1; n <= 4; ++n)
    for (int root = 0; root < n; ++root) {
      CAPTURE(n);
      CAPTURE(root);
      const int64_t size = 13;  // does not divide by 2, 3 or 4
      std::vector<std::vector<float>> red(n);
      run_threads(n, [&](ProcessGroup& pg) {
        Tensor u = make<float>(pg.rank(), size, 2);
        pg.reduce(u, root, ReduceOp::Avg);
        red[pg.rank()] = u.to_vector<float>();
      });
      auto want = reference<float>(ReduceOp::Avg, n, size, 2);
      for (int r = 0; r < n; ++r)
        for (int64_t i = 0; i < size; ++i) {
          float expected = r == root ? want[i] : value<float>(r, i, 2);
          CHECK(red[r][i] == doctest::Approx(expected).epsilon(1e-6));
        }
    }
}

TEST_CASE("all_gather, gather, scatter, reduce_scatter (int64 and float32)") {
  for (int n = 1; n <= 4; ++n)
    for (int64_t size : {int64_t{0}, int64_t{5}, int64_t{40000}}) {
      CAPTURE(n);
      CAPTURE(size);
      std::vector<std::vector<std::vector<int64_t>>> gathered(n), root_gather(n);
      std::vector<std::vector<int64_t>> scattered(n);
      std::vector<std::vector<float>> rs(n);
      run_threads(n, [&](ProcessGroup& pg) {
        const int r = pg.rank();
        GatherScatterBuffers buffers(n, r, size);
        auto& [outs, gouts, ins, rs_ins] = buffers;
        pg.all_gather(outs, make<int64_t>(r, size));
        pg.gather(gouts, make<int64_t>(r, size), n - 1);
        Tensor piece = Tensor::empty({size}, {.dtype = DType::Int64});
        pg.scatter(piece, ins, 0);
        Tensor block = Tensor::empty({size});
        pg.reduce_scatter(block, rs_ins, ReduceOp::Sum);
        for (auto& t : outs) gathered[r].push_back(t.to_vector<int64_t>());
        if (r == n - 1)
          for (auto& t : gouts) root_gather[r].push_back(t.to_vector<int64_t>());
        scattered[r] = piece.to_vector<int64_t>();
        rs[r] = block.to_vector<float>();
        CHECK(rs_ins[0].to_vector<float>() == make<float>(r, size, 0).to_vector<float>());
      });
      for (int r = 0; r < n; ++r) {
        for (int i = 0; i < n; ++i) {
          CHECK(gathered[r][i] == make<int64_t>(i, size).to_vector<int64_t>());
          if (r == n - 1) CHECK(root_gather[r][i] == make<int64_t>(i, size).to_vector<int64_t>());
        }
        CHECK(scattered[r] == make<int64_t>(100 + r, size).to_vector<int64_t>());
        CHECK(rs[r] == reference<float>(ReduceOp::Sum, n, size, r));
      }
    }
}

TEST_CASE("send/recv around a ring, and barrier holds everyone until all arrive") {
  for (int n = 2; n <= 4; ++n) {
    std::vector<std::vector<float>> got(n);
    std::atomic<int> arrived{0};
    std::vector<int> seen(n);
    run_threads(n, [&](ProcessGroup& pg) {
      const int r = pg.rank();
      Tensor mine = make<float>(r, 70001);
      Tensor theirs = Tensor::empty({70001});
      if (r % 2 == 0) {  // even ranks send first, so the pattern cannot deadlock
        pg.send(mine, (r + 1) % n);
        pg.recv(theirs, (r + n - 1) % n);
      } else {
        pg.recv(theirs, (r + n - 1) % n);
        pg.send(mine, (r + 1) % n);
      }
      got[r] = theirs.to_vector<float>();
      std::this_thread::sleep_for(std::chrono::milliseconds(15 * r));
      arrived++;
      pg.barrier();
      seen[r] = arrived.load();
    });
    for (int r = 0; r < n; ++r) {
      CHECK(got[r] == make<float>((r + n - 1) % n, 70001).to_vector<float>());
      CHECK(seen[r] == n);
    }
  }
}

TEST_CASE("async handles complete in call order and rethrow errors on wait()") {
  const int n = 3;
  std::vector<std::vector<float>> a(n), b(n);
  run_threads(n, [&](ProcessGroup& pg) {
    Tensor x = make<float>(pg.rank(), 50000), y = make<float>(pg.rank(), 777, 2);
    WorkPtr wx = pg.all_reduce_async(x, ReduceOp::Sum, Algorithm::Ring);
    WorkPtr wy = pg.all_reduce_async(y, ReduceOp::Max, Algorithm::Star);
    WorkPtr wb = pg.barrier_async();
    wb->wait();
    CHECK(wx->is_completed());
    CHECK(wy->is_completed());
    wy->wait();
    a[pg.rank()] = x.to_vector<float>();
    b[pg.rank()] = y.to_vector<float>();
    Tensor bad = make<int64_t>(pg.rank(), 3);
    WorkPtr wbad = pg.all_reduce_async(bad, ReduceOp::Avg);
    CHECK_THROWS_AS(wbad->wait(), Error);
  });
  for (int r = 0; r < n; ++r) {
    CHECK(a[r] == reference<float>(ReduceOp::Sum, n, 50000));
    CHECK(b[r] == reference<float>(ReduceOp::Max, n, 777, 2));
  }
}

TEST_CASE("counters: ring and star move the textbook bytes, exactly") {
  for (int n = 2; n <= 4; ++n)
    for (int64_t elems : {int64_t{12000}, int64_t{12001}, int64_t{5}, int64_t{2}}) {
      CAPTURE(n);
      CAPTURE(elems);
      const int64_t S = elems * 4;  // float32 bytes
      std::vector<CommStats> ring(n), star(n);
      run_threads(n, [&](ProcessGroup& pg) {
        Tensor t = make<float>(pg.rank(), elems);
        pg.all_reduce(t, ReduceOp::Sum, Algorithm::Ring);
        ring[pg.rank()] = pg.comm_stats();
        pg.reset_comm_stats();
        pg.all_reduce(t, ReduceOp::Sum, Algorithm::Star);
        star[pg.rank()] = pg.comm_stats();
      });
      auto c = [&](int i) { return chunk_elems(elems, n, ((i % n) + n) % n) * 4; };
      for (int r = 0; r < n; ++r) {
        const CollectiveStats& s = ring[r].per_collective.at("all_reduce");
        CHECK(s.calls == 1);
        // rank r sends every chunk but r+1 (reduce-scatter) and but r+2 (all-gather)
        CHECK(s.bytes_sent == 2 * S - c(r + 1) - c(r + 2));
        CHECK(s.bytes_received == 2 * S - c(r) - c(r + 1));
        if (elems % n == 0) CHECK(s.bytes_sent == 2 * (n - 1) * S / n);
        CHECK(ring[r].total.bytes_sent == s.bytes_sent);
        const CollectiveStats& p = star[r].per_collective.at("all_reduce");
        CHECK(p.bytes_sent == (r == 0 ? (n - 1) * S : S));
        CHECK(p.bytes_received == (r == 0 ? (n - 1) * S : S));
      }
    }
}

TEST_CASE("counters: every collective counts exactly the formula of algorithms/cost.h") {
  // ring.cpp, star.cpp and p2p.cpp count bytes as they move them; cost.h writes the same as
  // formulas, which the mpi and nccl engines report. They must agree, call by call.
  for (int n = 1; n <= 4; ++n)
    for (int64_t elems : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{12001}})
      for (int root : {0, n - 1}) {
        CAPTURE(n);
        CAPTURE(elems);
        CAPTURE(root);
        const int64_t S = elems * 4;  // float32 bytes
        std::vector<std::map<std::string, Traffic>> got(n);
        run_threads(n, [&](ProcessGroup& pg) {
          auto& mine = got[pg.rank()];
          auto measure = [&](const std::string& name, auto call) {
            pg.reset_comm_stats();
            call();
            const CollectiveStats s =
                pg.comm_stats().per_collective.at(name);  // a copy: returned by value
            mine[name] = {s.bytes_sent, s.bytes_received};
          };
          Tensor t = make<float>(pg.rank(), elems);
          std::vector<Tensor> list;
          for (int i = 0; i < n; ++i) list.push_back(make<float>(i, elems));
          measure("all_reduce", [&] { pg.all_reduce(t, ReduceOp::Sum, Algorithm::Ring); });
          mine["star"] = {};
          measure("all_reduce", [&] { pg.all_reduce(t, ReduceOp::Sum, Algorithm::Star); });
          mine["star"] = mine["all_reduce"];
          measure("all_reduce", [&] { pg.all_reduce(t, ReduceOp::Sum, Algorithm::Ring); });
          measure("broadcast", [&] { pg.broadcast(t, root); });
          measure("reduce", [&] { pg.reduce(t, root); });
          measure("all_gather", [&] { pg.all_gather(list, t); });
          measure("reduce_scatter", [&] { pg.reduce_scatter(t, list); });
          measure("gather", [&] { pg.gather(list, t, root); });
          measure("scatter", [&] { pg.scatter(t, list, root); });
          if (n > 1) {
            if (pg.rank() == 0) measure("send", [&] { pg.send(t, 1); });
            if (pg.rank() == 1) measure("recv", [&] { pg.recv(t, 0); });
          }
        });
        auto same = [](Traffic a, Traffic b) {
          return a.sent == b.sent && a.received == b.received;
        };
        for (int r = 0; r < n; ++r) {
          CAPTURE(r);
          CHECK(same(got[r].at("all_reduce"), ring_all_reduce_cost(S, 4, r, n)));
          CHECK(same(got[r].at("star"), star_all_reduce_cost(S, r, n)));
          CHECK(same(got[r].at("broadcast"), chain_broadcast_cost(S, r, n, root)));
          CHECK(same(got[r].at("reduce"), star_reduce_cost(S, r, n, root)));
          CHECK(same(got[r].at("all_gather"), ring_all_gather_cost(S, n)));
          CHECK(same(got[r].at("reduce_scatter"), ring_all_gather_cost(S, n)));
          CHECK(same(got[r].at("gather"), star_reduce_cost(S, r, n, root)));
          CHECK(same(got[r].at("scatter"), star_scatter_cost(S, r, n, root)));
        }
        if (n > 1) {
          CHECK(same(got[0].at("send"), send_cost(S)));
          CHECK(same(got[1].at("recv"), recv_cost(S)));
        }
      }
}

namespace {
// An engine that moves nothing, writes down each call ProcessGroup makes of it, and reports
// a traffic of its own (as mpi and nccl report cost.h's formulas).
struct RecordingEngine final : CollectiveEngine {
  std::vector<std::string>* log;
  std::string name_ = "recording";
  explicit RecordingEngine(std::vector<std::string>* l) : log(l) {}
  const std::string& name() const override { return name_; }
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void note(CollectiveCall& call, const char* what, Traffic traffic) {
    log->push_back(std::string(what) + " " + call.name);
    call.traffic = traffic;
  }
  void all_reduce(CollectiveCall& c, Tensor& t, ReduceOp op, std::optional<Algorithm>) override {
    c.name = fmt::format("all_reduce({}, {})", name_, reduce_op_name(op));  // names what ran
    note(c, "all_reduce", {t.nbytes(), 1});
  }
  void broadcast(CollectiveCall& c, Tensor&, int) override { note(c, "broadcast", {0, 24}); }
  void reduce(CollectiveCall& c, Tensor&, int, ReduceOp) override { note(c, "reduce", {}); }
  void all_gather(CollectiveCall& c, std::vector<Tensor>&, const Tensor&) override {
    note(c, "all_gather", {7, 7});
  }
  void reduce_scatter(CollectiveCall& c, Tensor&, const std::vector<Tensor>&, ReduceOp) override {
    note(c, "reduce_scatter", {});
  }
  void gather(CollectiveCall& c, std::vector<Tensor>&, const Tensor&, int) override {
    note(c, "gather", {});
  }
  void scatter(CollectiveCall& c, Tensor&, const std::vector<Tensor>&, int) override {
    note(c, "scatter", {});
  }
  void barrier(CollectiveCall&) override { throw CommError("the wire broke"); }
  void send(CollectiveCall& c, const Tensor&, int) override { note(c, "send", {5, 0}); }
  void recv(CollectiveCall& c, Tensor&, int) override { note(c, "recv", {}); }
  void mark_failed(const std::string& why) override { log->push_back("failed " + why); }
  void leave() override { log->push_back("leave"); }
  void abort(const std::string& why) override { log->push_back("abort " + why); }
};
}  // namespace

TEST_CASE("ProcessGroup checks, calls its engine once per collective, counts what it reports") {
  std::vector<std::string> log;
  {
    ProcessGroup pg(std::make_unique<RecordingEngine>(&log));
    // an engine without a dplab transport: both names are the engine's, for any device
    CHECK(pg.engine() == "recording");
    CHECK(pg.all_reduce_algorithm(1024) == "recording");
    CHECK(pg.transport_name() == "recording");
    CHECK(pg.transport_name(Device(DeviceKind::CPU)) == "recording");
    CHECK(pg.transport_name(Device("cuda:0")) == "recording");
    Tensor t = make<float>(0, 6);
    std::vector<Tensor> two{make<float>(0, 6), make<float>(1, 6)};
    CHECK_THROWS_WITH_AS(pg.broadcast(t, 2), doctest::Contains("root must be in [0, 2), got 2"),
                         Error);
    CHECK_THROWS_WITH_AS(pg.all_gather(two = {t}, t), doctest::Contains("must hold 2 tensors"),
                         Error);
    two = {make<float>(0, 6), make<float>(1, 6)};
    pg.all_reduce(t, ReduceOp::Avg);
    pg.broadcast(t, 1);
    pg.all_gather(two, t);
    pg.send(t, 1);
    CHECK(log == std::vector<std::string>{"all_reduce all_reduce(recording, avg)",
                                          "broadcast broadcast(root 1)", "all_gather all_gather",
                                          "send send(to 1)"});
    // the counters hold what the engine reported, per collective and in total
    CommStats s = pg.comm_stats();
    CHECK(s.per_collective.at("all_reduce").bytes_sent == 24);
    CHECK(s.per_collective.at("all_reduce").bytes_received == 1);
    CHECK(s.per_collective.at("broadcast").bytes_received == 24);
    CHECK(s.per_collective.at("all_gather").bytes_sent == 7);
    CHECK(s.per_collective.at("send").bytes_sent == 5);
    CHECK(s.total.bytes_sent == 24 + 7 + 5);
    CHECK(s.total.calls == 4);
    log.clear();
    CHECK_THROWS_WITH_AS(pg.barrier(), doctest::Contains("the wire broke"), CommError);
    CHECK(log == std::vector<std::string>{"failed barrier on rank 0: the wire broke"});
    CHECK_THROWS_WITH_AS(pg.all_reduce(t),
                         doctest::Contains("failed earlier (barrier on the "
                                           "recording engine: the wire broke)"),
                         CommError);
    log.clear();
  }
  CHECK(log == std::vector<std::string>{"leave"});
}

TEST_CASE("a rank that throws makes the others fail fast, naming it") {
  // The collectives wait the harness's 30 s: failing fast shows in the message, which gives
  // the failed rank's own reason ("failed because rank 1 failed"), not "timed out". A group
  // that did not pass the failure on would end only at the timeout, saying so.
  for (Algorithm a : {Algorithm::Ring, Algorithm::Star}) {
    CAPTURE(algorithm_name(a));
    std::vector<std::string> messages(3);
    try {
      run_threads(3, [&](ProcessGroup& pg) {
        if (pg.rank() == 1) throw std::runtime_error("rank 1 gives up");
        Tensor t = make<float>(pg.rank(), 100000);
        try {
          pg.all_reduce(t, ReduceOp::Sum, a);
        } catch (const CommError& e) {
          messages[pg.rank()] = e.what();
        }
        // the links' state is unknown after a failure: the group refuses further work
        CHECK_THROWS_WITH_AS(pg.barrier(), doctest::Contains("failed earlier"), CommError);
      });
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()) == "rank 1 gives up");
    }
    for (int r : {0, 2}) {
      CAPTURE(messages[r]);
      CHECK(messages[r].find("all_reduce") != std::string::npos);
      CHECK(messages[r].find("failed because rank 1 failed") != std::string::npos);
      CHECK(messages[r].find("timed out") == std::string::npos);
    }
  }
}

TEST_CASE("a rank that never comes times out with a CommError naming rank, peer, collective") {
  // The timeout also covers making the group, which start_together makes immediate; 2 s
  // leaves that moment to a thread the scheduler runs late, and is what rank 0 then waits.
  ProcessGroupOptions opts{.engine = "star", .timeout = Seconds(2.0)};
  std::string message;
  std::atomic<bool> done{false};
  run_threads(
      2,
      [&](ProcessGroup& pg) {
    if (pg.rank() == 1) {  // alive, but never joins the collective
      while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    Tensor t = make<float>(0, 10);
    try {
      pg.all_reduce(t);
    } catch (const CommError& e) {
      message = e.what();
    }
    done = true;
      },
      opts);
  CAPTURE(message);
  CHECK(message.find("rank 0") != std::string::npos);
  CHECK(message.find("timed out after 2.0 s") != std::string::npos);
  CHECK(message.find("all_reduce(star") != std::string::npos);
  CHECK(message.find("rank 1") != std::string::npos);
}
