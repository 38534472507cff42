// remote.h: hw4's ranks as the judge drives them when they are processes of their own
// (common/wire.h frames on each rank's two control pipes; the all-reduces' bytes go through
// the broker, common/broker.h, on two other pipes). The calls, one at a time:
//   buckets = u8 kBuckets, i64 cap, i64 count, count i64 numels       -> u8 0, buckets
//   begin   = u8 kBegin, i64 rank, i64 size, i64 cap, u8 overlap, 4 tensors (the weights)
//             -> u8 0, buckets (the rank holds the model, its group and the student's reducer)
//   step    = u8 kStep, u8 micro, micro pairs of tensors (the rank's rows, their labels)
//             -> u8 0, run (what rank_trainer.h's RankRun holds after the step)
//   end     = u8 kEnd                                                -> u8 0
//   any call that threw                                              -> u8 1, string
// Before a step's reply the rank may send notices (u8 kSay, string): words for the student,
// sent before the student's finish() runs, since it may crash on what they say. With
// `overlap` (the overlap test) the rank's first all-reduce is held until its first last
// gradient (recording_engine.h), and at each synchronised backward's last gradient, before
// the reducer's hook sees it, the rank says u8 kLastGradient and waits: the judge answers
// kAck once it has read the broker's counts (then the rank lets the held all-reduce go),
// and kGo once the broker has seen the traffic of the buckets already full, or nothing has
// moved for kStandstill while every rank waits (a reducer that launched nothing).
//   buckets = i64 count, each i64 length and that many i64 indices
//   floats  = i64 count, each i64 length and that many f32
//   run     = floats params, floats grads, i64 launched, i64 launched_before_last_gradient,
//             u8 held_in_vain, buckets, floats local_grads, floats launched_flats
// Every count and length is checked against the caps below before anything is kept. What a
// rank reports is its own account; the judge checks it against what it sees itself (the
// bytes each rank sent through the broker, the parameters one process gets).
// Read next: worker.cpp (a rank), remote.cpp (the judge).
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rank_trainer.h"
#include "wire.h"

namespace hw4::remote {

enum Call : std::uint8_t { kBuckets = 1, kBegin = 2, kStep = 3, kEnd = 4 };
inline constexpr std::uint8_t kSay = 2;                    // a notice before a step's reply
inline constexpr std::uint8_t kLastGradient = 3;           // the overlap test's stop
inline constexpr char kAck = 'a', kGo = 'g';               // the judge's answers to it
inline constexpr std::chrono::seconds kStandstill{5};      // nothing moved, every rank waits
inline constexpr std::size_t kSegmentBytes = 128 * 1024;  // the library's slot (transport.h)
inline constexpr std::chrono::seconds kWait{20};          // a rank's wait for a segment
inline constexpr std::int64_t kMaxLists = 64, kMaxFloats = 1 << 16;

inline void put_buckets(course::wire::Writer& out, const std::vector<std::vector<size_t>>& buckets) {
  out.i64(static_cast<std::int64_t>(buckets.size()));
  for (const std::vector<size_t>& b : buckets) {
    out.i64(static_cast<std::int64_t>(b.size()));
    for (size_t p : b) out.i64(static_cast<std::int64_t>(p));
  }
}

inline std::int64_t count_in(course::wire::Reader& in, std::int64_t most, const char* what) {
  const std::int64_t n = in.i64();
  if (n < 0 || n > most)
    throw course::wire::Error(std::to_string(n) + " " + what + " (at most " + std::to_string(most) + ")");
  return n;
}

inline std::vector<std::vector<size_t>> get_buckets(course::wire::Reader& in) {
  std::vector<std::vector<size_t>> buckets(static_cast<size_t>(count_in(in, kMaxLists, "buckets")));
  for (std::vector<size_t>& b : buckets) {
    const std::int64_t n = count_in(in, kMaxLists, "parameters in a bucket");
    for (std::int64_t i = 0; i < n; ++i) b.push_back(static_cast<size_t>(count_in(in, kMaxLists, "as an index")));
  }
  return buckets;
}

inline void put_floats(course::wire::Writer& out, const std::vector<std::vector<float>>& lists) {
  out.i64(static_cast<std::int64_t>(lists.size()));
  for (const std::vector<float>& l : lists) {
    out.i64(static_cast<std::int64_t>(l.size()));
    for (float v : l) out.f32(v);
  }
}

inline std::vector<std::vector<float>> get_floats(course::wire::Reader& in) {
  std::vector<std::vector<float>> lists(static_cast<size_t>(count_in(in, kMaxLists, "lists of floats")));
  for (std::vector<float>& l : lists) {
    const std::int64_t n = count_in(in, kMaxFloats, "floats in a list");
    for (std::int64_t i = 0; i < n; ++i) l.push_back(in.f32());
  }
  return lists;
}

inline void put_run(course::wire::Writer& out, const grading::RankRun& run) {
  put_floats(out, run.params);
  put_floats(out, run.grads);
  out.i64(run.launched);
  out.i64(run.launched_before_last_gradient);
  out.u8(run.held_in_vain ? 1 : 0);
  put_buckets(out, run.buckets);
  put_floats(out, run.local_grads);
  put_floats(out, run.launched_flats);
}

inline grading::RankRun get_run(course::wire::Reader& in) {
  grading::RankRun run;
  run.params = get_floats(in);
  run.grads = get_floats(in);
  run.launched = in.i64();
  run.launched_before_last_gradient = in.i64();
  run.held_in_vain = in.u8() != 0;
  run.buckets = get_buckets(in);
  run.local_grads = get_floats(in);
  run.launched_flats = get_floats(in);
  return run;
}

}  // namespace hw4::remote
