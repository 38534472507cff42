// test_link_model.cpp: the emulated per-rank link (transport/link_model.h).
// The virtual clock's arithmetic is checked exactly, on the times the model books (LinkModel's
// bookings, PacedTransport's arrivals), which no scheduler delay can move; the rest through
// the bounds the model guarantees: a wait never ends early, so a transfer of b bytes on a
// link of B bytes/s takes at least b/B, and the ring and the star must spend at least their
// textbook volumes over the busiest link: ring 2(N-1)/N * S per rank, star 2(N-1) * S at
// the master. No check here has an upper bound on wall time.
// Read next: test_collectives_threads.cpp.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "framework/error.h"
#include "framework/ops/ops.h"
#include "parallel/comm/process_group.h"
#include "parallel/rendezvous/hash_store.h"
#include "parallel/transport/link_model.h"
#include "parallel/transport/thread_transport.h"
#include "tests/parallel/rank_harness.h"

using namespace dplab;
using namespace dplab::parallel;
using dplab::parallel::testing::run_threads;

namespace {

double seconds_since(LinkClock::time_point t) {
  return std::chrono::duration<double>(LinkClock::now() - t).count();
}
double ms(LinkClock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Wall time of one all_reduce of `elems` floats on `n` threads with links of `gbps`;
// checks the sums too (every rank adds 1..n, so each element is n(n+1)/2).
double timed_all_reduce(int n, int64_t elems, double gbps, Algorithm algo) {
  std::atomic<double> slowest{0};
  run_threads(
      n,
      [&](ProcessGroup& pg) {
    Tensor t = full({elems}, float(pg.rank() + 1));
    pg.barrier();
    auto start = LinkClock::now();
    pg.all_reduce(t, ReduceOp::Sum, algo);
    double s = seconds_since(start);
    double seen = slowest.load();
    while (s > seen && !slowest.compare_exchange_weak(seen, s)) {}
    const float* p = t.data<float>();
    for (int64_t i = 0; i < elems; i += 997) REQUIRE(p[i] == float(n * (n + 1) / 2));
      },
      ProcessGroupOptions{.link_gbps = gbps});
  return slowest.load();
}

// Two ranks on threads, joined by the thread transport (a mailbox), wrapped in a paced link
// of `gbps` unless gbps is 0; body(rank, transport) runs on each. `observe` hears what
// rank 1's ingress carried.
void run_pair(double gbps, const std::function<void(int, Transport&)>& body,
              LinkObserver observe = {}) {
  HashStore store(Seconds{30});
  std::exception_ptr errors[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        std::unique_ptr<Transport> t = make_thread_transport(store, r, 2, Seconds{30});
        if (gbps > 0)
          t = make_paced_transport(std::move(t), gbps, {}, r == 1 ? observe : LinkObserver{});
        body(r, *t);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace

TEST_CASE("a mailbox segment carries its note to the receiver") {
  uint64_t noted = 1, plain = 1;
  run_pair(0, [&](int rank, Transport& t) {
    const float x = 1.0f;
    if (rank == 0) {
      t.send_noted(1, &x, sizeof x, 42);
      t.send_segment(1, &x, sizeof x);
      return;
    }
    t.recv_segment(0, [&](const void*, std::size_t) { noted = t.received_note(0); });
    t.recv_segment(0, [&](const void*, std::size_t) { plain = t.received_note(0); });
  });
  CHECK(noted == 42);
  CHECK(plain == 0);  // a segment sent without a note reads 0
}

TEST_CASE("an emulated link carries bytes while their receiver is busy elsewhere") {
  // 0.01 Gbit/s = 1.25e6 bytes/s: a segment of 125000 bytes is 100 ms on the wire. Rank 0
  // sends two at once: the second queues behind the first on its egress and starts down the
  // wire when the first is through. Rank 1 takes the first, then is busy elsewhere until
  // 300 ms after rank 0 has sent both, when the second is long in: its ingress carried it
  // from the moment it was on the wire, as a NIC's buffer fills while its process computes,
  // so it was usable at on_wire + 100 ms, not 100 ms after rank 1 looked. The times are
  // the link's bookings (virtual), which a late thread cannot move.
  const std::size_t bytes = 125000;
  const double wire_ms = 100.0;
  std::vector<std::byte> buf(bytes);
  std::vector<LinkArrival> arrivals;  // rank 1's, in order
  std::atomic<bool> both_sent{false};
  LinkClock::time_point first_used{}, looked{};
  run_pair(
      0.01,
      [&](int rank, Transport& t) {
    if (rank == 0) {
      t.send_segment(1, buf.data(), bytes);
      t.send_segment(1, buf.data(), bytes);
      both_sent = true;
      return;
    }
    auto ignore = [](const void*, std::size_t) {};
    t.recv_segment(0, ignore);
    first_used = LinkClock::now();
    while (!both_sent) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    // Busy elsewhere. The second segment starts down the wire at most 100 ms after rank 0's
    // send returned (it queues behind the first), so it is in 200 ms after; rank 1 looks
    // 300 ms after (a sleep never ends early), when the bytes are in whatever the scheduler did.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    looked = LinkClock::now();
    t.recv_segment(0, ignore);
      },
      [&](const LinkArrival& a) { arrivals.push_back(a); });
  REQUIRE(arrivals.size() == 2);
  const LinkArrival &first = arrivals[0], &second = arrivals[1];
  MESSAGE("second segment on the wire ", ms(second.on_wire - first.on_wire),
          " ms after the first, carried ", ms(second.carried - second.on_wire),
          " ms after that; rank 1 looked ", ms(looked - second.carried), " ms after it was in");
  CHECK(first.bytes == bytes);
  CHECK(first.peer == 0);
  CHECK(ms(first.carried - first.on_wire) == doctest::Approx(wire_ms));  // the ingress was idle
  CHECK(first_used >= first.carried);  // a segment is usable once carried, never before
  CHECK(ms(second.on_wire - first.on_wire) >= wire_ms - 1e-6);  // queued on rank 0's egress
  // The property: carried from when it was on the wire. Had the ingress started it when
  // rank 1 looked, it would be carried at looked + 100 ms, after rank 1 looked.
  CHECK(ms(second.carried - second.on_wire) == doctest::Approx(wire_ms));
  CHECK(second.carried < looked);
}

TEST_CASE("a link direction books transfers back to back on a virtual clock") {
  LinkDirection link(link_bytes_per_s(1.0));  // 1 Gbit/s = 1.25e8 bytes/s
  const auto t0 = LinkClock::now();
  auto ms = [&](LinkClock::time_point t) {
    return std::chrono::duration<double, std::milli>(t - t0).count();
  };
  CHECK(ms(link.reserve(125000, t0)) == doctest::Approx(1.0));  // 1 ms
  CHECK(ms(link.reserve(250000, t0)) == doctest::Approx(3.0));  // queued behind the first
  // asked for after the link went idle: starts when asked, not when the link freed up
  CHECK(ms(link.reserve(125000, t0 + std::chrono::milliseconds(10))) == doctest::Approx(11.0));
  CHECK(ms(link.reserve(0, t0)) == doctest::Approx(11.0));  // a token takes no time
}

TEST_CASE("a link model serialises copies that share an endpoint, not others") {
  // 2.5e7 bytes at 1 Gbit/s = 200 ms per copy. Two copies asked for at the same instant t0:
  // when each would end, on the virtual clock.
  const int64_t bytes = 25'000'000;
  const auto t0 = LinkClock::now();
  auto ends = [&](int from_a, int to_a, int from_b, int to_b) {
    LinkModel links(4, 1.0);
    const double a = ms(links.book(from_a, to_a, bytes, t0) - t0);
    const double b = ms(links.book(from_b, to_b, bytes, t0) - t0);
    return std::vector<double>{a, b};
  };
  using doctest::Approx;
  auto both_into_0 = ends(1, 0, 2, 0);  // device 0's ingress carries one after the other
  CHECK(both_into_0[0] == Approx(200.0));
  CHECK(both_into_0[1] == Approx(400.0));
  auto both_out_of_0 = ends(0, 1, 0, 2);  // a broadcast from the master: its egress, in turn
  CHECK(both_out_of_0[0] == Approx(200.0));
  CHECK(both_out_of_0[1] == Approx(400.0));
  auto apart = ends(1, 0, 2, 3);  // disjoint endpoints: side by side
  CHECK(apart[0] == Approx(200.0));
  CHECK(apart[1] == Approx(200.0));
  LinkModel links(2, 1.0);
  CHECK(links.book(1, 1, bytes, t0) == t0);  // a device to itself crosses no link
  CHECK_THROWS_WITH_AS(links.transfer(0, 2, 1), doctest::Contains("endpoints must be in [0, 2)"),
                       Error);

  // transfer() books from two threads at once and waits for its booking's end: the second
  // copy into device 0 cannot be done before 400 ms (a wait never ends early)
  LinkModel shared(4, 1.0);
  const auto start = LinkClock::now();
  std::thread a([&] { shared.transfer(1, 0, bytes); });
  std::thread b([&] { shared.transfer(2, 0, bytes); });
  a.join();
  b.join();
  CHECK(seconds_since(start) >= 0.4);
}

TEST_CASE("over emulated links the star's master is the bottleneck the ring avoids") {
  const int n = 4;
  const int64_t elems = 1 << 20;  // S = 4 MiB of float32
  const double gbps = 2.0, bytes_per_s = link_bytes_per_s(gbps), S = 4.0 * elems;
  const double ring = timed_all_reduce(n, elems, gbps, Algorithm::Ring);
  const double star = timed_all_reduce(n, elems, gbps, Algorithm::Star);
  const double ring_floor = 2.0 * (n - 1) / n * S / bytes_per_s;  // ingress of every rank
  const double star_floor = (n - 1) * S / bytes_per_s;            // the master's ingress alone
  MESSAGE("ring ", ring * 1e3, " ms (>= ", ring_floor * 1e3, "), star ", star * 1e3,
          " ms (>= ", star_floor * 1e3, "): star/ring = ", star / ring, " (textbook ", n, ")");
  // The floors are what the links alone cost (a virtual clock: they hold on a loaded
  // machine too); the star's is (N-1)/(2(N-1)/N) = N/2 = 2 times the ring's. The measured
  // ratio also depends on how busy the cores are, so it is printed, not asserted here
  // (bench_allreduce --link-gbps prints it too).
  CHECK(ring >= ring_floor);
  CHECK(star >= star_floor);
}

TEST_CASE("link bandwidths must be positive") {
  CHECK_THROWS_WITH_AS(link_bytes_per_s(0), doctest::Contains("must be > 0 Gbit/s, got 0"), Error);
  CHECK_THROWS_WITH_AS(run_threads(
                           2, [](ProcessGroup&) {}, ProcessGroupOptions{.link_gbps = -1}),
                       doctest::Contains("link_gbps must be >= 0"), Error);
  // mpi moves its own bytes: an emulated link there would be silently ignored, so it is refused
  CHECK_THROWS_WITH_AS(
      run_threads(
          1, [](ProcessGroup&) {}, ProcessGroupOptions{.engine = "mpi", .link_gbps = 10}),
      doctest::Contains(
          "needs one of dplab's engines (ring, star, ...); the mpi engine moves its bytes itself"),
      Error);
}
