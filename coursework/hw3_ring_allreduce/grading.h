// grading.h: how hw3 is checked, shared by the visible and the hidden tests. In a student's
// own build ranks run as threads over the library's thread transport, each behind a CountingTransport that counts
// the bytes it really moves and files each send and receive with a WaitGraph, which names a
// deadlock the moment it forms (deadlock.h); the given exchange() and divide() report what
// each rank asked of them (observe.h). Inputs are small integers (exact in every dtype), so
// a result is right or wrong, and a wrong one is explained in the ring's terms (diagnose.h):
// which rank, which chunk, which step. In the grader, the judge's threads drive one process
// per rank instead (remote.cpp): results, byte counts and times are then taken outside them.
// Read next: deadlock.h, diagnose.h, tests_visible.cpp.
#pragma once
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "deadlock.h"
#include "diagnose.h"
#include "observe.h"
#include "rank_threads.h"
#include "ring.h"
#include "framework/backend/cpu/cpu_half.h"
#include "parallel/rendezvous/hash_store.h"
#include "parallel/transport/mailbox_transport.h"
#include "parallel/transport/thread_transport.h"

namespace hw3::grading {

using dplab::parallel::Seconds;

// A wait for one segment ends after this. A deadlock among the ranks' sends and receives
// is named at once (deadlock.h), without it: this guards against a rank that never comes
// (a loop that never ends), generously, and still within the test's time limit.
inline constexpr Seconds kWait{20.0};

// Forwards to the real transport, counts what passes, files each call with the run's
// WaitGraph (a call that would wait forever throws instead), and puts a wait that ran out of
// time in hw3's words.
class CountingTransport : public Transport {
 public:
  CountingTransport(std::unique_ptr<Transport> inner, WaitGraph& graph) : inner_(std::move(inner)), graph_(graph) {
    sent_to.assign(static_cast<size_t>(inner_->size()), 0);
  }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  std::size_t segment_bytes() const override { return inner_->segment_bytes(); }
  void set_context(const std::string& c) override { inner_->set_context(c); }
  void send_segment(int peer, const void* src, std::size_t len) override {
    enter(WaitGraph::Doing::Sending, peer);
    try {
      inner_->send_segment(peer, src, len);
    } catch (const std::exception& e) {
      const std::string why = waited("to send to", peer, e.what());
      graph_.leave(rank(), false);
      throw std::runtime_error(why);
    }
    graph_.leave(rank(), true);
    sent += static_cast<int64_t>(len);
    if (peer >= 0 && peer < size()) sent_to[peer] += static_cast<int64_t>(len);
  }
  void recv_segment(int peer, const std::function<void(const void*, std::size_t)>& use) override {
    enter(WaitGraph::Doing::Receiving, peer);
    try {
      inner_->recv_segment(peer, [&](const void* d, std::size_t len) {
        use(d, len);
        received += static_cast<int64_t>(len);
      });
    } catch (const std::exception& e) {
      const std::string why = waited("for a segment from", peer, e.what());
      graph_.leave(rank(), false);
      throw std::runtime_error(why);
    }
    graph_.leave(rank(), true);
  }
  void mark_failed(const std::string& why) override { inner_->mark_failed(why); }
  void mark_left() override { inner_->mark_left(); }
  int64_t sent = 0, received = 0;
  std::vector<int64_t> sent_to;  // by peer

