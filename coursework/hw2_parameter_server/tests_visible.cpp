// tests_visible.cpp: the hw2 tests you can run yourself (dplab-course test hw2_parameter_server
// DIR). The grader also runs a hidden set: more chunk cases, 2 to 4 devices, a batch smaller
// than the devices, and every device's bytes. A test's points are in its name.
#include "grading.h"

using namespace hw2;
using namespace hw2::grading;

TEST_SUITE("visible") {

TEST_CASE("chunk_sizes splits 7 rows over 3 devices as torch.chunk does (10 points)") {
  const std::vector<int64_t> got = chunk_sizes(7, 3), want{3, 3, 1};
  CHECK_MESSAGE(got == want, fmt::format("chunk_sizes(7, 3) = [{}]; torch.chunk gives [3, 3, 1]: ceil(7 / 3) "
                                         "rows each, the last chunk what is left", fmt::join(got, ", ")));
}

TEST_CASE("two devices train like one device on the whole batch (10 points)") {
  check_equal_to_one_device(2, 2, 8);
}

}  // TEST_SUITE
