// observe.h: what the tests see of a rank's ring besides its result: every exchange() and
// divide() call of the thread, recorded by the given code (support.cpp) while a test
// watches (grading.h sets the log). It lets feedback say which step sent which chunk where,
// and which chunk sizes the ring used. Not for the student's code: the grader refuses calls
// into hw3::observe. A dry log (the offsets test's) also asks them to move nothing: the ring
// then runs over a buffer that is never touched, larger than the test's memory.
// Read next: diagnose.h (what the tests make of it).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ring.h"

namespace hw3::observe {

struct Exchange {
  int to, from;
  const std::byte* out;
  int64_t out_bytes;
  const std::byte* in;
  int64_t in_bytes;
  Combine how;
};

struct Log {
  std::vector<Exchange> exchanges;
  int divides = 0;
  bool dry = false;  // record only: exchange() and divide() touch neither buffer nor transport
};

Log*& current();  // this thread's log; null while no test watches (support.cpp)

}  // namespace hw3::observe
