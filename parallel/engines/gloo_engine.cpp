// gloo_engine.cpp: the gloo engine, PyTorch's CPU backend. Each collective is one call of
// gloo's own algorithms over its TCP pairs: gloo::allreduce (its ring, or bcube, a hypercube
// exchange in log steps), broadcast, reduce, allgather, gather, scatter, barrier; send and
// recv are gloo messages from unbound buffers. reduce_scatter, which this gloo has only as an
// old-style template, is an all-reduce of the N blocks, of which each rank keeps its own.
// The ranks meet through dplab's store (rendezvous/gloo_store.h), so dplab-run starts a
// multi-node job with no mpirun; the interface is chosen as transport/gloo_transport.h says.
// gloo cannot say what it sent: comm_stats() shows algorithms/cost.h's textbook traffic
// (textbook_traffic.h; bcube and reduce_scatter as said above).
// Timeouts: a collective running past the group's timeout wakes the watchdog
// (collective_watchdog.h), which names the late rank within its grace period; gloo's own
// deadline is set a second past that, and its error becomes a CommError carrying the
// diagnosis. A peer whose process died ends gloo's wait at once (its connection closes).
// Read next: transport/gloo_transport.h; tests/gloo/.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/scatter.h>
#include <gloo/types.h>

#include <cstring>
#include <map>
#include <mutex>

#include "framework/backend/backend.h"
#include "framework/error.h"
#include "parallel/algorithms/cost.h"
#include "parallel/engines/collective_engine.h"
#include "parallel/engines/textbook_traffic.h"
#include "parallel/transport/gloo_transport.h"

namespace dplab::parallel {

bool gloo_built() { return true; }

namespace {

constexpr uint8_t kP2pSlotPrefix = 0x40;  // above gloo's own prefixes (types.h: 0x01..0x08)

Tensor host_of(const Tensor& t) {
  return t.device().is_cpu() ? t : t.contiguous_copy_on(Device(DeviceKind::CPU));
}
void write_back(Tensor& user, const Tensor& host) {
  if (!user.is_same(host)) user.copy_(host);
}
void copy_into(Tensor& dst, const std::byte* src) {
  if (dst.numel() == 0) return;
  Tensor h = host_of(dst);
  std::memcpy(h.raw_data(), src, h.nbytes());
  write_back(dst, h);
}
void scale_for_avg(const Tensor& h, ReduceOp op, int n) {
  if (op != ReduceOp::Avg || h.numel() == 0 || n == 1) return;
  auto* x = static_cast<float*>(h.raw_data());
  backend_for(Device(DeviceKind::CPU)).unary(UnaryOp::MulScalar, x, x, h.numel(), 1.0f / n);
}

// gloo's reduction callback: out = a op b, with dplab's CPU kernels, so every dtype dplab
// has (float32, int64, float16, bfloat16) reduces as on the ring.
gloo::AllreduceOptions::Func reduce_fn(ReduceOp op, DType dtype) {
  const dplab::ReduceKind kind = op == ReduceOp::Max   ? dplab::ReduceKind::Max
                                 : op == ReduceOp::Min ? dplab::ReduceKind::Min
                                                       : dplab::ReduceKind::Sum;
  const std::size_t esize = static_cast<std::size_t>(element_size(dtype));
  return [kind, dtype, esize](void* out, const void* a, const void* b, size_t n) {
    if (out != a) std::memmove(out, a, n * esize);
    backend_for(Device(DeviceKind::CPU)).reduce_into(kind, dtype, out, b, static_cast<int64_t>(n));
  };
}

// gloo sizes buffers by a C++ type; one of each width dplab's dtypes have.
template <class F>
void with_element_type(DType t, F&& f) {
  switch (element_size(t)) {
    case 2: f(uint16_t{}); return;
    case 4: f(float{}); return;
    case 8: f(int64_t{}); return;
  }
  DPLAB_FAIL("gloo engine: no element type of {} bytes", element_size(t));
}

class GlooEngine final : public CollectiveEngine {
 public:
  GlooEngine(std::shared_ptr<Store> store, int rank, int world_size, Seconds timeout,
             bool multi_node, CollectiveWatchdog::Connect watchdog_store) {
    // gloo's own deadline is the backstop: the watchdog, at `timeout`, diagnoses first
    const Seconds backstop = timeout + CollectiveWatchdog::grace(timeout) + Seconds(1);
    gloo_timeout_ = std::chrono::duration_cast<std::chrono::milliseconds>(backstop);
    context_ = make_gloo_context(store, rank, world_size, backstop, multi_node);
    status_ = std::move(store);
    watchdog_ = std::make_unique<CollectiveWatchdog>(
        std::move(watchdog_store), rank, world_size, timeout, [this](const std::string& why) {
          {
            std::lock_guard<std::mutex> lock(mu_);
            hang_ = why;
          }
        });
  }
  ~GlooEngine() override { watchdog_.reset(); }

