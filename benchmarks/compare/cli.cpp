// cli.cpp: dplab-compare's main: the options, then every mode for every N, then the report.
//   dplab-compare [--model mlp|cnn|resnet|gpt] [--ns 1,2,4] [--steps 100 | --epochs E] [--global-batch 256]
//                 [--bucket-cap-mb 25] [--device cpu|cuda] [--trace] [--out results]
// Single device and DataParallel run in this process; DDP star and ring start N processes
// of this same program in its hidden --worker mode (run_ddp.cpp; ps, the sharded parameter
// server with --servers 1,N and --ps-placement: run_ps.cpp), which report back through
// files under <out>/runs. The ping-pong for the alpha-beta model is one more worker run.
// CLI11 lives in this file only (it is slow to compile).
// Read next: compare.h, then run_local.cpp and run_ddp.cpp.
#include <fmt/core.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "benchmarks/cli_numbers.h"
#include "benchmarks/compare/alpha_beta.h"
#include "benchmarks/compare/compare.h"
#include "benchmarks/compare/netns_links.h"
#include "benchmarks/compare/report.h"
#include "benchmarks/compare/trace.h"
#include "benchmarks/compare/training.h"
#include "benchmarks/project/links.h"
#include "framework/backend/cpu/cpu_dispatch.h"
#include "framework/backend/cuda/virtual_gpus.h"
#include "framework/error.h"
#include "models/gpt.h"
#include "parallel/launch/supervisor.h"

using namespace dplab;
using namespace dplab::compare;

namespace {

std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  DPLAB_CHECK(!ec, "cannot read /proc/self/exe: {}", ec.message());
  return p.string();
}

// The projection's models: ours (measured) and two well-known sizes, GPT-2 small's counted
// by models/gpt.h as its GPT would hold them.
std::vector<std::pair<std::string, double>> projection_models(const Config& cfg, double params) {
  return {{cfg.model, params},
          {"resnet50", 25.6e6},
          {"gpt2-small", double(models::gpt_param_count(models::GPTConfig{}))}};
}

// The largest of --ns, and at least `floor`.
int largest_n(const Config& cfg, int floor) {
  int largest = floor;
  for (int n : cfg.ns) largest = std::max(largest, n);
  return largest;
}

// --device cuda on fewer GPUs than the largest N: that many logical GPUs on the ones there are.
void use_enough_gpus(const Config& cfg) {
  const int max_n = largest_n(cfg, 1);
  if (cuda_logical_device_count() >= max_n) return;
  std::cout << fmt::format(
      "--device cuda: {} GPU(s) seen, {} asked for: using {} logical GPUs on them\n",
      cuda_logical_device_count(), max_n, max_n);
  set_virtual_gpus(max_n);
}

// How the runs that start processes start them: this program in its --worker mode with our
// options, and with --links netns the real links and the bed their twins run on.
struct Workers {
  std::string exe;
  const std::vector<std::string>& args;
  const std::optional<NetnsLinks>& netns;
  const NetnsBed* bed;  // nullptr: no runs behind real links
};

// What the runs leave for the report: one result per run, one trace per run that recorded one.
struct Runs {
  std::vector<RunResult> results;
  std::vector<TraceRun> traces;
};

void set_emulated_link(RunResult& r, const Config& cfg, int n) {
  r.link_gbps = link_gbps(cfg, r.mode, n);
  r.link = r.link_gbps > 0 ? "emulated" : "none";
}

// A run of processes: one track per rank (star's rank 0 is its master).
TraceRun rank_trace(const Config& cfg, const std::string& mode, int n, int world) {
  TraceRun tr{.label = fmt::format("{} N={}", mode, n)};
  for (int r = 0; r < world; ++r) {
    tr.fragments.push_back(run_file(cfg, mode, n, r, "trace"));
    tr.track_names.push_back(fmt::format("rank {} ({}){}", r, device_of(cfg, r).str(),
                                         mode == "star" && r == 0 && n > 1 ? " master" : ""));
  }
  return tr;
}

