// worker.cpp: the main() of one hw3 rank when the grader runs the ranks as processes of their
// own, each as its own user: the student's ring_all_reduce (and the given exchange() and
// divide()) and nothing of the grader's. It answers the judge's calls (rank_loop.h, remote.h)
// on its two control pipes, running the ring over the broker (common/broker_transport.h), the
// rank's only link to the others, until the judge closes its end. A crash is reported on a
// pipe of its own (common/crash.cpp), words for the student, never a verdict.
// Read next: rank_loop.cpp, remote.cpp, ../common/broker.h.
#include <cstdio>
#include <string>

#include "rank_loop.h"
#include "ring.h"
#include "wire.h"
#include "worker_side.h"

int main() {
  const auto pipes = course::worker::start(course::worker::Role::kRank);
  if (!pipes) return 3;
  hw3::remote::serve_calls(pipes->in, pipes->out, pipes->to_broker, pipes->from_broker,
                           &hw3::ring_all_reduce, "your ring_all_reduce");
  return 0;
}
