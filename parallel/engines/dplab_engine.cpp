// dplab_engine.cpp: dplab's own CollectiveEngine, the one to read. Tensors in, algorithms
// out: it picks the transport by the tensors' device (the CPU one for CPU tensors, cuda_ipc
// for CUDA tensors, made at the first CUDA call; CUDA tensors go through host memory only
// when there is no cuda_ipc), turns tensors into Blocks, and runs an algorithm of
// algorithms/ over them: ring.cpp's, star.cpp's, recursive_doubling.cpp's,
// halving_doubling.cpp's, one_shot.cpp's or hierarchical.cpp's (auto: the one cost.h's model
// picks for the tensor's size and the node layout); the sharded parameter server's push and
// pull are ps.cpp's. The algorithms count the bytes they move into the call's traffic, those
// to and from other nodes apart (comm_stats() shows these, measured): the engine hands every
// Exchange the node of each rank. An all-reduce on one rank does nothing at all (not even
// Avg's scale by 1/1).
// A collective that throws marks the transports failed, so peers stop waiting and name
// this rank; so does a group destroyed while an exception unwinds the stack.
// Read next: algorithms/ring.cpp, algorithms/star.cpp; transport/transport.h.
#include "parallel/engines/collective_engine.h"

#include "framework/backend/backend.h"
#include "framework/error.h"
#include "parallel/algorithms/collectives.h"
#include "parallel/algorithms/cost.h"
#include "parallel/transport/transport.h"

namespace dplab::parallel {

namespace {

// The kernel under a collective's reduction: Avg is a Sum, then a scale by 1/N.
dplab::ReduceKind kernel_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Max: return dplab::ReduceKind::Max;
    case ReduceOp::Min: return dplab::ReduceKind::Min;
    default: return dplab::ReduceKind::Sum;
  }
}

Block block_of(const Tensor& t) { return {static_cast<std::byte*>(t.raw_data()), t.numel()}; }

void write_back(Tensor& user, const Tensor& host) {
  if (!user.is_same(host)) user.copy_(host);
}
// The device whose backend copies and adds a collective's buffer: one CPU for all CPU devices
// (cpu:0..N-1 are all host memory), else the tensor's GPU.
Device buffer_device(const Tensor& t) {
  return t.device().is_cpu() ? Device(DeviceKind::CPU) : t.device();
}
// n bytes between two buffers of device d (memmove on the CPU, a D2D copy on the GPU).
void copy_on(Device d, void* dst, const void* src, std::size_t n) {
  if (n) backend_for(d).copy_device(d, dst, d, src, n);
}
void check_buffer_device(const std::vector<Tensor>& buffers, Device d, const char* what,
                         const char* name) {
  for (std::size_t i = 0; i < buffers.size(); ++i)
    DPLAB_CHECK(!buffers[i].defined() || buffer_device(buffers[i]) == d,
                "{}: {}[{}] is on {} but the input is on {}: one collective moves tensors of "
                "one device",
                what, name, i, buffers[i].device(), d);
}
void scale_for_avg(const Tensor& t, ReduceOp op, int n) {
  if (op != ReduceOp::Avg || t.numel() == 0) return;
  auto* x = static_cast<float*>(t.raw_data());
  backend_for(t.device()).unary(UnaryOp::MulScalar, x, x, t.numel(), 1.0f / n);
}

class DplabEngine final : public CollectiveEngine {
 public:
  DplabEngine(std::unique_ptr<Transport> transport, Algorithm algorithm,
              CudaTransportFactory make_cuda, const NodeLinks& links)
      : transport_(std::move(transport)), algorithm_(algorithm), links_(links),
        make_cuda_(std::move(make_cuda)), cuda_in_place_(make_cuda_ != nullptr),
        name_(algorithm_name(algorithm)) {
    DPLAB_CHECK(transport_ != nullptr, "dplab engine: no transport");
    const NodeLayout layout{transport_->size(), links.ranks_per_node};
    check_node_layout(layout, "dplab engine");
    if (layout.nodes() > 1)  // one node: no rank is across, and p2p.cpp need not look
      for (int r = 0; r < layout.world; ++r) node_of_.push_back(layout.node_of(r));
  }

