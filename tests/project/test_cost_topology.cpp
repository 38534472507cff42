// test_cost_topology.cpp: the cluster model's bytes against cost.h's per-rank formulas (which
// tests/parallel checks against the bytes the real algorithms move), and its times on cases
// worked by hand. Links: intra 1 us + 0.1 ns/B, inter 10 us + 1 ns/B, unless said. And the
// model's memory: the same bytes for a thousand devices as for a million (this file counts
// what operator new hands out in the test program).
// Read next: test_timeline.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <new>

#include "framework/error.h"
#include "parallel/algorithms/cost.h"
#include "parallel/algorithms/cost_topology.h"

using namespace dplab::parallel;

// Every allocation of this test program through operator new (new[] and the sized and
// nothrow forms come here too), counted in bytes: a model that lists its ranks shows as bytes
// that grow with N.
namespace {
std::atomic<size_t> g_allocated_bytes{0};
}  // namespace
void* operator new(std::size_t bytes) {
  g_allocated_bytes += bytes;
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

size_t bytes_allocated_by(const std::function<void()>& work) {
  const size_t before = g_allocated_bytes;
  work();
  return g_allocated_bytes - before;
}

Cluster cluster(int m, int g, int k = 1) {
  return {.nodes = m, .devices_per_node = g, .nics_per_node = k, .intra = {1e-6, 1e-10}, .inter = {1e-5, 1e-9}};
}
const Servers kOne{.count = 1, .colocated = true};

}  // namespace

TEST_CASE("ring: every device and every NIC carries 2(N-1)/N·S, as cost.h counts for each rank") {
  for (auto [m, g] : {std::pair{1, 4}, {4, 1}, {2, 3}, {3, 2}, {4, 4}}) {
    const int n = m * g;
    const int64_t s = 720720;  // divisible by every N here
    CAPTURE(m);
    CAPTURE(g);
    const LinkLoad l = link_load(ClusterAlgorithm::Ring, cluster(m, g), kOne, double(s));
    for (int r = 0; r < n; ++r) {
      const Traffic t = ring_all_reduce_cost(s, 1, r, n);
      CHECK(t.sent == t.received);
      if (g > 1) CHECK(l.device == doctest::Approx(double(t.sent)));
      if (m > 1) CHECK(l.nic == doctest::Approx(double(t.sent)));
    }
    CHECK(l.nic == doctest::Approx(m > 1 ? 2.0 * (n - 1) / n * s : 0));
    CHECK(l.server == 0);
  }
}

TEST_CASE("hierarchical: 2(G-1)/G·S inside the node, 2(M-1)/M·S through each node's NIC") {
  const int64_t s = 720720;
  for (auto [m, g] : {std::pair{2, 2}, {4, 3}, {3, 4}, {8, 1}, {1, 6}}) {
    CAPTURE(m);
    CAPTURE(g);
    const LinkLoad l = link_load(ClusterAlgorithm::Hierarchical, cluster(m, g), kOne, double(s));
    // reduce-scatter and all-gather of G blocks of S/G: cost.h's ring_all_gather_cost, twice
    CHECK(l.device == doctest::Approx(2.0 * ring_all_gather_cost(s / g, g).sent));
    CHECK(l.device == doctest::Approx(2.0 * (g - 1) / g * s));
    // G shard rings of S/G over the M nodes, all through one NIC
    CHECK(l.nic == doctest::Approx(double(g * ring_all_reduce_cost(s / g, 1, 0, m).sent)));
    CHECK(l.nic == doctest::Approx(2.0 * (m - 1) / m * s));
  }
  SUBCASE("halving-doubling between nodes: Rabenseifner's bytes; with M = 3 the folding nodes add S/G per shard") {
    for (int m : {2, 4, 8, 3, 6}) {
      CAPTURE(m);
      const int g = 3;
      const LinkLoad l = link_load(ClusterAlgorithm::HalvingDoubling, cluster(m, g), kOne, double(s));
      int64_t busiest = 0;  // a node that takes in a folded one's shard
      for (int r = 0; r < m; ++r) busiest = std::max(busiest, halving_doubling_cost(s / g, 1, r, m).sent);
      CHECK(l.nic == doctest::Approx(double(g * busiest)));
    }
  }
}

