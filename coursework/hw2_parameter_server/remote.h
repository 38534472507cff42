// remote.h: ps.h's two functions as the judge calls them in the worker (common/wire.h). A
// training run lives in the worker: its first step sends the model, every replica's weights
// and the optimizer's settings, and the worker keeps its replicas and optimizer (momentum
// too) for the run's next steps, as the tests' own replicas and optimizer are kept when
// ps_step runs in their process.
//   kChunkSizes: i64 batch, i64 n                  -> u8 0, i64 count, count i64 sizes
//   kPsStep:     u8 fresh, i64 step, i64 devices, devices i64 device indices (cpu),
//                if fresh: i64 in, i64 hidden layers, their i64 widths, i64 classes (an MLP),
//                          f64 lr, f64 momentum (as i64 bits), then for every replica
//                          i64 parameter count and its parameters;
//                x, y                              -> u8 0, i64 count, count tensors (the
//                master's parameters after the step), f32 loss, i64 entries, entries of
//                i64 device, i64 sent, i64 received   (the Traffic copy_to counted)
// Either reply may be u8 1, string: the student's code threw (its message).
// The byte counts are the worker's own: its devices are logical devices of one process, where
// only copy_to sees a tensor cross. The judge checks them against the formulas, and the
// parameters against its own step.
// Read next: worker.cpp (the worker), remote.cpp (the judge).
#pragma once
#include <cstdint>

namespace hw2::remote {

enum Function : std::uint8_t {
  kChunkSizes = 1,
  kPsStep = 2,
};

inline constexpr std::int64_t kMaxDevices = 16, kMaxLayers = 8, kMaxParameters = 32;

}  // namespace hw2::remote
