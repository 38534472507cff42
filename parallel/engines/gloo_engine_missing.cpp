// gloo_engine_missing.cpp: stands in for gloo_engine.cpp and transport/gloo_transport.cpp in
// builds without gloo, so that asking for the gloo engine, or for dplab's engines across
// machines (which need gloo's wire), says how to get it instead of failing to link.
// Read next: gloo_engine.cpp.
#include "framework/error.h"
#include "parallel/engines/collective_engine.h"
#include "parallel/transport/gloo_transport.h"

namespace dplab::parallel {

namespace {
[[noreturn]] void no_gloo() {
  DPLAB_FAIL(
      "gloo is not built: dplab was configured without it (install libgloo-dev, then "
      "`meson setup --reconfigure -Dgloo=enabled build`); the gloo engine and dplab's engines "
      "across machines need it");
}
}  // namespace

bool gloo_built() { return false; }
GlooInterface gloo_interface(bool) { no_gloo(); }
std::shared_ptr<gloo::Context> make_gloo_context(std::shared_ptr<Store>, int, int, Seconds, bool) {
  no_gloo();
}
std::unique_ptr<Transport> make_gloo_transport(std::shared_ptr<gloo::Context>,
                                               std::shared_ptr<Store>, std::vector<int>, Seconds,
                                               std::size_t) {
  no_gloo();
}
std::unique_ptr<CollectiveEngine> make_gloo_engine(std::shared_ptr<Store>, int, int, Seconds, bool,
                                                   CollectiveWatchdog::Connect) {
  no_gloo();
}

}  // namespace dplab::parallel