  const std::string& name() const override { return name_; }
  int rank() const override { return transport_->rank(); }
  int size() const override { return transport_->size(); }
  const std::string& transport_name() const override { return transport_->name(); }
  std::string transport_name(Device d) const override {
    if (d.is_cpu()) return transport_->name();
    if (cuda_in_place_) return "cuda_ipc";  // made, or to be made at the first CUDA call
    return transport_->name() + " (staged through host memory)";
  }
  std::string all_reduce_algorithm(int64_t bytes, std::optional<Algorithm> a) const override {
    const Algorithm asked = a.value_or(algorithm_);
    if (asked != Algorithm::Auto) return algorithm_name(asked);
    return "auto:" + algorithm_name(resolve(asked, bytes));
  }

  void all_reduce(CollectiveCall& call, Tensor& t, ReduceOp op,
                  std::optional<Algorithm> algo) override {
    call.name = fmt::format("all_reduce({}, {})", all_reduce_algorithm(t.nbytes(), algo),
                            reduce_op_name(op));
    if (size() == 1) return;  // the sum, max, min or mean of one tensor is that tensor
    const Algorithm a = resolve(algo.value_or(algorithm_), t.nbytes());
    Tensor buf = to_transport(t);
    run(call, buf.dtype(), op, buffer_device(buf), [&](Exchange& ex) {
      switch (a) {
        case Algorithm::Ring: ring_all_reduce(ex, block_of(buf)); break;
        case Algorithm::Star: star_all_reduce(ex, block_of(buf)); break;
        case Algorithm::RecursiveDoubling: recursive_doubling_all_reduce(ex, block_of(buf)); break;
        case Algorithm::HalvingDoubling: halving_doubling_all_reduce(ex, block_of(buf)); break;
        case Algorithm::OneShot: one_shot_all_reduce(ex, block_of(buf)); break;
        case Algorithm::Hierarchical: hierarchical_all_reduce(ex, block_of(buf)); break;
        case Algorithm::Auto: DPLAB_FAIL("all_reduce: auto was not resolved");
      }
    });
    scale_for_avg(buf, op, size());
    write_back(t, buf);
  }

  void broadcast(CollectiveCall& call, Tensor& t, int root) override {
    Tensor buf = to_transport(t);
    run(call, buf.dtype(), ReduceOp::Sum, buffer_device(buf),
        [&](Exchange& ex) { chain_broadcast(ex, block_of(buf), root); });
    write_back(t, buf);
  }

  void reduce(CollectiveCall& call, Tensor& t, int root, ReduceOp op) override {
    Tensor buf = to_transport(t);
    run(call, buf.dtype(), op, buffer_device(buf),
        [&](Exchange& ex) { star_reduce(ex, block_of(buf), root); });
    if (rank() == root) {
      scale_for_avg(buf, op, size());
      write_back(t, buf);
    }
  }

  void all_gather(CollectiveCall& call, std::vector<Tensor>& outputs,
                  const Tensor& input) override {
    const int n = size(), r = rank();
    std::vector<Tensor> bufs(n);
    std::vector<Block> blocks(n);
    for (int i = 0; i < n; ++i) {
      bufs[i] = to_transport(outputs[i]);
      blocks[i] = block_of(bufs[i]);
    }
    Tensor in = to_transport(input);
    const Device d = buffer_device(in);
    check_buffer_device(bufs, d, "all_gather", "outputs");
    copy_on(d, blocks[r].data, in.raw_data(), in.nbytes());
    run(call, input.dtype(), ReduceOp::Sum, d, [&](Exchange& ex) {
      if (input.numel()) ring_all_gather(ex, blocks, -1);  // rank r starts holding block r
    });
    for (int i = 0; i < n; ++i) write_back(outputs[i], bufs[i]);
  }