// A run in this process (single, dp): one track, the thread that drove it.
TraceRun local_trace(const Config& cfg, const std::string& mode, int n) {
  TraceRun tr{.label = fmt::format("{} N={}", mode, n)};
  tr.fragments.push_back(run_file(cfg, mode, n, -1, "trace"));
  tr.track_names.push_back(mode == "dp" ? fmt::format("master thread ({})", device_of(cfg, 0).str())
                                        : device_of(cfg, 0).str());
  return tr;
}

// Mode ps at N: one run per placement and server count (run_ps.cpp); co-located ones also
// behind real links, one rank per node.
void run_ps_mode(const Config& cfg, int n, const Workers& w, Runs& out) {
  for (const std::string& place : cfg.ps_placements)
    for (size_t i = 0; i < cfg.servers.size(); ++i) {
      const int s = resolve_servers(cfg.servers[i], n);
      bool seen = false;  // --servers 1,N at N = 1: one run, not two
      for (size_t j = 0; j < i; ++j) seen = seen || resolve_servers(cfg.servers[j], n) == s;
      if (seen) continue;
      RunResult emulated = run_ps(cfg, n, s, place == "separate", w.exe, w.args);
      set_emulated_link(emulated, cfg, n);
      out.traces.push_back(rank_trace(cfg, emulated.mode, n, ps_world(emulated.mode, n)));
      out.results.push_back(std::move(emulated));
      const RunResult& last = out.results.back();
      if (w.bed && n > 1 && runs_on_netns(last.mode)) {
        RunResult real = run_ddp_netns(cfg, last.mode, n, *w.netns, w.bed->name(), w.exe, w.args);
        real.servers = last.servers;
        out.results.push_back(std::move(real));
      }
    }
}

// The twin of a DDP run behind real links (--links netns), each rank on its own node.
void run_on_real_links(const Config& cfg, const std::string& mode, int n, const Workers& w,
                       Runs& out) {
  RunResult real = run_ddp_netns(cfg, mode, n, *w.netns, w.bed->name(), w.exe, w.args);
  real.precision = cfg.precision;
  TraceRun tr{.label = fmt::format("{} N={} (netns links)", mode, n)};
  for (int r = 0; r < n; ++r) {
    tr.fragments.push_back(run_file(cfg, run_label(real), n, r, "trace"));
    tr.track_names.push_back(fmt::format("rank {} (node {})", r, r));
  }
  out.results.push_back(std::move(real));
  out.traces.push_back(std::move(tr));
}

// Any mode but ps at N: single and dp in this process, the DDP modes in worker processes.
void run_mode(const Config& cfg, const std::string& mode, int n, const Workers& w, Runs& out) {
  const bool local = mode == "single" || mode == "dp";
  RunResult r = mode == "single" ? run_single(cfg)
                : mode == "dp"   ? run_data_parallel(cfg, n)
                                 : run_ddp(cfg, mode, n, w.exe, w.args);
  set_emulated_link(r, cfg, n);
  r.precision = cfg.precision;
  out.results.push_back(std::move(r));
  out.traces.push_back(local ? local_trace(cfg, mode, n) : rank_trace(cfg, mode, n, n));
  if (w.bed && n > 1 && runs_on_netns(mode)) run_on_real_links(cfg, mode, n, w, out);
}

Runs run_every_mode(const Config& cfg, const Workers& w) {
  Runs out;
  for (const std::string& mode : cfg.modes) {
    for (int n : cfg.ns) {
      if (mode == "single" && n != 1) continue;
      if (cfg.global_batch % n != 0)
        DPLAB_FAIL("--global-batch {} does not split evenly over N = {}: pick a multiple",
                   cfg.global_batch, n);
      if (mode == "ps") run_ps_mode(cfg, n, w, out);
      else run_mode(cfg, mode, n, w, out);
    }
  }
  return out;
}