 private:
  void enter(WaitGraph::Doing doing, int peer) {
    const std::string deadlock = graph_.enter(rank(), doing, peer, static_cast<int64_t>(segment_bytes()));
    if (deadlock.empty()) return;
    graph_.leave(rank(), false);
    throw std::runtime_error(deadlock);
  }
  // A library error (a peer that failed is its own story: keep it); a timeout in hw3's words.
  std::string waited(const char* what, int peer, const std::string& library) {
    if (course::is_consequence(library) || library.find("timed out") == std::string::npos) return library;
    return fmt::format("rank {} of {} waited {:.0f} s {} rank {}, in vain{}", rank(), size(), kWait.count(), what, peer,
                       graph_.why_waiting(rank()));
  }
  std::unique_ptr<Transport> inner_;
  WaitGraph& graph_;
};

// What each rank did in one run: the bytes its transport moved, what it asked of exchange()
// and divide(), and where its buffer was.
struct RingRun {
  std::vector<int64_t> sent, received;
  std::vector<std::vector<int64_t>> sent_to;  // [rank][peer]
  std::vector<observe::Log> logs;
  std::vector<const std::byte*> buffers;
};

// Runs body(rank's transport) on n threads, each watched (observe.h). In the grader's judge
// the ring itself runs in a process per rank (remote.cpp): the threads only drive them. A rank's failure
// fails the test with that rank's message (run_rank_threads picks the rank at fault).
inline RingRun run_ranks(int n, const std::function<void(CountingTransport&, RingRun&)>& body) {
  auto store = std::make_shared<dplab::parallel::HashStore>(kWait);
  RingRun run{std::vector<int64_t>(n), std::vector<int64_t>(n), std::vector<std::vector<int64_t>>(n),
              std::vector<observe::Log>(n), std::vector<const std::byte*>(n)};
  WaitGraph graph(n);
  course::run_rank_threads(n, [&](int r) {
    CountingTransport tr(dplab::parallel::make_thread_transport(*store, r, n, kWait), graph);
    tr.set_context("your ring_all_reduce");
    observe::current() = &run.logs[r];
    try {
      body(tr, run);
    } catch (const std::exception& e) {
      observe::current() = nullptr;
      tr.mark_failed(e.what());  // the other ranks stop waiting for this one
      throw;
    }
    observe::current() = nullptr;
    const observe::Log& log = run.logs[r];
    if (log.received >= 0) {  // a rank of its own process: the broker's counts (remote.cpp)
      run.sent_to[r] = log.sent_to;
      run.sent[r] = std::accumulate(log.sent_to.begin(), log.sent_to.end(), int64_t{0});
      run.received[r] = log.received;
    } else {
      run.sent_to[r] = tr.sent_to;
      run.sent[r] = tr.sent;
      run.received[r] = tr.received;
    }
    tr.mark_left();
  });
  return run;
}

// The inputs are drawn when the tests start, in the judge (a seed from std::random_device):
// answers written down for one grade's inputs are wrong in the next. Rank k's element i is
// (k + 1) * step + (i + shift) % 7 with step in [17, 55] and shift in [0, 6]: small integers,
// distinct per rank, exact in float16 too (a sum over 8 ranks stays below 2048).
struct InputDraw {
  int64_t step, shift;
};
inline const InputDraw& input_draw() {
  static const InputDraw draw = [] {
    std::random_device seed;
    std::mt19937_64 rng(seed());
    return InputDraw{std::uniform_int_distribution<int64_t>(17, 55)(rng),
                     std::uniform_int_distribution<int64_t>(0, 6)(rng)};
  }();
  return draw;
}
inline int64_t input(int k, int64_t i) {
  const InputDraw& d = input_draw();
  return (k + 1) * d.step + (i + d.shift) % 7;
}
// Its sum over ranks 0..n-1: step (1 + ... + n) + n ((i + shift) % 7), without a loop over
// the ranks (checking 64 MiB is then cheap next to moving it, in the speed test too).
inline int64_t input_sum(int n, int64_t i) {
  const InputDraw& d = input_draw();
  return d.step * n * (n + 1) / 2 + n * ((i + d.shift) % 7);
}

// Rank k's input as bytes of `dtype`.
inline std::vector<std::byte> make_input(int k, int64_t count, DType dtype) {
  std::vector<std::byte> out(static_cast<size_t>(count) * dplab::element_size(dtype));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t v = input(k, i);
    if (dtype == DType::Float32) reinterpret_cast<float*>(out.data())[i] = static_cast<float>(v);
    if (dtype == DType::Int64) reinterpret_cast<int64_t*>(out.data())[i] = v;
    if (dtype == DType::Float16)
      reinterpret_cast<uint16_t*>(out.data())[i] = dplab::float_to_half(static_cast<float>(v));
  }
  return out;
}

