// gpu_info.h: what the machine's GPUs are, for dplab-doctor and for programs that print it,
// with no CUDA type in sight (a CPU-only build links gpu_info_fallback.cpp and sees none).
// The versions are CUDA's integers (13000 = 13.0); peer access and the CUDA IPC premise
// (two processes mapping each other's memory) are checked by the doctor's self-tests.
// Read next: gpu_probe.h (what "no GPU" means), tools/doctor/checks_gpu.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dplab {

struct GpuInfo {
  int index = 0;     // physical GPU
  std::string name;  // "NVIDIA H100 80GB HBM3"
  int cc_major = 0, cc_minor = 0;
  int multiprocessors = 0;
  int64_t total_bytes = 0, free_bytes = 0;
  std::string compute_mode;  // "default", "exclusive-process", "prohibited"
  std::vector<int> peers;    // the other GPUs it can read and write directly
};

struct CudaVersions {
  int driver = 0;   // the newest CUDA the installed driver supports (0: no driver)
  int runtime = 0;  // the runtime dplab was linked with (0: built without CUDA)
};

// "13.0" from 13000.
std::string cuda_version_string(int v);
CudaVersions cuda_versions();
// One entry per physical GPU; empty without CUDA, a driver or a GPU (gpu_probe.h says why).
std::vector<GpuInfo> gpu_infos();

}  // namespace dplab
