// process_group.cpp: checks, the async queue and the counters around one engine call per
// collective. Each collective checks its arguments, then run() lets queued async calls
// finish (so every rank sees one order), refuses if the group failed earlier, calls the
// engine once with the collective's name (for error messages and watchdogs), and records
// the bytes the engine reports (measured by dplab's engine; the textbook formulas of
// algorithms/cost.h from mpi and nccl) and the time. Last, create_process_group: a group's
// number and its view of the store; the engine it runs on is engines/make_engine.cpp's choice.
// Read next: engines/collective_engine.h, engines/dplab_engine.cpp.
#include "parallel/comm/process_group.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "framework/error.h"
#include "parallel/engines/collective_engine.h"
#include "parallel/engines/make_engine.h"

namespace dplab::parallel {

namespace {

void check_op(ReduceOp op, const Tensor& t, const char* what) {
  DPLAB_CHECK(t.defined(), "{}: the tensor is undefined", what);
  DPLAB_CHECK(op != ReduceOp::Avg || t.dtype() == DType::Float32,
              "{}: avg needs float32, got {} (use sum and divide)", what, dtype_name(t.dtype()));
}

void check_root(int root, int size, const char* what) {
  DPLAB_CHECK(root >= 0 && root < size, "{}: root must be in [0, {}), got {}", what, size, root);
}

// send's dst, recv's src: another rank of the group.
void check_peer(int peer, int rank, int size, const char* what, const char* name) {
  DPLAB_CHECK(peer >= 0 && peer < size && peer != rank,
              "{}: {} must be another rank in [0, {}), got {} (I am rank {})", what, name, size,
              peer, rank);
}

void check_list(const std::vector<Tensor>& list, const Tensor& like, int n, const char* what,
                const char* name) {
  DPLAB_CHECK(static_cast<int>(list.size()) == n,
              "{}: {} must hold {} tensors (one per rank), "
              "got {}",
              what, name, n, list.size());
  for (std::size_t i = 0; i < list.size(); ++i)
    DPLAB_CHECK(
        list[i].defined() && list[i].numel() == like.numel() && list[i].dtype() == like.dtype(),
        "{}: {}[{}] must have {} {} elements like the input, got {}", what, name, i, like.numel(),
        dtype_name(like.dtype()),
        list[i].defined() ? shape_str(list[i].shape()) : "an undefined tensor");
}

void check_plan(const Tensor& t, const ServerPlan& plan, int rank, int size, const char* what) {
  DPLAB_CHECK(t.defined(), "{}: the tensor is undefined", what);
  check_server_plan(plan, size);
  DPLAB_CHECK(t.numel() == plan.buffer_elems(rank),
              "{}: rank {} must pass {} elements ({} of {}, {}), got {}", what, rank,
              plan.buffer_elems(rank), plan.is_worker(rank) ? "all" : "its shard", plan.elems,
              describe(plan), t.numel());
}

// The handle of one queued call.
struct WorkState : Work {
  mutable std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  void wait() override {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    if (error) std::rethrow_exception(error);
  }
  bool is_completed() const override {
    std::lock_guard<std::mutex> lock(mu);
    return done;
  }
  void finish(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      error = e;
    }
    cv.notify_all();
  }
};

}  // namespace

struct ProcessGroup::Impl {
  std::string broken;  // set by a failed collective: the links' state is unknown after it
  mutable std::mutex stats_mu;
  CommStats stats;

  // async queue: one worker, call order preserved
  std::mutex q_mu;
  std::condition_variable q_cv;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<WorkState>>> queue;
  bool busy = false, stopping = false;
  std::thread worker;

  void worker_loop() {
    std::unique_lock<std::mutex> lock(q_mu);
    for (;;) {
      q_cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;  // stopping and drained
      auto [fn, work] = std::move(queue.front());
      queue.pop_front();
      busy = true;
      lock.unlock();
      std::exception_ptr err;
      try {
        fn();
      } catch (...) {
        err = std::current_exception();
      }
      work->finish(err);
      lock.lock();
      busy = false;
      q_cv.notify_all();
    }
  }

