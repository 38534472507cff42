// gpu_probe.cpp: classify_gpu_probe (see gpu_probe.h). The error numbers are CUDA's
// (driver_types.h), written out here so that this file needs no CUDA header.
// Read next: cuda_devices.cpp.
#include "framework/backend/cuda/gpu_probe.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cstdlib>

namespace dplab {
namespace {

constexpr int kInsufficientDriver = 35;  // cudaErrorInsufficientDriver
constexpr int kDevicesUnavailable = 46;  // cudaErrorDevicesUnavailable
constexpr int kNoDevice = 100;           // cudaErrorNoDevice

std::string hint(int err) {
  switch (err) {
    case kInsufficientDriver:
      return "; a driver is installed (libcuda.so.1 loads) but is older than this CUDA runtime: "
             "update the NVIDIA driver";
    case kDevicesUnavailable:
      return "; every GPU is busy or in exclusive-process mode (nvidia-smi -q | grep "
             "'Compute Mode'), another process holds it";
    default: return "";
  }
}

}  // namespace

GpuProbe classify_gpu_probe(int err, int count, const std::string& name, const std::string& text,
                            bool driver_library) {
  if (err == 0) return {count < 0 ? 0 : count, ""};
  if (err == kNoDevice) return {0, ""};
  if (err == kInsufficientDriver && !driver_library) return {0, ""};
  return {
      0, fmt::format("cudaGetDeviceCount failed: {} ({}, error {}){}", name, text, err, hint(err))};
}

bool cuda_mps_running() {
  const char* dir = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  const std::string control =
      std::string(dir != nullptr && *dir ? dir : "/tmp/nvidia-mps") + "/control";
  struct stat st {};
  return stat(control.c_str(), &st) == 0;
}

}  // namespace dplab
