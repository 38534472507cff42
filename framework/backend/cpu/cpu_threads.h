// cpu_threads.h: how many threads the CPU kernels (OpenMP loops, GEMM slices) may use.
// The default is 1, or the DPLAB_NUM_THREADS environment variable: DistributedDataParallel
// runs one process per device, and N processes each spawning all-core thread pools on a
// 2-core machine would fight (torchrun sets OMP_NUM_THREADS=1 for the same reason).
// The setting is process-wide. Implemented in cpu_threads.cpp.
#pragma once
#include <cstdint>

namespace dplab {

// n >= 1; throws Error otherwise. Without OpenMP in the build, only 1 is accepted.
void set_num_threads(int n);
int get_num_threads();

// Threads a kernel may start here: get_num_threads(), or 1 inside a parallel region (a lane
// of CpuBackend::run_pieces already has its thread).
int kernel_threads();

// Threads for a loop over `work` independent units (elements, or window reads): all of
// kernel_threads() from 32K units up, else one, since starting a parallel region costs
// microseconds.
int threads_for(int64_t work);

}  // namespace dplab
