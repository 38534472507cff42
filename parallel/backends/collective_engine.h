// collective_engine.h: the seam between ProcessGroup and an existing communication engine
// (MPI on CPUs, NCCL on GPUs), for more than one machine. The ring and the star over shm are
// dplab's own teaching implementation; an engine replaces them wholesale: a ProcessGroup
// built on an engine checks arguments, counts and queues async calls as usual, then hands
// the whole collective to the engine, which picks its own algorithm (an explicit
// Algorithm::Ring/Star argument is ignored there).
// Read next: mpi_engine.cpp (every collective mapped onto MPI), nccl_engine.cpp.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "framework/tensor/tensor.h"
#include "parallel/comm/process_group.h"
#include "parallel/backends/collective_watchdog.h"
#include "parallel/comm/store.h"

namespace dplab::parallel {

// Arguments reach an engine already checked by ProcessGroup (ranks in range, list lengths,
// matching sizes and dtypes). ReduceOp::Avg is the engine's to do (sum, then scale by 1/N).
class CollectiveEngine {
 public:
  virtual ~CollectiveEngine() = default;
  virtual const std::string& name() const = 0;  // "mpi", "nccl"
  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual void all_reduce(Tensor& t, ReduceOp op) = 0;
  virtual void broadcast(Tensor& t, int root) = 0;
  virtual void reduce(Tensor& t, int root, ReduceOp op) = 0;
  virtual void all_gather(std::vector<Tensor>& outputs, const Tensor& input) = 0;
  virtual void reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) = 0;
  virtual void gather(std::vector<Tensor>& outputs, const Tensor& input, int root) = 0;
  virtual void scatter(Tensor& output, const std::vector<Tensor>& inputs, int root) = 0;
  virtual void barrier() = 0;
  virtual void send(const Tensor& t, int dst) = 0;
  virtual void recv(Tensor& t, int src) = 0;

  // This rank is leaving while an exception unwinds its stack: peers blocked in a
  // collective with it would wait forever (engines have no timeouts), so stop the job.
  // (A rank that returns from main early is caught at exit: see mpi_engine.cpp.)
  virtual void abort(const std::string& why) = 0;
};

// The engine for opts.backend ("mpi" or "nccl"). `prefix` names this group's keys in the
// store (NCCL publishes its unique id there). Throws Error naming the build option when
// dplab was built without that engine, and when rank/world_size disagree with the engine's.
std::unique_ptr<CollectiveEngine> make_engine(Store& store, const std::string& prefix, int rank,
                                              int world_size, const ProcessGroupOptions& opts);
bool is_engine_backend(const std::string& backend);  // "mpi" or "nccl"

// ---- what the counters say on an engine ----
// We cannot see MPI's or NCCL's wire, so comm_stats() counts what the textbook algorithm of
// each collective moves per rank, the same formulas (and the same chunk split) as dplab's
// own: all_reduce and all_gather/reduce_scatter as the ring (2(N-1)/N * S per rank for an
// all-reduce, which is what MPI and NCCL do for large messages), broadcast as the chain,
// reduce/gather/scatter as the star, send/recv as S. Small messages really go by other
// algorithms (trees, recursive doubling): these are model bytes, not measured ones.
struct ModelTraffic {
  int64_t sent = 0;
  int64_t received = 0;
};
ModelTraffic model_traffic(const std::string& collective, int64_t bytes, int64_t elem_size,
                           int rank, int size, int root = 0);

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

// The engines' constructors (mpi_engine.cpp, nccl_engine.cpp; or their *_missing.cpp
// stand-ins, which throw an Error naming the build option, when dplab was built without).
// timeout: how long a collective may run before the engine gives up: the mpi engine's
// watchdog then names the late rank and aborts the job (and a rank that exits waits this
// long for the others); the nccl engine aborts its communicator. watchdog_store: the store
// the mpi watchdog files its hang report in (collective_watchdog.h), under watchdog_prefix.
std::unique_ptr<CollectiveEngine> make_mpi_engine(int rank, int world_size, Seconds timeout,
                                                  CollectiveWatchdog::Connect watchdog_store,
                                                  const std::string& watchdog_prefix);
std::unique_ptr<CollectiveEngine> make_nccl_engine(Store& store, const std::string& prefix,
                                                   int rank, int world_size, Seconds timeout);

}  // namespace dplab::parallel