  const std::string& name() const override { return name_; }
  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  std::string all_reduce_algorithm(int64_t, std::optional<Algorithm> algo) const override {
    return bcube(algo) ? "gloo:bcube" : "gloo:ring";
  }

  void all_reduce(CollectiveCall& call, Tensor& t, ReduceOp op,
                  std::optional<Algorithm> algo) override {
    const bool cube = bcube(algo);
    // bcube exchanges like halving-doubling (for a power-of-two N, exactly): counted as that
    call.name = fmt::format("all_reduce(gloo:{}, {})", cube ? "bcube" : "ring", reduce_op_name(op));
    call.traffic = cube ? halving_doubling_cost(t.nbytes(), element_size(t.dtype()), rank(), size())
                        : textbook_traffic(*this).all_reduce(t);
    Tensor h = host_of(t);
    if (h.numel() > 0 && size() > 1)
      run(call.name, [&] { all_reduce_raw(h.raw_data(), h.numel(), h.dtype(), op, cube); });
    scale_for_avg(h, op, size());
    write_back(t, h);
  }

  void broadcast(CollectiveCall& call, Tensor& t, int root) override {
    call.traffic = textbook_traffic(*this).broadcast(t, root);
    Tensor h = host_of(t);
    if (h.nbytes() > 0)
      run(call.name, [&] {
        gloo::BroadcastOptions o(context_);
        o.setOutput(static_cast<uint8_t*>(h.raw_data()), static_cast<size_t>(h.nbytes()));
        o.setRoot(root);
        o.setTag(next_tag());
        o.setTimeout(gloo_timeout_);
        gloo::broadcast(o);
      });
    write_back(t, h);
  }

  void reduce(CollectiveCall& call, Tensor& t, int root, ReduceOp op) override {
    call.traffic = textbook_traffic(*this).reduce(t, root);
    Tensor h = host_of(t);
    // other ranks' tensors stay unchanged: gloo writes its result into `out` on every rank
    std::vector<std::byte> out(static_cast<std::size_t>(h.nbytes()));
    if (h.numel() > 0)
      run(call.name, [&] {
        with_element_type(h.dtype(), [&](auto e) {
          using T = decltype(e);
          gloo::ReduceOptions o(context_);
          o.setInput(static_cast<T*>(h.raw_data()), static_cast<size_t>(h.numel()));
          o.setOutput(reinterpret_cast<T*>(out.data()), static_cast<size_t>(h.numel()));
          o.setRoot(root);
          o.setReduceFunction(reduce_fn(op, h.dtype()));
          o.setTag(next_tag());
          o.setTimeout(gloo_timeout_);
          gloo::reduce(o);
        });
      });
    if (rank() == root) {
      if (!out.empty()) std::memcpy(h.raw_data(), out.data(), out.size());
      scale_for_avg(h, op, size());
      write_back(t, h);
    }
  }

  void all_gather(CollectiveCall& call, std::vector<Tensor>& outputs,
                  const Tensor& input) override {
    call.traffic = textbook_traffic(*this).all_gather(input);
    Tensor in = host_of(input);
    const int64_t bytes = in.nbytes();
    std::vector<std::byte> all(static_cast<std::size_t>(bytes * size()));
    if (bytes > 0)
      run(call.name, [&] {
        gloo::AllgatherOptions o(context_);
        o.setInput(static_cast<uint8_t*>(in.raw_data()), static_cast<size_t>(bytes));
        o.setOutput(reinterpret_cast<uint8_t*>(all.data()), all.size());
        o.setTag(next_tag());
        o.setTimeout(gloo_timeout_);
        gloo::allgather(o);
      });
    for (int i = 0; i < size(); ++i) copy_into(outputs[i], all.data() + i * bytes);
  }

