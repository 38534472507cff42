// process_group.cpp: tensors in, algorithms out. Checks arguments, picks the transport by
// the tensors' device (shm/thread for CPU, cuda_ipc for CUDA, made at the first CUDA call;
// CUDA tensors are staged through host memory only when there is no cuda_ipc), picks ring
// or star, times each call and adds its Traffic to the counters, and runs async calls on
// one worker thread in order.
// A rank whose collective throws marks itself failed in the transport, so its peers stop
// waiting and name it; so does a group destroyed while an exception unwinds the stack.
// On an engine backend (mpi, nccl) each method, after its checks, hands the call to the
// engine through Impl::on_engine: same drain, counters (model bytes) and async queue.
// Read next: ring.cpp, star.cpp; backends/collective_engine.h.
#include "parallel/comm/process_group.h"
#include "parallel/comm/process_group_impl.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "framework/backend/backend.h"
#include "framework/error.h"
#include "parallel/backends/collective_engine.h"
#include "parallel/comm/collectives.h"

namespace dplab::parallel {

std::string reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}
std::string algorithm_name(Algorithm a) { return a == Algorithm::Ring ? "ring" : "star"; }

namespace {

dplab::ReduceOp kernel_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Max: return dplab::ReduceOp::Max;
    case ReduceOp::Min: return dplab::ReduceOp::Min;
    default: return dplab::ReduceOp::Sum;  // Avg = Sum, then scale by 1/N
  }
}

Block block_of(const Tensor& t) { return {static_cast<std::byte*>(t.raw_data()), t.numel()}; }

void write_back(Tensor& user, const Tensor& host) {
  if (!user.is_same(host)) user.copy_(host);
}
// The device a collective's buffers are on after to_host: one CPU for all CPU devices.
Device where(const Tensor& host) {
  return host.device().is_cpu() ? Device(DeviceKind::CPU) : host.device();
}
// n bytes between two buffers of device d (memmove on the CPU, a D2D copy on the GPU).
void copy_on(Device d, void* dst, const void* src, std::size_t n) {
  if (n) backend_for(d).copy_device(d, dst, d, src, n);
}
void check_where(const std::vector<Tensor>& host, Device d, const char* what, const char* name) {
  for (std::size_t i = 0; i < host.size(); ++i)
    DPLAB_CHECK(!host[i].defined() || where(host[i]) == d,
                "{}: {}[{}] is on {} but the input is on {}: one collective moves tensors of "
                "one device", what, name, i, host[i].device(), d);
}

void scale_for_avg(const Tensor& host, ReduceOp op, int n) {
  if (op != ReduceOp::Avg || host.numel() == 0) return;
  auto* x = static_cast<float*>(host.raw_data());
  backend_for(host.device()).unary(UnaryOp::MulScalar, x, x, host.numel(), 1.0f / n);
}

void check_op(ReduceOp op, const Tensor& t, const char* what) {
  DPLAB_CHECK(t.defined(), "{}: the tensor is undefined", what);
  DPLAB_CHECK(op != ReduceOp::Avg || t.dtype() == DType::Float32,
              "{}: avg needs float32, got {} (use sum and divide)", what,
              dtype_name(t.dtype()));
}

void check_list(const std::vector<Tensor>& list, const Tensor& like, int n, const char* what,
                const char* name) {
  DPLAB_CHECK(static_cast<int>(list.size()) == n, "{}: {} must hold {} tensors (one per rank), "
              "got {}", what, name, n, list.size());
  for (std::size_t i = 0; i < list.size(); ++i)
    DPLAB_CHECK(list[i].defined() && list[i].numel() == like.numel() &&
                    list[i].dtype() == like.dtype(),
                "{}: {}[{}] must have {} {} elements like the input, got {}", what, name, i,
                like.numel(), dtype_name(like.dtype()),
                list[i].defined() ? shape_str(list[i].shape()) : "an undefined tensor");
}

}  // namespace


ProcessGroup::ProcessGroup(std::unique_ptr<Transport> transport, const ProcessGroupOptions& opts)
    : impl_(std::make_unique<Impl>()) {
  DPLAB_CHECK(transport != nullptr, "ProcessGroup: no transport");
  DPLAB_CHECK(opts.backend == "ring" || opts.backend == "star",
              "ProcessGroup: backend must be \"ring\" or \"star\", got \"{}\"", opts.backend);
  rank_ = transport->rank();
  size_ = transport->size();
  algorithm_ = opts.backend == "star" ? Algorithm::Star : Algorithm::Ring;
  impl_->transport = std::move(transport);
}

