// judge_side.h: what every judge outside the student's process ("judge": "outside" in
// assignment.json) holds of the processes that run the student's code: each one's two
// control pipes, and whether it is lost (Process); hw1's and hw2's one call at a time to
// their worker, turned into the words the student reads (call_worker); and, for the ranks of
// hw3-hw5, their pipes (ranks_from_env) and the meeting of a call's rank threads (Meeting).
// The worker's side of the same pipes is worker_side.h; what travels on them, wire.h.
// Read next: ../hw1_autograd/remote.cpp (a worker), ../hw3_ring_allreduce/remote.cpp (ranks).
#pragma once
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "broker.h"
#include "wire.h"

namespace course::judge {

// A worker or a rank, as the judge holds it: its control pipes (to it, from it). Once it
// broke the protocol or ended, no call reaches it; `why` says what happened.
struct Process {
  int to = -1, from = -1;
  bool lost = false;
  std::string why;
  // Marks it lost and returns `words`, what the test is told.
  std::string lose(const std::string& words) {
    lost = true;
    why = words;
    return words;
  }
};

// The worker the grader started beside the judge (DPLAB_COURSE_JUDGE_TO_WORKER_FD,
// DPLAB_COURSE_JUDGE_FROM_WORKER_FD; -1 when unset). Ignores SIGPIPE: a write to a worker that
// died says EPIPE, and the test that called it fails.
Process worker_from_env();

// Calls `name` in worker `w`: writes `request`, reads the reply's frame and its status (0: it
// returned, 1: it threw), and lets `read` read what follows a 0; every byte must be read.
// Throws the student's exception in its own words, or, when the worker ended or answered what
// the protocol does not allow (a wire::Error from `read` too), words that say so, and marks
// the worker lost.
void call_worker(Process& w, const char* name, const wire::Writer& request,
                 const std::function<void(wire::Reader&)>& read);

// The ranks the grader started (DPLAB_COURSE_RANK_FDS: each rank's two control pipes and its
// two pipes to the broker): each one's control pipes, and its link for the broker. Empty where
// the grader started none (the judge run by hand); else SIGPIPE is ignored (a rank that died:
// write() says EPIPE, the test fails).
struct Ranks {
  std::vector<Process> control;
  std::vector<broker::Link> links;
};
Ranks ranks_from_env();

// n threads meet; the last to come runs `last` before any goes on.
class Meeting {
 public:
  void meet(int n, const std::function<void()>& last) {
    std::unique_lock<std::mutex> lock(mu_);
    const long generation = generation_;
    if (++came_ == n) {
      last();
      came_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != generation; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int came_ = 0;
  long generation_ = 0;
};

}  // namespace course::judge
