// bench_train_throughput: training samples/s of the MLP and the LeNet-style CNN at batch 64,
// on real Fashion-MNIST batches (the first --limit training images, in order, batch after
// batch, prepared before the clock starts as a loader's prefetched batches would be) with the
// tutorials' recipes: the MLP at SGD lr 0.1 (tutorial 02), the CNN at lr 0.05 (tutorial 03),
// momentum 0.9 for both. --data synthetic trains on 8 random batches instead, cycled (there
// PyTorch's step runs slower than on real data: measure what users run). Each row times whole
// steps (zero_grad, forward, cross_entropy, backward, SGD step) past --min-time, split into
// forward / backward / optimizer, with 1 thread and all threads. The CSV names the CPU and its
// vector extensions. --device cuda adds a row per model on the GPU (synchronised at each
// phase boundary) and prints GPU/CPU ratios; without a GPU it says so and exits 0.
// --gpu-only leaves the CPU rows out (train_throughput_torch_gpu.py's paired rounds).
// train_throughput_torch.py is PyTorch's side (and runs both in paired rounds).
// --gemm-isa baseline runs the AVX2 GEMM and convolution kernels on a CPU with AVX-512
// (cpu_dispatch.h); DPLAB_GEMM=eigen runs every GEMM on Eigen; DPLAB_CONV=im2col runs
// the reference convolution (cpu_dispatch.h).
// Run: bench_train_throughput [--min-time 3] [--threads 1,2] [--data synthetic] [--csv out.csv]
#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "benchmarks/cpu_info.h"
#include "datasets/fashion_mnist.h"
#include "framework/backend/backend.h"
#include "framework/backend/cpu/cpu_dispatch.h"
#include "framework/backend/cpu/cpu_threads.h"
#include "framework/dplab.h"
#include "framework/optim/sgd.h"
#include "models/models.h"

using namespace dplab;
using bench::cpu_info;
using bench::CpuInfo;

