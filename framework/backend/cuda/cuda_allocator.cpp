// cuda_allocator.cpp: a size-bucketed caching allocator, one pool per logical device.
// Rounding: requests below 1 MiB round up to a multiple of 512 B (small tensors: biases,
// losses, optimizer scalars), larger ones to a multiple of 2 MiB, so a free list holds
// blocks of one exact size and reuse wastes at most 511 B or 2 MiB - 1 per block.
// Blocks are never split or merged: simple, at the cost of more reserved than allocated.
// Why reuse is safe without events: every kernel and copy that touches a block of cuda:k is
// queued on cuda:k's single stream, so work queued after a free (by a new owner of the
// block) runs after all work queued before it (by the old owner). A second stream per
// device would break this and need cudaEventRecord at free time (PyTorch's record_stream).
// The comm stream (cuda_devices.h) is that second stream, kept safe two ways: a collective
// ends by making the compute stream wait for it (an event), and a block freed inside a
// collective (a scratch buffer) first waits for the comm stream.
// Out of memory: logical devices that share a physical GPU all give their cache back before
// the request fails, since any of them may hold the free blocks that would make it fit.
// Read next: cuda_backend.cpp.
#include "framework/backend/cuda/cuda_allocator.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "framework/backend/cuda/cuda_check.h"
#include "framework/backend/cuda/cuda_devices.h"
#include "framework/backend/cuda/virtual_gpus.h"
#include "framework/error.h"
#include "framework/tensor/allocator.h"

namespace dplab::cuda {
namespace {

constexpr std::size_t kSmallRound = 512;
constexpr std::size_t kLargeThreshold = std::size_t{1} << 20;  // 1 MiB
constexpr std::size_t kLargeRound = std::size_t{2} << 20;      // 2 MiB

struct Block {
  std::size_t size = 0;  // rounded size, as passed to cudaMalloc
  int device = 0;        // logical device
  bool in_use = false;
};

struct Pool {
  std::unordered_map<std::size_t, std::vector<void*>> free_lists;  // rounded size -> blocks
  int64_t reserved = 0;                                            // bytes held from cudaMalloc
};

struct State {
  std::mutex mu;
  std::map<std::uintptr_t, Block> blocks;  // every cudaMalloc block, by base address
  Pool pools[kMaxDevicesPerKind];
};
// Never destroyed on purpose: a tensor in static storage may be freed after main returns,
// and its free must still find the table.
State& state() {
  static State* s = new State();
  return *s;
}

std::size_t round_size(std::size_t n) {
  if (n < kLargeThreshold) return (n + kSmallRound - 1) / kSmallRound * kSmallRound;
  return (n + kLargeRound - 1) / kLargeRound * kLargeRound;
}

// The block containing p, or state().blocks.end() (caller holds state().mu).
std::map<std::uintptr_t, Block>::iterator find_block(const void* p) {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  auto it = state().blocks.upper_bound(addr);
  if (it == state().blocks.begin()) return state().blocks.end();
  --it;
  if (addr >= it->first + it->second.size) return state().blocks.end();
  return it;
}

// cudaFree every cached block of device k (caller holds state().mu). Waits for k's streams
// first: a block freed by its tensor may still be read by a kernel queued before the free.
void release_cached_locked(int k) {
  Pool& pool = state().pools[k];
  if (pool.free_lists.empty()) return;
  LogicalDevice& dev = bind(k);
  CUDA_CHECK(cudaStreamSynchronize(dev.stream));
  CUDA_CHECK(cudaStreamSynchronize(dev.comm_stream));
  for (auto& [size, blocks] : pool.free_lists) {
    for (void* p : blocks) {
      CUDA_CHECK(cudaFree(p));
      state().blocks.erase(reinterpret_cast<std::uintptr_t>(p));
      pool.reserved -= static_cast<int64_t>(size);
    }
  }
  pool.free_lists.clear();
  set_reserved_bytes(Device(DeviceKind::CUDA, k), pool.reserved);
}

}  // namespace

void* cache_allocate(int k, std::size_t nbytes) {
  const std::size_t size = round_size(nbytes);
  std::lock_guard<std::mutex> lock(state().mu);
  Pool& pool = state().pools[k];
  if (auto it = pool.free_lists.find(size); it != pool.free_lists.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    state().blocks[reinterpret_cast<std::uintptr_t>(p)].in_use = true;
    return p;
  }
  // Miss: ask CUDA. On out-of-memory, give back the cache of every logical device on this
  // physical GPU (cuda:k's own and its virtual siblings') and try once more.
  const int physical = bind(k).physical;
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, size);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    int siblings[kMaxDevicesPerKind];
    const int n = logical_devices_on(physical, siblings, kMaxDevicesPerKind);
    for (int i = 0; i < n; ++i) release_cached_locked(siblings[i]);
    bind(k);  // release_cached_locked bound each sibling in turn
    err = cudaMalloc(&p, size);
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) cudaGetLastError();
    throw CudaError(fmt::format(
        "cuda:{}: cudaMalloc of {} bytes (request {}) failed: {}; this logical device reserves "
        "{} bytes, the GPU has {} of {} bytes free",
        k, size, nbytes, cudaGetErrorString(err), pool.reserved, free_b, total_b));
  }
  state().blocks[reinterpret_cast<std::uintptr_t>(p)] = Block{size, k, true};
  pool.reserved += static_cast<int64_t>(size);
  set_reserved_bytes(Device(DeviceKind::CUDA, k), pool.reserved);
  return p;
}

