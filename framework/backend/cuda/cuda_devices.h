// cuda_devices.h: logical CUDA devices. cuda:k is a compute stream (non-blocking), a cuBLAS
// handle bound to it, a communication stream and a small device-side error flag, on physical GPU k % M when virtual GPUs
// are on (DPLAB_VIRTUAL_GPUS=N or set_virtual_gpus(N)), else on GPU k (k < M, or an Error).
// One stream per logical device keeps everything queued on cuda:k in issue order, which is
// what makes the caching allocator's reuse safe (see cuda_allocator.cpp). The second stream
// carries collectives only (CommStreamScope), so an all-reduce overlaps the backward kernels
// on the compute stream; events order the two (cuda_ipc_transport.cpp, nccl_engine.cpp).
// Read next: cuda_allocator.h.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dplab::cuda {

struct LogicalDevice {
  int logical = 0;
  int physical = 0;
  cudaStream_t stream = nullptr;       // compute: every kernel and copy of cuda:k
  cudaStream_t comm_stream = nullptr;  // communication: collectives, inside a CommStreamScope
  cublasHandle_t cublas = nullptr;
  // [0] = number of bad indices seen, [1] = the first bad index (kernels cannot throw)
  unsigned long long* err_flag = nullptr;
};

// Physical GPUs; 0 when there is none (no driver, no device) and when counting failed: then
// cuda_gpu_probe().error names why (gpu_probe.h) and logical_device() throws it.
int physical_count();
// The logical device k, created on first use; throws Error when k does not exist.
LogicalDevice& logical_device(int k);
// cudaSetDevice(physical) for k, records k for error messages, returns the device.
LogicalDevice& bind(int k);
// After a launch that checks indices: waits for dev's stream, reads its error flag and
// clears it. Returns the number of bad indices seen (0: all good) and the first in *first.
unsigned long long take_index_errors(LogicalDevice& dev, int64_t* first);
// The logical devices created so far that run on physical GPU `physical` (for the
// allocator's out-of-memory retry, which empties the cache of all of them).
int logical_devices_on(int physical, int* out, int max_out);

// While a CommStreamScope for cuda:k is alive on this thread, the backend queues this
// thread's work for cuda:k on k's comm_stream instead of its compute stream: a collective's
// reduce kernels and copies then run beside the backward pass, not behind it. Whoever opens
// one orders the streams with events (see cuda_ipc_transport.cpp).
class CommStreamScope {
 public:
  explicit CommStreamScope(int logical);
  ~CommStreamScope();
  CommStreamScope(const CommStreamScope&) = delete;
  CommStreamScope& operator=(const CommStreamScope&) = delete;

 private:
  int saved_;
};
// The stream this thread's work for dev goes on: comm_stream inside a scope for dev, else
// the compute stream.
cudaStream_t stream_for(const LogicalDevice& dev);
// True while this thread is inside a CommStreamScope for logical device k.
bool in_comm_scope(int k);

}  // namespace dplab::cuda