namespace {

using Clock = std::chrono::steady_clock;
double secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Row {
  std::string model;
  Device device;
  int threads = 1;
  int64_t batch = 0, steps = 0;
  double seconds = 0, forward_s = 0, backward_s = 0, step_s = 0;
  double samples_per_s() const { return static_cast<double>(steps * batch) / seconds; }
  double ms(double s) const { return 1e3 * s / static_cast<double>(steps); }
};

// The batches a run cycles through, on the run's device before the clock starts.
struct Batches {
  std::vector<Tensor> x, y;
  size_t size() const { return x.size(); }
};

// 8 distinct random batches: enough that no step sees the previous step's exact input, few
// enough (8 x 200 KB) to stay in cache.
Batches synthetic_batches(int64_t batch, Device d) {
  Batches b;
  Generator gen(1234);
  for (int i = 0; i < 8; ++i) {
    b.x.push_back(randn({batch, 1, 28, 28}, {.device = d}, &gen));
    b.y.push_back(randint(0, 10, {batch}, {.dtype = DType::Int64, .device = d}, &gen));
  }
  return b;
}

// The first `limit` Fashion-MNIST training images (normalised as the tutorials do), cut into
// whole batches in order: what tutorial 03 --limit 12800 trains on, without the shuffling.
Batches fashion_mnist_batches(int64_t batch, int64_t limit, Device d) {
  datasets::FashionMNIST train("train", {.limit = limit});
  const int64_t count = train.size() / batch;
  DPLAB_CHECK(count >= 1, "--limit {}: fewer images ({}) than one batch of {}", limit, train.size(),
              batch);
  Batches b;
  for (int64_t i = 0; i < count; ++i) {
    b.x.push_back(train.data().narrow(i * batch, batch).contiguous_copy_on(d));
    b.y.push_back(train.targets().narrow(i * batch, batch).contiguous_copy_on(d));
  }
  return b;
}

// The tutorials' learning rates: 02 trains the MLP at 0.1, 03 the CNN at 0.05.
double recipe_lr(const std::string& model) { return model == "cnn" ? 0.05 : 0.1; }

Row run(const std::string& name, Device d, int threads, int64_t batch, int warmup, double min_time,
        double lr, double momentum, const std::string& data_kind, int64_t limit) {
  set_num_threads(threads);
  manual_seed(0);
  std::shared_ptr<nn::Module> model = models::make_model(name);
  model->to(d);  // before the optimizer takes the parameters (to() rebinds them)
  optim::SGD opt(model->parameters(), {.lr = lr, .momentum = momentum});
  const Batches data = data_kind == "synthetic" ? synthetic_batches(batch, d)
                                                : fashion_mnist_batches(batch, limit, d);
  Row row{.model = name, .device = d, .threads = threads, .batch = batch};
  // CUDA kernels are asynchronous: wait for the GPU before reading the clock.
  auto sync = [d] {
    if (d.is_cuda()) backend_for(d).synchronize(d);
  };

  for (int64_t i = 0;; ++i) {
    const size_t k = static_cast<size_t>(i) % data.size();
    sync();
    const auto t0 = Clock::now();
    opt.zero_grad();
    Tensor loss = cross_entropy(model->forward(data.x[k]), data.y[k]);
    sync();
    const auto t1 = Clock::now();
    loss.backward();
    sync();
    const auto t2 = Clock::now();
    opt.step();
    sync();
    const auto t3 = Clock::now();
    if (i < warmup) continue;  // first steps allocate momentum buffers and warm caches
    row.steps += 1;
    row.forward_s += secs(t0, t1);
    row.backward_s += secs(t1, t2);
    row.step_s += secs(t2, t3);
    row.seconds += secs(t0, t3);
    if (row.seconds >= min_time && row.steps >= 5) break;
  }
  return row;
}

std::vector<int> parse_threads(const std::string& spec, int all) {
  std::vector<int> out;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    std::string item =
        spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item == "all") out.push_back(all);
    else if (!item.empty()) out.push_back(std::stoi(item));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  DPLAB_CHECK(!out.empty(), "--threads: expected a list like \"1,all\" or \"1,2\", got \"{}\"",
              spec);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Training throughput (samples/s) of the MLP and the CNN, dplab"};
  double min_time = 3.0, lr = 0.0, momentum = 0.9;
  int warmup = 3;
  int64_t batch = 64, limit = 12800;
  std::string data_kind = "fashion-mnist";
  std::string threads_spec = "1,all", models_spec = "mlp,cnn", csv, device_spec = "cpu";
  std::string gemm_isa_spec;
  bool gpu_only = false;
  app.add_option("--min-time", min_time, "seconds of timed steps per row");
  app.add_option("--warmup", warmup, "untimed steps first");
  app.add_option("--batch-size", batch)->check(CLI::PositiveNumber);
  app.add_option("--threads", threads_spec, "comma list; 'all' = hardware threads");
  app.add_option("--models", models_spec, "comma list of mlp, cnn");
  app.add_option("--lr", lr, "SGD lr for every model (default: the tutorials', 0.1 MLP, 0.05 CNN)");
  app.add_option("--data", data_kind,
                 "fashion-mnist (the first --limit training images) or synthetic")
      ->check(CLI::IsMember({"fashion-mnist", "synthetic"}));
  app.add_option("--limit", limit, "Fashion-MNIST images to cycle through")
      ->check(CLI::PositiveNumber);
  app.add_option("--momentum", momentum);
  app.add_option("--csv", csv, "also write the rows to this CSV file");
  app.add_option("--device", device_spec,
                 "cpu, or cuda[:k] to add GPU rows and GPU/CPU ratios (CPU rows always run)");
  app.add_flag("--gpu-only", gpu_only, "with --device cuda: no CPU rows");
  app.add_option("--gemm-isa", gemm_isa_spec,
                 "CPU GEMM kernel: baseline or avx512 (default: the best this CPU has)");
  CLI11_PARSE(app, argc, argv);

