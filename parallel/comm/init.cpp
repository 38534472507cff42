// init.cpp: the default process group, built on the rendezvous (rendezvous/rendezvous.cpp:
// rank discovery, the store, the check-in) and torn down with an exit barrier.
// Engines: dplab's own (ring, star, ...) use shared memory inside a node and, in a build with
// gloo, gloo's TCP wire between nodes (without gloo they are refused when the launcher says
// the job spans several); gloo meets through the store like ring; mpi takes rank and size from MPI itself (mpirun), and its
// store's address from rank 0 by MPI_Bcast; nccl meets through the store like ring.
// Read next: launch/supervisor.h (how ranks are started), launch/spawn.h.
#include "parallel/comm/init.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "framework/error.h"
#include "framework/io/settings.h"
#include "parallel/engines/collective_engine.h"
#include "parallel/rendezvous/file_store.h"
#include "parallel/rendezvous/job_token.h"
#include "parallel/rendezvous/tcp_store.h"

namespace dplab::parallel {

namespace {

struct Global {
  std::mutex mu;
  std::shared_ptr<ProcessGroup> pg;
  std::shared_ptr<Store> store;
  Seconds timeout = kDefaultTimeout;
};
Global& global() {
  static Global g;
  return g;
}

}  // namespace

namespace {

// `given` when set, else the variable's seconds when it is set, else `fallback`.
Seconds timeout_from(std::optional<Seconds> given, const char* variable, const char* option,
                     Seconds fallback) {
  if (given) {
    DPLAB_CHECK(std::isfinite(given->count()) && given->count() > 0 && *given <= kMaxTimeout,
                "init_process_group: {} must be a number of seconds in (0, {:.0f}], got {}",
                option, kMaxTimeout.count(), given->count());
    return *given;
  }
  const auto v = setting_value(variable);
  return v ? Seconds(parse_timeout_setting(variable, *v)) : fallback;
}

}  // namespace

Seconds resolve_timeout(std::optional<Seconds> given) {
  return timeout_from(given, "DPLAB_TIMEOUT", "timeout", kDefaultTimeout);
}

Seconds resolve_rendezvous_timeout(std::optional<Seconds> given, Seconds timeout) {
  return timeout_from(given, "DPLAB_RENDEZVOUS_TIMEOUT", "rendezvous_timeout", timeout);
}

namespace {

void check_single_node(const std::string& engine, const RankInfo& info) {
  DPLAB_CHECK(info.local_world_size == info.world_size,
              "init_process_group: the '{}' engine runs on one node (its ranks share memory) in "
              "this build, which has no gloo, but this job spans several: WORLD_SIZE={}, "
              "LOCAL_WORLD_SIZE={}. Build with gloo (libgloo-dev, -Dgloo=enabled) for dplab's "
              "engines across nodes, or use the 'mpi' engine (CPUs, started by mpirun) or the "
              "'nccl' engine (GPUs)",
              engine, info.world_size, info.local_world_size);
}

// The mpi engine's store: rank 0 serves it on a free port and tells the others where, and
// the job token, with one MPI_Bcast (MPI is the job's own channel), so mpirun needs neither
// MASTER_ADDR/MASTER_PORT nor DPLAB_JOB_TOKEN (a DPLAB_JOB_TOKEN that is set is used).
// What it binds: 127.0.0.1 when every rank is on rank 0's node; across nodes MASTER_ADDR if
// set (the address the nodes share), else every interface (0.0.0.0), where the token still
// keeps strangers out (docs/store.md).
std::shared_ptr<Store> mpi_store(const MpiWorld& w, Seconds timeout) {
  std::shared_ptr<TCPStore> served;
  std::string where;
  if (w.rank == 0) {
    const std::string token = job_token_for_launch();
    const char* a = std::getenv("MASTER_ADDR");
    std::string bind = "127.0.0.1", host = "127.0.0.1";
    if (w.local_size != w.size) {
      if (a && *a) {
        bind = host = a;
      } else {
        char name[256] = {};
        ::gethostname(name, sizeof(name) - 1);
        bind = "0.0.0.0";
        host = name;
      }
    }
    served = std::make_shared<TCPStore>(bind, 0, true, timeout, token);
    where = fmt::format("{}:{}\n{}", host, served->port(), token);
  }
  where = mpi_broadcast_string(where, 0);
  if (served) return served;
  const size_t newline = where.find('\n'), colon = where.rfind(':', newline);
  return std::make_shared<TCPStore>(where.substr(0, colon),
                                    std::stoi(where.substr(colon + 1, newline - colon - 1)), false,
                                    timeout, where.substr(newline + 1));
}

}  // namespace

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& opts) {
  DPLAB_CHECK(is_known_engine(opts.engine),
              "init_process_group: unknown engine '{}': expected 'ring', 'star', "
              "'recursive_doubling', 'halving_doubling', 'one_shot', 'hierarchical', 'auto', 'mpi', "
              "'nccl' or 'gloo' (the sharded parameter server is an optimizer over any of them: "
              "ParameterServer, docs/parameter_server.md)",
              opts.engine);
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  DPLAB_CHECK(g.pg == nullptr,
              "init_process_group: already initialized as rank {} of {}; call "
              "destroy_process_group() first",
              g.pg->rank(), g.pg->size());
  const Seconds timeout = resolve_timeout(opts.timeout);
  // Start-up (reaching the store, every rank checking in) may take longer than a collective
  // on a loaded machine: processes are exec'd and load their programs. Its own timeout, when
  // set, covers it; the store then goes back to the collectives' timeout.
  const Seconds joining = resolve_rendezvous_timeout(opts.rendezvous_timeout, timeout);
  int rank = opts.rank, world_size = opts.world_size, ranks_per_node = 0;
  std::shared_ptr<Store> store;
  if (opts.engine == "mpi") {
    // MPI knows the world: mpirun (or srun --mpi=pmix) started it
    const MpiWorld w = mpi_world();
    DPLAB_CHECK((rank < 0 || rank == w.rank) && (world_size < 0 || world_size == w.size),
                "init_process_group: the mpi engine takes rank and world size from mpirun "
                "(rank {} of {}), but rank {} of {} was passed",
                w.rank, w.size, rank, world_size);
    rank = w.rank;
    world_size = w.size;
    store = opts.init_method == "env://" ? mpi_store(w, joining)
                                         : make_store(opts.init_method, rank, world_size, joining);
  } else {
    if (rank < 0 || world_size < 0) {
      RankInfo info = rank_info_from_env();
      if (opts.engine != "nccl" && opts.engine != "gloo" && !gloo_built())
        check_single_node(opts.engine, info);
      if (rank < 0) rank = info.rank;
      if (world_size < 0) world_size = info.world_size;
      if (info.local_world_size < info.world_size) ranks_per_node = info.local_world_size;
    }
    DPLAB_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
                "init_process_group: rank {} is not in [0, world_size {})", rank, world_size);
    store = make_store(opts.init_method, rank, world_size, joining);
  }
  rendezvous(*store, rank, world_size, joining);
  store->set_timeout(timeout);
  g.pg = create_process_group(
      store, rank, world_size,
      ProcessGroupOptions{.engine = opts.engine,
                          .timeout = timeout,
                          .link_gbps = opts.link_gbps,
                          .ranks_per_node = ranks_per_node});
  g.store = store;
  g.timeout = timeout;
  return g.pg;
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(global().mu);
  return global().pg != nullptr;
}

