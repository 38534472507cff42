// training.cpp: the initial model, timing and files every mode of dplab-compare shares
// (training.h, compare.h); the data, loss and evaluation are workload.cpp's. Rank files are plain "key value..." lines: small, greppable,
// and parsed here with no JSON library (framework/io/json.h has no floats).
// Read next: run_local.cpp.
#include "benchmarks/compare/training.h"

#include "framework/amp/master_weights.h"
#include "framework/amp/precision.h"

#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "framework/error.h"
#include "framework/ops/ops.h"
#include "framework/optim/adam.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/allocator.h"
#include "framework/tensor/random.h"
#include "models/models.h"

namespace dplab::compare {

double link_gbps(const Config& cfg, const std::string& mode, int n) {
  if (n < 2 || (mode != "dp" && mode != "star" && mode != "ring" && mode != "zero1" &&
                mode != "zero2" && !is_ps_label(mode)))
    return 0.0;
  if (cfg.link_gbps >= 0) return cfg.link_gbps;
  return cfg.device == "cpu" ? 10.0 : 0.0;  // logical CPU devices stand for machines on 10 GbE
}

Device device_of(const Config& cfg, int k) {
  if (cfg.device == "cpu") return Device(DeviceKind::CPU, k);
  if (cfg.device == "cuda") return Device(DeviceKind::CUDA, k);
  DPLAB_FAIL("--device: expected cpu or cuda, got '{}'", cfg.device);
}

std::string run_file(const Config& cfg, const std::string& mode, int n, int rank,
                     const std::string& ext) {
  std::string name = fmt::format("{}_n{}", mode, n);
  if (rank >= 0) name += fmt::format("_rank{}", rank);
  return (std::filesystem::path(cfg.out) / "runs" / (name + "." + ext)).string();
}

std::shared_ptr<nn::Module> initial_model(const Config& cfg) {
  manual_seed(cfg.seed);
  std::shared_ptr<nn::Module> model = cfg.model == "gpt"
                                          ? std::make_shared<models::GPT>(gpt_config(cfg))
                                          : models::make_model(cfg.model);
  if (model_dtype(cfg) != DType::Float32) amp::cast_module_(*model, model_dtype(cfg));
  return model;
}

DType model_dtype(const Config& cfg) {
  return amp::compute_dtype(amp::parse_precision(cfg.precision));
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  return v[mid];
}

namespace {
ProgressOptions bar_options(const Config& cfg, const std::string& label, bool show) {
  ProgressOptions opts{.total = cfg.steps, .desc = label, .unit = "steps"};
  if (!show) opts.mode = ProgressMode::Off;
  return opts;
}
}  // namespace

TimedSteps::TimedSteps(const Config& cfg, const std::string& bar_label, bool show_bar)
    : timed_from_(std::min(cfg.warmup, cfg.steps - 1)),
      bar_(bar_options(cfg, bar_label, show_bar)) {}

void TimedSteps::end_step(int64_t step, double seconds, float loss) {
  if (is_timed(step)) step_seconds_.push_back(seconds);
  bar_.update(1, {{"loss", double(loss)}});
}

double TimedSteps::finish() {
  bar_.close();
  return median(step_seconds_) * double(count());
}

std::vector<float> flat_params(const nn::Module& model) {
  std::vector<float> out;
  for (const Tensor& p : model.parameters()) {
    std::vector<float> v = p.to(Device(DeviceKind::CPU, 0)).to(DType::Float32).to_vector<float>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

void write_params(const std::string& path, const std::vector<float>& values) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(values.data()),
          std::streamsize(values.size() * sizeof(float)));
  DPLAB_CHECK(f.good(), "could not write {}", path);
}

std::vector<float> read_params(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  DPLAB_CHECK(f.good(), "missing parameter file {}", path);
  const auto bytes = static_cast<size_t>(f.tellg());
  std::vector<float> v(bytes / sizeof(float));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
  return v;
}

// ---- rank files -------------------------------------------------------------------------

void write_rank_file(const std::string& path, const RunResult& r, int rank) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  const DeviceFigures& d = r.devices.at(static_cast<size_t>(rank));
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << fmt::format("steps {}\ntimed_steps {}\nseconds {:.9g}\n", r.steps, r.timed_steps,
                     r.seconds);
    f << fmt::format("compute_s {:.9g}\ncomm_s {:.9g}\nwait_s {:.9g}\n", r.compute_s, r.comm_s,
                     r.wait_s);
    f << fmt::format("test_accuracy {:.9g}\ntest_loss {:.9g}\nparam_count {}\n", r.test_accuracy,
                     r.test_loss, r.param_count);
    f << fmt::format("device {} {} {} {} {}\n", d.peak_bytes, d.bytes_sent, d.bytes_received,
                     d.weight_bytes_sent, d.weight_bytes_received);
    f << fmt::format("memory {} {} {} {}\n", d.param_bytes, d.grad_bytes, d.optim_state_bytes,
                     d.activation_bytes);
    DPLAB_CHECK(f.good(), "could not write {}", tmp);
  }
  std::filesystem::rename(tmp, path);  // a reader never sees half a file
}

