// process_group.h: the collectives API (torch.distributed's ProcessGroup) and its counters.
// A ProcessGroup is N ranks that call the same collectives in the same order. It owns a
// transport (shm between processes, heap between threads; see transport/transport.h), plus
// a cuda_ipc one for CUDA tensors (transport/cuda_ipc_transport.h), and
// runs one of two all-reduce patterns over it: the ring (comm/ring.cpp) or the star, a
// parameter server (comm/star.cpp). Every collective counts the bytes this rank sent and
// received, so the textbook volumes can be checked, not just quoted.
// On the mpi and nccl backends the group holds a CollectiveEngine instead, which runs each
// collective whole (backends/collective_engine.h); checks, counters and async are the same.
// Read next: transport/transport.h, then comm/ring.cpp.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/tensor/tensor.h"
#include "parallel/comm/store.h"

namespace dplab::parallel {

enum class ReduceOp { Sum, Avg, Max, Min };
enum class Algorithm { Ring, Star };  // star = parameter server: all to rank 0, rank 0 reduces, sends back

struct ProcessGroupOptions {
  // "ring" (all_reduce uses Algorithm::Ring) or "star" (uses Star) over shm on one node;
  // "mpi" or "nccl": an existing engine, any number of nodes (it picks its own algorithms)
  std::string backend = "ring";
  Seconds timeout = kDefaultTimeout;  // every wait ends in CommError after this
  double link_gbps = 0;  // > 0: emulate a link of this many Gbit/s per rank (link_model.h)
};

// Traffic of one rank. Bytes are payload bytes this rank copied into a peer's slot (sent)
// or consumed from a slot a peer filled (received); seconds are wall time inside calls.
struct CollectiveStats {
  int64_t calls = 0;
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  double seconds = 0.0;
};
struct CommStats {
  std::map<std::string, CollectiveStats> per_collective;  // "all_reduce", "broadcast", ...
  CollectiveStats total;
};

// The handle an async collective returns. wait() blocks until done and rethrows its error.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool is_completed() const = 0;
};
using WorkPtr = std::shared_ptr<Work>;

class Transport;
class CollectiveEngine;

class ProcessGroup {
 public:
  ProcessGroup(std::unique_ptr<Transport> transport, const ProcessGroupOptions& opts);
  ProcessGroup(std::unique_ptr<CollectiveEngine> engine, const ProcessGroupOptions& opts);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  Algorithm default_algorithm() const { return algorithm_; }
  const std::string& transport_name() const;  // "shm", "thread", or the engine: "mpi", "nccl"
  // The transport a tensor on `d` travels by: "shm"/"thread" for CPU tensors, "cuda_ipc" for
  // CUDA tensors when the group has one, else "<cpu transport> (staged through host memory)".
  std::string transport_name(Device d) const;

  // Where CUDA tensors go: make(k) builds, collectively, the transport for logical device
  // cuda:k. It is called at the first collective on a CUDA tensor (every rank reaches it at
  // the same call, since all call collectives in one order); later CUDA tensors must be on
  // the same cuda:k. Without a factory CUDA tensors are staged through host memory.
  // create_process_group sets it when dplab was built with CUDA.
  using CudaTransportFactory = std::function<std::unique_ptr<Transport>(int cuda_index)>;
  void set_cuda_transport_factory(CudaTransportFactory make);

  // In place: every rank ends with op over all ranks' tensors. algo overrides the group's.
  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum, std::optional<Algorithm> algo = {});
  // root's tensor is copied into everyone's t (a pipelined chain root -> root+1 -> ...).
  void broadcast(Tensor& t, int root = 0);
  // root's t becomes op over all ranks' t; other ranks' t is left unchanged.
  void reduce(Tensor& t, int root = 0, ReduceOp op = ReduceOp::Sum);
  // outputs[i] <- rank i's input; outputs has size() tensors shaped like input.
  void all_gather(std::vector<Tensor>& outputs, const Tensor& input);
  // output <- op over ranks of inputs[rank()]; inputs has size() tensors shaped like output.
  void reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs,
                      ReduceOp op = ReduceOp::Sum);
  // On root, outputs[i] <- rank i's input (outputs is ignored elsewhere).
  void gather(std::vector<Tensor>& outputs, const Tensor& input, int root = 0);
  // output <- root's inputs[rank()] (inputs is ignored off root).
  void scatter(Tensor& output, const std::vector<Tensor>& inputs, int root = 0);
  void barrier();
  void send(const Tensor& t, int dst);
  void recv(Tensor& t, int src);

  // Async forms: queued on one worker thread per group, run in call order. The tensors
  // must stay alive and untouched until wait() returns.
  WorkPtr all_reduce_async(Tensor t, ReduceOp op = ReduceOp::Sum,
                           std::optional<Algorithm> algo = {});
  WorkPtr broadcast_async(Tensor t, int root = 0);
  WorkPtr all_gather_async(std::vector<Tensor> outputs, Tensor input);
  WorkPtr reduce_scatter_async(Tensor output, std::vector<Tensor> inputs,
                               ReduceOp op = ReduceOp::Sum);
  WorkPtr barrier_async();

  CommStats comm_stats() const;
  void reset_comm_stats();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0;
  int size_ = 1;
  Algorithm algorithm_ = Algorithm::Ring;
};

// The thread transport when store is a HashStore (ranks are threads of one process),
// else shm between processes; for backend "mpi" or "nccl", that engine (rank and
// world_size must then be the engine's: mpirun's for MPI). In a build with CUDA a
// transport group also gets a cuda_ipc factory: CUDA tensors then move GPU to GPU (created
// at the first CUDA collective); without CUDA compiled there are no CUDA tensors to move.
std::shared_ptr<ProcessGroup> create_process_group(std::shared_ptr<Store> store, int rank,
                                                   int world_size,
                                                   const ProcessGroupOptions& opts = {});

// How a buffer of n elements is cut into `parts` chunks: the first n % parts chunks get
// one element more than the others (n = 10, parts = 4 -> 3, 3, 2, 2). Ring and
// reduce_scatter use it; the counters' exact values follow from it.
int64_t chunk_elems(int64_t n, int parts, int index);
int64_t chunk_offset(int64_t n, int parts, int index);

std::string reduce_op_name(ReduceOp op);
std::string algorithm_name(Algorithm a);

}  // namespace dplab::parallel
