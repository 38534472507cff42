// nccl_engine_missing.cpp: stands in for nccl_engine.cpp in builds without CUDA or NCCL,
// so that asking for the nccl engine says how to get it instead of failing to link.
// Read next: nccl_engine.cpp.
#include "framework/error.h"
#include "parallel/engines/collective_engine.h"

namespace dplab::parallel {

bool nccl_built() { return false; }
std::string nccl_version() { return ""; }

std::unique_ptr<CollectiveEngine> make_nccl_engine(Store&, int, int, Seconds) {
  DPLAB_FAIL("the nccl engine is not built: dplab was configured without CUDA or NCCL (needs "
             "nvcc on PATH and NCCL from the CUDA toolkit, then `meson setup --reconfigure "
             "-Dnccl=enabled build`); on CPUs use the mpi or ring engine");
}

}  // namespace dplab::parallel
