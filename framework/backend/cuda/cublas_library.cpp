// cublas_library.cpp: dlopen + dlsym for cublas_library.h's table.
// Where the library is looked for: the loader's own search first (LD_LIBRARY_PATH, the
// program's RUNPATH, ld.so.cache), then the folders the build found cuBLAS in
// (DPLAB_CUBLAS_DIRS, set by framework/backend/cuda/meson.build), as -lcublas found it.
// Read next: cuda_devices.cpp.
#include "framework/backend/cuda/cublas_library.h"

#include <dlfcn.h>

#include <string>
#include <string_view>

#include "framework/error.h"

#ifndef DPLAB_CUBLAS_DIRS
#define DPLAB_CUBLAS_DIRS ""
#endif

namespace dplab::cuda {
namespace {

#define DPLAB_STRINGIFY_(x) #x
#define DPLAB_STRINGIFY(x) DPLAB_STRINGIFY_(x)
constexpr const char* kSoname = "libcublas.so." DPLAB_STRINGIFY(CUBLAS_VER_MAJOR);

// The handle, or nullptr with every path tried and the loader's last reason in `tried`.
void* open_cublas(std::string& tried) {
  if (void* h = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL)) return h;
  tried = fmt::format("{} ({})", kSoname, dlerror());
  std::string_view dirs = DPLAB_CUBLAS_DIRS;
  while (!dirs.empty()) {
    const size_t colon = dirs.find(':');
    const std::string path = fmt::format("{}/{}", dirs.substr(0, colon), kSoname);
    if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    tried += fmt::format("; {} ({})", path, dlerror());
    dirs = colon == std::string_view::npos ? std::string_view{} : dirs.substr(colon + 1);
  }
  return nullptr;
}

template <class Fn>
void resolve(void* handle, Fn& slot, const char* name) {
  slot = reinterpret_cast<Fn>(dlsym(handle, name));
  if (slot == nullptr)
    throw CudaError(fmt::format("cuBLAS: {} has no {}: it is older than the cuBLAS {} headers "
                                "this build was compiled with",
                                kSoname, name, CUBLAS_VER_MAJOR));
}

CublasLibrary load() {
  std::string tried;
  void* h = open_cublas(tried);
  if (h == nullptr)
    throw CudaError(fmt::format("cuBLAS could not be loaded (tried {}): install the CUDA "
                                "toolkit's cuBLAS {}, or put its folder in LD_LIBRARY_PATH",
                                tried, CUBLAS_VER_MAJOR));
  // cublas_v2.h defines cublasCreate as cublasCreate_v2 and so on: name the symbol the
  // header's name stands for, as the linker would have.
  CublasLibrary lib{};
  resolve(h, lib.create, DPLAB_STRINGIFY(cublasCreate));
  resolve(h, lib.destroy, DPLAB_STRINGIFY(cublasDestroy));
  resolve(h, lib.set_stream, DPLAB_STRINGIFY(cublasSetStream));
  resolve(h, lib.sgemm, DPLAB_STRINGIFY(cublasSgemm));
  resolve(h, lib.sgemm_strided_batched, DPLAB_STRINGIFY(cublasSgemmStridedBatched));
  resolve(h, lib.gemm_ex, "cublasGemmEx");
  resolve(h, lib.gemm_strided_batched_ex, "cublasGemmStridedBatchedEx");
  return lib;  // the handle stays open for the life of the process
}

}  // namespace

const CublasLibrary& cublas() {
  static const CublasLibrary lib = load();  // a throw leaves it unset: the next call retries
  return lib;
}

}  // namespace dplab::cuda
