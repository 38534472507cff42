// cuda_devices.cpp: the table of logical CUDA devices and the virtual-GPU switch.
// Creating a device costs two streams, a cuBLAS handle (~ a few MiB of workspace on the GPU)
// and 16 bytes for the error flag; it happens once, under a mutex, on first use, and the
// LogicalDevice then never moves (threads of DataParallel keep references to it). A creation
// step that fails gives back what the steps before it made.
// Read next: cuda_allocator.cpp.
#include "framework/backend/cuda/cuda_devices.h"

#include <dlfcn.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "framework/backend/cuda/cublas_library.h"
#include "framework/backend/cuda/cuda_backend.h"
#include "framework/backend/cuda/cuda_check.h"
#include "framework/backend/cuda/gpu_probe.h"
#include "framework/backend/cuda/virtual_gpus.h"
#include "framework/error.h"
#include "framework/io/settings.h"
#include "framework/tensor/device.h"

namespace dplab::cuda {
namespace {

std::mutex g_mu;
// Streams and handles are never destroyed: at exit the CUDA runtime may already be gone,
// and the driver releases everything with the process anyway.
LogicalDevice* g_devices[kMaxDevicesPerKind] = {};
int g_virtual = -1;        // -1: not decided yet; 0: off; N: N logical devices
bool g_announced = false;  // the "N logical share M physical" line is printed once

// Reads DPLAB_VIRTUAL_GPUS the first time (caller holds g_mu).
int virtual_count_locked() {
  if (g_virtual < 0) {
    g_virtual = 0;
    if (const auto env = setting_value("DPLAB_VIRTUAL_GPUS"))
      g_virtual = parse_virtual_gpus_setting(*env);
  }
  return g_virtual;
}

void announce_locked(int m) {
  if (g_announced || g_virtual <= 0 || m == 0) return;
  g_announced = true;
  std::fprintf(stderr, "dplab: %d logical CUDA devices share %d physical GPU(s)%s\n", g_virtual, m,
               cuda_mps_running() ? " (MPS is running)"
                                  : "; processes sharing a GPU take turns on it without MPS "
                                    "(nvidia-cuda-mps-control -d; docs/gpu.md)");
}

// Whether the NVIDIA driver library is installed: tells "no driver" from "a driver too old
// for this runtime", which both answer cudaErrorInsufficientDriver.
bool driver_library_loads() {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h == nullptr) return false;
  dlclose(h);
  return true;
}

// Frees what a half-created device holds (called with its physical GPU current).
void destroy_partial(LogicalDevice& dev) {
  if (dev.err_flag != nullptr && cudaFree(dev.err_flag) != cudaSuccess) cudaGetLastError();
  if (dev.cublas != nullptr) cublas().destroy(dev.cublas);
  if (dev.comm_stream != nullptr && cudaStreamDestroy(dev.comm_stream) != cudaSuccess)
    cudaGetLastError();
  if (dev.stream != nullptr && cudaStreamDestroy(dev.stream) != cudaSuccess) cudaGetLastError();
}

void create_locked(LogicalDevice& dev) {
  CUDA_CHECK(cudaSetDevice(dev.physical));
  CUDA_CHECK(cudaStreamCreateWithFlags(&dev.stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&dev.comm_stream, cudaStreamNonBlocking));
  CUBLAS_CHECK(cublas().create(&dev.cublas));
  CUBLAS_CHECK(cublas().set_stream(dev.cublas, dev.stream));
  CUDA_CHECK(cudaMalloc(&dev.err_flag, 2 * sizeof(unsigned long long)));
  CUDA_CHECK(cudaMemsetAsync(dev.err_flag, 0, 2 * sizeof(unsigned long long), dev.stream));
  CUDA_CHECK(cudaStreamSynchronize(dev.stream));
}

thread_local int tl_comm_device = -1;  // the CommStreamScope open on this thread, or -1

}  // namespace

int physical_count() { return cuda_gpu_probe().count; }

CommStreamScope::CommStreamScope(int logical) : saved_(tl_comm_device) { tl_comm_device = logical; }
CommStreamScope::~CommStreamScope() { tl_comm_device = saved_; }

cudaStream_t stream_for(const LogicalDevice& dev) {
  return tl_comm_device == dev.logical ? dev.comm_stream : dev.stream;
}
bool in_comm_scope(int k) { return tl_comm_device == k; }