// The ping-pong's alpha-beta fits: over the emulated link (or shm), and over the real links.
struct Fits {
  std::optional<AlphaBeta> ab, real_ab;
};

// The fit as a calibration file, which dplab-project --calibration reads: on real links
// (--links netns) their own fit, else the emulated link's (or shm's).
void write_calibration_file(const Config& cfg, const Fits& fits, const Workers& w) {
  const std::string path = (std::filesystem::path(cfg.out) / "calibration.csv").string();
  if (fits.real_ab) {
    const AlphaBeta& real = *fits.real_ab;
    const std::string source = fmt::format(
        "dplab-compare ping-pong between network namespaces over tbf-shaped {} links (TCP)",
        w.netns->rate);
    projection::write_calibration(path, {{.level = "inter",
                                          .alpha_us = 1e6 * real.alpha,
                                          .gbps = 8e-9 / real.beta,
                                          .source = source}});
    return;
  }
  const double link = link_gbps(cfg, "ring", 2);
  const std::string source =
      link > 0 ? fmt::format("dplab-compare ping-pong over a {:g} Gbit/s emulated link", link)
               : "dplab-compare ping-pong over shm";
  projection::write_calibration(path, {{.level = link > 0 ? "inter" : "intra",
                                        .alpha_us = 1e6 * fits.ab->alpha,
                                        .gbps = 8e-9 / fits.ab->beta,
                                        .source = source}});
}

// The ping-pong between 2 processes (and 2 nodes over real links), each run's predicted step,
// and the projection to N = 1024 in projection.csv.
Fits fit_and_project(const Config& cfg, const Workers& w, std::vector<RunResult>& runs) {
  Fits fits;
  std::cout << "ping-pong between 2 processes for the alpha-beta model...\n";
  fits.ab = fit_alpha_beta(run_pingpong(cfg, w.exe, w.args));
  if (w.bed) {
    std::cout << "ping-pong between 2 nodes over the real links...\n";
    fits.real_ab = fit_real_links(run_pingpong(cfg, w.exe, w.args, w.bed->name()));
  }
  write_calibration_file(cfg, fits, w);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  add_predictions(runs, *fits.ab, cfg, cores);
  if (fits.real_ab) add_real_link_predictions(runs, *fits.real_ab, cfg);
  const RunResult& first = runs.front();
  double base_compute = first.compute_s;
  for (const RunResult& r : runs)
    if (r.mode == "single") base_compute = r.compute_s;
  write_projection_csv(
      (std::filesystem::path(cfg.out) / "projection.csv").string(),
      project(*fits.ab, projection_models(cfg, double(first.param_count)),
              double(first.param_count), base_compute, cfg.bucket_cap_mb * (1 << 20)));
  return fits;
}

// The tables and the agreement with the single device, on stdout.
void print_findings(const std::vector<RunResult>& runs, const Config& cfg,
                    const Agreement& agreement) {
  std::cout << '\n' << format_table(runs) << '\n' << link_note(cfg) << '\n';
  std::cout << "\nmemory per device (MiB; other = the peak's transient buffers of backward and "
               "communication):\n"
            << format_memory_table(runs);
  const std::vector<std::string> ps_lines = ps_findings(runs);
  if (!ps_lines.empty()) {
    std::cout << "the sharded parameter server against the ring:\n";
    for (const std::string& l : ps_lines) std::cout << "  " << l << '\n';
  }
  std::cout << "traffic is MiB per step; dev0 is the master for dp and star. Agreement with the "
               "single device:\n";
  for (const std::string& l : agreement.lines) std::cout << "  " << l << '\n';
  std::cout << (agreement.ok ? "all modes agree: accuracy within 0.5 points of the single device\n"
                             : "WARNING: some modes DISAGREE with the single device (see above)\n");
}

