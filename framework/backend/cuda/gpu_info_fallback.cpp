// gpu_info_fallback.cpp: gpu_info.h in a build WITHOUT CUDA: no runtime, no GPU.
// Read next: gpu_info.h.
#include <fmt/core.h>

#include "framework/backend/cuda/gpu_info.h"

namespace dplab {

std::string cuda_version_string(int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); }
CudaVersions cuda_versions() { return {}; }
std::vector<GpuInfo> gpu_infos() { return {}; }

}  // namespace dplab
