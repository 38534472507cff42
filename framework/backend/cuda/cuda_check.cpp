// cuda_check.cpp: turns CUDA / cuBLAS status codes into CudaError with a readable message.
// Read next: cuda_devices.cpp.
#include "framework/backend/cuda/cuda_check.h"

#include <string>

#include "framework/error.h"

namespace dplab::cuda {
namespace {

thread_local int tl_logical = -1;

std::string where(const char* file, int line) {
  std::string f = file;
  if (auto pos = f.rfind("framework/"); pos != std::string::npos) f = f.substr(pos);
  return fmt::format("{}:{}", f, line);
}

// "cuda:1 (physical GPU 0)"; never throws, even when asking the runtime fails.
std::string device_text() {
  int phys = -1;
  if (cudaGetDevice(&phys) != cudaSuccess) {
    cudaGetLastError();  // reset the last-error slot so the next check is not blamed
    phys = -1;
  }
  if (tl_logical >= 0) return fmt::format("cuda:{} (physical GPU {})", tl_logical, phys);
  if (phys >= 0) return fmt::format("physical GPU {}", phys);
  return "no device";
}

const char* cublas_name(cublasStatus_t st) {
  switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "unknown cuBLAS status";
}

}  // namespace

int current_logical_device() { return tl_logical; }
void set_current_logical_device(int k) { tl_logical = k; }

void check_cuda(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return;
  throw CudaError(fmt::format("CUDA call {} failed: {} ({}) on {} ({})", call,
                              cudaGetErrorName(err), cudaGetErrorString(err), device_text(),
                              where(file, line)));
}

void check_cublas(cublasStatus_t st, const char* call, const char* file, int line) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  throw CudaError(fmt::format("cuBLAS call {} failed: {} (status {}) on {} ({})", call,
                              cublas_name(st), static_cast<int>(st), device_text(),
                              where(file, line)));
}

}  // namespace dplab::cuda