// results.csv, per_device.csv, the tables, trace.json, the plots and report.md. Exit status:
// 0, or 3 when a mode disagrees with the single device.
int report(const Config& cfg, const Runs& runs, const Fits& fits, const std::string& plot_script,
           const std::optional<NetnsLinks>& netns) {
  const std::filesystem::path out(cfg.out);
  write_results_csv((out / "results.csv").string(), runs.results);
  write_per_device_csv((out / "per_device.csv").string(), runs.results);
  Agreement agreement = check_agreement(cfg, runs.results);
  if (!initial_model(cfg)->buffers().empty())
    agreement.lines.push_back(fmt::format(
        "note: {} has BatchNorm: each device normalises its own G/N rows, so N > 1 is not the same "
        "computation "
        "as one device (SyncBatchNorm would make it so); compare the modes at the same N instead",
        cfg.model));
  print_findings(runs.results, cfg, agreement);
  if (fits.ab)
    std::cout << fmt::format(
        "alpha-beta fit: alpha = {:.2f} us, beta = {:.4f} ns/byte ({:.2f} GB/s); "
        "pred ms = the model's DDP step (overlap) for this machine's {} cores\n",
        1e6 * fits.ab->alpha, 1e9 * fits.ab->beta, fits.ab->bandwidth_gbs(),
        std::thread::hardware_concurrency());
  if (cfg.trace) {
    const int64_t events = merge_traces(runs.traces, (out / "trace.json").string());
    std::cout << fmt::format(
        "trace: {} events in {} (open in https://ui.perfetto.dev or chrome://tracing)\n", events,
        (out / "trace.json").string());
  }
  std::string plot_note = "plots not asked for (--no-plots)";
  std::vector<std::string> plots;
  if (cfg.plots) plots = make_plots(cfg, plot_script, plot_note);
  std::cout << plot_note << '\n';
  write_report_md((out / "report.md").string(), cfg, runs.results, agreement, fits.ab, plots,
                  plot_note);
  if (netns) {
    std::ofstream md(out / "report.md", std::ios::app);
    write_netns_section(md, *netns, runs.results, fits.real_ab);
    write_netns_section(std::cout, *netns, runs.results, fits.real_ab);
  }
  std::cout << fmt::format("wrote {}, {}, {}\n", (out / "results.csv").string(),
                           (out / "per_device.csv").string(), (out / "report.md").string());
  return agreement.ok ? 0 : 3;
}

int run_all(const Config& cfg, const std::vector<std::string>& worker_args,
            const std::string& plot_script, const std::optional<NetnsLinks>& netns) {
  std::filesystem::create_directories(std::filesystem::path(cfg.out) / "runs");
  std::cout << fmt::format("device: {}; kernels: {}\n", cfg.device, kernels_summary());
  if (cfg.device == "cuda") use_enough_gpus(cfg);
  const std::string exe = self_exe();
  // --links netns: one bed for the whole run, as many nodes as the largest N (2 at least,
  // for the ping-pong); down at the end, on an error and on Ctrl-C (netns_links.h)
  std::optional<NetnsBed> bed;
  if (netns) bed.emplace(DPLAB_NETNS_CLUSTER_SCRIPT, largest_n(cfg, 2), netns->rate);
  const Workers workers{exe, worker_args, netns, bed ? &*bed : nullptr};
  Runs runs = run_every_mode(cfg, workers);
  Fits fits;
  if (cfg.projection && !runs.results.empty()) fits = fit_and_project(cfg, workers, runs.results);
  return report(cfg, runs, fits, plot_script, netns);
}