void read_rank_file(const std::string& path, RunResult& r, int rank) {
  std::ifstream f(path);
  DPLAB_CHECK(f.good(), "rank {} left no result file {} (did it fail before the end?)", rank, path);
  std::map<std::string, std::string> kv;
  for (std::string line; std::getline(f, line);) {
    const auto sp = line.find(' ');
    if (sp != std::string::npos) kv[line.substr(0, sp)] = line.substr(sp + 1);
  }
  auto get = [&](const std::string& k) -> const std::string& {
    auto it = kv.find(k);
    DPLAB_CHECK(it != kv.end(), "{}: expected a line '{} ...', found none", path, k);
    return it->second;
  };
  if (static_cast<size_t>(rank) >= r.devices.size())
    r.devices.resize(static_cast<size_t>(rank) + 1);
  std::istringstream dev(get("device"));
  DeviceFigures& d = r.devices[static_cast<size_t>(rank)];
  dev >> d.peak_bytes >> d.bytes_sent >> d.bytes_received >> d.weight_bytes_sent >>
      d.weight_bytes_received;
  DPLAB_CHECK(!dev.fail(), "{}: malformed device line '{}'", path, get("device"));
  std::istringstream mem(get("memory"));
  mem >> d.param_bytes >> d.grad_bytes >> d.optim_state_bytes >> d.activation_bytes;
  DPLAB_CHECK(!mem.fail(), "{}: malformed memory line '{}'", path, get("memory"));
  if (rank != 0) return;
  r.steps = std::stoll(get("steps"));
  r.timed_steps = std::stoll(get("timed_steps"));
  r.seconds = std::stod(get("seconds"));
  r.compute_s = std::stod(get("compute_s"));
  r.comm_s = std::stod(get("comm_s"));
  r.wait_s = std::stod(get("wait_s"));
  r.test_accuracy = std::stod(get("test_accuracy"));
  r.test_loss = std::stod(get("test_loss"));
  r.param_count = std::stoll(get("param_count"));
}

std::unique_ptr<optim::Optimizer> make_optimizer(const Config& cfg, std::vector<Tensor> params) {
  if (model_dtype(cfg) != DType::Float32) {  // Apex O2: the same optimizer, on float32 masters
    Config inner = cfg;
    inner.precision = "fp32";
    return std::make_unique<amp::MasterWeightOptimizer>(
        std::move(params),
        [inner](std::vector<Tensor> masters) { return make_optimizer(inner, std::move(masters)); });
  }
  if (cfg.optimizer == "adam")
    return std::make_unique<optim::Adam>(std::move(params), optim::AdamOptions{.lr = cfg.lr});
  DPLAB_CHECK(cfg.optimizer == "sgd", "--optimizer: expected sgd or adam, got '{}'", cfg.optimizer);
  return std::make_unique<optim::SGD>(std::move(params),
                                      optim::SGDOptions{.lr = cfg.lr, .momentum = cfg.momentum});
}

int64_t optimizer_state_bytes(const optim::Optimizer& opt) {
  StateDict sd;
  Metadata meta;
  opt.state_dict(sd, meta);
  int64_t bytes = 0;
  for (const auto& [name, t] : sd) bytes += t.nbytes();
  return bytes;
}

void fill_memory(DeviceFigures& d, const std::vector<Tensor>& params, int64_t state_bytes,
                 int64_t extra_grad_bytes) {
  d.param_bytes = d.grad_bytes = 0;
  for (const Tensor& p : params) {
    d.param_bytes += p.nbytes();
    if (p.grad().defined()) d.grad_bytes += p.grad().nbytes();
  }
  d.grad_bytes += extra_grad_bytes;
  d.optim_state_bytes = state_bytes;
}

ActivationMeter::ActivationMeter(std::vector<Device> devices)
    : devices_(std::move(devices)), before_(devices_.size()), peak_(devices_.size()) {}

void ActivationMeter::before_forward() {
  for (size_t i = 0; i < devices_.size(); ++i)
    before_[i] = memory_stats(devices_[i]).allocated_bytes;
}

void ActivationMeter::after_forward() {
  for (size_t i = 0; i < devices_.size(); ++i)
    peak_[i] = std::max(peak_[i], memory_stats(devices_[i]).allocated_bytes - before_[i]);
}

}  // namespace dplab::compare
