// backend.cpp: picks the backend for a device. The only #if on CUDA outside backend/cuda/:
// the CUDA backend exists only when the build found nvcc.
#include "framework/backend/backend.h"

#include "framework/backend/cpu/cpu_backend.h"
#include "framework/error.h"

#if DPLAB_WITH_CUDA
#include "framework/backend/cuda/cuda_backend.h"
#endif

namespace dplab {

bool cuda_compiled() {
#if DPLAB_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#if DPLAB_WITH_CUDA
  return cuda_physical_device_count();
#else
  return 0;
#endif
}

Backend& backend_for(Device d) {
  if (d.is_cpu()) return cpu_backend();
#if DPLAB_WITH_CUDA
  return cuda_backend();
#else
  DPLAB_FAIL("device {}: this dplab was built without CUDA (reconfigure with -Dcuda=enabled "
             "on a machine with nvcc)",
             d);
#endif
}

}  // namespace dplab
