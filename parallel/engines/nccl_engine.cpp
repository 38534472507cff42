// nccl_engine.cpp: the nccl engine, one GPU per rank, any number of machines. Rank 0
// publishes an ncclUniqueId in the group's own store (a PrefixStore view); all ranks join with
// ncclCommInitRankConfig (one non-blocking communicator per group) on cuda:<local rank>
// (nccl_rules.h picks it, and refuses several ranks per GPU).
// Streams, PyTorch DDP's way: collectives run on the device's communication stream, which
// first waits (an event) for the work already queued on the compute stream (the gradients
// being reduced); after the collective the compute stream waits (an event) for it, so the
// optimizer reads finished sums while backward kernels queued meanwhile were never blocked.
// The call returns when the collective is done: it polls the event and
// ncclCommGetAsyncError until done, an error, or the group's timeout, and aborts the
// communicator on the last two (nccl_wait_or_abort), so a dead peer ends in a CommError
// naming the collective and this rank instead of a hang. An aborted communicator is never
// destroyed again. The ProcessGroup's async worker gives DDP its overlap with the host.
// NCCL has no gather/scatter/barrier: grouped ncclSend/ncclRecv, and a 1-float all-reduce.
// NCCL does not say what it sent: each collective reports algorithms/cost.h's textbook traffic
// (textbook_traffic.h).
// Compiled with the nccl build option; needs a GPU at run time (tests skip without one).
// Read next: nccl_rules.h, mpi_engine.cpp, collective_engine.h.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>

#include "framework/backend/cuda/cuda_backend.h"
#include "framework/backend/cuda/cuda_check.h"
#include "framework/backend/cuda/cuda_devices.h"
#include "framework/backend/cuda/virtual_gpus.h"
#include "framework/error.h"
#include "parallel/algorithms/cost.h"
#include "parallel/engines/collective_engine.h"
#include "parallel/engines/textbook_traffic.h"
#include "parallel/engines/nccl_rules.h"
#include "parallel/rendezvous/rendezvous.h"

