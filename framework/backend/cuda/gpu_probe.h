// gpu_probe.h: what "is there a GPU?" means, as plain logic with no CUDA type, so that every
// build compiles it and a machine without a GPU can test it.
// cudaGetDeviceCount answers with a count or an error. Two errors mean "no GPU here" and are
// counted as 0: cudaErrorNoDevice (100: a driver, no device) and cudaErrorInsufficientDriver
// (35) when no driver library (libcuda.so.1) is installed at all. Every other error (35 with
// a driver installed: the driver is older than the runtime; 46: every GPU busy or in
// exclusive-process mode; 999: a broken driver) is named, not taken for "0 GPUs", so a
// machine that should train on a GPU does not quietly fall back, or skip its GPU tests.
// Read next: cuda_devices.cpp (where the probe runs), tests/gpu_suite.h (the GPU test mains).
#pragma once
#include <string>

namespace dplab {

struct GpuProbe {
  int count = 0;      // GPUs visible (0 when none, or on error)
  std::string error;  // empty: count is the answer; else why the GPUs could not be counted
};

// The verdict on one cudaGetDeviceCount call: err is its cudaError_t as an int (0 = success),
// name/text its cudaGetErrorName / cudaGetErrorString, driver_library whether libcuda.so.1
// loads on this machine.
GpuProbe classify_gpu_probe(int err, int count, const std::string& name, const std::string& text,
                            bool driver_library);

// This process's probe, made once (cuda_devices.cpp; {0, ""} in a build without CUDA).
const GpuProbe& cuda_gpu_probe();

// Whether CUDA's MPS daemon is up for this process (its control pipe, in
// CUDA_MPS_PIPE_DIRECTORY or /tmp/nvidia-mps). Without it, processes that share a GPU get it
// in turns (time slices), so every hand-off between two ranks on one GPU may wait for the
// other's turn (the measurements: docs/gpu.md).
bool cuda_mps_running();

}  // namespace dplab
