// tests_visible.cpp: the hw3 tests you can run yourself (dplab-course test hw3_ring_allreduce
// DIR). The grader runs these and a hidden set (more rank counts, sizes, dtypes, the bytes
// each rank sends, and speed). A test's points are in its name.
#include "grading.h"

using namespace hw3;
using namespace hw3::grading;

TEST_SUITE("visible") {

TEST_CASE("sum of float32 over 2 and 3 ranks (10 points)") {
  for (int n : {2, 3})
    for (int64_t count : {int64_t{12}, int64_t{1000}})
      if (!check_all_reduce(n, count, DType::Float32, Op::Sum)) return;
}

TEST_CASE("a count that N does not divide: 10 elements over 4 ranks (10 points)") {
  check_all_reduce(4, 10, DType::Float32, Op::Sum);
}

}  // TEST_SUITE
