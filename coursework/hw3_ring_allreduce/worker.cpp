// worker.cpp: the main() of one hw3 rank when the grader runs the ranks as processes of their
// own, each as its own user: the student's ring_all_reduce (and the given exchange() and
// divide()) and nothing of the grader's. It answers the judge's calls (rank_loop.h, remote.h)
// on its two control pipes, running the ring over the broker (common/broker_transport.h), the
// rank's only link to the others, until the judge closes its end. A crash is reported on a
// pipe of its own (common/crash.cpp), words for the student, never a verdict.
// Read next: rank_loop.cpp, remote.cpp, ../common/broker.h.
#include <cstdio>
#include <string>

#include "channel.h"
#include "rank_loop.h"
#include "ring.h"
#include "wire.h"

namespace course::harness {
void install_crash_handlers();  // crash.cpp
}

int main() {
  std::string why;
  if (!course::harness::open_channel(why)) {  // the crash reports' pipe (no verdicts read there)
    std::fprintf(stderr, "rank: %s\n", why.c_str());
    return 3;
  }
  course::harness::install_crash_handlers();
  const int in = course::wire::fd_from_env("DPLAB_COURSE_WORKER_IN_FD");
  const int out = course::wire::fd_from_env("DPLAB_COURSE_WORKER_OUT_FD");
  const int to_broker = course::wire::fd_from_env("DPLAB_COURSE_TO_BROKER_FD");
  const int from_broker = course::wire::fd_from_env("DPLAB_COURSE_FROM_BROKER_FD");
  if (in < 0 || out < 0 || to_broker < 0 || from_broker < 0) {
    std::fprintf(stderr, "rank: started without the grader's pipes\n");
    return 3;
  }
  hw3::remote::serve_calls(in, out, to_broker, from_broker, &hw3::ring_all_reduce,
                           "your ring_all_reduce");
  return 0;
}
