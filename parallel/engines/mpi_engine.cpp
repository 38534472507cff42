// mpi_engine.cpp: the mpi engine. Each collective is one MPI call on the group's own
// communicator (MPI_Comm_dup of MPI_COMM_WORLD): MPI_Allreduce, MPI_Bcast, MPI_Reduce,
// MPI_Allgather, MPI_Reduce_scatter_block, MPI_Gather/Scatter, MPI_Barrier, MPI_Send/Recv.
// OpenMPI picks the algorithm (ring or Rabenseifner for large all-reduces, trees for small)
// and the wire (shared memory in a node, TCP / InfiniBand between nodes). Ranks come from
// mpirun; CUDA tensors are staged through host memory; float16 sums use MPI user ops.
// A collective that runs past the group's timeout wakes the watchdog (collective_watchdog.h),
// which names the late rank and aborts the job: MPI itself would wait forever.
// MPI does not say what it sent: each collective reports the textbook traffic of
// algorithms/cost.h (textbook_traffic.h: a ring for all_reduce, as MPI runs large messages).
// Read next: nccl_engine.cpp; tests/parallel/test_mpi_collectives.cpp.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>

#include "framework/backend/backend.h"
#include "framework/error.h"
#include "parallel/algorithms/cost.h"
#include "parallel/engines/collective_engine.h"
#include "parallel/engines/textbook_traffic.h"

namespace dplab::parallel {

namespace {

// ---- MPI once per process ----
struct MpiState {
  std::mutex mu;
  bool ready = false;
  int provided = 0;
  MpiWorld world;
  MPI_Op half_ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // sum, max, min
  MPI_Op bfloat16_ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  std::mutex serial;  // held around every MPI call when MPI gave less than THREAD_MULTIPLE
  Seconds exit_timeout = kDefaultTimeout;  // the last group's timeout; see finalize_at_exit
};
MpiState& state() {
  static MpiState s;
  return s;
}

// MPI_Finalize at exit, unless the program already did. MPI_Finalize waits for every rank,
// and a rank that leaves early (an exception caught in main, then return 1) would wait
// forever for a peer that waits forever in a collective with it. So the ranks first meet
// in a non-blocking barrier, polled up to the group's timeout; a rank that waits longer
// aborts the job, saying why, and mpirun stops every rank. Cost: one barrier at exit.
void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MpiState& s = state();
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(s.exit_timeout);
  for (int done = 0; !done;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) break;
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr,
                   "dplab mpi engine: rank %d is exiting, but the other ranks did not "
                   "reach the end of the program within %.1f s (one failed, or is waiting in a "
                   "collective with this rank): aborting the MPI job\n",
                   s.world.rank, s.exit_timeout.count());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  MPI_Finalize();
}

// float16 reductions: MPI knows no half type, so halves travel as MPI_UINT16_T and these
// user ops add them with the CPU backend's half kernels (the same ones the ring uses).
template <dplab::ReduceKind Op>
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  backend_for(Device(DeviceKind::CPU)).reduce_into(Op, DType::Float16, inout, in, *len);
}
template <dplab::ReduceKind Op>
void bfloat16_op(void* in, void* inout, int* len, MPI_Datatype*) {
  backend_for(Device(DeviceKind::CPU)).reduce_into(Op, DType::BFloat16, inout, in, *len);
}

bool env_says_many_ranks() {
  for (const char* var : {"WORLD_SIZE", "SLURM_NTASKS"})
    if (const char* v = std::getenv(var); v && std::atoi(v) > 1) return true;
  return false;
}
bool started_by_mpi_launcher() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(var)) return true;
  return false;
}