// Every run of N devices starts N processes (ps with separate servers: N + S), or N threads
// for dp: over dplab-run's limit per node it is refused as dplab-run refuses it, before any
// process starts.
void check_process_counts(const Config& cfg, int nproc_limit) {
  const bool separate_ps =
      std::find(cfg.modes.begin(), cfg.modes.end(), "ps") != cfg.modes.end() &&
      std::find(cfg.ps_placements.begin(), cfg.ps_placements.end(), "separate") != cfg.ps_placements.end();
  for (int n : cfg.ns) {
    const std::string over = parallel::nproc_over_limit(fmt::format("--ns {}", n), n, nproc_limit);
    DPLAB_CHECK(over.empty(), "{}", over);
    if (!separate_ps) continue;
    for (const std::string& spec : cfg.servers) {
      const int64_t world = int64_t{n} + resolve_servers(spec, n);
      const std::string with_servers = parallel::nproc_over_limit(
          fmt::format("--ns {} with --servers {} --ps-placement separate ({} processes)", n, spec, world), world,
          nproc_limit);
      DPLAB_CHECK(with_servers.empty(), "{}", with_servers);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "dplab-compare: the same training as a single device, DataParallel (parameter server), "
      "DDP star and DDP ring, side by side"};
  Config cfg;
  std::string worker, plot_script;
  bool link_gbps_given = false;
  int worker_n = 0, nproc_limit = parallel::kDefaultNprocLimit;
  using bench::at_least;
  app.add_option("--model", cfg.model,
                 "mlp | cnn | resnet | wide_mlp on Fashion-MNIST, or gpt: a byte-level GPT (4 "
                 "layers, 4 heads, 256 channels, 128-byte context: 3.26 M parameters, a 12.4 MiB "
                 "gradient) on a text file (--data), where the gradient is large enough that the "
                 "link's bandwidth, not its latency, decides the step")
      ->check(CLI::IsMember({"mlp", "cnn", "resnet", "toy", "wide_mlp", "gpt"}));
  app.add_option("--n-layer", cfg.n_layer, "--model gpt: transformer blocks (default 4)")
      ->check(at_least(1, "n_layer >= 1"));
  app.add_option("--n-head", cfg.n_head, "--model gpt: attention heads (default 4)")
      ->check(at_least(1, "n_head >= 1"));
  app.add_option("--n-embd", cfg.n_embd,
                 "--model gpt: channels, a multiple of --n-head (default 256)")
      ->check(at_least(1, "n_embd >= 1"));
  app.add_option("--block-size", cfg.block_size,
                 "--model gpt: bytes per sample, the context (default 128)")
      ->check(at_least(2, "a block size >= 2"));
  app.add_option("--ns", cfg.ns, "device counts, e.g. 1,2,4 (each at most --nproc-limit)")
      ->delimiter(',')
      ->check(at_least(1, "device counts >= 1"));
  app.add_option("--nproc-limit", nproc_limit,
                 fmt::format("the most processes one run may start, as dplab-run's (default {})",
                             parallel::kDefaultNprocLimit))
      ->check(at_least(1, "a process limit >= 1"));
  app.add_option("--modes,--backend", cfg.modes,
                 "any of single,dp,star,ring,zero1,zero2,mpi,nccl,gloo,ps (zero1/zero2: "
                 "ZeRO stage 1/2 over the ring, no DDP; mpi: DDP on the mpi engine, ranks started "
                 "by mpirun; gloo: DDP on the gloo engine (gloo's ring over TCP on loopback); "
                 "nccl: with --device cuda, one GPU per rank; ps: the sharded parameter server, "
                 "see --servers)")
      ->delimiter(',')
      ->check(CLI::IsMember({"single", "dp", "star", "ring", "zero1", "zero2", "mpi", "nccl", "gloo", "ps"}));
  app.add_option("--servers", cfg.servers,
                 "mode ps: parameter-server counts S, e.g. 1,2,N (N: one per device; default 1,N)")
      ->delimiter(',')
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            constexpr long kMaxServers = std::numeric_limits<int>::max();
            char* end = nullptr;
            const long s = std::strtol(v.c_str(), &end, 10);
            if (v == "N" || (end != v.c_str() && *end == '\0' && s >= 1 && s <= kMaxServers)) return "";
            return fmt::format("expected server counts >= 1 or N, got '{}'", v);
          },
          "S >= 1 or N"));
  app.add_option("--ps-placement", cfg.ps_placements,
                 "mode ps: colocated (S of the N training ranks also serve) and/or separate (S "
                 "more processes only serve)")
      ->delimiter(',')
      ->check(CLI::IsMember({"colocated", "separate"}));
  app.add_option("--optimizer", cfg.optimizer, "sgd (with --momentum) or adam (lr = --lr)")
      ->check(CLI::IsMember({"sgd", "adam"}));
  app.add_option("--steps", cfg.steps, "optimizer steps per run")->check(at_least(1, "steps >= 1"));
  int64_t epochs = 0;
  app.add_option(
         "--epochs", epochs,
         "passes over the training subset; sets --steps to epochs x (train-limit / global-batch)")
      ->check(at_least(1, "epochs >= 1"));
  app.add_option("--warmup", cfg.warmup, "steps left out of the timing")
      ->check(at_least(0, "warm-up steps >= 0"));
  app.add_option("--global-batch", cfg.global_batch,
                 "samples per step in all (GLOBAL): each of N devices gets global/N, so every mode "
                 "sees the same samples per step (default 256; gpt: 16 windows of --block-size "
                 "bytes)")
      ->check(at_least(1, "a global batch >= 1"));
  app.add_option("--train-limit", cfg.train_limit, "training subset of Fashion-MNIST")
      ->check(at_least(1, "a training subset >= 1 example"));
  app.add_option("--test-limit", cfg.test_limit,
                 "test subset (default 2000; gpt: validation windows, default 32)")
      ->check(at_least(1, "a test subset >= 1 example"));
  app.add_option("--lr", cfg.lr)->check(at_least(0, "a learning rate >= 0"));
  app.add_option("--momentum", cfg.momentum)->check(at_least(0, "a momentum >= 0"));
  app.add_option("--bucket-cap-mb", cfg.bucket_cap_mb, "DDP bucket size in MiB")
      ->check(at_least(1e-6, "a bucket size > 0 MiB"));
  app.add_option("--link-gbps", cfg.link_gbps,
                 "emulated link per device in Gbit/s, as between machines (default 10 on cpu, none "
                 "on cuda; "
                 "0: none, raw shared memory)")
      ->check(at_least(0, "a link speed >= 0 Gbit/s (0: no emulated link)"));
  app.add_option("--device", cfg.device, "cpu (logical cpu:k devices) or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--out", cfg.out, "output directory");
  app.add_option("--data", cfg.data_root,
                 "Fashion-MNIST directory (default: the usual search path); with --model gpt a "
                 "text file, plain or gzip (default: the Jargon File, Debian's jargon-text)");
  app.add_option("--seed", cfg.seed, "seed of the initial weights");
  app.add_flag("--trace", cfg.trace, "write trace.json (Chrome trace: Perfetto, chrome://tracing)");
  app.add_flag("!--no-projection", cfg.projection,
               "skip the ping-pong and the alpha-beta projection");
  app.add_flag("!--no-plots", cfg.plots, "skip plot_results.py");
  app.add_option("--plot-script", plot_script,
                 "path of plot_results.py (default: next to the source)");
  app.add_option("--worker", worker,
                 "internal: ring | star | zero1 | zero2 | mpi | nccl | ps-s<S>[-sep] | pingpong")
      ->group("");
  app.add_option("--worker-n", worker_n, "internal: ranks of the worker")->group("");
  app.add_option("--worker-netns", cfg.netns_bed, "internal: the bed the worker's ranks enter")
      ->group("");
  app.add_option("--links", cfg.links,
                 "emulated (default), or netns[:RATE] (root): each DDP mode also runs with every "
                 "rank in a network namespace of its own behind a real tc-shaped link of RATE "
                 "(e.g. 1gbit; default: --link-gbps), and the report sets both side by side");
  app.add_option("--precision", cfg.precision,
                 "fp32, or fp16 / bf16: Apex O2 (16-bit weights, gradients and "
                 "all-reduces, float32 master weights; fp16 with a GradScaler). Modes single, "
                 "star, ring, mpi, nccl")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  CLI11_PARSE(app, argc, argv);
  link_gbps_given = app.count("--link-gbps") > 0;
  if (cfg.model == "gpt") {  // a step of 256 windows of 128 bytes would take a CPU many seconds
    if (app.count("--global-batch") == 0) cfg.global_batch = 16;
    if (app.count("--test-limit") == 0) cfg.test_limit = 32;
  }
  if (epochs > 0 && cfg.model == "gpt") {
    std::cerr << "dplab-compare: --epochs counts passes over Fashion-MNIST; with --model gpt give "
                 "--steps\n";
    return 1;
  }
  if (epochs > 0) {
    constexpr int64_t kTrainExamples = 60000;  // Fashion-MNIST's training split
    cfg.steps =
        epochs * std::max<int64_t>(1, std::min(cfg.train_limit, kTrainExamples) / cfg.global_batch);
  }

  try {
    check_process_counts(cfg, nproc_limit);
    DPLAB_CHECK(cfg.model == "gpt" ||
                    (cfg.n_layer == 0 && cfg.n_head == 0 && cfg.n_embd == 0 && cfg.block_size == 0),
                "--n-layer, --n-head, --n-embd and --block-size shape --model gpt, not --model {}",
                cfg.model);
    DPLAB_CHECK(cfg.model != "gpt" || cfg.precision == "fp32",
                "--precision {} with --model gpt is not supported (16-bit runs are checked on "
                "the image models only); use fp32",
                cfg.precision);
    if (cfg.model == "gpt") (void)gpt_config(cfg);  // a bad shape fails here, before any process
    if (cfg.precision != "fp32")
      for (const std::string& m : cfg.modes)
        DPLAB_CHECK(m != "dp" && m != "zero1" && m != "zero2" && m != "ps",
                    "--precision {}: mode {} is not supported (its "
                    "optimizer and replicas are float32-only); use single, star, ring, mpi or nccl",
                    cfg.precision, m);
    // --links netns: the emulated and the real links have one rate, so the two can be compared
    const std::optional<NetnsLinks> netns = parse_links(cfg.links, link_gbps(cfg, "ring", 2));
    if (netns) {
      DPLAB_CHECK(cfg.device == "cpu", "--links netns runs CPU ranks (--device cpu), got --device {}",
                  cfg.device);
      DPLAB_CHECK(!link_gbps_given || std::fabs(cfg.link_gbps - netns->gbps) < 1e-9,
                  "--links {} and --link-gbps {:g} disagree: the emulated and the real links must "
                  "have one rate to be compared (drop --link-gbps, or give the same)",
                  cfg.links, cfg.link_gbps);
      cfg.link_gbps = netns->gbps;
    }
    // the workers: after the above, so they emulate the rate the parent reports
    if (!worker.empty()) {
      if (worker == "pingpong") pingpong_worker_main(cfg);
      else if (is_ps_label(worker)) ps_worker_main(cfg, worker, worker_n);
      else ddp_worker_main(cfg, worker, worker_n);
      return 0;
    }
    if (plot_script.empty()) plot_script = DPLAB_COMPARE_PLOT_SCRIPT;
    // The workers get exactly our options, so they build the same Config.
    std::vector<std::string> worker_args(argv + 1, argv + argc);
    return run_all(cfg, worker_args, plot_script, netns);
  } catch (const std::exception& e) {
    std::cerr << "dplab-compare: " << e.what() << '\n';
    return 1;
  }
}
