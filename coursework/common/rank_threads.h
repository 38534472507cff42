// rank_threads.h: the assignments' ranks as threads of the test process. A rank that throws
// fails the test with its message and its rank number, after every thread has ended.
// When one rank fails, the others usually fail too, only because it stopped ("rank 1
// failed because rank 0 failed ..."): the test reports the rank whose failure was its own.
// Used by hw3_ring_allreduce/grading.h and one_process_reference.h (hw4, hw5).
// Read next: harness.h (each thread's place, for crash reports).
#pragma once
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <exception>
#include <functional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

namespace course {

// True for the library's words for "a peer stopped": a consequence, not a cause.
inline bool is_consequence(const std::string& why) {
  for (const char* words : {"failed because rank", "left the group", "destroyed its", "died while rank"})
    if (why.find(words) != std::string::npos) return true;
  return false;
}

// The library's words for a peer that stopped, in a student's: they never touched a
// ProcessGroup's destructor or a transport's collective counter.
inline std::string plain_words(std::string why) {
  static const std::regex left(R"(rank (\d+) left the group \(destroyed its ProcessGroup\) while rank (\d+) still waits on it)");
  why = std::regex_replace(why, left,
                           "rank $1 had already finished while rank $2 still waited on it: do all ranks make the same "
                           "collective calls, in the same order? (rank $1 made fewer)");
  static const std::regex none(R"(\(no collective\) #0)");
  return std::regex_replace(why, none, "its first collective");
}

// Runs body(rank) on n threads. Returns "" when every rank returned; else the failure of the
// first rank that failed on its own: "rank 2 of 4 threw: ...". `rewrite` may put a library
// message in the assignment's words.
inline std::string run_rank_threads_quiet(int n, const std::function<void(int rank)>& body) {
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      harness::thread_begin(r, n);
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (errors[r].empty()) errors[r] = "an exception without a message";
      } catch (...) {
        errors[r] = "an exception that is not a std::exception";
      }
      harness::thread_end();
    });
  for (auto& t : threads) t.join();
  int first = -1;
  for (int r = 0; r < n; ++r)
    if (!errors[r].empty() && (first < 0 || (is_consequence(errors[first]) && !is_consequence(errors[r]))))
      first = r;
  if (first < 0) return "";
  return fmt::format("rank {} of {} threw: {}", first, n, plain_words(errors[first]));
}

// The same, failing the test with the message.
inline void run_rank_threads(int n, const std::function<void(int rank)>& body) {
  const std::string why = run_rank_threads_quiet(n, body);
  if (!why.empty()) FAIL(why);
}

}  // namespace course
