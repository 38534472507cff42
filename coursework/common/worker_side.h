// worker_side.h: how every worker main() of an assignment judged outside the student's
// process starts (hw1's and hw2's worker, hw3-hw5's ranks): the crash reports' pipe
// (channel.h, crash.cpp), SIGPIPE ignored, and the pipes the grader opened for it (start); and
// how hw1, hw2, hw4 and hw5 answer the judge's calls on them, one at a time (serve). The
// judge's side of the same pipes is judge_side.h; what travels on them, wire.h.
// Read next: ../hw1_autograd/worker.cpp, ../hw3_ring_allreduce/worker.cpp.
#pragma once
#include <functional>
#include <optional>
#include <string>

namespace course::worker {

// A worker's two control pipes (from the judge, to the judge), and for a rank its link to the
// others through the broker (broker_transport.h); -1 where it has none.
struct Pipes {
  int in = -1, out = -1;
  int to_broker = -1, from_broker = -1;
};

enum class Role { kWorker, kRank };

// Opens the crash reports' pipe, installs the crash handlers, ignores SIGPIPE (a judge that is
// gone: write() says EPIPE) and reads the pipes the grader named (DPLAB_COURSE_WORKER_IN_FD,
// DPLAB_COURSE_WORKER_OUT_FD and, for a rank, DPLAB_COURSE_TO_BROKER_FD and
// DPLAB_COURSE_FROM_BROKER_FD). Empty, once it said why on stderr ("worker: ..." or
// "rank: ..."), where they are not what they should be: main() returns 3.
std::optional<Pipes> start(Role role);

// Answers the judge's calls on `pipes` until it closes its end: each reply is
// answer(request), or, when that threw, its words (wire::error_reply). What the student's code
// printed is flushed before the reply goes, so that it comes before the reply is judged.
void serve(const Pipes& pipes, const std::function<std::string(const std::string&)>& answer);

}  // namespace course::worker