ProcessGroup::ProcessGroup(std::unique_ptr<CollectiveEngine> engine, const ProcessGroupOptions& opts)
    : impl_(std::make_unique<Impl>()) {
  DPLAB_CHECK(engine != nullptr, "ProcessGroup: no engine");
  DPLAB_CHECK(opts.backend == engine->name(), "ProcessGroup: backend \"{}\" given with the {} "
              "engine", opts.backend, engine->name());
  rank_ = engine->rank();
  size_ = engine->size();
  impl_->engine = std::move(engine);
}

ProcessGroup::~ProcessGroup() {
  const bool unwinding = std::uncaught_exceptions() > 0;
  {
    std::lock_guard<std::mutex> lock(impl_->q_mu);
    impl_->stopping = true;
    impl_->q_cv.notify_all();
  }
  if (impl_->worker.joinable()) impl_->worker.join();  // queued async calls finish first
  if (impl_->engine) {
    // engines cannot time out: a peer inside a collective with this rank would hang
    if (unwinding) impl_->engine->abort("left its process group while an exception was propagating");
    return;
  }
  impl_->for_each_transport([&](Transport& t) {
    if (unwinding)
      t.mark_failed(fmt::format(
          "rank {} left its process group while an exception was propagating", rank_));
    else
      t.mark_left();
  });
}

const std::string& ProcessGroup::transport_name() const {
  return impl_->engine ? impl_->engine->name() : impl_->transport->name();
}

std::string ProcessGroup::transport_name(Device d) const {
  if (d.is_cpu()) return impl_->transport->name();
  if (impl_->cuda_in_place) return "cuda_ipc";  // made, or to be made at the first CUDA call
  return impl_->transport->name() + " (staged through host memory)";
}

void ProcessGroup::set_cuda_transport_factory(CudaTransportFactory make) {
  DPLAB_CHECK(!impl_->cuda_transport, "set_cuda_transport_factory: the cuda_ipc transport "
              "already exists (set the factory before the first collective)");
  impl_->cuda_in_place = make != nullptr;
  impl_->make_cuda = std::move(make);
}

void ProcessGroup::all_reduce(Tensor& t, ReduceOp op, std::optional<Algorithm> algo) {
  check_op(op, t, "all_reduce");
  if (impl_->engine)
    return impl_->on_engine("all_reduce", fmt::format("all_reduce({})", reduce_op_name(op)),
                            model_traffic("all_reduce", t.nbytes(), element_size(t.dtype()), rank_, size_),
                            [&] { impl_->engine->all_reduce(t, op); });
  Algorithm a = algo.value_or(algorithm_);
  Tensor host = impl_->to_host(t);
  impl_->run("all_reduce", fmt::format("all_reduce({}, {})", algorithm_name(a), reduce_op_name(op)),
             host.dtype(), kernel_op(op), [&](Ctx& c) {
               if (a == Algorithm::Ring) ring_all_reduce(c, block_of(host));
               else star_all_reduce(c, block_of(host));
             }, where(host));
  scale_for_avg(host, op, size_);
  write_back(t, host);
}

void ProcessGroup::broadcast(Tensor& t, int root) {
  DPLAB_CHECK(t.defined(), "broadcast: the tensor is undefined");
  DPLAB_CHECK(root >= 0 && root < size_, "broadcast: root must be in [0, {}), got {}", size_, root);
  if (impl_->engine)
    return impl_->on_engine("broadcast", fmt::format("broadcast(root {})", root),
                            model_traffic("broadcast", t.nbytes(), 1, rank_, size_, root),
                            [&] { impl_->engine->broadcast(t, root); });
  Tensor host = impl_->to_host(t);
  impl_->run("broadcast", fmt::format("broadcast(root {})", root), host.dtype(),
             dplab::ReduceOp::Sum, [&](Ctx& c) { chain_broadcast(c, block_of(host), root); },
             where(host));
  write_back(t, host);
}

void ProcessGroup::reduce(Tensor& t, int root, ReduceOp op) {
  check_op(op, t, "reduce");
  DPLAB_CHECK(root >= 0 && root < size_, "reduce: root must be in [0, {}), got {}", size_, root);
  if (impl_->engine)
    return impl_->on_engine("reduce", fmt::format("reduce(root {}, {})", root, reduce_op_name(op)),
                            model_traffic("reduce", t.nbytes(), 1, rank_, size_, root),
                            [&] { impl_->engine->reduce(t, root, op); });
  Tensor host = impl_->to_host(t);
  impl_->run("reduce", fmt::format("reduce(root {}, {})", root, reduce_op_name(op)),
             host.dtype(), kernel_op(op), [&](Ctx& c) { star_reduce(c, block_of(host), root); },
             where(host));
  if (rank_ == root) {
    scale_for_avg(host, op, size_);
    write_back(t, host);
  }
}

