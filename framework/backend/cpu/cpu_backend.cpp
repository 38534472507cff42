// cpu_backend.cpp: the CPU backend's memory, copies and thread count, and the singleton.
// Host memory is plain aligned_alloc; counting per logical device (cpu:0, cpu:1, ...) is done
// above us in tensor/allocator.cpp, so every cpu:k shares this one backend object.
// Read next: cpu_gemm.cpp (the kernel that matters for speed).
#include "framework/backend/cpu/cpu_backend.h"

#include <cstdlib>
#include <cstring>
#include <malloc.h>
#include <mutex>
#include <string>

#include "framework/backend/cpu/cpu_gemm_kernel.h"
#include "framework/backend/cpu/cpu_threads.h"
#include "framework/error.h"

namespace dplab {
namespace {

constexpr std::size_t kAlignment = 64;

// Eigen reads its thread count from a process-wide variable (one per build of the GEMM kernel,
// cpu_gemm_kernel.h); set it once, on first use, from DPLAB_NUM_THREADS (default 1).
int& thread_setting() {
  static int n = 1;
  return n;
}

void apply_threads(int n) {
  gemm_kernel::set_threads_baseline(n);
#ifdef DPLAB_HAVE_AVX512_GEMM
  gemm_kernel::set_threads_avx512(n);
#endif
  thread_setting() = n;
}

void init_threads_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    int n = 1;
    if (const char* env = std::getenv("DPLAB_NUM_THREADS"); env != nullptr && *env != '\0') {
      char* end = nullptr;
      long v = std::strtol(env, &end, 10);
      DPLAB_CHECK(end != env && *end == '\0' && v >= 1 && v <= 1024,
                  "DPLAB_NUM_THREADS: expected an integer in [1, 1024], got '{}'", env);
      n = static_cast<int>(v);
    }
#ifndef _OPENMP
    n = 1;  // built without OpenMP: Eigen is single-threaded whatever we ask
#endif
    apply_threads(n);
  });
}

}  // namespace

void set_num_threads(int n) {
  init_threads_once();
  DPLAB_CHECK(n >= 1, "set_num_threads: expected n >= 1, got {}", n);
#ifndef _OPENMP
  DPLAB_CHECK(n == 1, "set_num_threads({}): this dplab was built without OpenMP, only 1 thread "
              "is available", n);
#endif
  apply_threads(n);
}

int get_num_threads() {
  init_threads_once();
  return thread_setting();
}

int threads_for(int64_t work) { return work >= (int64_t{1} << 15) ? get_num_threads() : 1; }

Backend& cpu_backend() {
  static CpuBackend backend;
  init_threads_once();
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
