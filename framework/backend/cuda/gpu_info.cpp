// gpu_info.cpp: gpu_info.h from the CUDA runtime's device properties.
// Read next: gpu_info.h.
#include "framework/backend/cuda/gpu_info.h"

#include <cuda_runtime.h>
#include <fmt/core.h>

#include "framework/backend/cuda/gpu_probe.h"

namespace dplab {

std::string cuda_version_string(int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); }

CudaVersions cuda_versions() {
  CudaVersions v;
  if (cudaDriverGetVersion(&v.driver) != cudaSuccess) v.driver = 0;
  if (cudaRuntimeGetVersion(&v.runtime) != cudaSuccess) v.runtime = 0;
  cudaGetLastError();
  return v;
}

std::vector<GpuInfo> gpu_infos() {
  std::vector<GpuInfo> out;
  const int n = cuda_gpu_probe().count;
  for (int d = 0; d < n; ++d) {
    GpuInfo g;
    g.index = d;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    g.name = prop.name;
    g.cc_major = prop.major;
    g.cc_minor = prop.minor;
    g.multiprocessors = prop.multiProcessorCount;
    int mode = cudaComputeModeDefault;  // (CUDA 13's cudaDeviceProp no longer carries it)
    if (cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, d) != cudaSuccess)
      mode = cudaComputeModeDefault;
    g.compute_mode = mode == cudaComputeModeExclusiveProcess ? "exclusive-process"
                     : mode == cudaComputeModeProhibited     ? "prohibited"
                                                             : "default";
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(d) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
      g.free_bytes = static_cast<int64_t>(free_b);
      g.total_bytes = static_cast<int64_t>(total_b);
    } else {
      g.total_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    }
    for (int p = 0; p < n; ++p) {
      int can = 0;
      if (p != d && cudaDeviceCanAccessPeer(&can, d, p) == cudaSuccess && can) g.peers.push_back(p);
    }
    cudaGetLastError();
    out.push_back(g);
  }
  return out;
}

}  // namespace dplab