void ProcessGroup::all_gather(std::vector<Tensor>& outputs, const Tensor& input) {
  DPLAB_CHECK(input.defined(), "all_gather: the input is undefined");
  check_list(outputs, input, size_, "all_gather", "outputs");
  if (impl_->engine)
    return impl_->on_engine("all_gather", "all_gather",
                            model_traffic("all_gather", input.nbytes(), 1, rank_, size_),
                            [&] { impl_->engine->all_gather(outputs, input); });
  std::vector<Tensor> host(size_);
  std::vector<Block> blocks(size_);
  for (int i = 0; i < size_; ++i) {
    host[i] = impl_->to_host(outputs[i]);
    blocks[i] = block_of(host[i]);
  }
  Tensor in = impl_->to_host(input);
  check_where(host, where(in), "all_gather", "outputs");
  copy_on(where(in), blocks[rank_].data, in.raw_data(), in.nbytes());
  impl_->run("all_gather", "all_gather", input.dtype(), dplab::ReduceOp::Sum, [&](Ctx& c) {
    if (input.numel()) ring_all_gather(c, blocks, -1);  // rank r starts holding block r
  }, where(in));
  for (int i = 0; i < size_; ++i) write_back(outputs[i], host[i]);
}

void ProcessGroup::reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs,
                                  ReduceOp op) {
  check_op(op, output, "reduce_scatter");
  check_list(inputs, output, size_, "reduce_scatter", "inputs");
  if (impl_->engine)
    return impl_->on_engine("reduce_scatter", fmt::format("reduce_scatter({})", reduce_op_name(op)),
                            model_traffic("reduce_scatter", output.nbytes(), 1, rank_, size_),
                            [&] { impl_->engine->reduce_scatter(output, inputs, op); });
  // the ring reduces in place, so it runs on a scratch copy (on the output's device) and the
  // inputs stay as they were
  const std::size_t bytes = static_cast<std::size_t>(output.nbytes());
  Tensor host = impl_->to_host(output);
  const Device d = where(host);
  std::vector<std::byte> host_scratch(d.is_cpu() ? bytes * size_ : 0);
  Tensor gpu_scratch = d.is_cpu() ? Tensor() : Tensor::empty({output.numel() * size_},
                                                             {.dtype = output.dtype(), .device = d});
  std::byte* scratch = d.is_cpu() ? host_scratch.data()
                                  : static_cast<std::byte*>(gpu_scratch.raw_data());
  std::vector<Block> blocks(size_);
  for (int i = 0; i < size_; ++i) {
    Tensor h = impl_->to_host(inputs[i]);
    check_where({h}, d, "reduce_scatter", "inputs");
    blocks[i] = {scratch + i * bytes, output.numel()};
    copy_on(d, blocks[i].data, h.raw_data(), bytes);
  }
  impl_->run("reduce_scatter", fmt::format("reduce_scatter({})", reduce_op_name(op)),
             output.dtype(), kernel_op(op), [&](Ctx& c) {
               if (bytes) ring_reduce_scatter(c, blocks, -1);  // rank r ends with block r
             }, d);
  copy_on(d, host.raw_data(), blocks[rank_].data, bytes);
  scale_for_avg(host, op, size_);
  write_back(output, host);
}

void ProcessGroup::gather(std::vector<Tensor>& outputs, const Tensor& input, int root) {
  DPLAB_CHECK(input.defined(), "gather: the input is undefined");
  DPLAB_CHECK(root >= 0 && root < size_, "gather: root must be in [0, {}), got {}", size_, root);
  if (impl_->engine) {
    if (rank_ == root) check_list(outputs, input, size_, "gather", "outputs");
    return impl_->on_engine("gather", fmt::format("gather(root {})", root),
                            model_traffic("gather", input.nbytes(), 1, rank_, size_, root),
                            [&] { impl_->engine->gather(outputs, input, root); });
  }
  Tensor in = impl_->to_host(input);
  std::vector<Tensor> host(size_);
  std::vector<Block> blocks(size_);
  if (rank_ == root) {
    check_list(outputs, input, size_, "gather", "outputs");
    for (int i = 0; i < size_; ++i) {
      host[i] = impl_->to_host(outputs[i]);
      blocks[i] = block_of(host[i]);
    }
    check_where(host, where(in), "gather", "outputs");
    copy_on(where(in), blocks[root].data, in.raw_data(), in.nbytes());
  } else {
    blocks[rank_] = block_of(in);
  }
  impl_->run("gather", fmt::format("gather(root {})", root), input.dtype(),
             dplab::ReduceOp::Sum, [&](Ctx& c) { star_gather(c, blocks, root); }, where(in));
  if (rank_ == root)
    for (int i = 0; i < size_; ++i) write_back(outputs[i], host[i]);
}

