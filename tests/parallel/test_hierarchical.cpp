// test_hierarchical.cpp: the hierarchical all-reduce and the inter-node byte counters, on
// pretend nodes (ranks_per_node) of one machine: ranks as threads and as shm processes, K
// nodes x L ranks = 2x2, 2x3, 3x2, 4x1, 1x4. It equals the serial reference for sizes N does
// not divide, float32 / float16 / bfloat16, sum / avg / max; every rank's bytes inside and
// across nodes equal cost.cpp's formulas and the textbook's (hierarchical: 2(L-1)/L·S inside,
// 2(K-1)/K·S/L across; the ring: all of a boundary rank's bytes, none of the others');
// every algorithm's split (ring, star, one-shot, recursive doubling, halving-doubling with
// its fold at N = 6) equals its per-peer formula, and what leaves the nodes arrives at the
// nodes; broadcast's chain too; an emulated link with nodes paces only the hops between
// them (seen in the counters and in the link's own bookings); a failed rank is named by
// the ranks waiting on it in either level; the two-level model's times and auto's choice;
// and layouts that do not divide N are refused.
// Read next: parallel/algorithms/hierarchical.cpp, tests/ddp/test_ddp.cpp (DDP on it).
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "framework/tensor/tensor.h"
#include "parallel/algorithms/cost.h"
#include "parallel/comm/process_group.h"
#include "parallel/rendezvous/hash_store.h"
#include "parallel/transport/link_model.h"
#include "parallel/transport/mailbox_transport.h"
#include "parallel/transport/thread_transport.h"
#include "tests/parallel/collective_test_util.h"
#include "tests/parallel/rank_harness.h"

using namespace dplab;
using namespace dplab::parallel;
using dplab::parallel::testing::make;
using dplab::parallel::testing::reference;
using dplab::parallel::testing::run_processes;
using dplab::parallel::testing::run_threads;

namespace {

struct Layout {
  int nodes, per_node;
  int world() const { return nodes * per_node; }
};
const Layout kLayouts[] = {{2, 2}, {2, 3}, {3, 2}, {4, 1}, {1, 4}};

// make<float> as dtype d: small integers, exact in float16 and bfloat16 too (|sum| <= 30)
Tensor input(int rank, int64_t n, DType d, int salt) {
  Tensor t = make<float>(rank, n, salt);
  return d == DType::Float32 ? t : t.to(d);
}
std::vector<float> values(const Tensor& t) {
  return (t.dtype() == DType::Float32 ? t : t.to(DType::Float32)).to_vector<float>();
}

// The counters of one all_reduce, with the inter-node part.
Traffic measured(ProcessGroup& pg, Tensor& t, Algorithm a) {
  pg.reset_comm_stats();
  pg.all_reduce(t, ReduceOp::Sum, a);
  const CollectiveStats s = pg.comm_stats().per_collective.at("all_reduce");
  return {s.bytes_sent, s.bytes_received, s.bytes_sent_inter_node, s.bytes_received_inter_node};
}
bool same(const Traffic& a, const Traffic& b) {
  return a.sent == b.sent && a.received == b.received && a.sent_inter_node == b.sent_inter_node &&
         a.received_inter_node == b.received_inter_node;
}

}  // namespace

TEST_CASE("hierarchical equals the reference: 2x2, 2x3, 3x2, 4x1, 1x4, three dtypes, sum avg max") {
  for (const Layout& lay : kLayouts)
    for (DType d : {DType::Float32, DType::Float16, DType::BFloat16}) {
      const int n = lay.world();
      CAPTURE(lay.nodes);
      CAPTURE(lay.per_node);
      CAPTURE(dtype_name(d));
      std::vector<ReduceOp> ops{ReduceOp::Sum, ReduceOp::Max};
      if (d == DType::Float32) ops.push_back(ReduceOp::Avg);  // avg: float32 only
      // sizes: empty, fewer than L or N elements (empty shards), primes, 3 segments and a bit
      const std::vector<int64_t> sizes{0, 1, n - 1, 13, 1009, 98317};
      std::vector<std::vector<std::vector<float>>> got(n);
      run_threads(
          n,
          [&](ProcessGroup& pg) {
        CHECK(pg.all_reduce_algorithm(4096) == "hierarchical");
        for (int64_t size : sizes)
          for (ReduceOp op : ops) {
            Tensor t = input(pg.rank(), size, d, int(size % 7));
            pg.all_reduce(t, op);  // the group's algorithm: hierarchical
            got[pg.rank()].push_back(values(t));
          }
          },
          {.engine = "hierarchical", .ranks_per_node = lay.per_node, .nodes_share_memory = true});
      size_t k = 0;
      for (int64_t size : sizes)
        for (ReduceOp op : ops) {
          CAPTURE(size);
          CAPTURE(reduce_op_name(op));
          const std::vector<float> want = reference<float>(op, n, size, int(size % 7));
          for (int r = 0; r < n; ++r) CHECK(got[r][k] == want);
          ++k;
        }
    }
}

