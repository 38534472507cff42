// collective_engine.h: the seam under ProcessGroup. A ProcessGroup checks arguments, queues
// async calls and keeps the traffic counters; then it calls one CollectiveEngine, once per
// collective: that one call moves the bytes, names what ran and reports the traffic.
// Four engines sit behind it:
//   dplab (dplab_engine.cpp): dplab's own ring, star, recursive doubling, halving-doubling,
//     one-shot and hierarchical (algorithms/: ring.cpp, star.cpp, recursive_doubling.cpp,
//     halving_doubling.cpp, one_shot.cpp, hierarchical.cpp) over a transport (thread, shm,
//     shm+gloo across nodes; cuda_ipc for CUDA
//     tensors, or host staging without it); it counts the bytes it moves;
//   mpi (mpi_engine.cpp): OpenMPI, CPUs, any number of machines;
//   nccl (nccl_engine.cpp): NCCL, GPUs;
//   gloo (gloo_engine.cpp): gloo, PyTorch's CPU backend, over TCP, any number of machines.
// mpi, nccl and gloo cannot see their wire: they report algorithms/cost.h's textbook formulas
// (textbook_traffic.h picks one per collective).
// Adding a collective touches this interface, each engine, and ProcessGroup's checks.
// Only make_engine.cpp picks an engine (and a transport) by name.
// Read next: make_engine.h (which engine a group gets), dplab_engine.cpp (the teaching
// engine), then mpi_engine.cpp.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/tensor/tensor.h"
#include "framework/error.h"
#include "parallel/algorithms/collective_types.h"
#include "parallel/algorithms/server_plan.h"
#include "parallel/engines/collective_watchdog.h"
#include "parallel/rendezvous/store.h"

namespace dplab::parallel {

// One collective as ProcessGroup hands it to the engine, and what the engine hands back.
struct CollectiveCall {
  // In: the collective as error messages, hang reports and watchdogs name it
  // ("broadcast(root 1)", "all_reduce(sum)"). all_reduce renames it with the algorithm it
  // runs before it starts ("all_reduce(ring, sum)"), so every message about it says what ran.
  std::string name;
  // Out: the bytes this rank moved. dplab's engine counts them on its transports; mpi and
  // nccl cannot see their wire and fill in the textbook formula (algorithms/cost.h).
  Traffic traffic;
};

// Arguments reach an engine already checked by ProcessGroup (ranks in range, list lengths,
// matching sizes and dtypes). ReduceOp::Avg is the engine's to do (sum, then scale by 1/N).
// A collective that throws leaves the group broken: ProcessGroup refuses later calls.
class CollectiveEngine {
 public:
  virtual ~CollectiveEngine() = default;
  // The engine's word, as create_process_group was given it: "ring", "star", ..., "auto"
  // (dplab's engine, named by its default all-reduce algorithm), "mpi", "nccl".
  virtual const std::string& name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // How bytes of a tensor on `d` travel ("shm", "thread", "cuda_ipc", "mpi", ...); with no
  // device, how CPU tensors do.
  virtual const std::string& transport_name() const { return name(); }
  virtual std::string transport_name(Device) const { return name(); }
  // What runs an all_reduce of `bytes` asked for with `algo` (none: the engine's default):
  // "ring", "star", "recursive_doubling", "halving_doubling", "one_shot", "hierarchical" on dplab's engine,
  // where auto reads "auto:<the algorithm it picks for this size>"; MPI and NCCL pick their
  // own algorithm, ignore `algo` and answer their name.
  virtual std::string all_reduce_algorithm(int64_t /*bytes*/,
                                           std::optional<Algorithm> /*algo*/) const {
    return name();
  }

  virtual void all_reduce(CollectiveCall& call, Tensor& t, ReduceOp op,
                          std::optional<Algorithm> algo) = 0;
  virtual void broadcast(CollectiveCall& call, Tensor& t, int root) = 0;
  virtual void reduce(CollectiveCall& call, Tensor& t, int root, ReduceOp op) = 0;
  virtual void all_gather(CollectiveCall& call, std::vector<Tensor>& outputs,
                          const Tensor& input) = 0;
  virtual void reduce_scatter(CollectiveCall& call, Tensor& output,
                              const std::vector<Tensor>& inputs, ReduceOp op) = 0;
  virtual void gather(CollectiveCall& call, std::vector<Tensor>& outputs, const Tensor& input,
                      int root) = 0;
  virtual void scatter(CollectiveCall& call, Tensor& output, const std::vector<Tensor>& inputs,
                       int root) = 0;
  virtual void barrier(CollectiveCall& call) = 0;
  virtual void send(CollectiveCall& call, const Tensor& t, int dst) = 0;
  virtual void recv(CollectiveCall& call, Tensor& t, int src) = 0;
  // The sharded parameter server's halves (algorithms/ps.cpp; t holds plan.buffer_elems(rank)
  // elements): dplab's engine runs ps.cpp's schedule on its transport, mpi the same schedule
  // with MPI_Isend/Irecv. An engine without them says so.
  virtual void ps_push(CollectiveCall& call, Tensor& /*t*/, const ServerPlan& /*plan*/) {
    DPLAB_FAIL("{}: the {} engine has no parameter-server exchange; use dplab's engine (ring, "
               "star, ...) or mpi",
               call.name, name());
  }
  virtual void ps_pull(CollectiveCall& call, Tensor& /*t*/, const ServerPlan& /*plan*/) {
    DPLAB_FAIL("{}: the {} engine has no parameter-server exchange; use dplab's engine (ring, "
               "star, ...) or mpi",
               call.name, name());
  }