void ProcessGroup::scatter(Tensor& output, const std::vector<Tensor>& inputs, int root) {
  DPLAB_CHECK(output.defined(), "scatter: the output is undefined");
  DPLAB_CHECK(root >= 0 && root < size_, "scatter: root must be in [0, {}), got {}", size_, root);
  if (impl_->engine) {
    if (rank_ == root) check_list(inputs, output, size_, "scatter", "inputs");
    return impl_->on_engine("scatter", fmt::format("scatter(root {})", root),
                            model_traffic("scatter", output.nbytes(), 1, rank_, size_, root),
                            [&] { impl_->engine->scatter(output, inputs, root); });
  }
  std::vector<Tensor> host(size_);
  std::vector<Block> blocks(size_);
  if (rank_ == root) {
    check_list(inputs, output, size_, "scatter", "inputs");
    for (int i = 0; i < size_; ++i) {
      host[i] = impl_->to_host(inputs[i]);
      blocks[i] = block_of(host[i]);
    }
  }
  Tensor out = impl_->to_host(output);
  check_where(host, where(out), "scatter", "inputs");
  impl_->run("scatter", fmt::format("scatter(root {})", root), output.dtype(),
             dplab::ReduceOp::Sum, [&](Ctx& c) { star_scatter(c, blocks, block_of(out), root); },
             where(out));
  write_back(output, out);
}

void ProcessGroup::barrier() {
  if (impl_->engine)
    return impl_->on_engine("barrier", "barrier", {}, [&] { impl_->engine->barrier(); });
  impl_->run("barrier", "barrier", DType::Float32, dplab::ReduceOp::Sum, [&](Ctx& c) {
    if (size_ > 1) star_barrier(c);
  });
}

void ProcessGroup::send(const Tensor& t, int dst) {
  DPLAB_CHECK(t.defined(), "send: the tensor is undefined");
  DPLAB_CHECK(dst >= 0 && dst < size_ && dst != rank_,
              "send: dst must be another rank in [0, {}), got {} (I am rank {})", size_, dst, rank_);
  if (impl_->engine)
    return impl_->on_engine("send", fmt::format("send(to {})", dst),
                            model_traffic("send", t.nbytes(), 1, rank_, size_),
                            [&] { impl_->engine->send(t, dst); });
  Tensor host = impl_->to_host(t);
  impl_->run("send", fmt::format("send(to {})", dst), t.dtype(), dplab::ReduceOp::Sum,
             [&](Ctx& c) { send_block(c, dst, block_of(host)); }, where(host));
}

void ProcessGroup::recv(Tensor& t, int src) {
  DPLAB_CHECK(t.defined(), "recv: the tensor is undefined");
  DPLAB_CHECK(src >= 0 && src < size_ && src != rank_,
              "recv: src must be another rank in [0, {}), got {} (I am rank {})", size_, src, rank_);
  if (impl_->engine)
    return impl_->on_engine("recv", fmt::format("recv(from {})", src),
                            model_traffic("recv", t.nbytes(), 1, rank_, size_),
                            [&] { impl_->engine->recv(t, src); });
  Tensor host = impl_->to_host(t);
  impl_->run("recv", fmt::format("recv(from {})", src), t.dtype(), dplab::ReduceOp::Sum,
             [&](Ctx& c) { recv_copy(c, src, block_of(host)); }, where(host));
  write_back(t, host);
}

WorkPtr ProcessGroup::all_reduce_async(Tensor t, ReduceOp op, std::optional<Algorithm> algo) {
  return impl_->enqueue([this, t, op, algo]() mutable { all_reduce(t, op, algo); });
}
WorkPtr ProcessGroup::broadcast_async(Tensor t, int root) {
  return impl_->enqueue([this, t, root]() mutable { broadcast(t, root); });
}
WorkPtr ProcessGroup::all_gather_async(std::vector<Tensor> outputs, Tensor input) {
  return impl_->enqueue([this, outputs, input]() mutable { all_gather(outputs, input); });
}
WorkPtr ProcessGroup::reduce_scatter_async(Tensor output, std::vector<Tensor> inputs,
                                           ReduceOp op) {
  return impl_->enqueue(
      [this, output, inputs, op]() mutable { reduce_scatter(output, inputs, op); });
}
WorkPtr ProcessGroup::barrier_async() {
  return impl_->enqueue([this] { barrier(); });
}

CommStats ProcessGroup::comm_stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mu);
  return impl_->stats;
}
void ProcessGroup::reset_comm_stats() {
  std::lock_guard<std::mutex> lock(impl_->stats_mu);
  impl_->stats = {};
}

}  // namespace dplab::parallel