void cache_free(int k, void* p) {
  std::lock_guard<std::mutex> lock(state().mu);
  auto it = state().blocks.find(reinterpret_cast<std::uintptr_t>(p));
  DPLAB_CHECK(it != state().blocks.end() && it->second.in_use,
              "cuda:{}: free of {} which is not a live block of the CUDA allocator", k, p);
  DPLAB_CHECK(it->second.device == k, "cuda:{}: free of a block that belongs to cuda:{}", k,
              it->second.device);
  if (in_comm_scope(k)) {
    // freed inside a collective: its last reader may be on the comm stream, which later
    // compute-stream work does not wait for until the collective ends
    CUDA_CHECK(cudaStreamSynchronize(logical_device(k).comm_stream));
  }
  it->second.in_use = false;
  state().pools[k].free_lists[it->second.size].push_back(p);
}

int device_of(const void* p, const char* what) {
  std::lock_guard<std::mutex> lock(state().mu);
  auto it = find_block(p);
  DPLAB_CHECK(it != state().blocks.end() && it->second.in_use,
              "cuda {}: pointer {} is not memory of a live CUDA tensor (a host pointer, or a "
              "tensor on another backend?)",
              what, p);
  return it->second.device;
}

LogicalDevice& bind_owner(const void* p, const char* what) { return bind(device_of(p, what)); }

}  // namespace dplab::cuda

namespace dplab {

void* cuda_block_base(void* p, std::size_t* offset) {
  std::lock_guard<std::mutex> lock(cuda::state().mu);
  auto it = cuda::find_block(p);
  DPLAB_CHECK(it != cuda::state().blocks.end(), "cuda_block_base: {} is not inside a CUDA block",
              p);
  if (offset != nullptr) *offset = reinterpret_cast<std::uintptr_t>(p) - it->first;
  return reinterpret_cast<void*>(it->first);
}

void cuda_empty_cache(int logical_device) {
  DPLAB_CHECK(logical_device >= 0 && logical_device < kMaxDevicesPerKind,
              "cuda_empty_cache: expected a device index in [0, {}), got {}", kMaxDevicesPerKind,
              logical_device);
  std::lock_guard<std::mutex> lock(cuda::state().mu);
  cuda::release_cached_locked(logical_device);
}

}  // namespace dplab