int logical_devices_on(int physical, int* out, int max_out) {
  std::lock_guard<std::mutex> lock(g_mu);
  int n = 0;
  for (int k = 0; k < kMaxDevicesPerKind && n < max_out; ++k)
    if (g_devices[k] != nullptr && g_devices[k]->physical == physical) out[n++] = k;
  return n;
}

LogicalDevice& logical_device(int k) {
  // Every call takes the mutex (tens of ns per kernel launch, next to ~5 us for the launch);
  // a created device never moves, so the returned reference stays valid without it.
  std::lock_guard<std::mutex> lock(g_mu);
  const int m = physical_count();
  if (const std::string& why = cuda_gpu_probe().error; !why.empty())
    throw CudaError(fmt::format("cuda:{}: the GPUs could not be counted: {}", k, why));
  DPLAB_CHECK(m > 0, "cuda:{}: no CUDA GPU is visible (no driver or no device)", k);
  const int v = virtual_count_locked();
  const int n = std::min(v > 0 ? v : m, kMaxDevicesPerKind);  // Device indices stop there
  DPLAB_CHECK(k >= 0 && k < n,
              "cuda:{}: this machine has {} physical GPU(s) and {} logical CUDA device(s); set "
              "DPLAB_VIRTUAL_GPUS=N (or set_virtual_gpus(N)) to share GPUs between more "
              "logical devices",
              k, m, n);
  announce_locked(m);
  if (!g_devices[k]) {
    auto dev = std::make_unique<LogicalDevice>();
    dev->logical = k;
    dev->physical = k % m;
    set_current_logical_device(k);
    try {
      create_locked(*dev);
    } catch (...) {
      destroy_partial(*dev);  // the streams and handle made before the failing step
      throw;
    }
    g_devices[k] = dev.release();
  }
  return *g_devices[k];
}

LogicalDevice& bind(int k) {
  LogicalDevice& dev = logical_device(k);
  set_current_logical_device(k);
  CUDA_CHECK(cudaSetDevice(dev.physical));
  return dev;
}

unsigned long long take_index_errors(LogicalDevice& dev, int64_t* first) {
  // 16 bytes back to the host; this synchronisation is the price of an exception that names
  // the bad index (the alternative, copying all indices to the host first, costs more).
  unsigned long long flag[2] = {0, 0};
  CUDA_CHECK(cudaMemcpyAsync(flag, dev.err_flag, sizeof(flag), cudaMemcpyDeviceToHost, dev.stream));
  CUDA_CHECK(cudaStreamSynchronize(dev.stream));
  if (flag[0] != 0) {
    CUDA_CHECK(cudaMemsetAsync(dev.err_flag, 0, sizeof(flag), dev.stream));
    CUDA_CHECK(cudaStreamSynchronize(dev.stream));
  }
  *first = static_cast<int64_t>(flag[1]);
  return flag[0];
}

}  // namespace dplab::cuda

namespace dplab {

const GpuProbe& cuda_gpu_probe() {
  // Asked once: the answer cannot change within a process, and each failing call is slow.
  static const GpuProbe probe = [] {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) cudaGetLastError();
    return classify_gpu_probe(static_cast<int>(err), n, cudaGetErrorName(err),
                              cudaGetErrorString(err),
                              err == cudaErrorInsufficientDriver && cuda::driver_library_loads());
  }();
  return probe;
}

void set_virtual_gpus(int n) {
  DPLAB_CHECK(n >= 1 && n <= kMaxDevicesPerKind, "set_virtual_gpus: expected n in [1, {}], got {}",
              kMaxDevicesPerKind, n);
  std::lock_guard<std::mutex> lock(cuda::g_mu);
  cuda::virtual_count_locked();  // an invalid env var still reports, even when overridden
  // Shrinking below a device already in use would strand its memory and stream.
  for (int k = n; k < kMaxDevicesPerKind; ++k) {
    DPLAB_CHECK(!cuda::g_devices[k], "set_virtual_gpus({}): cuda:{} is already in use", n, k);
  }
  if (cuda::g_virtual != n) cuda::g_announced = false;
  cuda::g_virtual = n;
}

int cuda_logical_device_count() {
  std::lock_guard<std::mutex> lock(cuda::g_mu);
  const int m = cuda::physical_count();
  if (m == 0) return 0;
  const int v = cuda::virtual_count_locked();
  return v > 0 ? v : m;
}

int cuda_physical_device_count() { return cuda::physical_count(); }

}  // namespace dplab
