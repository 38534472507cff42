// self_tests.cpp: the doctor's quick checks that the pieces work here, each small enough that
// all of them take seconds:
//  - the CPU's fast kernels (direct GEMM, direct convolution, the AVX-512 build) against the
//    reference path (Eigen, im2col) on small, odd shapes;
//  - the CUDA backend against the CPU, forward and backward, on the parity suite's shapes;
//  - a 2-rank all-reduce over every transport there is (shm between processes, cuda_ipc
//    between processes on one GPU) and NCCL on one rank;
//  - one DDP step on 2 ranks against one process on the whole batch;
//  - a checkpoint written and read back.
// The multi-rank ones start ranks with spawn(), which re-runs the program: a rank runs this
// same function, skips the in-process tests, and reaches the same spawn() calls in order.
// Read next: report.cpp.
#include <fmt/core.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>

#include "framework/backend/backend.h"
#include "framework/backend/cpu/cpu_dispatch.h"
#include "framework/error.h"
#include "framework/io/checkpoint.h"
#include "framework/ops/ops.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "models/toy.h"
#include "parallel/comm/init.h"
#include "parallel/comm/process_group.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/engines/collective_engine.h"
#include "parallel/launch/spawn.h"
#include "tools/doctor/doctor.h"

namespace dplab::doctor {
namespace {

using Clock = std::chrono::steady_clock;

float max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to(Device("cpu")).to_vector<float>(),
                           y = b.to(Device("cpu")).to_vector<float>();
  DPLAB_CHECK(x.size() == y.size(), "sizes differ: {} vs {}", x.size(), y.size());
  float m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

// The fix for a failed self-test: `usual` unless the message shows another cause, which is
// then named (a test that ran out of file descriptors says nothing about shared memory).
std::string fix_for(const std::string& what, const std::string& usual) {
  if (what.find(std::strerror(EMFILE)) != std::string::npos ||
      what.find(std::strerror(ENFILE)) != std::string::npos)
    return fmt::format("a process ran out of file descriptors (ulimit -n is {}; a job of 2 ranks "
                       "needs {}): see the file descriptor check above",
                       descriptor_limit(), descriptors_needed(2));
  return usual;
}

// Runs body; a dplab Error or any exception becomes a failed check with its message.
// True when it passed.
bool run_check(Report& r, const std::string& name, const std::string& fix,
               const std::function<std::string()>& body) {
  Check c{.section = "self-test", .name = name};
  const auto t0 = Clock::now();
  try {
    c.detail = body();
  } catch (const std::exception& e) {
    c.verdict = Verdict::Fail;
    c.detail = e.what();
    c.fix = fix_for(c.detail, fix);
  }
  c.detail += fmt::format(" ({:.2f} s)", std::chrono::duration<double>(Clock::now() - t0).count());
  r.add(c);
  return c.verdict == Verdict::Ok;
}

// The forward and the input gradients of f on one device.
struct Result {
  Tensor out, grad_x, grad_w;
};
Result run_op(Device d, const std::function<Tensor(const Tensor&, const Tensor&)>& f,
              const Tensor& x0, const Tensor& w0) {
  Tensor x = x0.to(d).detach().requires_grad_(), w = w0.to(d).detach().requires_grad_();
  Tensor out = f(x, w);
  sum(mul(out, out)).backward();
  return {out, x.grad(), w.grad()};
}

// The op table the CUDA parity check runs: small odd shapes, as tests/ops_cuda does.
struct OpCase {
  const char* name;
  Shape x, w;
  std::function<Tensor(const Tensor&, const Tensor&)> f;
};
std::vector<OpCase> op_cases() {
  return {
      {"matmul", {17, 33}, {33, 9}, [](const Tensor& x, const Tensor& w) { return matmul(x, w); }},
      {"conv2d",
       {2, 3, 9, 9},
       {4, 3, 3, 3},
       [](const Tensor& x, const Tensor& w) { return conv2d(x, w, {}, 1, 1); }},
      {"relu+max_pool2d",
       {2, 3, 8, 8},
       {1},
       [](const Tensor& x, const Tensor& w) { return max_pool2d(relu(mul(x, w)), 2); }},
      {"softmax", {5, 7}, {7}, [](const Tensor& x, const Tensor& w) { return softmax(mul(x, w)); }},
      {"sum", {6, 11}, {11}, [](const Tensor& x, const Tensor& w) { return sum(mul(x, w), {0}); }},
  };
}

std::string compare_devices(Device a, Device b, float tol) {
  std::string worst;
  float worst_diff = 0;
  Generator gen(7);
  for (const OpCase& c : op_cases()) {
    const Tensor x = randn(c.x, {}, &gen), w = randn(c.w, {}, &gen);
    const Result ra = run_op(a, c.f, x, w), rb = run_op(b, c.f, x, w);
    for (const auto& [what, p, q] :
         {std::tuple{"forward", ra.out, rb.out}, std::tuple{"dx", ra.grad_x, rb.grad_x},
          std::tuple{"dw", ra.grad_w, rb.grad_w}}) {
      const float d = max_abs_diff(p, q);
      DPLAB_CHECK(d <= tol, "{} {}: {} and {} differ by {:.3g} (tolerance {:.0e})", c.name, what,
                  a.str(), b.str(), d, tol);
      if (d >= worst_diff) {
        worst_diff = d;
        worst = fmt::format("{} {}", c.name, what);
      }
    }
  }
  return fmt::format("{} ops forward and backward agree, largest difference {:.2g} ({})",
                     op_cases().size(), worst_diff, worst);
}

// The CPU's fast kernels against its reference ones, process-wide settings restored after.
std::string cpu_fast_vs_reference() {
  Generator gen(3);
  const Tensor a = randn({37, 53}, {}, &gen), b = randn({53, 29}, {}, &gen);
  const Tensor x = randn({2, 3, 11, 11}, {}, &gen), w = randn({5, 3, 3, 3}, {}, &gen);
  std::string done;
  const GemmAlgorithm gemm0 = gemm_algorithm();
  const ConvAlgorithm conv0 = conv_algorithm();
  const GemmIsa isa0 = gemm_isa();
  set_gemm_algorithm(GemmAlgorithm::Eigen);
  const Tensor ref_mm = matmul(a, b);
  set_conv_algorithm(ConvAlgorithm::Im2col);
  const Tensor ref_conv = conv2d(x, w, {}, 1, 1);
  float worst = 0;
  for (GemmIsa isa : {GemmIsa::Baseline, GemmIsa::Avx512}) {
    if (!gemm_isa_available(isa)) continue;
    set_gemm_isa(isa);
    set_gemm_algorithm(GemmAlgorithm::Direct);
    const float mm = max_abs_diff(matmul(a, b), ref_mm);
    set_conv_algorithm(ConvAlgorithm::Direct);
    const float cv = max_abs_diff(conv2d(x, w, {}, 1, 1), ref_conv);
    DPLAB_CHECK(mm < 1e-3f && cv < 1e-3f,
                "{}: the direct GEMM differs from Eigen by {:.3g}, the direct "
                "convolution from im2col by {:.3g}",
                gemm_isa_name(isa), mm, cv);
    worst = std::max({worst, mm, cv});
    done += fmt::format("{}{}", done.empty() ? "" : ", ", gemm_isa_name(isa));
  }
  set_gemm_isa(isa0);
  set_gemm_algorithm(gemm0);
  set_conv_algorithm(conv0);
  return fmt::format(
      "direct GEMM and convolution ({}) match Eigen and im2col, largest difference {:.2g}", done,
      worst);
}

// rank r holds r+1 everywhere: the sum is n(n+1)/2 in every element (1001 of them: uneven).
void all_reduce_rank(int rank, const std::string& engine, Device d) {
  parallel::init_process_group({.engine = engine, .timeout = parallel::Seconds(20.0)});
  Tensor t = full({1001}, rank + 1.0, {.device = d});
  parallel::default_process_group().all_reduce(t);
  const int n = parallel::default_process_group().size();
  const std::vector<float> got = t.to(Device("cpu")).to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i)
    DPLAB_CHECK(got[i] == n * (n + 1) / 2.0f, "rank {}: element {} is {}, expected {}", rank, i,
                got[i], n * (n + 1) / 2.0f);
  parallel::destroy_process_group();
}

// Two SGD steps of the ToyModel: DDP on 2 ranks (4 rows each) against one process on all 8.
std::vector<float> flat_params(nn::Module& m) {
  std::vector<float> out;
  for (const Tensor& p : m.parameters())
    for (float v : p.to_vector<float>()) out.push_back(v);
  return out;
}
void ddp_rank(int rank) {
  auto batch = [](int s) {
    Generator g(100 + s), h(200 + s);
    return std::pair{randn({8, 10}, {}, &g), randn({8, 5}, {}, &h)};
  };
  manual_seed(0);
  auto single = std::make_shared<models::ToyModel>();
  optim::SGD single_opt(single->parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int s = 0; s < 2; ++s) {
    single_opt.zero_grad();
    mse_loss(single->forward(batch(s).first), batch(s).second).backward();
    single_opt.step();
  }
  parallel::init_process_group({.timeout = parallel::Seconds(20.0)});
  manual_seed(0);
  auto model = std::make_shared<models::ToyModel>();
  parallel::DistributedDataParallel ddp(model);
  optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int s = 0; s < 2; ++s) {
    opt.zero_grad();
    auto [x, y] = batch(s);
    mse_loss(ddp.forward(x.narrow(rank * 4, 4)), y.narrow(rank * 4, 4)).backward();
    opt.step();
  }
  const std::vector<float> a = flat_params(*single), b = flat_params(*model);
  float worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  DPLAB_CHECK(worst < 1e-5f,
              "rank {}: after 2 DDP steps a parameter differs from one process by {:.3g}", rank,
              worst);
  parallel::destroy_process_group();
}

