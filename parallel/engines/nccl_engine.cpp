// nccl_engine.cpp: the nccl backend, one GPU per rank, any number of machines. Rank 0
// publishes an ncclUniqueId in the store under the group's prefix; all ranks join with
// ncclCommInitRank (one communicator per group). Collectives run on the tensor's device
// stream and the call waits for it: the ProcessGroup's async worker gives DDP its overlap.
// NCCL has no gather/scatter/barrier: grouped ncclSend/ncclRecv, and a 1-float all-reduce.
// Compiled with the nccl build option; needs a GPU at run time (tests skip without one).
// Read next: mpi_engine.cpp, collective_engine.h.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>

#include "framework/backend/cuda/cuda_backend.h"
#include "framework/backend/cuda/cuda_check.h"
#include "framework/backend/cuda/cuda_devices.h"
#include "framework/error.h"
#include "parallel/engines/collective_engine.h"

namespace dplab::parallel {

namespace {

void check_nccl(ncclResult_t r, const char* call, int rank, const char* collective) {
  if (r == ncclSuccess) return;
  throw CommError(fmt::format("rank {}: {} failed in {} on the nccl backend: {} ({})", rank,
                              call, collective, ncclGetErrorString(r), ncclGetLastError(nullptr)));
}

ncclDataType_t type_of(DType t) {
  switch (t) {
    case DType::Float32: return ncclFloat32;
    case DType::Int64: return ncclInt64;
    case DType::Float16: return ncclFloat16;
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

int local_rank_from_env(int rank) {
  const char* v = std::getenv("LOCAL_RANK");
  return v ? std::atoi(v) : rank;
}

class NcclEngine final : public CollectiveEngine {
 public:
  NcclEngine(Store& store, const std::string& prefix, int rank, int world_size)
      : rank_(rank), size_(world_size) {
    DPLAB_CHECK(cuda_physical_device_count() > 0,
                "the nccl backend needs a GPU and this machine has none (use the mpi or ring "
                "backend on CPUs)");
    // one GPU per rank: the rank's local index picks its logical device cuda:<local rank>
    device_ = local_rank_from_env(rank);
    cuda::LogicalDevice& dev = cuda::bind(device_);
    ncclUniqueId id;
    const std::string key = prefix + "/nccl_unique_id";
    if (rank == 0) {
      check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", rank_, "process group creation");
      store.set(key, std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
    } else {
      const std::string got = store.get(key);
      DPLAB_CHECK(got.size() == sizeof(id), "nccl: the unique id in the store has {} bytes, "
                  "expected {}", got.size(), sizeof(id));
      std::memcpy(&id, got.data(), sizeof(id));
    }
    (void)dev;
    check_nccl(ncclCommInitRank(&comm_, world_size, id, rank), "ncclCommInitRank", rank_,
               "process group creation");
  }
  ~NcclEngine() override {
    if (comm_) ncclCommDestroy(comm_);
  }

  const std::string& name() const override { return name_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce(Tensor& t, ReduceOp op, std::optional<Algorithm>) override {  // NCCL picks its own
    cudaStream_t s = stream_of(t, "all_reduce");
    nccl(ncclAllReduce(t.raw_data(), t.raw_data(), t.numel(), type_of(t.dtype()), op_of(op),
                       comm_, s), "ncclAllReduce", "all_reduce");
    finish(s);
  }
  void broadcast(Tensor& t, int root) override {
    cudaStream_t s = stream_of(t, "broadcast");
    nccl(ncclBroadcast(t.raw_data(), t.raw_data(), t.numel(), type_of(t.dtype()), root, comm_, s),
         "ncclBroadcast", "broadcast");
    finish(s);
  }
  void reduce(Tensor& t, int root, ReduceOp op) override {
    // recvbuff is only written on the root, so the others' tensors stay unchanged
    cudaStream_t s = stream_of(t, "reduce");
    nccl(ncclReduce(t.raw_data(), t.raw_data(), t.numel(), type_of(t.dtype()), op_of(op), root,
                    comm_, s), "ncclReduce", "reduce");
    finish(s);
  }
  void all_gather(std::vector<Tensor>& outputs, const Tensor& input) override {
    cudaStream_t s = stream_of(input, "all_gather");
    for (const Tensor& o : outputs) stream_of(o, "all_gather");
    Tensor all = Tensor::empty({input.numel() * size_}, {.dtype = input.dtype(), .device = input.device()});
    nccl(ncclAllGather(input.raw_data(), all.raw_data(), input.numel(), type_of(input.dtype()),
                       comm_, s), "ncclAllGather", "all_gather");
    for (int i = 0; i < size_; ++i) copy_block(outputs[i].raw_data(), all, i, input.nbytes(), s);
    finish(s);
  }
  void reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) override {
    cudaStream_t s = stream_of(output, "reduce_scatter");
    const int64_t bytes = output.nbytes();
    Tensor all = Tensor::empty({output.numel() * size_}, {.dtype = output.dtype(), .device = output.device()});
    for (int i = 0; i < size_; ++i) {
      stream_of(inputs[i], "reduce_scatter");
      CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(all.raw_data()) + i * bytes,
                                 inputs[i].raw_data(), bytes, cudaMemcpyDeviceToDevice, s));
    }
    nccl(ncclReduceScatter(all.raw_data(), output.raw_data(), output.numel(),
                           type_of(output.dtype()), op_of(op), comm_, s),
         "ncclReduceScatter", "reduce_scatter");
    finish(s);
  }
  void gather(std::vector<Tensor>& outputs, const Tensor& input, int root) override {
    cudaStream_t s = stream_of(input, "gather");
    const std::size_t n = input.numel();
    nccl(ncclGroupStart(), "ncclGroupStart", "gather");
    if (rank_ == root) {
      for (int i = 0; i < size_; ++i) {
        stream_of(outputs[i], "gather");
        if (i == root)
          CUDA_CHECK(cudaMemcpyAsync(outputs[i].raw_data(), input.raw_data(), input.nbytes(),
                                     cudaMemcpyDeviceToDevice, s));
        else
          nccl(ncclRecv(outputs[i].raw_data(), n, type_of(input.dtype()), i, comm_, s), "ncclRecv", "gather");
      }
    } else {
      nccl(ncclSend(input.raw_data(), n, type_of(input.dtype()), root, comm_, s), "ncclSend", "gather");
    }
    nccl(ncclGroupEnd(), "ncclGroupEnd", "gather");
    finish(s);
  }
  void scatter(Tensor& output, const std::vector<Tensor>& inputs, int root) override {
    cudaStream_t s = stream_of(output, "scatter");
    const std::size_t n = output.numel();
    nccl(ncclGroupStart(), "ncclGroupStart", "scatter");
    if (rank_ == root) {
      for (int i = 0; i < size_; ++i) {
        stream_of(inputs[i], "scatter");
        if (i == root)
          CUDA_CHECK(cudaMemcpyAsync(output.raw_data(), inputs[i].raw_data(), output.nbytes(),
                                     cudaMemcpyDeviceToDevice, s));
        else
          nccl(ncclSend(inputs[i].raw_data(), n, type_of(output.dtype()), i, comm_, s), "ncclSend", "scatter");
      }
    } else {
      nccl(ncclRecv(output.raw_data(), n, type_of(output.dtype()), root, comm_, s), "ncclRecv", "scatter");
    }
    nccl(ncclGroupEnd(), "ncclGroupEnd", "scatter");
    finish(s);
  }
  void barrier() override {
    // an all-reduce of one float on this rank's device: returns when every rank has joined
    Tensor one = Tensor::empty({1}, {.device = Device(DeviceKind::CUDA, device_)});
    cudaStream_t s = stream_of(one, "barrier");
    nccl(ncclAllReduce(one.raw_data(), one.raw_data(), 1, ncclFloat32, ncclSum, comm_, s),
         "ncclAllReduce", "barrier");
    finish(s);
  }
  void send(const Tensor& t, int dst) override {
    cudaStream_t s = stream_of(t, "send");
    nccl(ncclSend(t.raw_data(), t.numel(), type_of(t.dtype()), dst, comm_, s), "ncclSend", "send");
    finish(s);
  }
  void recv(Tensor& t, int src) override {
    cudaStream_t s = stream_of(t, "recv");
    nccl(ncclRecv(t.raw_data(), t.numel(), type_of(t.dtype()), src, comm_, s), "ncclRecv", "recv");
    finish(s);
  }
  void abort(const std::string& why) override {
    std::fprintf(stderr, "dplab nccl backend: rank %d: %s; aborting the communicator\n", rank_,
                 why.c_str());
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

 private:
  // The stream of t's logical device; CPU tensors are refused with the backends that take them.
  cudaStream_t stream_of(const Tensor& t, const char* collective) {
    DPLAB_CHECK(t.device().is_cuda(), "{} on the nccl backend needs CUDA tensors, got a tensor "
                "on {} (use the mpi or ring backend for CPU tensors)", collective, t.device().str());
    DPLAB_CHECK(t.device().index == device_, "{} on the nccl backend: this rank's communicator "
                "is on cuda:{}, the tensor is on {}", collective, device_, t.device().str());
    return cuda::bind(device_).stream;
  }
  void copy_block(void* dst, const Tensor& all, int i, int64_t bytes, cudaStream_t s) {
    if (bytes == 0) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, static_cast<const char*>(all.raw_data()) + i * bytes, bytes,
                               cudaMemcpyDeviceToDevice, s));
  }
  void finish(cudaStream_t s) { CUDA_CHECK(cudaStreamSynchronize(s)); }
  void nccl(ncclResult_t r, const char* call, const char* collective) {
    check_nccl(r, call, rank_, collective);
  }

  std::string name_ = "nccl";
  int rank_ = 0;
  int size_ = 1;
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

bool nccl_built() { return true; }

std::unique_ptr<CollectiveEngine> make_nccl_engine(Store& store, const std::string& prefix,
                                                   int rank, int world_size) {
  return std::make_unique<NcclEngine>(store, prefix, rank, world_size);
}

}  // namespace dplab::parallel