  // A collective on this rank threw: tell the peers, if the engine can (dplab marks its
  // transports failed, so peers stop waiting and name this rank). `why` names the
  // collective, this rank and the error.
  virtual void mark_failed(const std::string& /*why*/) {}
  // This rank is done with the group: a peer still waiting on it will wait in vain.
  virtual void leave() {}
  // This rank is leaving while an exception unwinds its stack: peers blocked in a
  // collective with it must not wait forever (MPI and NCCL have no timeouts: stop the job).
  // (A rank that returns from main early is caught at exit: see mpi_engine.cpp.)
  virtual void abort(const std::string& why) = 0;
};

// ---- the MPI world (mpi_engine.cpp; errors when built without MPI) ----
struct MpiWorld {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  // MPI_THREAD_MULTIPLE granted: several threads may be in MPI at once. Without it every MPI
  // call takes one process-wide lock, and two groups used from two threads can deadlock.
  bool thread_multiple = false;
};
// Initialises MPI once (MPI_THREAD_MULTIPLE requested; MPI_Finalize runs at exit) and
// returns this process's place in MPI_COMM_WORLD. Throws Error, saying to use mpirun, when
// the environment says there are several ranks but MPI was not started by mpirun.
MpiWorld mpi_world();
// Rank root's string, on every rank of MPI_COMM_WORLD (a collective: all ranks call it).
std::string mpi_broadcast_string(const std::string& value, int root);
bool mpi_built();
bool nccl_built();
// Whether dplab was built with gloo (-Dgloo): the gloo engine, and gloo's wire under dplab's
// engines across nodes.
bool gloo_built();
// NCCL's version as "2.28.3" (ncclGetVersion), or "" in a build without NCCL.
std::string nccl_version();

// The engines' constructors; make_engine.cpp calls them.
class Transport;
// Where CUDA tensors go on dplab's engine: make(k), called collectively at the first
// collective on a CUDA tensor (every rank reaches it at the same call), builds the cuda_ipc
// transport for logical device cuda:k; later CUDA tensors must be on the same cuda:k.
// Without a factory CUDA tensors are staged through host memory.
using CudaTransportFactory = std::function<std::unique_ptr<Transport>(int cuda_index)>;
// dplab's own: `transport` moves CPU tensors; `algorithm` is all_reduce's default;
// `link` is what Algorithm::Auto weighs its choice with (algorithms/cost.h);
// `ranks_per_node` how the ranks sit on nodes (NodeLayout; 0: one node): hierarchical's
// levels, and the inter-node bytes of comm_stats(). Checked: 0 or a divisor of the size.
// The second form gives the links of both levels (NodeLinks: ranks_per_node, intra, inter);
// the first takes `link` for both, as on one machine with pretend nodes.
struct LinkCost;
struct NodeLinks;
std::unique_ptr<CollectiveEngine> make_dplab_engine(std::unique_ptr<Transport> transport,
                                                    Algorithm algorithm,
                                                    CudaTransportFactory make_cuda,
                                                    const LinkCost& link, int ranks_per_node = 0);
std::unique_ptr<CollectiveEngine> make_dplab_engine(std::unique_ptr<Transport> transport,
                                                    Algorithm algorithm,
                                                    CudaTransportFactory make_cuda,
                                                    const NodeLinks& links);
// mpi_engine.cpp, nccl_engine.cpp; or their *_missing.cpp stand-ins, which throw an Error
// naming the build option when dplab was built without that engine, and when rank /
// world_size disagree with the engine's.
// timeout: how long a collective may run before the engine gives up: the mpi engine's
// watchdog then names the late rank and aborts the job (and a rank that exits waits this
// long for the others); the nccl engine aborts its communicator. watchdog_store: the store
// the mpi watchdog files its hang report in (collective_watchdog.h), a view of its own.
// store: the group's own view (PrefixStore "dplab/pg3"): NCCL publishes its unique id there.
std::unique_ptr<CollectiveEngine> make_mpi_engine(int rank, int world_size, Seconds timeout,
                                                  CollectiveWatchdog::Connect watchdog_store);
std::unique_ptr<CollectiveEngine> make_nccl_engine(Store& store, int rank, int world_size,
                                                   Seconds timeout);
// gloo_engine.cpp (gloo_engine_missing.cpp without -Dgloo): gloo's collectives over its TCP
// pairs. store: the group's view for gloo's rendezvous ("dplab/pg3/gloo"); multi_node: the
// job spans machines (gloo then listens on the interface gloo_transport.h picks, not
// loopback); watchdog_store as for mpi: a timeout names the late rank, then fails the call.
std::unique_ptr<CollectiveEngine> make_gloo_engine(std::shared_ptr<Store> store, int rank,
                                                   int world_size, Seconds timeout,
                                                   bool multi_node,
                                                   CollectiveWatchdog::Connect watchdog_store);

}  // namespace dplab::parallel