  // An all-reduce of the N blocks back to back; each rank keeps block `rank`. Twice a
  // reduce-scatter's bytes: the textbook counts below say so.
  void reduce_scatter(CollectiveCall& call, Tensor& output, const std::vector<Tensor>& inputs,
                      ReduceOp op) override {
    const int64_t bytes = output.nbytes();
    call.traffic = ring_all_reduce_cost(bytes * size(), element_size(output.dtype()), rank(), size());
    std::vector<std::byte> all(static_cast<std::size_t>(bytes * size()));
    for (int i = 0; i < size(); ++i)
      if (bytes) std::memcpy(all.data() + i * bytes, host_of(inputs[i]).raw_data(), bytes);
    if (bytes > 0)
      run(call.name, [&] {
        all_reduce_raw(all.data(), output.numel() * size(), output.dtype(), op, false);
      });
    Tensor h = host_of(output);
    if (bytes) std::memcpy(h.raw_data(), all.data() + rank() * bytes, bytes);
    scale_for_avg(h, op, size());
    write_back(output, h);
  }

  void gather(CollectiveCall& call, std::vector<Tensor>& outputs, const Tensor& input,
              int root) override {
    call.traffic = textbook_traffic(*this).gather(input, root);
    Tensor in = host_of(input);
    const int64_t bytes = in.nbytes();
    std::vector<std::byte> all(rank() == root ? static_cast<std::size_t>(bytes * size()) : 0);
    if (bytes > 0)
      run(call.name, [&] {
        gloo::GatherOptions o(context_);
        o.setInput(static_cast<uint8_t*>(in.raw_data()), static_cast<size_t>(bytes));
        if (rank() == root) o.setOutput(reinterpret_cast<uint8_t*>(all.data()), all.size());
        o.setRoot(root);
        o.setTag(next_tag());
        o.setTimeout(gloo_timeout_);
        gloo::gather(o);
      });
    if (rank() == root)
      for (int i = 0; i < size(); ++i) copy_into(outputs[i], all.data() + i * bytes);
  }

  void scatter(CollectiveCall& call, Tensor& output, const std::vector<Tensor>& inputs,
               int root) override {
    call.traffic = textbook_traffic(*this).scatter(output, root);
    const int64_t bytes = output.nbytes();
    std::vector<Tensor> hosts;
    std::vector<uint8_t*> ptrs;
    if (rank() == root)
      for (const Tensor& t : inputs) {
        hosts.push_back(host_of(t));
        ptrs.push_back(static_cast<uint8_t*>(hosts.back().raw_data()));
      }
    Tensor h = host_of(output);
    if (bytes > 0)
      run(call.name, [&] {
        gloo::ScatterOptions o(context_);
        if (rank() == root) o.setInputs(ptrs, static_cast<size_t>(bytes));
        o.setOutput(static_cast<uint8_t*>(h.raw_data()), static_cast<size_t>(bytes));
        o.setRoot(root);
        o.setTag(next_tag());
        o.setTimeout(gloo_timeout_);
        gloo::scatter(o);
      });
    write_back(output, h);
  }

  void barrier(CollectiveCall& call) override {
    run(call.name, [&] {
      gloo::BarrierOptions o(context_);
      o.setTag(next_tag());
      o.setTimeout(gloo_timeout_);
      gloo::barrier(o);
    });
  }

  void send(CollectiveCall& call, const Tensor& t, int dst) override {
    call.traffic = textbook_traffic(*this).send(t);
    Tensor h = host_of(t);
    const uint32_t n = sent_[dst]++;
    run(call.name, [&] {
      // a zero-byte tensor still sends a message: the receiver waits for one
      uint8_t empty = 0;
      void* p = h.nbytes() ? h.raw_data() : &empty;
      auto buf = context_->createUnboundBuffer(p, static_cast<size_t>(h.nbytes()));
      buf->send(dst, gloo::Slot::build(kP2pSlotPrefix, n));
      buf->waitSend(gloo_timeout_);
    });
  }

