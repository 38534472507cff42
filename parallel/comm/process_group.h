// process_group.h: the collectives API (torch.distributed's ProcessGroup) and its counters.
// A ProcessGroup is N ranks that call the same collectives in the same order. It does three
// things itself: checks arguments (ranks in range, list lengths, sizes, dtypes), runs async
// calls on one worker thread in call order, and counts the bytes each collective moved.
// The bytes are moved by one CollectiveEngine (engines/collective_engine.h), called once per
// collective: dplab's own ring or star over a transport, or MPI, NCCL or gloo; it reports what
// it moved. create_process_group (below) makes a group; which engine and which transport it
// gets is engines/make_engine.cpp's choice, so this folder never names a transport.
// Read next: engines/collective_engine.h, then engines/dplab_engine.cpp and algorithms/ring.cpp.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/tensor/tensor.h"
#include "parallel/algorithms/collective_types.h"
#include "parallel/algorithms/server_plan.h"
#include "parallel/engines/make_engine.h"
#include "parallel/rendezvous/store.h"

namespace dplab::parallel {

// How a group is made: which engine runs it, its timeout, an emulated link, the transport's
// slot and how the ranks sit on nodes. They are the engine's options, documented where the
// engine is chosen (engines/make_engine.h).
using ProcessGroupOptions = EngineOptions;

// Traffic of one rank. Bytes are payload bytes this rank copied into a peer's slot (sent)
// or consumed from a slot a peer filled (received); seconds are wall time inside calls.
// The *_inter_node part of them went to or came from a rank on another node
// (ranks_per_node): what crossed this machine's link. dplab's engine counts it per peer for
// every collective; mpi and nccl, which report formulas, leave it 0.
struct CollectiveStats {
  int64_t calls = 0;
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t bytes_sent_inter_node = 0;
  int64_t bytes_received_inter_node = 0;
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

class CollectiveEngine;
struct CollectiveCall;

class ProcessGroup {
 public:
  explicit ProcessGroup(std::unique_ptr<CollectiveEngine> engine);
  // Queued async calls finish first. Then the engine is told this rank left; if an exception
  // is unwinding the stack, that it failed (peers stop waiting for it).
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& engine() const;  // "ring", "star", "auto", ..., "mpi", "nccl"
  // The algorithm an all_reduce of `bytes` with `algo` runs: "ring", "star",
  // "recursive_doubling", "halving_doubling", "one_shot", "hierarchical"; "auto:<the one
  // picked>" for auto; the engine's name on mpi and nccl.
  std::string all_reduce_algorithm(int64_t bytes, std::optional<Algorithm> algo = {}) const;
  const std::string& transport_name() const;  // "shm", "thread", or the engine: "mpi", "nccl"
  // The transport a tensor on `d` travels by: "shm"/"thread" for CPU tensors, "cuda_ipc" for
  // CUDA tensors when the group has one, else "<cpu transport> (staged through host memory)";
  // on the mpi and nccl engines, the engine's name.
  std::string transport_name(Device d) const;

  // In place: every rank ends with op over all ranks' tensors. algo overrides the group's
  // (ring, star, recursive doubling, halving-doubling, one-shot or auto; the mpi and nccl engines
  // pick their own). On one rank it returns at once: there is nothing to reduce.
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
  // The sharded parameter server's halves (algorithms/server_plan.h, ps.cpp); t holds
  // plan.buffer_elems(rank()) elements: all P on a worker, its shard on a separate server.
  // ps_push: each server's shard of t becomes the sum of the workers' copies of it.
  // ps_pull: each worker's copy of every shard becomes its server's. dplab's engines and mpi.
  void ps_push(Tensor& t, const ServerPlan& plan);
  void ps_pull(Tensor& t, const ServerPlan& plan);

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
  // Every collective, after its checks: drain the async queue, refuse if broken, call the
  // engine once (call_engine) with a call named `name`, record under `collective` the
  // traffic the engine reports and the time; on a throw, mark the group broken and tell the
  // engine.
  void run(const char* collective, std::string name,
           const std::function<void(CollectiveCall&)>& call_engine);
  struct Impl;  // the async queue and the counters (process_group.cpp)
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<CollectiveEngine> engine_;
  int rank_ = 0;
  int size_ = 1;
};

// Engine "ring", "star", "recursive_doubling", "halving_doubling", "one_shot", "hierarchical"
// or "auto":
// dplab's engine over the thread transport when store is a HashStore (ranks are threads of
// one process), else shm between processes. In a build
// with CUDA it also gets a cuda_ipc factory: CUDA tensors then move GPU to GPU (created at
// the first CUDA collective); without CUDA compiled there are no CUDA tensors to move.
// Engine "mpi" or "nccl": that engine (rank and world_size must then be the engine's:
// mpirun's for MPI). Engine "gloo": gloo's collectives over TCP, meeting through `store`.
// With ranks_per_node > 0 and less than world_size (a job across nodes), dplab's engines run
// over the node transport: shm (threads) in a node, gloo's TCP wire between nodes.
// (process_group.cpp numbers the group; engines/make_engine.cpp makes its engine.)
std::shared_ptr<ProcessGroup> create_process_group(std::shared_ptr<Store> store, int rank,
                                                   int world_size,
                                                   const ProcessGroupOptions& opts = {});

}  // namespace dplab::parallel
