// remote.h: hw5's ranks as the judge drives them when each is a process of its own (the
// grader's way: "judge": "outside", "ranks": 4). The judge's calls travel as common/wire.h
// frames on each rank's two control pipes; the collectives' own bytes go through the broker
// (common/broker.h) on two other pipes, the rank's only link to the others. One call is one
// rank's whole part of a test case (rank_run.h's run_rank):
//   request = i64 rank, i64 size, f32 lr, f32 momentum, i64 params, i64 steps,
//             params tensors (the initial values), steps x params tensors (the gradients)
//   reply   = u8 0, i64 shard, i64 state floats, i64 steps, steps x (i64 reduce-scatters,
//             i64 all-gathers, i64 all-reduces), i64 params, params tensors (the values after
//             the last step)
//           | u8 1, string   (the call threw: the message)
// The judge checks the values it gets against SGD it runs itself, and the bytes each rank
// sent against the broker's counts, taken where no rank can change them; the shard, the
// momentum's floats and the calls are what the library counted in the rank's process.
// Read next: worker.cpp (a rank), remote.cpp (the judge).
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace hw5::remote {

inline constexpr std::size_t kSegmentBytes = 128 * 1024;  // the library's slot (transport.h)
// A rank that waits this long for a segment gives up: the judge then says which rank had
// already finished (a rank that made fewer calls), well within the test's 30 s.
inline constexpr std::chrono::seconds kWait{10};
inline constexpr std::int64_t kMaxParams = 64, kMaxSteps = 16;  // a call's, at most

}  // namespace hw5::remote
