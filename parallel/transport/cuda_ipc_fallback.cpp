// cuda_ipc_fallback.cpp: cuda_ipc_transport.h for a build WITHOUT CUDA (meson compiles this
// file instead of cuda_ipc_transport.cpp when have_cuda is false). There are no CUDA
// tensors then, and engines/make_engine.cpp never asks for the transport.
// Read next: cuda_ipc_transport.h.
#include "parallel/transport/cuda_ipc_transport.h"

#include "framework/error.h"

namespace dplab::parallel {

bool cuda_ipc_compiled() { return false; }

std::unique_ptr<Transport> make_cuda_ipc_transport(Store&, int rank, int, int cuda_device, bool,
                                                   Seconds) {
  DPLAB_FAIL("rank {}: the cuda_ipc transport for cuda:{} needs a dplab built with CUDA "
             "(reconfigure with -Dcuda=enabled on a machine with nvcc)",
             rank, cuda_device);
}

}  // namespace dplab::parallel
