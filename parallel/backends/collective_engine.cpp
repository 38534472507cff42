// collective_engine.cpp: picks the engine for a backend name, and the model traffic that
// comm_stats() reports on an engine (see collective_engine.h for why it is a model).
// The formulas are the ones ring.cpp and star.cpp count as they move bytes, so a group on
// the mpi backend reports exactly what the same calls on the ring backend report.
// Read next: mpi_engine.cpp.
#include "parallel/backends/collective_engine.h"

#include "framework/error.h"
#include "parallel/comm/tcp_store.h"

namespace dplab::parallel {

bool is_engine_backend(const std::string& backend) {
  return backend == "mpi" || backend == "nccl";
}

namespace {

// The watchdog's own store: a second connection to the same TCP store (the first may be
// busy in the main thread), or the shared store itself when it needs no connection.
CollectiveWatchdog::Connect watchdog_store(Store& store) {
  if (auto* tcp = dynamic_cast<TCPStore*>(&store)) {
    return [host = tcp->host(), port = tcp->port()](Seconds timeout) -> std::shared_ptr<Store> {
      return std::make_shared<TCPStore>(host, port, false, timeout);
    };
  }
  return [&store](Seconds) { return std::shared_ptr<Store>(&store, [](Store*) {}); };
}

}  // namespace

std::unique_ptr<CollectiveEngine> make_engine(Store& store, const std::string& prefix, int rank,
                                              int world_size, const ProcessGroupOptions& opts) {
  if (opts.backend == "mpi")
    return make_mpi_engine(rank, world_size, opts.timeout, watchdog_store(store),
                           prefix + "/watchdog");
  if (opts.backend == "nccl") return make_nccl_engine(store, prefix, rank, world_size, opts.timeout);
  DPLAB_FAIL("make_engine: backend must be \"mpi\" or \"nccl\", got \"{}\"", opts.backend);
}

ModelTraffic model_traffic(const std::string& collective, int64_t bytes, int64_t elem_size,
                           int rank, int size, int root) {
  ModelTraffic t;
  const int n = size, r = rank;
  if (n == 1 || bytes == 0) return t;
  auto mod = [n](int a) { return ((a % n) + n) % n; };
  if (collective == "all_reduce") {
    // ring: reduce-scatter then all-gather over N chunks (ring.cpp): rank r sends every
    // chunk but r+1 and r+2, receives every chunk but r and r+1; 2(N-1)/N * S when N | S
    const int64_t elems = bytes / elem_size;
    auto c = [&](int i) { return chunk_elems(elems, n, mod(i)) * elem_size; };
    t.sent = 2 * bytes - c(r + 1) - c(r + 2);
    t.received = 2 * bytes - c(r) - c(r + 1);
  } else if (collective == "all_gather" || collective == "reduce_scatter") {
    // ring over N blocks of `bytes` each: N-1 steps, one block out and one in per step
    t.sent = t.received = (n - 1) * bytes;
  } else if (collective == "broadcast") {
    // chain root -> root+1 -> ...: all but the last send S, all but the root receive S
    const int pos = mod(r - root);
    t.sent = pos < n - 1 ? bytes : 0;
    t.received = pos > 0 ? bytes : 0;
  } else if (collective == "reduce" || collective == "gather") {
    // star into the root: each leaf sends S, the root receives (N-1)S
    t.sent = r == root ? 0 : bytes;
    t.received = r == root ? (n - 1) * bytes : 0;
  } else if (collective == "scatter") {
    t.sent = r == root ? (n - 1) * bytes : 0;
    t.received = r == root ? 0 : bytes;
  } else if (collective == "send") {
    t.sent = bytes;
  } else if (collective == "recv") {
    t.received = bytes;
  }  // barrier: no payload
  return t;
}

}  // namespace dplab::parallel
