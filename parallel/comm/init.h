// init.h: init_process_group and friends (torch.distributed.init_process_group).
// A process learns its rank and the world size from the launcher's environment, meets the
// other ranks through a store and checks that everyone agrees on the world size (all of
// that is rendezvous/rendezvous.h), then builds the default group on it.
// Read next: rendezvous/rendezvous.h, comm/process_group.h; launch/spawn.h for starting ranks.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "framework/io/settings.h"
#include "parallel/comm/process_group.h"
#include "parallel/rendezvous/rendezvous.h"
#include "parallel/rendezvous/store.h"

namespace dplab::parallel {

struct InitOptions {
  // The engine that runs the collectives (process_group.h): "ring", "star", ... (dplab's own,
  // one node, shared memory); "mpi" (CPUs, any number of nodes, needs mpirun: rank and world
  // size then come from MPI), "nccl" (GPUs, any number of nodes) or "gloo" (CPUs, any number
  // of nodes, started by dplab-run: docs/gloo.md). In a build with gloo, dplab's own engines
  // also span nodes (shared memory in a node, gloo's TCP wire between nodes). PyTorch calls it the
  // backend; dplab keeps that word for the compute Backend (framework/backend/backend.h).
  std::string engine = "ring";
  std::string init_method = "env://";  // or "file:///path", "tcp://host:port"
  int rank = -1;                       // -1: from the environment
  int world_size = -1;                 // -1: from the environment
  // Rendezvous and every later collective wait. A value set here wins; left unset, the
  // environment variable DPLAB_TIMEOUT (seconds) decides, else 60 s.
  std::optional<Seconds> timeout = std::nullopt;
  // Reaching the store and every rank checking in (torchrun's rendezvous timeout). Left unset:
  // DPLAB_RENDEZVOUS_TIMEOUT (seconds) when set, else the timeout above. A job whose
  // collectives must fail fast (tests, fault drills) still gives slow start-ups time.
  std::optional<Seconds> rendezvous_timeout = std::nullopt;
  double link_gbps = 0;  // > 0: emulate a link per rank (transport/link_model.h)
};

// Builds the default process group; every rank must call it. Throws CommError naming the
// ranks that did not check in within the timeout, or the ranks that disagree on world size.
std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& opts = {});
ProcessGroup& default_process_group();  // throws if init_process_group has not run
// The default group as a shared_ptr that does not own it, for classes that keep their group
// in a shared_ptr (DDP, hvd::DistributedOptimizer): destroy_process_group() still ends it.
std::shared_ptr<ProcessGroup> default_process_group_handle();
// The rendezvous store behind the default group, for exchanging small facts (strings)
// between ranks; keys starting with "rdzv/" and "exit/" are used by init itself.
std::shared_ptr<Store> default_store();
bool is_initialized();
// Waits (up to the timeout) until every rank has called it too (an exit barrier, so no rank
// leaves while a peer is still in the last collective with it), then drops the default
// group; rank 0 closes the store last. Call it on every rank, like init_process_group.
void destroy_process_group();
int get_rank();
int get_world_size();

// The timeout init_process_group uses: `given` when set, else DPLAB_TIMEOUT's seconds when
// the variable is set, else 60 s. Throws Error on a malformed or out-of-range timeout
// (either source): it must be a number of seconds in (0, kMaxTimeout].
Seconds resolve_timeout(std::optional<Seconds> given);
// The rendezvous's: `given`, else DPLAB_RENDEZVOUS_TIMEOUT, else `timeout`; the same rule.
Seconds resolve_rendezvous_timeout(std::optional<Seconds> given, Seconds timeout);
inline constexpr Seconds kMaxTimeout{kMaxTimeoutSeconds};  // settings.h: a week

}  // namespace dplab::parallel