  void reduce_scatter(CollectiveCall& call, Tensor& output, const std::vector<Tensor>& inputs,
                      ReduceOp op) override {
    // the ring reduces in place, so it runs on a scratch copy (on the output's device) and
    // the inputs stay as they were
    const int n = size(), r = rank();
    const std::size_t bytes = static_cast<std::size_t>(output.nbytes());
    Tensor buf = to_transport(output);
    const Device d = buffer_device(buf);
    std::vector<std::byte> host_scratch(d.is_cpu() ? bytes * n : 0);
    Tensor gpu_scratch =
        d.is_cpu() ? Tensor()
                   : Tensor::empty({output.numel() * n}, {.dtype = output.dtype(), .device = d});
    std::byte* base =
        d.is_cpu() ? host_scratch.data() : static_cast<std::byte*>(gpu_scratch.raw_data());
    std::vector<Block> blocks(n);
    for (int i = 0; i < n; ++i) {
      Tensor in = to_transport(inputs[i]);
      check_buffer_device({in}, d, "reduce_scatter", "inputs");
      blocks[i] = {base + i * bytes, output.numel()};
      copy_on(d, blocks[i].data, in.raw_data(), bytes);
    }
    run(call, output.dtype(), op, d, [&](Exchange& ex) {
      if (bytes) ring_reduce_scatter(ex, blocks, -1);  // rank r ends with block r
    });
    copy_on(d, buf.raw_data(), blocks[r].data, bytes);
    scale_for_avg(buf, op, n);
    write_back(output, buf);
  }

  void gather(CollectiveCall& call, std::vector<Tensor>& outputs, const Tensor& input,
              int root) override {
    const int n = size(), r = rank();
    Tensor in = to_transport(input);
    const Device d = buffer_device(in);
    std::vector<Tensor> bufs(n);
    std::vector<Block> blocks(n);
    if (r == root) {
      for (int i = 0; i < n; ++i) {
        bufs[i] = to_transport(outputs[i]);
        blocks[i] = block_of(bufs[i]);
      }
      check_buffer_device(bufs, d, "gather", "outputs");
      copy_on(d, blocks[root].data, in.raw_data(), in.nbytes());
    } else {
      blocks[r] = block_of(in);
    }
    run(call, input.dtype(), ReduceOp::Sum, d,
        [&](Exchange& ex) { star_gather(ex, blocks, root); });
    if (r == root)
      for (int i = 0; i < n; ++i) write_back(outputs[i], bufs[i]);
  }

  void scatter(CollectiveCall& call, Tensor& output, const std::vector<Tensor>& inputs,
               int root) override {
    const int n = size();
    std::vector<Tensor> bufs(n);
    std::vector<Block> blocks(n);
    if (rank() == root) {
      for (int i = 0; i < n; ++i) {
        bufs[i] = to_transport(inputs[i]);
        blocks[i] = block_of(bufs[i]);
      }
    }
    Tensor out = to_transport(output);
    check_buffer_device(bufs, buffer_device(out), "scatter", "inputs");
    run(call, output.dtype(), ReduceOp::Sum, buffer_device(out),
        [&](Exchange& ex) { star_scatter(ex, blocks, block_of(out), root); });
    write_back(output, out);
  }

  void barrier(CollectiveCall& call) override {
    run(call, DType::Float32, ReduceOp::Sum, Device(DeviceKind::CPU), [&](Exchange& ex) {
      if (size() > 1) star_barrier(ex);
    });
  }

  void send(CollectiveCall& call, const Tensor& t, int dst) override {
    Tensor buf = to_transport(t);
    run(call, t.dtype(), ReduceOp::Sum, buffer_device(buf),
        [&](Exchange& ex) { send_block(ex, dst, block_of(buf)); });
  }

  void recv(CollectiveCall& call, Tensor& t, int src) override {
    Tensor buf = to_transport(t);
    run(call, t.dtype(), ReduceOp::Sum, buffer_device(buf),
        [&](Exchange& ex) { recv_copy(ex, src, block_of(buf)); });
    write_back(t, buf);
  }

  void ps_push(CollectiveCall& call, Tensor& t, const ServerPlan& plan) override {
    Tensor buf = to_transport(t);
    run(call, t.dtype(), ReduceOp::Sum, buffer_device(buf),
        [&](Exchange& ex) { parallel::ps_push(ex, block_of(buf), plan); });
    write_back(t, buf);
  }

  void ps_pull(CollectiveCall& call, Tensor& t, const ServerPlan& plan) override {
    Tensor buf = to_transport(t);
    run(call, t.dtype(), ReduceOp::Sum, buffer_device(buf),
        [&](Exchange& ex) { parallel::ps_pull(ex, block_of(buf), plan); });
    write_back(t, buf);
  }

  void mark_failed(const std::string& why) override {
    each_transport([&](Transport& t) { t.mark_failed(why); });
  }
  void leave() override {
    each_transport([&](Transport& t) { t.mark_left(); });
  }
  void abort(const std::string& why) override {
    const std::string msg = fmt::format("rank {} {}", rank(), why);
    each_transport([&](Transport& t) { t.mark_failed(msg); });
  }

