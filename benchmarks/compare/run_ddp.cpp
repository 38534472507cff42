// run_ddp.cpp: the DDP modes, star (a parameter server over processes) and ring, both
// DistributedDataParallel over the shm process group, one process per device; and mpi, DDP
// on the mpi engine (MPI_Allreduce), whose N ranks mpirun starts instead of spawn(); and
// nccl, DDP on the nccl engine (--device cuda, one GPU per rank), started by spawn(); and
// gloo, DDP on the gloo engine (gloo's ring over TCP, here on loopback), started by spawn().
//   parent   run_ddp(): starts `dplab-compare <same options> --worker ring --worker-n N` as
//            one child in its own process group, waits (with a deadline), reads each
//            rank's result file; a non-zero exit or a missing file is an Error naming the run.
//   worker   ddp_worker_main(): spawn() re-executes the program N times; each rank trains
//            its G/N rows of every global batch and writes runs/<algo>_n<N>_rank<r>.txt.
// A failing rank makes spawn() stop the others and exit non-zero: the parent never hangs.
// The comm hook is a timed one (comm_thread below): one thread per rank runs each bucket's
// all_reduce(Avg) in launch order and stamps its start and end, and the Work it returns
// stamps how long backward's end waited for it. That is where the trace's bucket events
// and the table's communication and waiting columns come from.
// zero1 and zero2 are ZeRO (parallel/zero/zero_redundancy_optimizer.h) over the same ring
// group, without DDP: each rank steps 1/N of the parameters; the reduce-scatter and
// all-gather run inside backward (zero2) or the step, so their time is communication the
// step waits for.
// Read next: report.cpp.
#include <fmt/core.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <future>
#include <thread>

#include "benchmarks/compare/compare.h"
#include "benchmarks/compare/netns_links.h"
#include "benchmarks/compare/trace.h"
#include "benchmarks/compare/training.h"
#include "framework/amp/precision.h"
#include "framework/backend/cuda/virtual_gpus.h"
#include "framework/error.h"
#include "framework/ops/ops.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/allocator.h"
#include "parallel/comm/init.h"
#include "parallel/ddp/compression.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/engines/collective_engine.h"
#include "parallel/launch/spawn.h"
#include "parallel/launch/supervisor.h"
#include "parallel/transport/gloo_transport.h"
#include "parallel/zero/zero_redundancy_optimizer.h"

namespace dplab::compare {

namespace {

using parallel::Algorithm;
using parallel::ProcessGroup;
using parallel::WorkPtr;

// Runs bucket all-reduces one at a time, in the order backward launched them (the order
// every rank agrees on), on its own thread, and times them.
class CommThread {
 public:
  CommThread(ProcessGroup& pg, Algorithm algo, TraceRecorder& trace)
      : pg_(pg), algo_(algo), trace_(trace), thread_([this] { loop(); }) {}
  ~CommThread() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  parallel::CommHook hook() {
    return [this](ProcessGroup&, Tensor& bucket) -> WorkPtr {
      auto done = std::make_shared<std::promise<void>>();
      auto work = std::make_shared<TimedWork>(this, done->get_future(), bucket_index_++);
      const double ready = now_us();  // its last gradient is in: dplab-project's readiness profile
      trace_.add(fmt::format("ready bucket {} ({} bytes)", work->index, bucket.nbytes()), pg_.rank(), ready, ready);
      {
        std::lock_guard lock(mu_);
        queue_.push_back({bucket, done, work->index});
      }
      cv_.notify_one();
      return work;
    };
  }
  void start_step() { bucket_index_ = 0; }
  void reset_times() {
    std::lock_guard lock(mu_);
    comm_s_ = wait_s_ = 0;
  }
  double comm_seconds() const {
    std::lock_guard lock(mu_);
    return comm_s_;
  }
  double wait_seconds() const {
    std::lock_guard lock(mu_);
    return wait_s_;
  }

 private:
  struct Task {
    Tensor bucket;
    std::shared_ptr<std::promise<void>> done;
    int index;
  };
  struct TimedWork : parallel::Work {
    TimedWork(CommThread* o, std::future<void> f, int i) : owner(o), done(f.share()), index(i) {}
    void wait() override {
      const double t0 = now_us();
      done.get();  // rethrows the collective's error (a peer died, a timeout)
      const double t1 = now_us();
      owner->trace_.add(fmt::format("wait bucket {}", index), owner->pg_.rank(), t0, t1);
      std::lock_guard lock(owner->mu_);
      owner->wait_s_ += (t1 - t0) * 1e-6;
    }
    bool is_completed() const override {
      return done.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    }
    CommThread* owner;
    std::shared_future<void> done;
    int index;
  };