TEST_CASE("hierarchical on general floats: every rank ends with the same bits") {
  // a sum's bits depend on its order; each shard is reduced in one order that all ranks share
  const Layout lay{2, 3};
  std::vector<std::vector<float>> got(lay.world());
  run_threads(
      lay.world(),
      [&](ProcessGroup& pg) {
    Tensor t = Tensor::empty({40001});
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = std::sin(0.37f * float(i) + float(pg.rank()));
    pg.all_reduce(t, ReduceOp::Sum, Algorithm::Hierarchical);
    got[pg.rank()] = t.to_vector<float>();
      },
      {.ranks_per_node = lay.per_node, .nodes_share_memory = true});
  for (int r = 1; r < lay.world(); ++r) CHECK(got[r] == got[0]);
}

TEST_CASE("counters: bytes inside and across nodes equal cost.cpp's formulas and the textbook's") {
  for (const Layout& lay : kLayouts)
    for (int64_t elems : {int64_t{1}, int64_t{7}, int64_t{12001}, int64_t{12 * 1000}}) {
      const int n = lay.world(), L = lay.per_node, K = lay.nodes;
      CAPTURE(K);
      CAPTURE(L);
      CAPTURE(elems);
      const int64_t S = elems * 4;
      const Algorithm algos[] = {Algorithm::Hierarchical,
                                 Algorithm::Ring,
                                 Algorithm::Star,
                                 Algorithm::OneShot,
                                 Algorithm::RecursiveDoubling,
                                 Algorithm::HalvingDoubling};
      std::vector<std::map<Algorithm, Traffic>> got(n);
      std::vector<Traffic> bcast(n);
      run_threads(
          n,
          [&](ProcessGroup& pg) {
        for (Algorithm a : algos) {
          Tensor t = make<float>(pg.rank(), elems);
          got[pg.rank()][a] = measured(pg, t, a);
        }
        Tensor t = make<float>(pg.rank(), elems);
        pg.reset_comm_stats();
        pg.broadcast(t, 1);
        const CollectiveStats s = pg.comm_stats().total;
        bcast[pg.rank()] = {s.bytes_sent, s.bytes_received, s.bytes_sent_inter_node,
                            s.bytes_received_inter_node};
          },
          {.ranks_per_node = L, .nodes_share_memory = true});
      for (int r = 0; r < n; ++r) {
        CAPTURE(r);
        const Traffic h = got[r][Algorithm::Hierarchical], ring = got[r][Algorithm::Ring];
        for (Algorithm a : algos) {
          CAPTURE(algorithm_name(a));
          CHECK(same(got[r][a], all_reduce_cost(a, S, 4, r, n, L)));
        }
        // the textbook, when L and K·L divide the elements
        if (elems % n == 0 && n > 1) {
          CHECK(h.sent - h.sent_inter_node == 2 * (L - 1) * S / L);  // inside: 2(L-1)/L·S
          CHECK(h.received - h.received_inter_node == 2 * (L - 1) * S / L);
          CHECK(h.sent_inter_node == 2 * (K - 1) * (S / L) / K);  // across: 2(K-1)/K·S/L
          CHECK(h.received_inter_node == 2 * (K - 1) * (S / L) / K);
          CHECK(h.sent == ring.sent);  // the same total as the ring: 2(N-1)/N·S
          // the ring: the last rank of a node sends all of its 2(N-1)/N·S across, the
          // first receives all of its; one node: nothing crosses
          const bool last = r % L == L - 1, first = r % L == 0;
          CHECK(ring.sent_inter_node == (K > 1 && last ? 2 * (n - 1) * S / n : 0));
          CHECK(ring.received_inter_node == (K > 1 && first ? 2 * (n - 1) * S / n : 0));
        }
        // recursive doubling at 2x2: the swap at distance 1 stays in the node, the one at
        // distance 2 crosses: S each way
        if (n == 4 && L == 2) {
          CHECK(got[r][Algorithm::RecursiveDoubling].sent_inter_node == S);
          CHECK(got[r][Algorithm::RecursiveDoubling].received_inter_node == S);
        }
        // broadcast (a chain from rank 1): across where the next in the chain is on another node
        const int next = (r + 1) % n;
        const bool sends = (r - 1 + n) % n != n - 1;  // all but the chain's last send
        CHECK(bcast[r].sent_inter_node == (sends && next / L != r / L ? S : 0));
      }
      // each node's link: hierarchical puts 2(K-1)/K·S of the node's data through it, and
      // for every algorithm what leaves the nodes arrives at the nodes
      for (Algorithm a : algos) {
        CAPTURE(algorithm_name(a));
        int64_t out = 0, in = 0;
        for (int r = 0; r < n; ++r) {
          out += got[r][a].sent_inter_node;
          in += got[r][a].received_inter_node;
          CHECK(got[r][a].sent_inter_node <= got[r][a].sent);
          if (K == 1) CHECK(got[r][a].sent_inter_node == 0);
        }
        CHECK(out == in);
        if (a == Algorithm::Hierarchical && elems % n == 0)
          for (int k = 0; k < K; ++k) {
            int64_t node_out = 0;
            for (int r = k * L; r < (k + 1) * L; ++r) node_out += got[r][a].sent_inter_node;
            CHECK(node_out == 2 * (K - 1) * S / K);
          }
      }
    }
}

