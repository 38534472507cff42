// thread_count_scope.h: sets the CPU thread count for one test and puts the previous count
// back when the scope ends, also when a REQUIRE ends the test early (a count left at 3 would
// change every test after it). available() is false where the count cannot be set (a build
// without OpenMP accepts only 1): the test should then say it skips.
#pragma once
#include "framework/backend/cpu/cpu_threads.h"
#include "framework/error.h"

namespace dplab::testing {

class ThreadCountScope {
 public:
  explicit ThreadCountScope(int threads) : before_(get_num_threads()) {
    try {
      set_num_threads(threads);
      available_ = true;
    } catch (const Error&) {
      available_ = false;
    }
  }
  ~ThreadCountScope() { set_num_threads(before_); }
  ThreadCountScope(const ThreadCountScope&) = delete;
  ThreadCountScope& operator=(const ThreadCountScope&) = delete;
  bool available() const { return available_; }

 private:
  int before_;
  bool available_ = false;
};

}  // namespace dplab::testing