  try {
    const int all = std::max(1u, std::thread::hardware_concurrency());
    std::vector<std::string> names;
    for (const std::string& m : {std::string("mlp"), std::string("cnn")})
      if (models_spec.find(m) != std::string::npos) names.push_back(m);
    DPLAB_CHECK(!names.empty(), "--models: expected mlp and/or cnn, got \"{}\"", models_spec);

    const Device gpu(device_spec);
    DPLAB_CHECK(!gpu_only || gpu.is_cuda(), "--gpu-only needs --device cuda, got --device {}",
                device_spec);
    if (!gemm_isa_spec.empty()) set_gemm_isa(parse_gemm_isa(gemm_isa_spec));
    const CpuInfo cpu = cpu_info();
    auto lr_of = [&](const std::string& model) { return lr > 0 ? lr : recipe_lr(model); };
    // the CSV's conv column: the convolution, and whether LeNet's conv + ReLU + pool run as one
    // kernel (DPLAB_FUSE)
    const std::string conv =
        fmt::format("{}{}", conv_algorithm_name(conv_algorithm()), fused_conv() ? "+fused" : "");
    fmt::print("dplab training throughput: batch {}, SGD momentum {}, lr {}, data: {}\n"
               "CPU: {} ({})\nkernels: {}\n",
               batch, momentum,
               lr > 0 ? fmt::format("{}", lr) : "0.1 MLP / 0.05 CNN (the tutorials')",
               data_kind == "synthetic" ? std::string("8 synthetic batches")
                                        : fmt::format("Fashion-MNIST, the first {} images", limit),
               cpu.model, cpu.vector_extensions, kernels_summary());
    fmt::print("{:<6} {:<7} {:>7} {:>7} {:>10} {:>9} {:>9} {:>9} {:>12}\n", "model", "device",
               "threads", "steps", "ms/step", "fwd ms", "bwd ms", "step ms", "samples/s");
    std::vector<Row> rows;
    auto run_and_print = [&](const std::string& name, Device d, int t) {
      Row r;
      try {
        r = run(name, d, t, batch, warmup, min_time, lr_of(name), momentum, data_kind, limit);
      } catch (const Error& e) {  // e.g. a build without OpenMP accepts only 1 thread
        fmt::print("{:<6} {:<7} {:>7} skipped: {}\n", name, d.str(), t, e.what());
        return;
      }
      fmt::print("{:<6} {:<7} {:>7} {:>7} {:>10.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>12.1f}\n",
                 r.model, r.device.str(), r.threads, r.steps, r.ms(r.seconds), r.ms(r.forward_s),
                 r.ms(r.backward_s), r.ms(r.step_s), r.samples_per_s());
      std::fflush(stdout);
      rows.push_back(r);
    };
    for (int t : gpu_only ? std::vector<int>{} : parse_threads(threads_spec, all)) {
      for (const std::string& name : names) run_and_print(name, Device("cpu"), t);
    }
    if (gpu.is_cuda()) {
      if (cuda_device_count() == 0) {
        fmt::print("{}: no GPU: skipped ({})\n", gpu.str(),
                   cuda_compiled() ? "no CUDA GPU is visible" : "dplab was built without CUDA");
      } else {
        for (const std::string& name : names) run_and_print(name, gpu, 1);
        // GPU / CPU, per model, against each CPU row.
        for (const Row& g : rows) {
          if (!g.device.is_cuda()) continue;
          for (const Row& c : rows) {
            if (c.device.is_cuda() || c.model != g.model) continue;
            fmt::print("ratio {:<4} {} / cpu ({} threads): {:.1f} / {:.1f} samples/s = {:.2f}x\n",
                       g.model, g.device.str(), c.threads, g.samples_per_s(), c.samples_per_s(),
                       g.samples_per_s() / c.samples_per_s());
          }
        }
      }
    }
    if (!csv.empty()) {
      std::ofstream f(csv);
      DPLAB_CHECK(f.good(), "--csv: cannot write {}", csv);
      f << "framework,model,threads,batch,steps,ms_per_step,forward_ms,backward_ms,step_ms,"
           "samples_per_s,device,gemm_isa,gemm,conv,data,lr,momentum,cpu,vector_extensions\n";
      for (const Row& r : rows)
        f << fmt::format(
            "dplab,{},{},{},{},{:.4f},{:.4f},{:.4f},{:.4f},{:.2f},{},{},{},{},{},{},{},{},{}\n",
            r.model, r.threads, r.batch, r.steps, r.ms(r.seconds), r.ms(r.forward_s),
            r.ms(r.backward_s), r.ms(r.step_s), r.samples_per_s(), r.device.str(),
            gemm_isa_name(gemm_isa()), gemm_kernel_in_use(), conv, data_kind, lr_of(r.model),
            momentum, cpu.model, cpu.vector_extensions);
      fmt::print("wrote {}\n", csv);
    }
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