TEST_CASE("shm processes: hierarchical at 2x2 and 2x3 equals the reference, counters as formulas") {
  for (const Layout& lay : {Layout{2, 2}, Layout{2, 3}}) {
    const int n = lay.world();
    CAPTURE(n);
    const int64_t elems = 98317;  // several segments of the shm slot, N does not divide it
    auto outcomes = run_processes(
        n,
        [&](ProcessGroup& pg) {
      for (DType d : {DType::Float32, DType::BFloat16}) {
        Tensor t = input(pg.rank(), elems, d, 3);
        const Traffic got = measured(pg, t, Algorithm::Hierarchical);
        DPLAB_CHECK(values(t) == reference<float>(ReduceOp::Sum, n, elems, 3),
                    "rank {}: the {} result differs from the reference", pg.rank(), dtype_name(d));
        const Traffic want = hierarchical_all_reduce_cost(
            elems * int64_t(element_size(d)), int64_t(element_size(d)), pg.rank(), n, lay.per_node);
        DPLAB_CHECK(same(got, want),
                    "rank {}: counted {}/{} bytes ({}/{} across), expected {}/{} ({}/{})",
                    pg.rank(), got.sent, got.received, got.sent_inter_node, got.received_inter_node,
                    want.sent, want.received, want.sent_inter_node, want.received_inter_node);
      }
      Tensor m = make<float>(pg.rank(), 1009);
      pg.all_reduce(m, ReduceOp::Max);
      DPLAB_CHECK(m.to_vector<float>() == reference<float>(ReduceOp::Max, n, 1009),
                  "rank {}: max differs", pg.rank());
        },
        {.engine = "hierarchical", .ranks_per_node = lay.per_node, .nodes_share_memory = true});
    for (auto& o : outcomes) CHECK_MESSAGE(o.ok, o.message);
  }
}

