// rank_threads.h: the assignments' ranks as threads of the test process. A rank that throws
// fails the test with its message and its rank number, after every thread has ended.
// Used by hw3_ring_allreduce/grading.h and hw4_ddp/grading.h.
#pragma once
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace course {

inline void run_rank_threads(int n, const std::function<void(int rank)>& body) {
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      FAIL(fmt::format("rank {} of {} threw: {}", r, n, e.what()));
    }
  }
}

}  // namespace course