namespace dplab::parallel {

namespace {

ncclDataType_t type_of(DType t) {
  switch (t) {
    case DType::Float32: return ncclFloat32;
    case DType::Int64: return ncclInt64;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
  }
  return ncclFloat32;
}
ncclRedOp_t op_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;  // NCCL >= 2.10 divides by N itself
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  return ncclSum;
}

// Where this rank runs, as the launcher said (dplab-run / torchrun, mpirun, srun), or, with
// no launcher variables (ranks made in one program), all ranks on this machine.
NcclPlacement placement_of(int rank, int world_size) {
  NcclPlacement p{.rank = rank, .world_size = world_size};
  if (std::getenv("RANK") || std::getenv("OMPI_COMM_WORLD_RANK") || std::getenv("SLURM_PROCID")) {
    const RankInfo info = rank_info_from_env();
    p.launcher_env = true;
    p.local_rank = info.local_rank;
    p.local_world_size = info.local_world_size;
  }
  p.physical_gpus = cuda_physical_device_count();
  p.logical_devices = cuda_logical_device_count();
  return p;
}

class NcclEngine final : public CollectiveEngine {
 public:
  NcclEngine(Store& store, int rank, int world_size, Seconds timeout)
      : rank_(rank), size_(world_size), timeout_(timeout) {
    device_ = nccl_device_for(placement_of(rank, world_size));
    cuda::LogicalDevice& dev = cuda::bind(device_);
    dev_ = &dev;
    ncclUniqueId id;
    const std::string key = "nccl_unique_id";
    if (rank == 0) {
      nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", "process group creation");
      store.set(key, std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
    } else {
      const std::string got = store.get(key);
      DPLAB_CHECK(got.size() == sizeof(id),
                  "nccl: the unique id in the store has {} bytes, "
                  "expected {}",
                  got.size(), sizeof(id));
      std::memcpy(&id, got.data(), sizeof(id));
    }
    // Non-blocking: a peer that never joins ends in the timeout below, not a hang.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    nccl(ncclCommInitRankConfig(&comm_, world_size, id, rank, &config), "ncclCommInitRankConfig",
         "process group creation");  // waits while it answers ncclInProgress
    CUDA_CHECK(cudaEventCreateWithFlags(&inputs_ready_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }
  ~NcclEngine() override {
    // Only a healthy communicator is finalized and destroyed; a failed one was aborted
    // (ncclCommDestroy on it could wait forever for a dead peer).
    if (comm_ != nullptr) {
      try {
        nccl(ncclCommFinalize(comm_), "ncclCommFinalize", "process group destruction");
        ncclCommDestroy(comm_);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "dplab nccl engine: %s\n", e.what());  // aborted by then
      }
    }
    if (inputs_ready_ != nullptr && cudaEventDestroy(inputs_ready_) != cudaSuccess)
      cudaGetLastError();
    if (done_ != nullptr && cudaEventDestroy(done_) != cudaSuccess) cudaGetLastError();
  }

  const std::string& name() const override { return name_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce(CollectiveCall& call, Tensor& t, ReduceOp op,
                  std::optional<Algorithm>) override {  // NCCL picks its own
    call.name = fmt::format("all_reduce({}, {})", name_, reduce_op_name(op));
    call.traffic = textbook_traffic(*this).all_reduce(t);
    cudaStream_t s = begin(t, "all_reduce");
    nccl(ncclAllReduce(t.raw_data(), t.raw_data(), t.numel(), type_of(t.dtype()), op_of(op), comm_,
                       s),
         "ncclAllReduce", "all_reduce");
    finish("all_reduce");
  }
  void broadcast(CollectiveCall& call, Tensor& t, int root) override {
    call.traffic = textbook_traffic(*this).broadcast(t, root);
    cudaStream_t s = begin(t, "broadcast");
    nccl(ncclBroadcast(t.raw_data(), t.raw_data(), t.numel(), type_of(t.dtype()), root, comm_, s),
         "ncclBroadcast", "broadcast");
    finish("broadcast");
  }
  void reduce(CollectiveCall& call, Tensor& t, int root, ReduceOp op) override {
    call.traffic = textbook_traffic(*this).reduce(t, root);
    // recvbuff is only written on the root, so the others' tensors stay unchanged
    cudaStream_t s = begin(t, "reduce");
    nccl(ncclReduce(t.raw_data(), t.raw_data(), t.numel(), type_of(t.dtype()), op_of(op), root,
                    comm_, s),
         "ncclReduce", "reduce");
    finish("reduce");
  }
  void all_gather(CollectiveCall& call, std::vector<Tensor>& outputs,
                  const Tensor& input) override {
    call.traffic = textbook_traffic(*this).all_gather(input);
    for (const Tensor& o : outputs) check_device(o, "all_gather");
    cudaStream_t s = begin(input, "all_gather");
    Tensor all =
        Tensor::empty({input.numel() * size_}, {.dtype = input.dtype(), .device = input.device()});
    nccl(ncclAllGather(input.raw_data(), all.raw_data(), input.numel(), type_of(input.dtype()),
                       comm_, s),
         "ncclAllGather", "all_gather");
    for (int i = 0; i < size_; ++i) copy_block(outputs[i].raw_data(), all, i, input.nbytes(), s);
    finish("all_gather");  // before `all` goes back to the cache: its readers are done
  }
  void reduce_scatter(CollectiveCall& call, Tensor& output, const std::vector<Tensor>& inputs,
                      ReduceOp op) override {
    call.traffic = textbook_traffic(*this).reduce_scatter(output);
    for (const Tensor& in : inputs) check_device(in, "reduce_scatter");
    cudaStream_t s = begin(output, "reduce_scatter");
    const int64_t bytes = output.nbytes();
    Tensor all = Tensor::empty({output.numel() * size_},
                               {.dtype = output.dtype(), .device = output.device()});
    for (int i = 0; i < size_; ++i) {
      CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(all.raw_data()) + i * bytes,
                                 inputs[i].raw_data(), bytes, cudaMemcpyDeviceToDevice, s));
    }
    nccl(ncclReduceScatter(all.raw_data(), output.raw_data(), output.numel(),
                           type_of(output.dtype()), op_of(op), comm_, s),
         "ncclReduceScatter", "reduce_scatter");
    finish("reduce_scatter");
  }
  void gather(CollectiveCall& call, std::vector<Tensor>& outputs, const Tensor& input,
              int root) override {
    call.traffic = textbook_traffic(*this).gather(input, root);
    if (rank_ == root)
      for (const Tensor& o : outputs) check_device(o, "gather");
    cudaStream_t s = begin(input, "gather");
    const std::size_t n = input.numel();
    nccl(ncclGroupStart(), "ncclGroupStart", "gather");
    if (rank_ == root) {
      for (int i = 0; i < size_; ++i) {
        if (i == root)
          CUDA_CHECK(cudaMemcpyAsync(outputs[i].raw_data(), input.raw_data(), input.nbytes(),
                                     cudaMemcpyDeviceToDevice, s));
        else
          nccl(ncclRecv(outputs[i].raw_data(), n, type_of(input.dtype()), i, comm_, s), "ncclRecv",
               "gather");
      }
    } else {
      nccl(ncclSend(input.raw_data(), n, type_of(input.dtype()), root, comm_, s), "ncclSend",
           "gather");
    }
    nccl(ncclGroupEnd(), "ncclGroupEnd", "gather");
    finish("gather");
  }
  void scatter(CollectiveCall& call, Tensor& output, const std::vector<Tensor>& inputs,
               int root) override {
    call.traffic = textbook_traffic(*this).scatter(output, root);
    if (rank_ == root)
      for (const Tensor& in : inputs) check_device(in, "scatter");
    cudaStream_t s = begin(output, "scatter");
    const std::size_t n = output.numel();
    nccl(ncclGroupStart(), "ncclGroupStart", "scatter");
    if (rank_ == root) {
      for (int i = 0; i < size_; ++i) {
        if (i == root)
          CUDA_CHECK(cudaMemcpyAsync(output.raw_data(), inputs[i].raw_data(), output.nbytes(),
                                     cudaMemcpyDeviceToDevice, s));
        else
          nccl(ncclSend(inputs[i].raw_data(), n, type_of(output.dtype()), i, comm_, s), "ncclSend",
               "scatter");
      }
    } else {
      nccl(ncclRecv(output.raw_data(), n, type_of(output.dtype()), root, comm_, s), "ncclRecv",
           "scatter");
    }
    nccl(ncclGroupEnd(), "ncclGroupEnd", "scatter");
    finish("scatter");
  }
  void barrier(CollectiveCall&) override {
    // an all-reduce of one float on this rank's device: returns when every rank has joined
    Tensor one = Tensor::empty({1}, {.device = Device(DeviceKind::CUDA, device_)});
    cudaStream_t s = begin(one, "barrier");
    nccl(ncclAllReduce(one.raw_data(), one.raw_data(), 1, ncclFloat32, ncclSum, comm_, s),
         "ncclAllReduce", "barrier");
    finish("barrier");
  }
  void send(CollectiveCall& call, const Tensor& t, int dst) override {
    call.traffic = textbook_traffic(*this).send(t);
    cudaStream_t s = begin(t, "send");
    nccl(ncclSend(t.raw_data(), t.numel(), type_of(t.dtype()), dst, comm_, s), "ncclSend", "send");
    finish("send");
  }
  void recv(CollectiveCall& call, Tensor& t, int src) override {
    call.traffic = textbook_traffic(*this).recv(t);
    cudaStream_t s = begin(t, "recv");
    nccl(ncclRecv(t.raw_data(), t.numel(), type_of(t.dtype()), src, comm_, s), "ncclRecv", "recv");
    finish("recv");
  }
  void abort(const std::string& why) override {
    std::fprintf(stderr, "dplab nccl engine: rank %d: %s; aborting the communicator\n", rank_,
                 why.c_str());
    abort_comm();
  }