TEST_CASE(
    "the two-level model: hierarchical's stages, flat algorithms paced by the slower link, auto") {
  const LinkCost fast{.alpha = 2e-6, .beta = 1e-10, .cores = 64};
  LinkCost slow = fast;
  slow.alpha = 20e-6;
  slow.beta = 8e-9;  // 1 Gbit/s
  auto near = [](double a, double b) { return std::fabs(a - b) <= 1e-12 + 1e-9 * std::fabs(b); };
  const double S = 8 << 20;
  for (const Layout& lay : {Layout{2, 2}, Layout{2, 4}, Layout{4, 2}}) {
    const int K = lay.nodes, L = lay.per_node, n = lay.world();
    CAPTURE(K);
    CAPTURE(L);
    const NodeLinks links{.ranks_per_node = L, .intra = fast, .inter = slow};
    // 2(L-1)·alpha_1 + 2(L-1)/L·S·beta_1 inside, 2(K-1)·alpha_2 + 2(K-1)/K·S/L·beta_2 across
    const double want = 2 * (L - 1) * (fast.alpha + S / L * fast.beta) + 2 * (K - 1) * slow.alpha +
                        2.0 * (K - 1) / K * S / L * slow.beta;
    CHECK(near(all_reduce_seconds(Algorithm::Hierarchical, n, S, links), want));
    // the flat ring: every step has a hop across: 2(N-1) steps at the slow link's pace
    CHECK(near(all_reduce_seconds(Algorithm::Ring, n, S, links),
               2 * (n - 1) * slow.alpha + 2.0 * (n - 1) / n * S * slow.beta));
    CHECK(choose_all_reduce(n, S, links) == Algorithm::Hierarchical);
    // one level: hierarchical is the ring, and auto never weighs it
    const NodeLinks one{.ranks_per_node = 0, .intra = fast, .inter = slow};
    CHECK(near(all_reduce_seconds(Algorithm::Hierarchical, n, S, one),
               all_reduce_seconds(Algorithm::Ring, n, S, fast)));
    CHECK(choose_all_reduce(n, S, one) == choose_all_reduce(n, S, fast));
  }
  // one rank per node: every hop is across, hierarchical is the ring, auto does not pick it
  const NodeLinks ones{.ranks_per_node = 1, .intra = fast, .inter = slow};
  CHECK(choose_all_reduce(4, S, ones) != Algorithm::Hierarchical);
  // ranks sharing cores: each stage keeps all N ranks busy, N/C times its critical path
  LinkCost two = fast;
  two.cores = 2;
  const HierarchicalSeconds wide = hierarchical_all_reduce_seconds(2, 2, S, fast, fast);
  const HierarchicalSeconds shared = hierarchical_all_reduce_seconds(2, 2, S, two, two);
  CHECK(near(shared.total(), 2 * wide.total()));
  CHECK(near(wide.reduce_scatter, fast.alpha + S / 2 * fast.beta));
  // what auto picked is what ran: the engine weighs the layout it was given
  std::vector<std::string> ran(4);
  run_threads(4, [&](ProcessGroup& pg) { ran[pg.rank()] = pg.all_reduce_algorithm(64 << 20); },
              {.engine = "auto", .ranks_per_node = 2, .nodes_share_memory = true});
  LinkCost shm = shm_link_cost(cpu_cores());
  const NodeLinks pretend{.ranks_per_node = 2, .intra = shm, .inter = shm};
  for (const std::string& r : ran)
    CHECK(r == "auto:" + algorithm_name(choose_all_reduce(4, double(64 << 20), pretend)));
}

TEST_CASE("layouts that do not divide the ranks are refused, naming what was expected") {
  CHECK_THROWS_WITH_AS(
      run_threads(4, [](ProcessGroup&) {}, {.engine = "hierarchical", .ranks_per_node = 3}),
      doctest::Contains("ranks_per_node must be 0 (one node) or divide world_size 4"), Error);
  CHECK_THROWS_WITH_AS(run_threads(2, [](ProcessGroup&) {}, {.ranks_per_node = -1}),
                       doctest::Contains("got -1"), Error);
  CHECK_THROWS_WITH_AS(
      hierarchical_all_reduce_cost(400, 4, 0, 6, 4),
      doctest::Contains("ranks_per_node must be 0 (one node) or divide the world size 6"), Error);
  CHECK_THROWS_WITH_AS(
      choose_all_reduce(6, 1e6, NodeLinks{.ranks_per_node = 5, .intra = {}, .inter = {}}),
      doctest::Contains("got 5"), Error);
  CHECK_THROWS_WITH_AS(algorithm_from_name("hierarchic"),
                       doctest::Contains("one_shot, hierarchical or auto"), Error);
}

