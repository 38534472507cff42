// harness.h: what the assignments' tests share with the test main (grader_main.cpp).
// place(): where this thread is in a test (its rank, the step it is on), so a crash report
// says "rank 2 of 4 crashed in ring step 3" instead of a bare signal. note(): a figure the
// test shows the student (the speed test's GB/s). thread_begin()/thread_end() frame a rank
// thread (its place, and a signal stack so even a stack overflow is reported).
// ask_for_time(): more time for a test whose work is measured in units of a reference it
// timed in the same run (the grader's limit is a guard against hangs, not a verdict).
// In a grade these travel to the grader through the channel only it opened (see
// grader_main.cpp); in a student's own build they print to stdout.
// Read next: grader_main.cpp, rank_threads.h.
#pragma once
#include <string>

namespace course::harness {

struct Place {
  int rank = -1, size = 0;    // the rank this thread plays, of `size` (-1: not a rank thread)
  int step = -1;              // the step it is on (-1: none yet)
  const char* step_word = "";  // what a step is here: "ring step", "training step"
};

Place& place();  // this thread's

// Shows `text` with the test's result (a figure, never a verdict).
void note(const std::string& text);

// Asks the grader to let this test run until `seconds` from now. For a test whose work is
// sized against a reference it has just timed here (hw3 times the library's own ring): a
// busy machine slows the reference as much as the rest, so the time asked for follows the
// load, and the test ends by its own checks, not by the grader's clock. The grader never
// shortens a limit and grants at most its paced_timeout_s; without the grader, nothing.
void ask_for_time(double seconds);

void thread_begin(int rank, int size);
void thread_end();

}  // namespace course::harness