 private:
  // CPU tensors are refused, naming the engines that take them.
  void check_device(const Tensor& t, const char* collective) {
    DPLAB_CHECK(t.device().is_cuda(),
                "{} on the nccl engine needs CUDA tensors, got a tensor "
                "on {} (use the mpi or ring engine for CPU tensors)",
                collective, t.device().str());
    DPLAB_CHECK(t.device().index == device_,
                "{} on the nccl engine: this rank's communicator "
                "is on cuda:{}, the tensor is on {}",
                collective, device_, t.device().str());
  }
  // Checks t, then orders the comm stream after everything queued so far on the compute
  // stream (the producer of the inputs) and returns the comm stream.
  cudaStream_t begin(const Tensor& t, const char* collective) {
    check_device(t, collective);
    DPLAB_CHECK(comm_ != nullptr,
                "rank {}: {} on the nccl engine: the communicator was "
                "aborted by an earlier failure; make a new process group",
                rank_, collective);
    cuda::bind(device_);
    CUDA_CHECK(cudaEventRecord(inputs_ready_, dev_->stream));
    CUDA_CHECK(cudaStreamWaitEvent(dev_->comm_stream, inputs_ready_, 0));
    return dev_->comm_stream;
  }
  // Orders the compute stream after the collective, then waits for it (or fails, or times
  // out) without blocking on the compute stream.
  void finish(const char* collective) {
    CUDA_CHECK(cudaEventRecord(done_, dev_->comm_stream));
    CUDA_CHECK(cudaStreamWaitEvent(dev_->stream, done_, 0));
    nccl_wait_or_abort(
        [&](std::string& why) {
      const cudaError_t e = cudaEventQuery(done_);
      if (e == cudaSuccess) return NcclPoll::Done;
      if (e != cudaErrorNotReady) {
        cudaGetLastError();
        why = fmt::format("CUDA error {} ({})", cudaGetErrorName(e), cudaGetErrorString(e));
        return NcclPoll::Failed;
      }
      // no async error only means "not failed yet": the event decides when it is done
      return async_state(why) == NcclPoll::Failed ? NcclPoll::Failed : NcclPoll::Pending;
        },
        [&] { abort_comm(); }, timeout_, rank_, collective);
  }
  // Waits for a call that answered ncclInProgress (non-blocking communicator) to settle.
  void settle(const char* collective) {
    nccl_wait_or_abort([&](std::string& why) { return async_state(why); }, [&] { abort_comm(); },
                       timeout_, rank_, collective);
  }
  NcclPoll async_state(std::string& why) {
    ncclResult_t r = ncclSuccess;
    if (comm_ == nullptr) {
      why = "the communicator was aborted";
      return NcclPoll::Failed;
    }
    if (ncclCommGetAsyncError(comm_, &r) != ncclSuccess ||
        (r != ncclSuccess && r != ncclInProgress)) {
      why = fmt::format("{} ({})", ncclGetErrorString(r), ncclGetLastError(comm_));
      return NcclPoll::Failed;
    }
    return r == ncclInProgress ? NcclPoll::Pending : NcclPoll::Done;
  }
  void abort_comm() {
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  void copy_block(void* dst, const Tensor& all, int i, int64_t bytes, cudaStream_t s) {
    if (bytes == 0) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, static_cast<const char*>(all.raw_data()) + i * bytes, bytes,
                               cudaMemcpyDeviceToDevice, s));
  }
  // A call's own result. ncclInProgress is the non-blocking communicator's "being queued":
  // the work reaches the stream only once the state turns to success, so wait for that
  // before recording an event behind it. Anything else aborts (peers blocked with us would
  // otherwise hang) and throws.
  void nccl(ncclResult_t r, const char* call, const char* collective) {
    if (r == ncclSuccess) return;
    if (r == ncclInProgress) return settle(collective);
    const std::string last = ncclGetLastError(comm_);
    abort_comm();
    throw CommError(fmt::format("rank {}: {} failed in {} on the nccl engine: {} ({}); the "
                                "communicator was aborted",
                                rank_, call, collective, ncclGetErrorString(r), last));
  }

  std::string name_ = "nccl";
  int rank_ = 0;
  int size_ = 1;
  Seconds timeout_;
  int device_ = 0;
  cuda::LogicalDevice* dev_ = nullptr;
  cudaEvent_t inputs_ready_ = nullptr;  // compute stream -> comm stream
  cudaEvent_t done_ = nullptr;          // comm stream -> compute stream, and the host's poll
  ncclComm_t comm_ = nullptr;           // null once aborted
};

}  // namespace

bool nccl_built() { return true; }

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9
  return fmt::format("{}.{}.{}", v / 10000, v % 10000 / 100, v % 100);
}

std::unique_ptr<CollectiveEngine> make_nccl_engine(Store& store, int rank, int world_size,
                                                   Seconds timeout) {
  return std::make_unique<NcclEngine>(store, rank, world_size, timeout);
}

}  // namespace dplab::parallel
