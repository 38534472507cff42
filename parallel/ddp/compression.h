// compression.h: gradient compression for the all-reduce (Horovod's Compression.fp16,
// PyTorch's fp16_compress_hook). A float32 gradient is cast to float16, all-reduced (Sum;
// each addition is done in float and rounded back to half, backend reduce_into), cast back
// and divided by the world size. The wire carries 2 bytes per element instead of 4: exactly
// half the all-reduce traffic, for a relative rounding error of about 2^-11 per element.
// Half overflows past 65504: a sum of N gradients must stay below that (gradients do).
// Read next: compression.cpp; horovod/horovod.h (the same compression for DistributedOptimizer);
// tutorials/15_horovod_style.md.
#pragma once
#include <optional>

#include "parallel/ddp/reducer.h"

namespace dplab::parallel {

// Names follow Horovod's (hvd.Compression.none / .fp16) so that code reads the same.
enum class Compression { none, fp16 };

// Starts averaging `t` (float32, any device) over the ranks, compressed as asked. A 16-bit
// t (float16 / bfloat16 gradients of a low-precision model) goes as it is, whatever
// `compression` says: divided by N, then summed, at 2 bytes per element. When the
// returned work's wait() returns, t holds the average. t must stay alive and untouched until
// then. The fp16 form keeps its half buffer inside the work.
WorkPtr all_reduce_average_async(ProcessGroup& pg, Tensor t, Compression compression,
                                 std::optional<Algorithm> algo = std::nullopt);

// A DDP communication hook (reducer.h's CommHook contract: the bucket holds the AVERAGE
// once the work completes) that sends the bucket as float16.
//   ddp.register_comm_hook(fp16_compress_hook());
CommHook fp16_compress_hook(std::optional<Algorithm> algo = std::nullopt);

}  // namespace dplab::parallel