TEST_CASE("ps and star: the hub carries (N-1)·S; S_v servers carry N·S/S_v each") {
  const int64_t s = 720720;
  SUBCASE("the star on one node (its hub's intra link) and across N nodes (its hub's NIC), as star.cpp counts") {
    for (int n : {2, 3, 4, 8}) {
      CAPTURE(n);
      const Traffic hub = star_all_reduce_cost(s, 0, n);
      CHECK(link_load(ClusterAlgorithm::Star, cluster(1, n), kOne, double(s)).server == doctest::Approx(double(hub.received)));
      CHECK(link_load(ClusterAlgorithm::Star, cluster(n, 1), kOne, double(s)).nic == doctest::Approx(double(hub.sent)));
      CHECK(hub.sent == (n - 1) * s);
    }
  }
  SUBCASE("separate servers: each takes N·S/S_v; a worker node's NIC all of its G devices' S") {
    const LinkLoad l = link_load(ClusterAlgorithm::ParameterServer, cluster(4, 2), {.count = 4, .colocated = false},
                                 double(s));
    CHECK(l.server == doctest::Approx(8.0 * s / 4));
    CHECK(l.nic == doctest::Approx(2.0 * s));
    CHECK(l.device == doctest::Approx(double(s)));
  }
  SUBCASE("co-located, one per node: (N-G)·S/S_v in, G·S·(S_v-1)/S_v out: 4x2 -> 1.5·S") {
    const LinkLoad l = link_load(ClusterAlgorithm::ParameterServer, cluster(4, 2), {.count = 4}, double(s));
    CHECK(l.nic == doctest::Approx(1.5 * s));
    CHECK(l.server == doctest::Approx(0.25 * s));  // the one other device of its node, over its intra link
    // more servers than nodes: at most one per node
    CHECK(link_load(ClusterAlgorithm::ParameterServer, cluster(4, 2), {.count = 9}, double(s)).nic ==
          doctest::Approx(1.5 * s));
    // 2 servers on 4 nodes: a node without one sends all G·S
    CHECK(link_load(ClusterAlgorithm::ParameterServer, cluster(4, 2), {.count = 2}, double(s)).nic ==
          doctest::Approx(3.0 * s));
  }
  SUBCASE("whole tensors: the busiest server's share times the imbalance") {
    const LinkLoad l = link_load(ClusterAlgorithm::ParameterServer, cluster(4, 1), {.count = 4, .imbalance = 2},
                                 double(s));
    CHECK(l.nic == doctest::Approx(3.0 * s / 4 * 2));  // 3 remote devices, twice the even share
  }
}