TEST_CASE("an emulated link with nodes slows only the hops between nodes") {
  // 0.001 Gbit/s = 125 kB/s: 64 KiB take 0.52 s over the link, microseconds in shared memory.
  // Nodes of 2 ranks: rank 0 sends to rank 1 (same node), then receives from rank 2 (node 1).
  const int64_t elems = 16384;
  std::vector<CollectiveStats> received(4);
  std::vector<double> took(4, 0.0);
  run_threads(
      4,
      [&](ProcessGroup& pg) {
    Tensor t = make<float>(pg.rank(), elems);
    const auto t0 = std::chrono::steady_clock::now();
    if (pg.rank() == 0) pg.send(t, 1);  // same node
    if (pg.rank() == 1) pg.recv(t, 0);
    if (pg.rank() == 2) pg.send(t, 0);  // across: node 1 -> node 0
    if (pg.rank() == 0) pg.recv(t, 2);
    took[pg.rank()] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (pg.rank() <= 1) received[pg.rank()] = pg.comm_stats().per_collective.at("recv");
      },
      {.link_gbps = 0.001, .ranks_per_node = 2, .nodes_share_memory = true});
  // rank 1 took rank 0's bytes inside the node: none of them crossed a machine's link
  CHECK(received[1].bytes_received == elems * 4);
  CHECK(received[1].bytes_received_inter_node == 0);
  CHECK(received[0].bytes_received_inter_node == elems * 4);
  CHECK(took[0] >= 0.45);  // rank 0's receive from node 1 waited for the link (never less)
}

TEST_CASE("the paced link books the hops between nodes only, by the node predicate") {
  // The test above cannot see which hops the link paced (a fast receive is no proof on a
  // busy machine); the link's own bookings can. Four ranks, nodes of 2, over the thread
  // transport wrapped as create_process_group wraps it with ranks_per_node: a paced link
  // whose across() is "the peer's node is not mine". Rank 0 receives from rank 1 (its node)
  // and from rank 2 (node 1): its ingress must book the second only.
  const NodeLayout nodes{.world = 4, .ranks_per_node = 2};
  const std::size_t bytes = 4096;  // 33 ms at 0.001 Gbit/s
  std::vector<std::byte> buf(bytes);
  std::vector<LinkArrival> booked;  // rank 0's
  HashStore store(Seconds{30});
  std::exception_ptr errors[4];
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r)
    threads.emplace_back([&, r] {
      try {
        auto across = [&nodes, r](int peer) { return nodes.node_of(peer) != nodes.node_of(r); };
        LinkObserver observe;
        if (r == 0) observe = [&](const LinkArrival& a) { booked.push_back(a); };
        auto t = make_paced_transport(make_thread_transport(store, r, 4, Seconds{30}), 0.001,
                                      across, observe);
        auto ignore = [](const void*, std::size_t) {};
        if (r == 1 || r == 2) t->send_segment(0, buf.data(), bytes);
        if (r == 0) {
          t->recv_segment(1, ignore);
          t->recv_segment(2, ignore);
        }
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  REQUIRE(booked.size() == 1);  // the hop from rank 1 went around the link
  CHECK(booked[0].peer == 2);
  CHECK(booked[0].bytes == bytes);
}

TEST_CASE("a rank that fails inside a node's sub-ring is named by the ranks of the other node") {
  // rank 3 leaves before the all-reduce; rank 1 waits on it across the nodes, rank 2 inside
  // node 1, rank 0 inside node 0: every wait ends, within the timeout, naming rank 3 and the
  // collective ("rank 0: all_reduce(hierarchical, sum) failed because rank 3 failed ...")
  std::vector<std::string> said(4);
  CHECK_THROWS_WITH_AS(
      run_threads(
          4,
          [&](ProcessGroup& pg) {
            if (pg.rank() == 3) throw Error("rank 3 fails on purpose");
            Tensor t = make<float>(pg.rank(), 50000);
            try {
              pg.all_reduce(t, ReduceOp::Sum, Algorithm::Hierarchical);
            } catch (const std::exception& e) {
              said[pg.rank()] = e.what();
            }
          },
          {.timeout = Seconds(10.0), .ranks_per_node = 2, .nodes_share_memory = true}),
      doctest::Contains("rank 3 fails on purpose"), Error);
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    CAPTURE(said[r]);
    CHECK(said[r].find("all_reduce(hierarchical, sum) failed because rank 3 failed") !=
          std::string::npos);
  }
}