inline double value_at(const std::vector<std::byte>& b, int64_t i, DType dtype) {
  if (dtype == DType::Float32) return reinterpret_cast<const float*>(b.data())[i];
  if (dtype == DType::Int64) return static_cast<double>(reinterpret_cast<const int64_t*>(b.data())[i]);
  return dplab::half_to_float(reinterpret_cast<const uint16_t*>(b.data())[i]);
}

// "" if rank r's result is right; else what is wrong with its values, in the ring's terms.
inline std::string explain(int r, int n, int64_t count, DType dtype, Op op, const std::vector<std::byte>& got) {
  for (int64_t i = 0; i < count; ++i) {
    const double sum = static_cast<double>(input_sum(n, i));
    const double want = op == Op::Avg ? sum / n : sum;
    const double have = value_at(got, i, dtype);
    auto near = [](double a, double b) { return std::abs(a - b) <= 1e-6 * std::abs(b) + 1e-6; };
    if (near(have, want)) continue;
    const int c = chunk_of(count, n, i);
    std::string why;
    if (op == Op::Avg && near(have, sum))
      why = fmt::format("it is the sum, not the average (divide by the {} ranks)", n);
    else if (op == Op::Avg && n > 1 && near(have, want / n))
      why = fmt::format("it is the average divided by {} once more: the average was taken twice", n);
    else if (near(have, static_cast<double>(input(r, i))))
      why = fmt::format("it is still rank {}'s own input: chunk {} never arrived there", r, c);
    for (int k = 0; k < n && why.empty(); ++k) {
      const double x = static_cast<double>(input(k, i)) / (op == Op::Avg ? n : 1);
      if (near(have - want, x)) why = fmt::format("rank {}'s contribution was added twice", k);
      if (near(want - have, x)) why = fmt::format("rank {}'s contribution is missing", k);
    }
    if (why.empty()) why = "it matches no sum of the ranks' inputs";
    return fmt::format("rank {} of {} ended with element {} (in chunk {}) = {:g}, but the {} over the ranks is {:g}: {}", r,
                       n, i, c, have, op == Op::Avg ? "average" : "sum", want, why);
  }
  return "";
}

// All-reduces with the student's ring on n ranks and checks every rank's result; a wrong
// one is explained by its values and by how the rank's steps left the schedule. Returns
// whether it was right (a test stops at its first wrong case: one explanation is enough).
inline bool check_all_reduce(int n, int64_t count, DType dtype, Op op) {
  std::vector<std::vector<std::byte>> results(n);
  const int64_t es = static_cast<int64_t>(dplab::element_size(dtype));
  RingRun run = run_ranks(n, [&](CountingTransport& tr, RingRun& rr) {
    std::vector<std::byte> data = make_input(tr.rank(), count, dtype);
    rr.buffers[tr.rank()] = data.data();
    ring_all_reduce(tr, data.data(), count, dtype, op);
    results[tr.rank()] = std::move(data);
  });
  for (int r = 0; r < n; ++r) {
    std::string why = explain(r, n, count, dtype, op, results[r]);
    if (why.empty()) continue;
    for (int k = 0; k < n; ++k) {  // the first rank whose steps left the schedule says how
      const std::string steps = schedule_words(k, n, count, es, run.buffers[k], run.logs[k], op == Op::Avg);
      if (!steps.empty()) {
        why += ". " + steps;
        break;
      }
    }
    FAIL_CHECK(fmt::format("{} {} of {} elements over {} ranks: {}", op == Op::Avg ? "average" : "sum",
                           dplab::dtype_name(dtype), count, n, why));
    return false;
  }
  CHECK(true);  // the case was checked
  return true;
}

}  // namespace hw3::grading