TEST_CASE("times: one level is cost.h's formula; two levels by hand") {
  const double s = 4e6;
  SUBCASE("one node: the ring and hierarchical are cost.h's ring, 2(G-1)(alpha + S/G·beta)") {
    const LinkCost intra{.alpha = 1e-6, .beta = 1e-10, .gamma = 0, .cores = 4};
    const double ring = all_reduce_seconds(Algorithm::Ring, 4, s, intra);
    CHECK(ring == doctest::Approx(6 * (1e-6 + 1e6 * 1e-10)));
    CHECK(cluster_all_reduce_seconds(ClusterAlgorithm::Ring, cluster(1, 4), kOne, s) == doctest::Approx(ring));
    CHECK(cluster_all_reduce_seconds(ClusterAlgorithm::Hierarchical, cluster(1, 4), kOne, s) == doctest::Approx(ring));
  }
  SUBCASE("the star is cost.h's star, 2(N-1)(alpha + S·beta), on either level") {
    for (int n : {2, 3, 5}) {
      CAPTURE(n);
      const LinkCost intra{.alpha = 1e-6, .beta = 1e-10, .gamma = 0, .cores = n};
      const LinkCost inter{.alpha = 1e-5, .beta = 1e-9, .gamma = 0, .cores = n};
      CHECK(cluster_all_reduce_seconds(ClusterAlgorithm::Star, cluster(1, n), kOne, s) ==
            doctest::Approx(all_reduce_seconds(Algorithm::Star, n, s, intra)));
      CHECK(cluster_all_reduce_seconds(ClusterAlgorithm::Star, cluster(n, 1), kOne, s) ==
            doctest::Approx(all_reduce_seconds(Algorithm::Star, n, s, inter)));
    }
  }
  SUBCASE("ring over 2 nodes x 2: the NIC hop sets the pace: 6·(10 us + 1e6 B·1 ns)") {
    CHECK(cluster_all_reduce_seconds(ClusterAlgorithm::Ring, cluster(2, 2), kOne, s) ==
          doctest::Approx(6 * (1e-5 + 1e-3)));
  }
  SUBCASE("hierarchical over 2 nodes x 2: reduce-scatter + 2 shard rings sharing one NIC + all-gather") {
    const auto st = all_reduce_stages(ClusterAlgorithm::Hierarchical, cluster(2, 2), kOne, s);
    REQUIRE(st.size() == 3);
    CHECK(st[0].name == "reduce-scatter (node)");
    CHECK(st[0].seconds == doctest::Approx(1e-6 + 2e6 * 1e-10));
    CHECK(st[1].seconds == doctest::Approx(2 * (1e-5 + 1e6 * 2e-9)));  // each shard flow at half the NIC
    CHECK(st[2].seconds == doctest::Approx(st[0].seconds));
    // two NICs: each flow has one of its own
    const auto two = all_reduce_stages(ClusterAlgorithm::Hierarchical, cluster(2, 2, 2), kOne, s);
    CHECK(two[1].seconds == doctest::Approx(2 * (1e-5 + 1e6 * 1e-9)));
  }
  SUBCASE("halving-doubling between 4 nodes of 1: 2·log2(4)·alpha + 2·3/4·S·beta") {
    CHECK(cluster_all_reduce_seconds(ClusterAlgorithm::HalvingDoubling, cluster(4, 1), kOne, s) ==
          doctest::Approx(4 * 1e-5 + 1.5 * s * 1e-9));
  }
  SUBCASE("ps, 2 separate servers for 2 nodes x 2: push = 4 messages + 4·S/2 bytes at a server, on channel Up") {
    const auto st = all_reduce_stages(ClusterAlgorithm::ParameterServer, cluster(2, 2), {.count = 2, .colocated = false}, s);
    REQUIRE(st.size() == 2);
    CHECK(st[0].name == "push");
    CHECK(st[0].channel == Channel::Up);
    CHECK(st[1].channel == Channel::Down);
    CHECK(st[0].seconds == doctest::Approx(4 * 1e-5 + 2 * s * 1e-9));
    CHECK(st[1].seconds == doctest::Approx(st[0].seconds));
    // co-located, push and pull share both directions of the NICs
    const auto co = all_reduce_stages(ClusterAlgorithm::ParameterServer, cluster(2, 2), {.count = 2}, s);
    CHECK(co[0].channel == Channel::Both);
    CHECK(co[1].channel == Channel::Both);
  }
}