  void recv(CollectiveCall& call, Tensor& t, int src) override {
    call.traffic = textbook_traffic(*this).recv(t);
    Tensor h = host_of(t);
    const uint32_t n = received_[src]++;
    run(call.name, [&] {
      uint8_t empty = 0;
      void* p = h.nbytes() ? h.raw_data() : &empty;
      auto buf = context_->createUnboundBuffer(p, static_cast<size_t>(h.nbytes()));
      buf->recv(src, gloo::Slot::build(kP2pSlotPrefix, n));
      buf->waitRecv(gloo_timeout_);
    });
    write_back(t, h);
  }

  void mark_failed(const std::string& why) override {
    try {
      status_->set(fmt::format("failed/{}", rank()), why);
    } catch (const std::exception&) {
    }
    close_all();
  }
  void abort(const std::string& why) override { mark_failed(why); }

 private:
  static bool bcube(std::optional<Algorithm> algo) {
    return algo && (*algo == Algorithm::RecursiveDoubling || *algo == Algorithm::HalvingDoubling);
  }
  uint32_t next_tag() { return tag_++; }

  void all_reduce_raw(void* data, int64_t n, DType dtype, ReduceOp op, bool cube) {
    with_element_type(dtype, [&](auto e) {
      using T = decltype(e);
      gloo::AllreduceOptions o(context_);
      o.setOutput(static_cast<T*>(data), static_cast<size_t>(n));
      o.setAlgorithm(cube ? gloo::AllreduceOptions::Algorithm::BCUBE
                          : gloo::AllreduceOptions::Algorithm::RING);
      o.setReduceFunction(reduce_fn(op, dtype));
      o.setTag(next_tag());
      o.setTimeout(gloo_timeout_);
      gloo::allreduce(o);
    });
  }

  // Runs one gloo call bracketed by the watchdog; gloo's errors become CommError with the
  // watchdog's diagnosis, or the reason a failed peer filed, when there is one.
  template <class F>
  void run(const std::string& collective, F&& f) {
    watchdog_->begin(collective);
    try {
      f();
    } catch (const gloo::Exception& e) {
      watchdog_->end();
      std::string why;
      {
        std::lock_guard<std::mutex> lock(mu_);
        why = hang_;
      }
      if (why.empty()) why = failed_peer();
      throw CommError(fmt::format("rank {}: {} on the gloo engine failed: {}{}", rank(),
                                  collective, why.empty() ? "" : why + "; gloo says: ", e.what()));
    }
    watchdog_->end();
  }
  std::string failed_peer() {
    try {
      for (int r = 0; r < size(); ++r)
        if (r != rank() && status_->check({fmt::format("failed/{}", r)}))
          return fmt::format("rank {} failed: {}", r, status_->get(fmt::format("failed/{}", r)));
    } catch (const std::exception&) {
    }
    return "";
  }
  void close_all() {
    for (int r = 0; r < size(); ++r)
      if (r != rank()) try {
          context_->getPair(r)->close();
        } catch (const std::exception&) {
        }
  }

  std::string name_ = "gloo";
  std::chrono::milliseconds gloo_timeout_{0};
  std::shared_ptr<gloo::Context> context_;
  std::shared_ptr<Store> status_;
  std::unique_ptr<CollectiveWatchdog> watchdog_;
  std::mutex mu_;
  std::string hang_;
  uint32_t tag_ = 0;
  std::map<int, uint32_t> sent_, received_;
};

}  // namespace

std::unique_ptr<CollectiveEngine> make_gloo_engine(std::shared_ptr<Store> store, int rank,
                                                   int world_size, Seconds timeout,
                                                   bool multi_node,
                                                   CollectiveWatchdog::Connect watchdog_store) {
  return std::make_unique<GlooEngine>(std::move(store), rank, world_size, timeout, multi_node,
                                      std::move(watchdog_store));
}

}  // namespace dplab::parallel
