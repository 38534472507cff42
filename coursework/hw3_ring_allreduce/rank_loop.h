// rank_loop.h: what a rank that is a process of its own does (remote.h's protocol): read a
// call's input, say ready, wait for go, run a ring over the broker, write the result; again,
// until the judge closes its end. Two kinds of rank serve it: the student's (worker.cpp, with
// their ring_all_reduce) and the library's, which the judge forks for the speed test so that
// both rings are timed as processes the same way (remote.cpp).
// Read next: remote.h, worker.cpp.
#pragma once
#include "ring.h"

namespace hw3::remote {

using Ring = void (*)(Transport& tr, std::byte* data, int64_t count, DType dtype, Op op);

// in, out: the control pipes (from the judge, to the judge); to_broker, from_broker: the
// rank's link to the others; context names the ring in a wait's words. Returns when the judge
// closes `in` (or is gone).
void serve_calls(int in, int out, int to_broker, int from_broker, Ring ring, const char* context);

}  // namespace hw3::remote
