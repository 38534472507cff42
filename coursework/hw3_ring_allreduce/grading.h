// grading.h: how hw3 is checked, shared by the visible and the hidden tests. Ranks run as
// threads over the library's thread transport, each behind a CountingTransport that counts
// the bytes it really moves; inputs are small integers (exact in every dtype), so a result
// is right or wrong, and a wrong one is explained in the ring's terms: which rank, which
// chunk, and whether a rank's contribution is missing or was added twice.
#pragma once
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "coursework/hw3_ring_allreduce/ring.h"
#include "coursework/rank_threads.h"
#include "framework/backend/cpu/cpu_half.h"
#include "parallel/rendezvous/hash_store.h"
#include "parallel/transport/thread_transport.h"

namespace hw3::grading {

using dplab::parallel::Seconds;

// Forwards to the real transport and counts what passes.
class CountingTransport : public Transport {
 public:
  explicit CountingTransport(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  std::size_t segment_bytes() const override { return inner_->segment_bytes(); }
  void set_context(const std::string& c) override { inner_->set_context(c); }
  void send_segment(int peer, const void* src, std::size_t len) override {
    inner_->send_segment(peer, src, len);
    sent += static_cast<int64_t>(len);
  }
  void recv_segment(int peer, const std::function<void(const void*, std::size_t)>& use) override {
    inner_->recv_segment(peer, [&](const void* d, std::size_t len) {
      use(d, len);
      received += static_cast<int64_t>(len);
    });
  }
  void mark_failed(const std::string& why) override { inner_->mark_failed(why); }
  void mark_left() override { inner_->mark_left(); }
  int64_t sent = 0, received = 0;

 private:
  std::unique_ptr<Transport> inner_;
};

// Runs body(rank's transport) on n threads; rethrows the first rank's exception, saying which
// rank threw. A rank that waits for a peer that never sends fails after `timeout`.
inline std::vector<int64_t> run_ranks(int n, const std::function<void(CountingTransport&)>& body,
                                      std::vector<int64_t>* received = nullptr,
                                      Seconds timeout = Seconds(20.0)) {
  auto store = std::make_shared<dplab::parallel::HashStore>(timeout);
  std::vector<int64_t> sent(n), got(n);
  course::run_rank_threads(n, [&](int r) {
    CountingTransport tr(dplab::parallel::make_thread_transport(*store, r, n, timeout));
    try {
      body(tr);
    } catch (const std::exception& e) {
      tr.mark_failed(e.what());  // the other ranks stop waiting for this one
      throw;
    }
    sent[r] = tr.sent;
    got[r] = tr.received;
    tr.mark_left();
  });
  if (received) *received = got;
  return sent;
}

// Rank k's input element i: small, distinct per rank, exact in float16 too.
inline int64_t input(int k, int64_t i) { return (k + 1) * 16 + (i % 7); }

// The chunk rule of the handout, for explaining mistakes.
inline int64_t chunk_length(int64_t count, int n, int i) { return count / n + (i < count % n ? 1 : 0); }
inline int chunk_of(int64_t count, int n, int64_t element) {
  int64_t first = 0;
  for (int c = 0; c < n; ++c) {
    if (element < first + chunk_length(count, n, c)) return c;
    first += chunk_length(count, n, c);
  }
  return n - 1;
}

template <typename T> std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
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

// "" if rank r's result is right; else what went wrong, in the ring's terms.
inline std::string explain(int r, int n, int64_t count, DType dtype, Op op,
                           const std::vector<std::byte>& got) {
  for (int64_t i = 0; i < count; ++i) {
    double sum = 0;
    for (int k = 0; k < n; ++k) sum += static_cast<double>(input(k, i));
    const double want = op == Op::Avg ? sum / n : sum;
    const double have = value_at(got, i, dtype);
    if (std::abs(have - want) <= 1e-6 * std::abs(want) + 1e-6) continue;
    const int c = chunk_of(count, n, i);
    std::string why;
    if (op == Op::Avg && std::abs(have - sum) < 1e-6 * std::abs(sum) + 1e-6)
      why = fmt::format("it is the sum, not the average (divide by the {} ranks)", n);
    else if (std::abs(have - static_cast<double>(input(r, i))) < 1e-9)
      why = fmt::format("it is still rank {}'s own input: chunk {} never arrived there", r, c);
    for (int k = 0; k < n && why.empty(); ++k) {
      const double x = static_cast<double>(input(k, i)) / (op == Op::Avg ? n : 1);
      if (std::abs(have - want - x) < 1e-6) why = fmt::format("rank {}'s contribution was added twice", k);
      if (std::abs(want - have - x) < 1e-6) why = fmt::format("rank {}'s contribution is missing", k);
    }
    if (why.empty()) why = "it matches no sum of the ranks' inputs";
    return fmt::format("rank {} of {} ended with element {} (in chunk {}) = {}, but the {} over "
                       "the ranks is {}: {}", r, n, i, c, have, op == Op::Avg ? "average" : "sum",
                       want, why);
  }
  return "";
}

// All-reduces with the student's ring on n ranks and checks every rank's result.
inline void check_all_reduce(int n, int64_t count, DType dtype, Op op) {
  std::vector<std::vector<std::byte>> results(n);
  run_ranks(n, [&](CountingTransport& tr) {
    std::vector<std::byte> data = make_input(tr.rank(), count, dtype);
    ring_all_reduce(tr, data.data(), count, dtype, op);
    results[tr.rank()] = std::move(data);
  });
  for (int r = 0; r < n; ++r) {
    const std::string why = explain(r, n, count, dtype, op, results[r]);
    CHECK_MESSAGE(why.empty(), fmt::format("{} {} of {} elements over {} ranks: {}",
                                           op == Op::Avg ? "average" : "sum",
                                           dplab::dtype_name(dtype), count, n, why));
    if (!why.empty()) return;  // one explanation per case is enough
  }
}

}  // namespace hw3::grading
