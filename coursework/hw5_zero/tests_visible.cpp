// tests_visible.cpp: the hw5 tests you can run yourself (dplab-course test hw5_zero DIR).
// The grader also runs a hidden set: 1 to 4 ranks, uneven shards, the bytes and the calls
// of each collective. Every run draws new parameters and gradients (grading.h); a failure
// names the seed it drew them with. A test's points are in its name.
#include "grading.h"

using namespace hw5;
using namespace hw5::grading;

TEST_SUITE("visible") {

TEST_CASE("two ranks train like one process with SGD and momentum (15 points)") {
  check_equal_to_one_process(2, 3);
}

TEST_CASE("each rank keeps the momentum of its shard only (5 points)") {
  const auto runs = run_all(2, draw(2, 1));
  for (int r = 0; r < 2; ++r)
    CHECK_MESSAGE(runs[r].state_floats == runs[r].shard,
                  fmt::format("rank {} holds {} floats of momentum; its shard has {} of the {} parameters", r,
                              runs[r].state_floats, runs[r].shard, total_params()));
}

}  // TEST_SUITE
