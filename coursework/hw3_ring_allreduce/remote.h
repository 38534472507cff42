// remote.h: hw3's ranks as the judge drives them when they are processes of their own
// (common/wire.h frames on each rank's two control pipes; the ring's own bytes go through
// the broker, common/broker.h, on two other pipes). One call:
//   request = i64 rank, i64 size, i64 count, u8 dtype, u8 op, u8 dry, blob input (empty if dry)
//   ready   = u8 kReady (the rank holds its input)     then from the judge: go = u8 kGo
//   reply   = u8 0, blob result (empty if dry), i64 divides, i64 records, records of
//               i64 to, i64 from, i64 out offset, i64 out bytes, i64 in offset, i64 in bytes, u8 how
//           | u8 1, string   (ring_all_reduce threw: the message)
// The judge times a call from go, sent once every rank of it is ready, to the reply's first
// byte: the input's and the result's way through the pipes is not the ring's time, and no
// byte the rank writes early can make it shorter without breaking the reply's frame.
// Offsets are from the start of the rank's buffer: the judge puts them back on its own copy,
// so that diagnose.h reads a remote rank's steps as it reads a thread's. What a rank reports of
// its steps is words for the student only; results and byte counts are checked on their own.
// Read next: worker.cpp (the rank), remote.cpp (the judge).
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace hw3::remote {

inline constexpr std::size_t kSegmentBytes = 128 * 1024;  // the library's slot (transport.h)
inline constexpr std::chrono::seconds kWait{20};          // as grading.h's kWait
inline constexpr std::int64_t kMaxRecords = 1 << 20;      // a reply's step records, at most
inline constexpr char kReady = 2, kGo = 'g';

}  // namespace hw3::remote