  void loop() {
    for (;;) {
      Task task;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      const double t0 = now_us();
      try {
        if (is_low_precision(task.bucket.dtype())) {  // --precision fp16 / bf16: as DDP's own hook
          parallel::all_reduce_average_async(pg_, task.bucket, parallel::Compression::none, algo_)
              ->wait();
        } else {
          pg_.all_reduce(task.bucket, parallel::ReduceOp::Avg, algo_);
        }
        const double t1 = now_us();
        trace_.add(fmt::format("allreduce bucket {} ({:.2f} MiB)", task.index,
                               double(task.bucket.nbytes()) / (1 << 20)),
                   pg_.rank(), t0, t1);
        {
          std::lock_guard lock(mu_);
          comm_s_ += (t1 - t0) * 1e-6;
        }
        task.done->set_value();
      } catch (...) {
        task.done->set_exception(std::current_exception());
      }
    }
  }

  ProcessGroup& pg_;
  Algorithm algo_;
  TraceRecorder& trace_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stop_ = false;
  int bucket_index_ = 0;  // touched by the training thread only
  double comm_s_ = 0, wait_s_ = 0;
  std::thread thread_;  // last: started once everything above exists
};

// ZeRO's optimizer for `zero1` / `zero2`: the configured one, sharded.
std::unique_ptr<parallel::ZeroRedundancyOptimizer> make_zero(const Config& cfg, int stage,
                                                             nn::Module& model,
                                                             std::shared_ptr<ProcessGroup> pg) {
  parallel::InnerOptions inner = optim::SGDOptions{.lr = cfg.lr, .momentum = cfg.momentum};
  if (cfg.optimizer == "adam") inner = optim::AdamOptions{.lr = cfg.lr};
  return std::make_unique<parallel::ZeroRedundancyOptimizer>(
      model.parameters(), inner, parallel::ZeroOptions{.stage = stage, .process_group = pg});
}

void ddp_rank(const Config& cfg, const std::string& algo_name, int n, int rank) {
  const Algorithm algo = algo_name == "star" ? Algorithm::Star : Algorithm::Ring;
  const int zero_stage = algo_name == "zero1" ? 1 : algo_name == "zero2" ? 2 : 0;
  const std::string engine = zero_stage ? "ring" : algo_name;
  if (cfg.device == "cuda" && cuda_logical_device_count() < n) set_virtual_gpus(n);
  // --links netns: this rank is node `rank` of the bed, behind a real link (netns_links.h)
  const bool netns = !cfg.netns_bed.empty();
  const std::string label = netns ? algo_name + "_netns" : algo_name;  // its files' name
  if (netns) enter_node(cfg.netns_bed, rank);
  auto pg = parallel::init_process_group(
      {.engine = engine,
       .init_method = netns ? netns_init_method(cfg, label, n) : "env://",
       .link_gbps = netns ? 0.0 : link_gbps(cfg, algo_name, n)});
  const std::unique_ptr<Workload> work = make_workload(cfg);
  const Device dev = device_of(cfg, rank);
  auto model = initial_model(cfg);
  model->to(dev);
  TraceRecorder trace(cfg.trace);
  CommThread comm(*pg, algo, trace);
  // DDP for star / ring / mpi / nccl / gloo; ZeRO alone (no DDP) for zero1 / zero2
  std::shared_ptr<nn::Module> net = model;
  std::unique_ptr<optim::Optimizer> optimizer;
  parallel::ZeroRedundancyOptimizer* zero = nullptr;
  if (zero_stage) {
    auto z = make_zero(cfg, zero_stage, *model, pg);
    zero = z.get();
    optimizer = std::move(z);
  } else {
    net = std::make_shared<parallel::DistributedDataParallel>(
        model, parallel::DDPOptions{.device = dev,
                                    .bucket_cap_mb = cfg.bucket_cap_mb,
                                    .algorithm = algo,
                                    .process_group = pg,
                                    .comm_hook = comm.hook()});
    optimizer = make_optimizer(cfg, net->parameters());
  }
  optim::Optimizer& opt = *optimizer;
  ActivationMeter activations({dev});
  TimedSteps timing(cfg, fmt::format("{} N={}", algo_name, n), rank == 0);
  amp::GradScaler scaler = amp::make_scaler(amp::parse_precision(cfg.precision));  // fp16 only
  RunResult r{.mode = algo_name, .n = n, .steps = cfg.steps, .global_batch = cfg.global_batch};
  LinkBytes link_at_start;  // --links netns: the node's link counters when timing starts
  for (int64_t step = 0; step < cfg.steps; ++step) {
    if (timing.is_first_timed(step)) {
      if (netns) link_at_start = link_bytes_settled(*pg);
      pg->reset_comm_stats();
      comm.reset_times();
      reset_peak_memory_stats(dev);
    }
    comm.start_step();
    const auto t0 = Clock::now();
    opt.zero_grad();
    const Batch b = work->batch(step, rank, n, dev);
    activations.before_forward();
    Tensor loss = work->loss(net->forward(b.x), b.y);
    const float loss_value = loss.item();
    if (timing.is_timed(step)) activations.after_forward();
    const auto t1 = Clock::now();
    scaler.scale(loss)
        .backward();  // buckets all-reduce while it runs; returns when all are averaged
    const auto t2 = Clock::now();
    scaler.step(opt);  // fp16: skipped when a gradient overflowed (every rank alike: averaged)
    scaler.update();
    const auto t3 = Clock::now();
    trace.add("forward", rank, to_us(t0), to_us(t1));
    trace.add("backward", rank, to_us(t1), to_us(t2));
    trace.add("optimizer step", rank, to_us(t2), to_us(t3));
    timing.end_step(step, seconds_between(t0, t3), loss_value);
  }
  r.timed_steps = timing.count();
  r.seconds = timing.finish();
  if (netns)
    write_link_bytes(run_file(cfg, label, n, rank, "link"), link_at_start, link_bytes_settled(*pg));
  // communication: time the buckets' all-reduces ran (overlapped with backward, so it is
  // not a slice of the step); waiting: time backward's end sat waiting for them; compute:
  // the rest of the step.
  const double steps = double(r.timed_steps);
  const parallel::CommStats stats = pg->comm_stats();
  r.comm_s = comm.comm_seconds() / steps;
  r.wait_s = comm.wait_seconds() / steps;
  if (zero_stage)
    r.comm_s = r.wait_s = stats.total.seconds / steps;  // ZeRO's collectives block the step
  r.compute_s = std::max(0.0, r.seconds / steps - r.wait_s);
  const auto ar = stats.per_collective.find("all_reduce");
  r.devices.assign(static_cast<size_t>(n), {});
  DeviceFigures& mine = r.devices[static_cast<size_t>(rank)];
  mine.peak_bytes = memory_stats(dev).peak_bytes;
  mine.bytes_sent = stats.total.bytes_sent;
  mine.bytes_received = stats.total.bytes_received;
  if (ar != stats.per_collective.end()) {
    mine.weight_bytes_sent = ar->second.bytes_sent;
    mine.weight_bytes_received = ar->second.bytes_received;
  }
  for (const char* c : {"reduce_scatter", "all_gather"})  // ZeRO's gradients and weights
    if (auto it = stats.per_collective.find(c); it != stats.per_collective.end()) {
      mine.weight_bytes_sent += it->second.bytes_sent;
      mine.weight_bytes_received += it->second.bytes_received;
    }
  fill_memory(mine, model->parameters(),
              zero ? zero->optimizer_state_bytes() : optimizer_state_bytes(opt),
              zero ? zero->gradient_shard_bytes() : 0);
  mine.activation_bytes = activations.bytes(0);
  const std::vector<float> params = flat_params(*model);
  r.param_count = static_cast<int64_t>(params.size());
  if (rank == 0) {
    const Evaluation ev = work->evaluate(*model, dev);
    r.test_accuracy = ev.accuracy;
    r.test_loss = ev.loss;
    write_params(run_file(cfg, label, n, -1, "params"), params);
  }
  trace.write_fragment(run_file(cfg, label, n, rank, "trace"));
  write_rank_file(run_file(cfg, label, n, rank, "txt"), r, rank);
  parallel::destroy_process_group();
}

}  // namespace

void ddp_worker_main(const Config& cfg, const std::string& algo, int n) {
  DPLAB_CHECK(algo == "ring" || algo == "star" || algo == "mpi" || algo == "nccl" ||
                  algo == "gloo" || algo == "zero1" || algo == "zero2",
              "--worker: expected ring, star, mpi, nccl, gloo, zero1 or zero2, got '{}'", algo);
  if (algo == "mpi") {  // mpirun started this process as one of the n ranks
    const parallel::MpiWorld w = parallel::mpi_world();
    DPLAB_CHECK(w.size == n, "--worker mpi: mpirun started {} ranks, expected {}", w.size, n);
    ddp_rank(cfg, algo, n, w.rank);
    return;
  }
  parallel::spawn([&](int rank) { ddp_rank(cfg, algo, n, rank); }, n);
}

void run_worker_process(const std::string& self_exe, std::vector<std::string> args,
                        const std::string& label, const std::vector<std::string>& launcher) {
  args.insert(args.begin(), self_exe);
  args.insert(args.begin(), launcher.begin(), launcher.end());
  const std::string program = args.front();
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::fflush(stdout);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  DPLAB_CHECK(pid >= 0, "fork failed for the {} run", label);
  if (pid == 0) {
    ::setpgid(0, 0);  // its own group, so a deadline can stop the worker and all its ranks
    // Ctrl-C reaches only dplab-compare (the worker has its own group): when it dies, the
    // worker gets SIGTERM and its supervisor stops the ranks.
    parallel::die_with_parent(parent);
    ::execvp(program.c_str(), argv.data());
    ::_exit(127);
  }
  // A deadline far beyond any sane run: collectives time out on their own long before.
  const auto deadline = Clock::now() + std::chrono::seconds(1800);
  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (Clock::now() > deadline) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      DPLAB_FAIL("{}: the worker processes ran past 30 minutes and were killed", label);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (WIFSIGNALED(status))
    DPLAB_FAIL("{}: the worker was killed by signal {} (its ranks' messages are above)", label,
               WTERMSIG(status));
  if (WEXITSTATUS(status) != 0)
    DPLAB_FAIL("{}: the worker exited with status {}{} (its ranks' messages are above)", label,
               WEXITSTATUS(status),
               WEXITSTATUS(status) == 127 ? " (could not execute " + program + ")" : "");
}

RunResult run_ddp(const Config& cfg, const std::string& algo, int n, const std::string& self_exe,
                  const std::vector<std::string>& worker_args) {
  for (int r = 0; r < n; ++r) std::filesystem::remove(run_file(cfg, algo, n, r, "txt"));
  std::vector<std::string> args = worker_args;
  for (const char* a : {"--worker", algo.c_str(), "--worker-n"}) args.emplace_back(a);
  args.push_back(std::to_string(n));
  std::vector<std::string> launcher;
  if (algo == "nccl") {
    DPLAB_CHECK(parallel::nccl_built(),
                "--modes nccl: dplab-compare was built without NCCL (needs "
                "the CUDA toolkit's NCCL; reconfigure with -Dnccl=enabled)");
    DPLAB_CHECK(cfg.device == "cuda", "--modes nccl needs --device cuda (NCCL reduces GPU tensors, "
                                      "one GPU per rank); on CPUs use ring, star or mpi");
  }
  if (algo == "gloo")
    DPLAB_CHECK(parallel::gloo_built(), "--modes gloo: dplab-compare was built without gloo "
                                        "(install libgloo-dev, then reconfigure with -Dgloo=enabled)");
  if (algo == "mpi") {
    DPLAB_CHECK(parallel::mpi_built(), "--modes mpi: dplab-compare was built without MPI (install "
                                       "libopenmpi-dev and openmpi-bin, then reconfigure)");
    launcher = {"mpirun", "--oversubscribe", "--bind-to", "none", "-np", std::to_string(n)};
    if (::geteuid() == 0) launcher.insert(launcher.begin() + 1, "--allow-run-as-root");
  }
  run_worker_process(self_exe, args, fmt::format("{} N={}", algo, n), launcher);

  RunResult r{.mode = algo, .n = n, .global_batch = cfg.global_batch};
  r.devices.resize(static_cast<size_t>(n));
  for (int rank = 0; rank < n; ++rank) read_rank_file(run_file(cfg, algo, n, rank, "txt"), r, rank);
  return r;
}

}  // namespace dplab::compare