void check_mpi(int err, const char* call, int rank, const char* collective) {
  if (err == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(err, text, &len);
  throw CommError(fmt::format("rank {}: {} failed in {} on the mpi engine: {}", rank, call,
                              collective, std::string(text, len)));
}

int as_count(int64_t n, const char* collective) {
  DPLAB_CHECK(n <= std::numeric_limits<int>::max(),
              "{} on the mpi engine: at most {} elements (MPI counts are int), got {}", collective,
              std::numeric_limits<int>::max(), n);
  return static_cast<int>(n);
}

// CPU tensors are used in place; CUDA tensors go through a host copy, like the ring.
Tensor host_of(const Tensor& t) {
  return t.device().is_cpu() ? t : t.contiguous_copy_on(Device(DeviceKind::CPU));
}
void write_back(Tensor& user, const Tensor& host) {
  if (!user.is_same(host)) user.copy_(host);
}

// Avg = Sum, then scale by 1/N (check_op in process_group.cpp allows it on float32 only).
void scale_for_avg(const Tensor& host, ReduceOp op, int n) {
  if (op != ReduceOp::Avg || host.numel() == 0 || n == 1) return;
  auto* x = static_cast<float*>(host.raw_data());
  backend_for(Device(DeviceKind::CPU)).unary(UnaryOp::MulScalar, x, x, host.numel(), 1.0f / n);
}

class MpiEngine final : public CollectiveEngine {
 public:
  MpiEngine(int rank, int world_size, Seconds timeout, CollectiveWatchdog::Connect watchdog_store) {
    const MpiWorld w = mpi_world();
    state().exit_timeout = timeout;
    DPLAB_CHECK(rank == w.rank && world_size == w.size,
                "the mpi engine takes ranks from mpirun: MPI says this is rank {} of {}, the "
                "caller asked for rank {} of {} (start the program with mpirun -np {})",
                w.rank, w.size, rank, world_size, world_size);
    rank_ = w.rank;
    size_ = w.size;
    auto lock = serialize();
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup", rank_,
              "process group creation");
    // errors come back as codes (turned into CommError) instead of aborting the job
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    // A rank blocked in MPI cannot be interrupted: past the timeout the watchdog names the
    // late rank and aborts the whole job, instead of every rank spinning forever.
    watchdog_ =
        std::make_unique<CollectiveWatchdog>(std::move(watchdog_store), rank_, size_, timeout,
                                             [](const std::string& why) {
      std::fprintf(stderr, "dplab mpi engine watchdog: %s; aborting the MPI job\n", why.c_str());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 3);
        });
  }
  ~MpiEngine() override {
    watchdog_.reset();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      auto lock = serialize();
      MPI_Comm_free(&comm_);
    }
  }

  const std::string& name() const override { return name_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce(CollectiveCall& call, Tensor& t, ReduceOp op,
                  std::optional<Algorithm>) override {  // MPI picks its own
    call.name = fmt::format("all_reduce({}, {})", name_, reduce_op_name(op));
    call.traffic = textbook_traffic(*this).all_reduce(t);
    auto lock = serialize();
    Watched watched(*watchdog_, "all_reduce");
    Tensor h = host_of(t);
    if (h.numel() > 0 && size_ > 1)
      check(MPI_Allreduce(MPI_IN_PLACE, h.raw_data(), as_count(h.numel(), "all_reduce"),
                          type_of(h.dtype()), op_of(op, h.dtype()), comm_),
            "MPI_Allreduce", "all_reduce");
    scale_for_avg(h, op, size_);
    write_back(t, h);
  }

  void broadcast(CollectiveCall& call, Tensor& t, int root) override {
    call.traffic = textbook_traffic(*this).broadcast(t, root);
    auto lock = serialize();
    Watched watched(*watchdog_, "broadcast");
    Tensor h = host_of(t);
    check(MPI_Bcast(h.raw_data(), as_count(h.nbytes(), "broadcast"), MPI_BYTE, root, comm_),
          "MPI_Bcast", "broadcast");
    write_back(t, h);
  }

  void reduce(CollectiveCall& call, Tensor& t, int root, ReduceOp op) override {
    call.traffic = textbook_traffic(*this).reduce(t, root);
    auto lock = serialize();
    Watched watched(*watchdog_, "reduce");
    Tensor h = host_of(t);
    const int count = as_count(h.numel(), "reduce");
    // the root reduces in place; the others' buffers are only read, so they stay unchanged
    void* send = rank_ == root ? MPI_IN_PLACE : h.raw_data();
    check(MPI_Reduce(send, rank_ == root ? h.raw_data() : nullptr, count, type_of(h.dtype()),
                     op_of(op, h.dtype()), root, comm_),
          "MPI_Reduce", "reduce");
    if (rank_ == root) {
      scale_for_avg(h, op, size_);
      write_back(t, h);
    }
  }

  void all_gather(CollectiveCall& call, std::vector<Tensor>& outputs,
                  const Tensor& input) override {
    call.traffic = textbook_traffic(*this).all_gather(input);
    auto lock = serialize();
    Watched watched(*watchdog_, "all_gather");
    Tensor in = host_of(input);
    const int64_t bytes = in.nbytes();
    std::vector<std::byte> all(static_cast<std::size_t>(bytes * size_));
    const int count = as_count(bytes, "all_gather");
    check(MPI_Allgather(in.raw_data(), count, MPI_BYTE, all.data(), count, MPI_BYTE, comm_),
          "MPI_Allgather", "all_gather");
    for (int i = 0; i < size_; ++i) copy_into(outputs[i], all.data() + i * bytes);
  }

  void reduce_scatter(CollectiveCall& call, Tensor& output, const std::vector<Tensor>& inputs,
                      ReduceOp op) override {
    call.traffic = textbook_traffic(*this).reduce_scatter(output);
    auto lock = serialize();
    Watched watched(*watchdog_, "reduce_scatter");
    // MPI wants the N blocks back to back; the inputs are separate tensors, so copy them once
    const int64_t bytes = output.nbytes();
    std::vector<std::byte> all(static_cast<std::size_t>(bytes * size_));
    for (int i = 0; i < size_; ++i)
      if (bytes) std::memcpy(all.data() + i * bytes, host_of(inputs[i]).raw_data(), bytes);
    Tensor h = host_of(output);
    check(MPI_Reduce_scatter_block(all.data(), h.raw_data(),
                                   as_count(output.numel(), "reduce_scatter"), type_of(h.dtype()),
                                   op_of(op, h.dtype()), comm_),
          "MPI_Reduce_scatter_block", "reduce_scatter");
    scale_for_avg(h, op, size_);
    write_back(output, h);
  }

  void gather(CollectiveCall& call, std::vector<Tensor>& outputs, const Tensor& input,
              int root) override {
    call.traffic = textbook_traffic(*this).gather(input, root);
    auto lock = serialize();
    Watched watched(*watchdog_, "gather");
    Tensor in = host_of(input);
    const int64_t bytes = in.nbytes();
    std::vector<std::byte> all(rank_ == root ? static_cast<std::size_t>(bytes * size_) : 0);
    const int count = as_count(bytes, "gather");
    check(MPI_Gather(in.raw_data(), count, MPI_BYTE, all.data(), count, MPI_BYTE, root, comm_),
          "MPI_Gather", "gather");
    if (rank_ == root)
      for (int i = 0; i < size_; ++i) copy_into(outputs[i], all.data() + i * bytes);
  }

  void scatter(CollectiveCall& call, Tensor& output, const std::vector<Tensor>& inputs,
               int root) override {
    call.traffic = textbook_traffic(*this).scatter(output, root);
    auto lock = serialize();
    Watched watched(*watchdog_, "scatter");
    const int64_t bytes = output.nbytes();
    std::vector<std::byte> all(rank_ == root ? static_cast<std::size_t>(bytes * size_) : 0);
    if (rank_ == root)
      for (int i = 0; i < size_; ++i)
        if (bytes) std::memcpy(all.data() + i * bytes, host_of(inputs[i]).raw_data(), bytes);
    Tensor h = host_of(output);
    const int count = as_count(bytes, "scatter");
    check(MPI_Scatter(all.data(), count, MPI_BYTE, h.raw_data(), count, MPI_BYTE, root, comm_),
          "MPI_Scatter", "scatter");
    write_back(output, h);
  }

  void barrier(CollectiveCall&) override {
    auto lock = serialize();
    Watched watched(*watchdog_, "barrier");
    check(MPI_Barrier(comm_), "MPI_Barrier", "barrier");
  }

  void send(CollectiveCall& call, const Tensor& t, int dst) override {
    call.traffic = textbook_traffic(*this).send(t);
    auto lock = serialize();
    Watched watched(*watchdog_, "send");
    Tensor h = host_of(t);
    check(MPI_Send(h.raw_data(), as_count(h.nbytes(), "send"), MPI_BYTE, dst, kTag, comm_),
          "MPI_Send", "send");
  }

  void recv(CollectiveCall& call, Tensor& t, int src) override {
    call.traffic = textbook_traffic(*this).recv(t);
    auto lock = serialize();
    Watched watched(*watchdog_, "recv");
    Tensor h = host_of(t);
    MPI_Status status;
    check(MPI_Recv(h.raw_data(), as_count(h.nbytes(), "recv"), MPI_BYTE, src, kTag, comm_, &status),
          "MPI_Recv", "recv");  // a longer message fails here with MPI_ERR_TRUNCATE
    int got = 0;
    MPI_Get_count(&status, MPI_BYTE, &got);
    if (got != h.nbytes())
      throw CommError(fmt::format("rank {}: recv from rank {} got {} bytes, expected {}: do "
                                  "sender and receiver pass tensors of one size and dtype?",
                                  rank_, src, got, h.nbytes()));
    write_back(t, h);
  }

  // The parameter server's halves: ps.cpp's schedule (step t: to r+t, from r-t, where the roles
  // say a message goes), each step one MPI_Isend and one MPI_Irecv in flight together; a
  // server adds what it received after the step. The messages are the shards themselves, so
  // the formula is what the wire carries (plus MPI's headers).
  void ps_push(CollectiveCall& call, Tensor& t, const ServerPlan& plan) override {
    ps_half(call, t, plan, true);
  }
  void ps_pull(CollectiveCall& call, Tensor& t, const ServerPlan& plan) override {
    ps_half(call, t, plan, false);
  }

  void abort(const std::string& why) override {
    std::fprintf(stderr,
                 "dplab mpi engine: rank %d: %s; aborting the MPI job so that no rank "
                 "waits for it forever\n",
                 rank_, why.c_str());
    std::fflush(stderr);
    MPI_Abort(comm_, 1);
  }

 private:
  static constexpr int kTag = 0;    // one communicator per group, so one tag suffices...
  static constexpr int kPsTag = 1;  // ...and one more keeps the parameter server's apart

  void ps_half(CollectiveCall& call, Tensor& t, const ServerPlan& plan, bool push) {
    const char* half = push ? "ps_push" : "ps_pull";
    const int64_t es = element_size(t.dtype());
    call.traffic = push ? ps_push_cost(plan, es, rank_, size_) : ps_pull_cost(plan, es, rank_, size_);
    auto lock = serialize();
    Watched watched(*watchdog_, half);
    Tensor h = host_of(t);
    auto* base = static_cast<std::byte*>(h.raw_data());
    const int r = rank_, n = size_, mine = plan.shard_of(r);
    auto shard = [&](int s) { return base + plan.local_offset(r, s) * es; };
    auto bytes = [&](int s) { return as_count(plan.shard_elems(s) * es, half); };
    std::vector<std::byte> incoming(push && mine >= 0 ? bytes(mine) : 0);
    bool have_first = plan.is_worker(r);  // push: a separate server copies its first arrival
    for (int step = 1; step < n; ++step) {
      const int to = (r + step) % n, from = (r - step + n) % n;
      // push: my copy of `to`'s shard out, `from`'s copy of mine in; pull: the other way
      const int out_shard = push ? (plan.is_worker(r) ? plan.shard_of(to) : -1)
                                 : (plan.is_worker(to) ? mine : -1);
      const int in_shard = push ? (plan.is_worker(from) ? mine : -1)
                                : (plan.is_worker(r) ? plan.shard_of(from) : -1);
      MPI_Request req[2];
      int k = 0;
      if (in_shard >= 0 && bytes(in_shard) > 0)
        check(MPI_Irecv(push ? incoming.data() : shard(in_shard), bytes(in_shard), MPI_BYTE, from,
                        kPsTag, comm_, &req[k++]),
              "MPI_Irecv", half);
      if (out_shard >= 0 && bytes(out_shard) > 0)
        check(MPI_Isend(shard(out_shard), bytes(out_shard), MPI_BYTE, to, kPsTag, comm_, &req[k++]),
              "MPI_Isend", half);
      check(MPI_Waitall(k, req, MPI_STATUSES_IGNORE), "MPI_Waitall", half);
      if (!push || in_shard < 0 || incoming.empty()) continue;
      if (have_first)
        backend_for(Device(DeviceKind::CPU))
            .reduce_into(dplab::ReduceKind::Sum, h.dtype(), shard(mine), incoming.data(),
                         plan.shard_elems(mine));
      else
        std::memcpy(shard(mine), incoming.data(), incoming.size());
      have_first = true;
    }
    write_back(t, h);
  }

  // Brackets one collective for the watchdog.
  struct Watched {
    CollectiveWatchdog& dog;
    Watched(CollectiveWatchdog& d, const char* collective) : dog(d) { dog.begin(collective); }
    ~Watched() { dog.end(); }
  };

  std::unique_lock<std::mutex> serialize() {
    // With MPI_THREAD_MULTIPLE, the async worker and the caller's thread may both be in MPI
    // (on different groups); with less, one MPI call at a time in the whole process.
    MpiState& s = state();
    if (s.provided >= MPI_THREAD_MULTIPLE) return {};
    return std::unique_lock<std::mutex>(s.serial);
  }
  void check(int err, const char* what, const char* collective) {
    check_mpi(err, what, rank_, collective);
  }
  MPI_Datatype type_of(DType t) const {
    switch (t) {
      case DType::Float32: return MPI_FLOAT;
      case DType::Int64: return MPI_INT64_T;
      case DType::Float16: return MPI_UINT16_T;   // with the half ops below
      case DType::BFloat16: return MPI_UINT16_T;  // with the bfloat16 ops below
    }
    return MPI_BYTE;
  }
  MPI_Op op_of(ReduceOp op, DType t) const {
    const int i = op == ReduceOp::Max ? 1 : op == ReduceOp::Min ? 2 : 0;  // Avg = Sum, scaled
    if (t == DType::Float16) return state().half_ops[i];
    if (t == DType::BFloat16) return state().bfloat16_ops[i];
    return i == 1 ? MPI_MAX : i == 2 ? MPI_MIN : MPI_SUM;
  }
  // Copies a received block into a (CPU or CUDA) tensor.
  static void copy_into(Tensor& dst, const std::byte* src) {
    if (dst.numel() == 0) return;
    if (dst.device().is_cpu()) {
      std::memcpy(dst.raw_data(), src, dst.nbytes());
      return;
    }
    Tensor h = Tensor::empty(dst.shape(), {.dtype = dst.dtype()});
    std::memcpy(h.raw_data(), src, h.nbytes());
    dst.copy_(h);
  }

  std::string name_ = "mpi";
  int rank_ = 0;
  int size_ = 1;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::unique_ptr<CollectiveWatchdog> watchdog_;
};

}  // namespace

