// cpu_threads.cpp: the CPU backend's thread count (cpu_threads.h), and lanes: conv2d's image
// groups run side by side, one thread each (Backend::run_pieces). Two ways to use two cores:
// split every kernel between the threads, or give each thread whole pieces of the op. The
// second keeps each thread's im2col columns in its own cache and needs no hand-off between
// kernels, which made LeNet's two-thread step much faster than split kernels did.
// Read next: cpu_gemm.cpp.
#include <cstdlib>
#include <exception>
#include <mutex>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "framework/backend/cpu/cpu_backend.h"
#include "framework/backend/cpu/cpu_dispatch.h"
#include "framework/backend/cpu/cpu_threads.h"
#include "framework/backend/cpu/reference/cpu_gemm_eigen.h"
#include "framework/error.h"

namespace dplab {
namespace {

// dplab's thread count, set once, on first use, from DPLAB_NUM_THREADS (default 1).
int& thread_setting() {
  static int n = 1;
  return n;
}

// Eigen itself always runs a GEMM on one thread: cpu_gemm.cpp splits C between dplab's threads
// (Eigen's threads spin while they wait for each other, which on a shared machine cost more
// than the GEMM; see cpu_gemm.cpp).
void apply_threads(int n) {
  gemm_eigen::set_threads_baseline(1);
#ifdef DPLAB_HAVE_AVX512_GEMM
  gemm_eigen::set_threads_avx512(1);
#endif
  thread_setting() = n;
}

void init_threads_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    int n = threads_from_env();  // DPLAB_NUM_THREADS (cpu_dispatch.cpp)
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
  DPLAB_CHECK(n == 1,
              "set_num_threads({}): this dplab was built without OpenMP, only 1 thread "
              "is available",
              n);
#endif
  apply_threads(n);
}

int get_num_threads() {
  init_threads_once();
  return thread_setting();
}

int kernel_threads() {
#ifdef _OPENMP
  if (omp_in_parallel()) return 1;  // a lane of run_pieces (or a kernel's own region)
#endif
  return get_num_threads();
}

int threads_for(int64_t work) { return work >= (int64_t{1} << 15) ? kernel_threads() : 1; }

int CpuBackend::lanes() const { return kernel_threads(); }

// Lane t of the team runs the t-th contiguous block of pieces, [n*t/team, n*(t+1)/team): the
// same lane gets the same pieces every run, so whatever a lane sums over its pieces is summed
// in the same order. Contiguous, not dealt round-robin: conv2d's pieces are image groups, and
// the plane loops of the kernels before and after it give thread t the t-th block of images
// too, so a thread's images stay in its own cache from op to op (it shows where data moving
// between two cores is slow, as on a virtual machine).
// An exception cannot leave an OpenMP region: the first is kept and rethrown after it.
void CpuBackend::run_pieces(int64_t n, int lanes, const std::function<void(int64_t, int)>& piece) {
  if (lanes <= 1 || n <= 1) {
    for (int64_t i = 0; i < n; ++i) piece(i, 0);
    return;
  }
  std::exception_ptr first_error;
  std::mutex error_mutex;
#pragma omp parallel num_threads(lanes)
  {
#ifdef _OPENMP
    const int lane = omp_get_thread_num(), team = omp_get_num_threads();
#else
    const int lane = 0, team = 1;
#endif
    for (int64_t i = n * lane / team; i < n * (lane + 1) / team; ++i) {
      try {
        piece(i, lane);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
        break;
      }
    }
  }
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace dplab
