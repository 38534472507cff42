// test_cublas_library.cpp: cuBLAS is opened when the CUDA backend first needs it, never when a
// program starts (framework/backend/cuda/cublas_library.h). Runs on every machine built with
// CUDA, GPU or not: opening the library and finding its entry points needs no driver.
// Read next: framework/backend/cuda/cublas_library.h.
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include "framework/backend/cuda/cublas_library.h"

namespace {

// Whether a file whose name contains `name` is mapped into this process.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(name) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("a program linked with dplab maps cuBLAS only when the CUDA backend asks for it") {
  // Before: nothing of cuBLAS or cuBLASLt (the half-gigabyte every process used to load).
  REQUIRE(mapped("libstdc++"));  // the maps are read (else "not mapped" would prove nothing)
  CHECK_FALSE(mapped("libcublas"));

  const dplab::cuda::CublasLibrary& lib = dplab::cuda::cublas();
  // every entry point found (a null one would mean a cuBLAS older than the headers)
  const bool all_found = lib.create && lib.destroy && lib.set_stream && lib.sgemm &&
                         lib.sgemm_strided_batched && lib.gemm_ex && lib.gemm_strided_batched_ex;
  CHECK(all_found);
  CHECK(mapped("libcublas.so"));
  CHECK(mapped("libcublasLt.so"));
  CHECK(&dplab::cuda::cublas() == &lib);  // opened once
}