bool mpi_built() { return true; }

MpiWorld mpi_world() {
  MpiState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.ready) return s.world;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // Open MPI started outside mpirun becomes a "singleton", a world of one: N such
    // processes (dplab-run, spawn) would each think they are rank 0 of 1.
    DPLAB_CHECK(started_by_mpi_launcher() || !env_says_many_ranks(),
                "the mpi engine needs mpirun (or srun --mpi=pmix): this process was started "
                "by another launcher (WORLD_SIZE={}), and MPI cannot join independently started "
                "processes into one world. Run `mpirun -np N PROGRAM`, or use --engine ring "
                "under dplab-run",
                std::getenv("WORLD_SIZE") ? std::getenv("WORLD_SIZE") : "?");
    int err = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &s.provided);
    DPLAB_CHECK(err == MPI_SUCCESS, "MPI_Init_thread failed with error {}", err);
    std::atexit(finalize_at_exit);
  } else {
    MPI_Query_thread(&s.provided);  // the program initialised MPI itself; use what it got
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &s.world.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &s.world.size);
  s.world.thread_multiple = s.provided >= MPI_THREAD_MULTIPLE;
  // ranks on this host: those that can share memory with me
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, s.world.rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &s.world.local_rank);
  MPI_Comm_size(local, &s.world.local_size);
  MPI_Comm_free(&local);
  MPI_Op_create(&half_op<dplab::ReduceKind::Sum>, 1, &s.half_ops[0]);
  MPI_Op_create(&half_op<dplab::ReduceKind::Max>, 1, &s.half_ops[1]);
  MPI_Op_create(&half_op<dplab::ReduceKind::Min>, 1, &s.half_ops[2]);
  MPI_Op_create(&bfloat16_op<dplab::ReduceKind::Sum>, 1, &s.bfloat16_ops[0]);
  MPI_Op_create(&bfloat16_op<dplab::ReduceKind::Max>, 1, &s.bfloat16_ops[1]);
  MPI_Op_create(&bfloat16_op<dplab::ReduceKind::Min>, 1, &s.bfloat16_ops[2]);
  s.ready = true;
  return s.world;
}

std::string mpi_broadcast_string(const std::string& value, int root) {
  const MpiWorld w = mpi_world();
  std::lock_guard<std::mutex> lock(state().serial);
  int len = w.rank == root ? static_cast<int>(value.size()) : 0;
  MPI_Bcast(&len, 1, MPI_INT, root, MPI_COMM_WORLD);
  std::string out = w.rank == root ? value : std::string(static_cast<std::size_t>(len), '\0');
  MPI_Bcast(out.data(), len, MPI_CHAR, root, MPI_COMM_WORLD);
  return out;
}

std::unique_ptr<CollectiveEngine> make_mpi_engine(int rank, int world_size, Seconds timeout,
                                                  CollectiveWatchdog::Connect watchdog_store) {
  return std::make_unique<MpiEngine>(rank, world_size, timeout, std::move(watchdog_store));
}

}  // namespace dplab::parallel