std::string checkpoint_round_trip() {
  const auto dir =
      std::filesystem::temp_directory_path() / fmt::format("dplab-doctor-{}", getpid());
  std::filesystem::create_directories(dir);
  struct Cleanup {
    std::filesystem::path dir;
    ~Cleanup() { std::filesystem::remove_all(dir); }
  } cleanup{dir};
  manual_seed(1);
  models::ToyModel saved;
  optim::SGD opt(saved.parameters(), {.lr = 0.1, .momentum = 0.9});
  const std::string path = (dir / "ckpt.safetensors").string();
  save_checkpoint(path, saved, &opt);
  manual_seed(2);
  models::ToyModel loaded;
  load_checkpoint(path, loaded);
  const std::vector<float> a = flat_params(saved), b = flat_params(loaded);
  DPLAB_CHECK(a == b, "the parameters read back differ from those written ({})", path);
  return fmt::format("{} parameters written to {} and read back bit for bit", a.size(),
                     std::filesystem::temp_directory_path().string());
}

}  // namespace

void self_tests(Report& r, bool with_gpu) {
  using parallel::spawn;
  const bool child = parallel::is_spawned_child();
  if (!child) {
    run_check(
        r, "CPU fast kernels against the reference",
        "a wrong kernel for this CPU: run DPLAB_GEMM=eigen DPLAB_CONV=im2col (the reference path) "
        "and report the CPU model (this doctor's output) as a bug",
        cpu_fast_vs_reference);
    run_check(r, "checkpoint written and read back",
              "the temporary folder must be writable (TMPDIR)", checkpoint_round_trip);
  }
  // The tests that start processes (spawn) are not run where the descriptor limit is below
  // what two ranks need: each would fail for that one reason, which the machine section names.
  // A spawned rank inherits the limit, so it skips the same spawn() calls as its parent.
  const bool can_spawn = descriptor_limit() >= descriptors_needed(2);
  auto run_spawned = [&](const std::string& name, const std::string& fix,
                         const std::function<std::string()>& body) {
    if (can_spawn) return run_check(r, name, fix, body);
    if (!child)
      r.add({.section = "self-test",
             .name = name,
             .verdict = Verdict::Skip,
             .detail = fmt::format("not run: a process may open {} files, a job of 2 ranks "
                                   "needs {} (see the file descriptor check above)",
                                   descriptor_limit(), descriptors_needed(2))});
    return false;
  };
  const bool shm_works = run_spawned(
      "shm all_reduce, 2 processes",
      "processes of one job cannot share memory here: see the /proc/<pid>/fd check above", [&] {
        spawn([](int rank) { all_reduce_rank(rank, "ring", Device("cpu")); }, 2);
        return std::string("1001 floats summed over the ring");
      });
  run_spawned(
      "DDP step on 2 processes equals one process on the whole batch",
      shm_works
          ? "DDP does not reproduce single-process training here: report it as a bug with this "
            "output"
          : "DDP's gradients travel over the shm transport, which failed above: fix that first",
      [&] {
    spawn([](int rank) { ddp_rank(rank); }, 2);
    return std::string("ToyModel, 2 SGD momentum steps, parameters within 1e-5");
      });
  if (!with_gpu) {
    if (!child)
      r.add({.section = "self-test",
             .name = "GPU self-tests",
             .verdict = Verdict::Skip,
             .detail = cuda_compiled() ? "no GPU visible" : "built without CUDA"});
    return;
  }
  if (!child)
    run_check(r, "CUDA ops against the CPU",
              "a CUDA kernel disagrees with the CPU: report it with this output",
              [] { return compare_devices(Device("cpu"), Device("cuda:0"), 2e-3f); });
  // cuda_ipc: two processes on logical GPUs cuda:0 and cuda:1 (sharing GPU 0 when it is alone)
  if (!child && cuda_device_count() < 2) setenv("DPLAB_VIRTUAL_GPUS", "2", 1);
  run_spawned(
      "cuda_ipc all_reduce, 2 processes (CUDA IPC between them)",
      "two processes cannot map each other's GPU memory here (containers may forbid it): run "
      "the ranks in one container with the same GPUs visible, or use the nccl engine",
      [&] {
    spawn([](int rank) { all_reduce_rank(rank, "ring", Device(DeviceKind::CUDA, rank)); }, 2);
    return std::string("1001 floats summed GPU to GPU");
      });
  if (parallel::nccl_built())
    run_spawned("NCCL all_reduce, 1 process",
                "NCCL cannot run here: check the driver and NCCL's version",
                [&] {
      spawn([](int rank) { all_reduce_rank(rank, "nccl", Device(DeviceKind::CUDA, rank)); }, 1);
      return std::string("NCCL ") + parallel::nccl_version() + " ran an all_reduce";
    });
}

}  // namespace dplab::doctor