ProcessGroup& default_process_group() {
  std::lock_guard<std::mutex> lock(global().mu);
  DPLAB_CHECK(global().pg != nullptr, "no default process group: call init_process_group() first");
  return *global().pg;
}

std::shared_ptr<ProcessGroup> default_process_group_handle() {
  return std::shared_ptr<ProcessGroup>(&default_process_group(), [](ProcessGroup*) {});
}

std::shared_ptr<Store> default_store() {
  std::lock_guard<std::mutex> lock(global().mu);
  DPLAB_CHECK(global().store != nullptr, "no default store: call init_process_group() first");
  return global().store;
}

int get_rank() { return default_process_group().rank(); }
int get_world_size() { return default_process_group().size(); }

void destroy_process_group() {
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  if (g.pg == nullptr) return;
  int rank = g.pg->rank(), world_size = g.pg->size();
  auto keys_of = [&](const char* prefix, int first) {
    std::vector<std::string> keys;
    for (int r = first; r < world_size; ++r) keys.push_back(prefix + std::to_string(r));
    return keys;
  };
  // A rank that died cannot check out: the waits below then end after the timeout (the
  // launcher has reported the death by then), and closing is still the right thing to do.
  auto wait_quietly = [&](const std::vector<std::string>& keys) {
    try {
      g.store->wait(keys);
    } catch (const CommError&) {}
  };
  // Phase 1, an exit barrier: no rank tears down its group while a peer may still be inside
  // the last collective with it.
  g.store->set("exit/" + std::to_string(rank), "1");
  wait_quietly(keys_of("exit/", 0));
  g.pg.reset();
  // Phase 2: rank 0 hosts the store, so it closes it only after everyone is done with it.
  if (rank != 0) {
    g.store->set("gone/" + std::to_string(rank), "1");
  } else {
    wait_quietly(keys_of("gone/", 1));
  }
  g.store.reset();
}

}  // namespace dplab::parallel
