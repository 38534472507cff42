// The doctest main of the GPU suites that need nothing else: exit 77 (SKIP) without a GPU,
// a failure with DPLAB_REQUIRE_GPU=1 or when the GPUs could not be counted (gpu_suite.h).
#include "tests/gpu_suite.h"

int main(int argc, char** argv) {
  return dplab::gpu_testing::gpu_suite_main(argc, argv, argc > 0 ? argv[0] : "gpu suite");
}