TEST_CASE("limits and bad input") {
  CHECK(all_reduce_stages(ClusterAlgorithm::Ring, cluster(1, 1), kOne, 1e6).empty());  // N = 1: nothing to send
  CHECK(all_reduce_stages(ClusterAlgorithm::ParameterServer, cluster(4, 2), kOne, 0).empty());
  CHECK(link_load(ClusterAlgorithm::Ring, cluster(1, 1), kOne, 1e6).device == 0);
  CHECK_THROWS_WITH_AS(all_reduce_stages(ClusterAlgorithm::Ring, cluster(0, 2), kOne, 1),
                       doctest::Contains("expected nodes, devices per node and NICs per node >= 1, got 0, 2 and 1"),
                       dplab::Error);
  Cluster bad = cluster(2, 2);
  bad.inter.beta = -1;
  CHECK_THROWS_WITH_AS(link_load(ClusterAlgorithm::Ring, bad, kOne, 1), doctest::Contains("(inter level)"), dplab::Error);
  CHECK_THROWS_WITH_AS(all_reduce_stages(ClusterAlgorithm::ParameterServer, cluster(2, 2), {.count = 0}, 1),
                       doctest::Contains("expected at least 1 server, got 0"), dplab::Error);
  // past 2^24 devices: refused by name, before any count overflows (M·G here is 2^25)
  CHECK_THROWS_WITH_AS(link_load(ClusterAlgorithm::Ring, cluster(1 << 12, 1 << 13), kOne, 1),
                       doctest::Contains("expected at most 16777216 devices, got 4096 nodes x 8192 = 33554432"),
                       dplab::Error);
  CHECK_THROWS_WITH_AS(all_reduce_stages(ClusterAlgorithm::Ring, cluster(100000, 100000), kOne, 1),
                       doctest::Contains("100000 nodes x 100000 = 10000000000"), dplab::Error);
  CHECK(cluster_algorithm_from_name("halving-doubling") == ClusterAlgorithm::HalvingDoubling);
  CHECK_THROWS_WITH_AS(cluster_algorithm_from_name("tree"),
                       doctest::Contains("ring, hierarchical, halving-doubling, star or ps, got 'tree'"), dplab::Error);
}

TEST_CASE("a million devices cost the model no more memory than a thousand: it counts kinds of rank, never lists them") {
  // 125 and 125000 nodes of 8: neither a power of two, so every algorithm takes the same
  // branches (the fold included) at both sizes, and allocates the same: its stage names
  const double s = 100e6;
  const Servers ps{.count = 4};
  for (ClusterAlgorithm a : {ClusterAlgorithm::Ring, ClusterAlgorithm::Hierarchical, ClusterAlgorithm::HalvingDoubling,
                             ClusterAlgorithm::Star, ClusterAlgorithm::ParameterServer}) {
    CAPTURE(cluster_algorithm_name(a));
    auto bytes_to_price = [&](int nodes) {
      double seconds = 0, nic = 0;
      const size_t bytes = bytes_allocated_by([&] {
        seconds = cluster_all_reduce_seconds(a, cluster(nodes, 8), ps, s);
        nic = link_load(a, cluster(nodes, 8), ps, s).nic;
      });
      CHECK(seconds > 0);
      CHECK(nic > 0);
      return bytes;
    };
    CHECK(bytes_to_price(125000) == bytes_to_price(125));
  }
  // cost.h's one-level times, at the largest cluster allowed and at a thousand ranks
  for (Algorithm a : {Algorithm::Ring, Algorithm::RecursiveDoubling, Algorithm::HalvingDoubling, Algorithm::Star,
                      Algorithm::OneShot}) {
    CAPTURE(algorithm_name(a));
    const LinkCost link{.alpha = 1e-6, .beta = 1e-10, .gamma = 1e-10, .cores = 2, .wake = 1e-5};
    auto bytes_to_price = [&](int n) {
      double seconds = 0;
      const size_t bytes = bytes_allocated_by([&] { seconds = all_reduce_seconds(a, n, s, link); });
      CHECK(seconds > 0);
      return bytes;
    };
    CHECK(bytes_to_price(kMaxClusterDevices - 1) == bytes_to_price(1000 - 1));
  }
}
