// cpu_backend.cpp: the CPU backend's memory and copies, and the singleton.
// Host memory is plain aligned_alloc; counting per logical device (cpu:0, cpu:1, ...) is done
// above us in tensor/allocator.cpp, so every cpu:k shares this one backend object.
// Read next: cpu_gemm.cpp (the kernel that matters for speed).
#include "framework/backend/cpu/cpu_backend.h"

#include <malloc.h>
#include <cstdlib>
#include <cstring>

#include "framework/backend/cpu/cpu_threads.h"
#include "framework/error.h"

namespace dplab {
namespace {

constexpr std::size_t kAlignment = 64;

}  // namespace

Backend& cpu_backend() {
  static CpuBackend backend;
  get_num_threads();  // reads DPLAB_NUM_THREADS now, before any kernel runs
  return backend;
}

// ---- memory and copies ----

// A training step allocates and frees the same large buffers every time (im2col columns,
// activations, gradients). By default glibc serves blocks above 128 KiB (a threshold it
// raises as it goes) with fresh mmaps and gives freed heap tops back to the kernel, so
// every step page-faults its memory in again: 20 MB of columns = 5,000 faults, zero-filled
// by the kernel, which cost more than the convolution's GEMM. Keep freed blocks up to the
// largest threshold glibc allows (32 MiB) and never trim, as a caching allocator would.
// And one arena for all threads: DataParallel starts its replica threads anew each step,
// and each new thread's arena heap was handed back to the kernel when it ended (the CNN
// under DataParallel on one device ran at half the single device's speed).
// memory_stats still counts what tensors hold, not what the heap keeps. Set once, when the
// one CpuBackend is made (cpu_backend()), which is before any host tensor is allocated.
CpuBackend::CpuBackend() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_ARENA_MAX, 1);
}

void* CpuBackend::allocate(Device d, std::size_t nbytes) {
  if (nbytes == 0) return nullptr;
  // aligned_alloc wants the size to be a multiple of the alignment.
  std::size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  DPLAB_CHECK(p != nullptr, "allocate on {}: out of host memory asking for {} bytes", d, nbytes);
  return p;
}

void CpuBackend::deallocate(Device, void* p, std::size_t) { std::free(p); }

void CpuBackend::copy_from_host(Device, void* dst, const void* src, std::size_t nbytes) {
  if (nbytes != 0) std::memcpy(dst, src, nbytes);
}

void CpuBackend::copy_to_host(Device, void* dst, const void* src, std::size_t nbytes) {
  if (nbytes != 0) std::memcpy(dst, src, nbytes);
}

void CpuBackend::copy_device(Device dst_dev, void* dst, Device src_dev, const void* src,
                             std::size_t nbytes) {
  DPLAB_CHECK(dst_dev.is_cpu() && src_dev.is_cpu(),
              "cpu backend copy_device: expected two cpu devices, got {} <- {}", dst_dev, src_dev);
  // Logical CPU devices share host memory: a move between them is a memcpy.
  if (nbytes != 0 && dst != src) std::memmove(dst, src, nbytes);
}

// Everything on the CPU runs synchronously on the calling thread.
void CpuBackend::synchronize(Device) {}

}  // namespace dplab