  WorkPtr enqueue(std::function<void()> fn) {
    auto work = std::make_shared<WorkState>();
    std::lock_guard<std::mutex> lock(q_mu);
    if (!worker.joinable()) worker = std::thread([this] { worker_loop(); });
    queue.emplace_back(std::move(fn), work);
    q_cv.notify_all();
    return work;
  }

  // A blocking call first lets queued async calls finish, so every rank sees one order.
  void drain() {
    std::unique_lock<std::mutex> lock(q_mu);
    if (worker.joinable() && std::this_thread::get_id() == worker.get_id()) return;
    q_cv.wait(lock, [&] { return queue.empty() && !busy; });
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(q_mu);
      stopping = true;
      q_cv.notify_all();
    }
    if (worker.joinable()) worker.join();  // queued async calls finish first
  }

  void record(const char* name, Traffic traffic, double secs) {
    std::lock_guard<std::mutex> lock(stats_mu);
    for (CollectiveStats* s : {&stats.per_collective[name], &stats.total}) {
      s->calls += 1;
      s->bytes_sent += traffic.sent;
      s->bytes_received += traffic.received;
      s->bytes_sent_inter_node += traffic.sent_inter_node;
      s->bytes_received_inter_node += traffic.received_inter_node;
      s->seconds += secs;
    }
  }
};

ProcessGroup::ProcessGroup(std::unique_ptr<CollectiveEngine> engine)
    : impl_(std::make_unique<Impl>()), engine_(std::move(engine)) {
  DPLAB_CHECK(engine_ != nullptr, "ProcessGroup: no engine");
  rank_ = engine_->rank();
  size_ = engine_->size();
}

ProcessGroup::~ProcessGroup() {
  const bool unwinding = std::uncaught_exceptions() > 0;
  impl_->stop();
  if (unwinding) engine_->abort("left its process group while an exception was propagating");
  else engine_->leave();
}

const std::string& ProcessGroup::engine() const { return engine_->name(); }
std::string ProcessGroup::all_reduce_algorithm(int64_t bytes, std::optional<Algorithm> algo) const {
  return engine_->all_reduce_algorithm(bytes, algo);
}
const std::string& ProcessGroup::transport_name() const { return engine_->transport_name(); }
std::string ProcessGroup::transport_name(Device d) const { return engine_->transport_name(d); }

void ProcessGroup::run(const char* collective, std::string name,
                       const std::function<void(CollectiveCall&)>& call_engine) {
  impl_->drain();
  CollectiveCall call{.name = std::move(name)};
  if (!impl_->broken.empty())
    throw CommError(fmt::format("rank {}: {} refused: this process group failed earlier ({}); "
                                "make a new one",
                                rank_, call.name, impl_->broken));
  const auto start = std::chrono::steady_clock::now();
  try {
    call_engine(call);
  } catch (const std::exception& e) {
    impl_->broken = fmt::format("{} on the {} engine: {}", call.name, engine_->name(), e.what());
    engine_->mark_failed(fmt::format("{} on rank {}: {}", call.name, rank_, e.what()));
    throw;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  impl_->record(collective, call.traffic, secs);
}

void ProcessGroup::all_reduce(Tensor& t, ReduceOp op, std::optional<Algorithm> algo) {
  check_op(op, t, "all_reduce");
  // the engine names the algorithm it runs: "all_reduce(ring, sum)"
  run("all_reduce", fmt::format("all_reduce({})", reduce_op_name(op)),
      [&](CollectiveCall& c) { engine_->all_reduce(c, t, op, algo); });
}

void ProcessGroup::broadcast(Tensor& t, int root) {
  DPLAB_CHECK(t.defined(), "broadcast: the tensor is undefined");
  check_root(root, size_, "broadcast");
  run("broadcast", fmt::format("broadcast(root {})", root),
      [&](CollectiveCall& c) { engine_->broadcast(c, t, root); });
}

void ProcessGroup::reduce(Tensor& t, int root, ReduceOp op) {
  check_op(op, t, "reduce");
  check_root(root, size_, "reduce");
  run("reduce", fmt::format("reduce(root {}, {})", root, reduce_op_name(op)),
      [&](CollectiveCall& c) { engine_->reduce(c, t, root, op); });
}

void ProcessGroup::all_gather(std::vector<Tensor>& outputs, const Tensor& input) {
  DPLAB_CHECK(input.defined(), "all_gather: the input is undefined");
  check_list(outputs, input, size_, "all_gather", "outputs");
  run("all_gather", "all_gather",
      [&](CollectiveCall& c) { engine_->all_gather(c, outputs, input); });
}

void ProcessGroup::reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) {
  check_op(op, output, "reduce_scatter");
  check_list(inputs, output, size_, "reduce_scatter", "inputs");
  run("reduce_scatter", fmt::format("reduce_scatter({})", reduce_op_name(op)),
      [&](CollectiveCall& c) { engine_->reduce_scatter(c, output, inputs, op); });
}

