// observe.h: what the tests see of a rank's ring besides its result: every exchange() and
// divide() call of the thread, recorded by the given code (support.cpp) while a test
// watches (grading.h sets the log). It lets feedback say which step sent which chunk where,
// and which chunk sizes the ring used. Not for the student's code: the grader refuses calls
// into hw3::observe. A dry log (the offsets test's) also asks them to move nothing: the ring
// then runs over a buffer that is never touched, larger than the test's memory. It keeps one
// record for calls that continue each other (a step moved in pieces), so that its size
// follows the ring's steps, not the pieces of a 12 GiB buffer.
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
  // Bytes counted outside the rank, by the broker, when the rank is a process of its own
  // (the grader's judge, remote.cpp): what it sent to each rank, and received (-1: not counted).
  std::vector<int64_t> sent_to;
  int64_t received = -1;
  double seconds = -1;  // and the call's time, from go to its reply's first byte (remote.h)
  bool dry = false;  // record only: exchange() and divide() touch neither buffer nor transport
  // Whether a call picks up where the last record ends, with the same peers and Combine (no
  // two steps of a ring of 3 or more ranks do: the next step's chunks lie behind, not ahead).
  bool continues(int to, int from, const std::byte* out, const std::byte* in, Combine how) const {
    if (exchanges.empty()) return false;
    const Exchange& e = exchanges.back();
    return e.to == to && e.from == from && e.how == how && out == e.out + e.out_bytes && in == e.in + e.in_bytes;
  }
};

Log*& current();  // this thread's log; null while no test watches (support.cpp)

// The judge's side when the ranks are processes of their own (remote.cpp sets it before the
// tests run; null in a student's own build, where ranks are the test's threads): the
// library's ring on ranks the judge forked, processes as the student's are, behind a broker
// of their own; returns the call's time, clocked as the student's calls are (remote.h).
struct Outside {
  virtual ~Outside() = default;
  virtual double library_all_reduce(int rank, int size, std::byte* data, int64_t count) = 0;
};
Outside*& outside();

}  // namespace hw3::observe
