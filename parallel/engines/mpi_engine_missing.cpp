// mpi_engine_missing.cpp: stands in for mpi_engine.cpp in builds without MPI, so that
// asking for the mpi engine says how to get it instead of failing to link.
// Read next: mpi_engine.cpp.
#include "framework/error.h"
#include "parallel/engines/collective_engine.h"

namespace dplab::parallel {

namespace {
[[noreturn]] void no_mpi() {
  DPLAB_FAIL(
      "the mpi engine is not built: dplab was configured without MPI (install "
      "libopenmpi-dev and openmpi-bin, then `meson setup --reconfigure -Dmpi=enabled build`)");
}
}  // namespace

bool mpi_built() { return false; }
MpiWorld mpi_world() { no_mpi(); }
std::string mpi_broadcast_string(const std::string&, int) { no_mpi(); }
std::unique_ptr<CollectiveEngine> make_mpi_engine(int, int, Seconds, CollectiveWatchdog::Connect) {
  no_mpi();
}

}  // namespace dplab::parallel
