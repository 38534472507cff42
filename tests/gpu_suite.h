// gpu_suite.h: the main() of every GPU test suite, and its exit rule as a function that a
// machine without a GPU can test (tests/backend_cuda/test_gpu_rules.cpp).
// A GPU suite on a machine without a GPU must be reported SKIP, never OK: Meson shows exit
// 77 as SKIP. DPLAB_REQUIRE_GPU=1 (for CI machines that have GPUs) turns that skip into a
// failure, and a GPU count that failed (gpu_probe.h: an old driver, an exclusive-process
// GPU) always fails, naming the error, rather than passing as "no GPU".
// Use: #define DOCTEST_CONFIG_IMPLEMENT, include this, and write
//   int main(int argc, char** argv) { return dplab::gpu_testing::gpu_suite_main(argc, argv, "name"); }
// Read next: framework/backend/cuda/gpu_probe.h.
#pragma once
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "framework/backend/cuda/gpu_probe.h"

namespace dplab::gpu_testing {

// The suite's exit code from doctest's, the probe and DPLAB_REQUIRE_GPU (null: unset).
// *why says why the code is not doctest's own (empty when it is).
inline int gpu_suite_exit_code(int doctest_rc, const GpuProbe& probe, const char* require_gpu,
                               std::string* why) {
  why->clear();
  const std::string require = require_gpu != nullptr ? require_gpu : "";
  if (require != "" && require != "0" && require != "1") {
    *why = "DPLAB_REQUIRE_GPU='" + require + "': expected 1 (a GPU must be there) or 0";
    return 1;
  }
  if (doctest_rc != 0) return doctest_rc;
  if (!probe.error.empty()) {
    *why = "the GPUs could not be counted (not the same as having none): " + probe.error;
    return 1;
  }
  if (probe.count > 0) return 0;
  if (require == "1") {
    *why = "DPLAB_REQUIRE_GPU=1 but no CUDA GPU is visible: every GPU case was skipped";
    return 1;
  }
  *why = "no CUDA GPU visible: every GPU case skipped (exit 77 = SKIP)";
  return 77;
}

inline int gpu_suite_main(int argc, char** argv, const char* suite) {
  doctest::Context context(argc, argv);
  const int rc = context.run();
  if (context.shouldExit()) return rc;
  std::string why;
  const int code =
      gpu_suite_exit_code(rc, cuda_gpu_probe(), std::getenv("DPLAB_REQUIRE_GPU"), &why);
  if (!why.empty()) std::printf("%s: %s\n", suite, why.c_str());
  return code;
}

}  // namespace dplab::gpu_testing