void ProcessGroup::gather(std::vector<Tensor>& outputs, const Tensor& input, int root) {
  DPLAB_CHECK(input.defined(), "gather: the input is undefined");
  check_root(root, size_, "gather");
  if (rank_ == root) check_list(outputs, input, size_, "gather", "outputs");  // root's only
  run("gather", fmt::format("gather(root {})", root),
      [&](CollectiveCall& c) { engine_->gather(c, outputs, input, root); });
}

void ProcessGroup::scatter(Tensor& output, const std::vector<Tensor>& inputs, int root) {
  DPLAB_CHECK(output.defined(), "scatter: the output is undefined");
  check_root(root, size_, "scatter");
  if (rank_ == root) check_list(inputs, output, size_, "scatter", "inputs");  // root's only
  run("scatter", fmt::format("scatter(root {})", root),
      [&](CollectiveCall& c) { engine_->scatter(c, output, inputs, root); });
}

void ProcessGroup::barrier() {
  run("barrier", "barrier", [&](CollectiveCall& c) { engine_->barrier(c); });
}

void ProcessGroup::send(const Tensor& t, int dst) {
  DPLAB_CHECK(t.defined(), "send: the tensor is undefined");
  check_peer(dst, rank_, size_, "send", "dst");
  run("send", fmt::format("send(to {})", dst),
      [&](CollectiveCall& c) { engine_->send(c, t, dst); });
}

void ProcessGroup::recv(Tensor& t, int src) {
  DPLAB_CHECK(t.defined(), "recv: the tensor is undefined");
  check_peer(src, rank_, size_, "recv", "src");
  run("recv", fmt::format("recv(from {})", src),
      [&](CollectiveCall& c) { engine_->recv(c, t, src); });
}

void ProcessGroup::ps_push(Tensor& t, const ServerPlan& plan) {
  check_plan(t, plan, rank_, size_, "ps_push");
  run("ps_push", fmt::format("ps_push({} shards)", plan.count()),
      [&](CollectiveCall& c) { engine_->ps_push(c, t, plan); });
}

void ProcessGroup::ps_pull(Tensor& t, const ServerPlan& plan) {
  check_plan(t, plan, rank_, size_, "ps_pull");
  run("ps_pull", fmt::format("ps_pull({} shards)", plan.count()),
      [&](CollectiveCall& c) { engine_->ps_pull(c, t, plan); });
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
WorkPtr ProcessGroup::reduce_scatter_async(Tensor output, std::vector<Tensor> inputs, ReduceOp op) {
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

// A group is numbered, gets its own view of the store, and asks engines/ for its engine: which
// engine and which transport is make_engine's choice (engines/make_engine.cpp).
std::shared_ptr<ProcessGroup> create_process_group(std::shared_ptr<Store> store, int rank,
                                                   int world_size,
                                                   const ProcessGroupOptions& opts) {
  DPLAB_CHECK(store != nullptr, "create_process_group: the store is null");
  DPLAB_CHECK(world_size >= 1, "create_process_group: world_size must be >= 1, got {}", world_size);
  DPLAB_CHECK(rank >= 0 && rank < world_size,
              "create_process_group: rank must be in [0, {}), got {}", world_size, rank);
  // Groups made on one store are numbered in creation order, which every rank shares; the
  // count lives in the store itself (one key per rank), so keys never collide between
  // groups ("dplab/pg0/...", "dplab/pg1/...").
  const int64_t generation = store->add(fmt::format("dplab/groups_made_by/{}", rank), 1) - 1;
  return std::make_shared<ProcessGroup>(
      make_engine(store, fmt::format("dplab/pg{}", generation), rank, world_size, opts));
}

}  // namespace dplab::parallel