 private:
  // Auto becomes the algorithm the model of cost.h says is fastest for this size; every rank
  // computes the same choice from the same numbers (sizes, N, link), so they agree.
  Algorithm resolve(Algorithm a, int64_t bytes) const {
    return a == Algorithm::Auto ? choose_all_reduce(size(), double(bytes), links_) : a;
  }

  // The tensor a collective works on, in memory its transport reaches. CPU tensors, and CUDA
  // tensors when the group moves them with cuda_ipc, are used in place (every tensor is
  // contiguous: tensor.h); a CUDA tensor without cuda_ipc goes through a host copy, which
  // write_back copies home.
  Tensor to_transport(const Tensor& t) const {
    if (!t.defined() || t.device().is_cpu() || cuda_in_place_) return t;
    return t.contiguous_copy_on(Device(DeviceKind::CPU));
  }

  // The transport for buffers on d; the cuda_ipc one is made here at the first CUDA call.
  Transport& transport_for(Device d) {
    if (d.is_cpu()) return *transport_;
    if (!cuda_transport_) {
      DPLAB_CHECK(make_cuda_ != nullptr,
                  "process group: a {} buffer reached the collectives, "
                  "but this group has no cuda_ipc transport (it should have been staged)",
                  d);
      cuda_transport_ = make_cuda_(d.index);
      cuda_index_ = d.index;
      make_cuda_ = nullptr;  // made once; this lets go of the store the factory held
    }
    DPLAB_CHECK(d.index == cuda_index_,
                "process group: this rank's cuda_ipc transport is on "
                "cuda:{} (its first CUDA collective), got a tensor on {}; use one device per "
                "rank, or a second process group",
                cuda_index_, d);
    return *cuda_transport_;
  }
  template <typename Each>
  void each_transport(Each each) {
    each(*transport_);
    if (cuda_transport_) each(*cuda_transport_);
  }

  // One algorithm on buffers of `device` over its transport, which names the call in its
  // messages; the algorithm counts its bytes into call.traffic.
  template <typename Fn>
  void run(CollectiveCall& call, DType dtype, ReduceOp op, Device device, Fn fn) {
    Transport& tr = transport_for(device);
    tr.set_context(call.name);
    Exchange ex{tr, dtype, kernel_op(op), call.traffic, device, node_of_};
    try {
      fn(ex);
    } catch (...) {
      // a GPU transport must order its streams again even when the collective threw; the
      // first error is the one to report
      try {
        tr.end_collective();
      } catch (const std::exception&) {}
      throw;
    }
    tr.end_collective();  // cuda_ipc: compute waits for the comm stream from here on
  }

  std::unique_ptr<Transport> transport_;       // CPU tensors (and staged CUDA tensors)
  Algorithm algorithm_;                        // all_reduce's pattern unless the call names one
  NodeLinks links_;                            // what Auto weighs (cost.h), and the layout
  std::vector<int> node_of_;                   // node of each rank; empty on one node
  CudaTransportFactory make_cuda_;             // set by make_engine.cpp with CUDA
  bool cuda_in_place_ = false;                 // a factory was given: CUDA tensors stay put
  std::unique_ptr<Transport> cuda_transport_;  // made by make_cuda_ at the first CUDA call
  int cuda_index_ = -1;                        // its logical device
  std::string name_;
};

}  // namespace

std::unique_ptr<CollectiveEngine> make_dplab_engine(std::unique_ptr<Transport> transport,
                                                    Algorithm algorithm,
                                                    CudaTransportFactory make_cuda,
                                                    const NodeLinks& links) {
  return std::make_unique<DplabEngine>(std::move(transport), algorithm, std::move(make_cuda),
                                       links);
}

std::unique_ptr<CollectiveEngine> make_dplab_engine(std::unique_ptr<Transport> transport,
                                                    Algorithm algorithm,
                                                    CudaTransportFactory make_cuda,
                                                    const LinkCost& link, int ranks_per_node) {
  return make_dplab_engine(
      std::move(transport), algorithm, std::move(make_cuda),
      NodeLinks{.ranks_per_node = ranks_per_node, .intra = link, .inter = link});
}

}  // namespace dplab::parallel
