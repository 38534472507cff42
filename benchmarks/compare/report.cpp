// report.cpp: the table, CSVs, Markdown report, agreement checks and plots (report.h).
// Columns, per step (one optimizer step of one global batch):
//   samples/s      global batch / the median step time over the timed steps (the median:
//                  on a shared machine other processes' bursts hit random steps)
//   speed-up       samples/s over the single device's; efficiency = speed-up / N
//   compute        single: the whole step; dp: a device's mean busy time; ddp: step - wait
//   comm           dp: the master's copies; ddp: time the bucket all-reduces ran (they
//                  overlap backward, so compute + comm can exceed the step)
//   wait           dp: a worker's idle time (the master works alone); ddp: backward's end
//                  waiting for the last all-reduces
//   memory         peak bytes per device (max, min, max/min: the imbalance)
//   traffic        MiB per step sent / received by device 0 (the master for dp and star)
//                  and by the busiest other device
// Read next: plot_results.py.
#include "benchmarks/compare/report.h"
#include "benchmarks/compare/netns_links.h"
#include "benchmarks/plot_runner.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "framework/error.h"

namespace dplab::compare {

namespace {

double mib(double bytes) { return bytes / (1 << 20); }

struct Derived {
  double speedup = 0, efficiency = 0, mem_max = 0, mem_min = 0, imbalance = 0;
  double master_sent = 0, master_recv = 0, other_sent = 0, other_recv = 0;  // MiB per step
  double master_weight_sent = 0, other_weight_sent = 0, other_weight_recv = 0,
         master_weight_recv = 0;
};

const RunResult* baseline(const std::vector<RunResult>& runs) {
  for (const RunResult& r : runs)
    if (r.mode == "single") return &r;
  return nullptr;
}

Derived derive(const RunResult& r, const std::vector<RunResult>& runs) {
  Derived d;
  const RunResult* base = baseline(runs);
  if (base && base->samples_per_s() > 0) d.speedup = r.samples_per_s() / base->samples_per_s();
  d.efficiency = d.speedup / r.n;
  const double steps = std::max<double>(1, double(r.timed_steps));
  d.mem_min = 1e300;
  for (size_t i = 0; i < r.devices.size(); ++i) {
    const DeviceFigures& f = r.devices[i];
    d.mem_max = std::max(d.mem_max, mib(double(f.peak_bytes)));
    d.mem_min = std::min(d.mem_min, mib(double(f.peak_bytes)));
    if (i == 0) {
      d.master_sent = mib(double(f.bytes_sent)) / steps,
      d.master_recv = mib(double(f.bytes_received)) / steps;
      d.master_weight_sent = mib(double(f.weight_bytes_sent)) / steps;
      d.master_weight_recv = mib(double(f.weight_bytes_received)) / steps;
    } else {
      d.other_sent = std::max(d.other_sent, mib(double(f.bytes_sent)) / steps);
      d.other_recv = std::max(d.other_recv, mib(double(f.bytes_received)) / steps);
      d.other_weight_sent = std::max(d.other_weight_sent, mib(double(f.weight_bytes_sent)) / steps);
      d.other_weight_recv =
          std::max(d.other_weight_recv, mib(double(f.weight_bytes_received)) / steps);
    }
  }
  if (r.devices.empty()) d.mem_min = 0;
  d.imbalance = d.mem_min > 0 ? d.mem_max / d.mem_min : 0;
  return d;
}

// netns rows: MiB per step rank 0's link carried (the kernel's count); NAN elsewhere
double wire_mib(const std::vector<int64_t>& bytes, const RunResult& r) {
  return bytes.empty() ? NAN : mib(double(bytes[0])) / std::max<double>(1, double(r.timed_steps));
}

double prediction_error_pct(const RunResult& r) {
  return r.predicted_step_s > 0 && r.step_s() > 0
             ? 100.0 * (r.predicted_step_s - r.step_s()) / r.step_s()
             : NAN;
}

}  // namespace

const std::vector<std::string>& csv_columns() {
  static const std::vector<std::string> kColumns{"mode",
                                                 "precision",
                                                 "N",
                                                 "global_batch",
                                                 "timed_steps",
                                                 "samples_per_s",
                                                 "speedup",
                                                 "efficiency",
                                                 "step_ms",
                                                 "compute_ms",
                                                 "comm_ms",
                                                 "wait_ms",
                                                 "peak_mem_max_mib",
                                                 "peak_mem_min_mib",
                                                 "mem_imbalance",
                                                 "master_sent_mib",
                                                 "master_recv_mib",
                                                 "other_sent_mib",
                                                 "other_recv_mib",
                                                 "master_weight_sent_mib",
                                                 "master_weight_recv_mib",
                                                 "other_weight_sent_mib",
                                                 "other_weight_recv_mib",
                                                 "test_accuracy",
                                                 "test_loss",
                                                 "params",
                                                 "predicted_step_ms",
                                                 "prediction_error_pct",
                                                 "link_gbps",
                                                 "servers",
                                                 "link",
                                                 "emulated_vs_real_pct",
                                                 "master_wire_sent_mib",
                                                 "master_wire_recv_mib"};
  return kColumns;
}

void add_predictions(std::vector<RunResult>& runs, const AlphaBeta& ab, const Config& cfg,
                     int cores) {
  const double bucket_bytes = cfg.bucket_cap_mb * (1 << 20);
  for (RunResult& r : runs) {
    if (r.mode != "ring" && r.mode != "star") continue;
    // C: the run's own compute (its step less the time it waited for communication). N
    // processes on one machine compute slower than one alone (a shared memory bus and
    // caches, DDP's bucket copies, the communication threads): no alpha-beta model knows
    // that, and it is not what the model is about. The model predicts what communication
    // adds to C.
    // on an emulated link the wire's time is a sleep, not the shared cores' work
    r.predicted_step_s = step_seconds(ab, r.mode == "ring" ? Pattern::Ring : Pattern::Star, r.n,
                                      r.compute_s, 4.0 * double(r.param_count), bucket_bytes,
                                      /*overlap=*/true, std::max(1, cores), r.link_gbps > 0);
  }
}

Agreement check_agreement(const Config& cfg, const std::vector<RunResult>& runs) {
  Agreement a;
  const RunResult* base = baseline(runs);
  if (!base) {
    a.lines.push_back("no single-device run: nothing to compare against");
    return a;
  }
  const std::vector<float> ref = read_params(run_file(cfg, "single", 1, -1, "params"));
  auto max_abs_diff = [](const std::vector<float>& x, const std::vector<float>& y) {
    double m = 0;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      m = std::max(m, double(std::fabs(x[i] - y[i])));
    return m;
  };
  std::map<int, std::pair<std::string, std::vector<float>>> first_at_n;  // N -> first mode's params
  std::vector<std::string> same_n;
  for (const RunResult& r : runs) {
    if (&r == base) continue;
    const std::vector<float> p = read_params(run_file(cfg, run_label(r), r.n, -1, "params"));
    double max_ref = 0;
    if (p.size() != ref.size()) {
      a.ok = false;
      a.lines.push_back(
          fmt::format("{} N={}: {} parameters, single has {}", run_label(r), r.n, p.size(), ref.size()));
      continue;
    }
    for (float v : ref) max_ref = std::max(max_ref, double(std::fabs(v)));
    const double max_diff = max_abs_diff(p, ref);
    // The parallel modes at the same N do the same arithmetic up to summation order, so
    // they agree closely even where N devices differ from one (BatchNorm's per-device batch).
    auto [it, fresh] = first_at_n.try_emplace(r.n, run_label(r), p);
    if (!fresh)
      same_n.push_back(fmt::format("{:>6} N={}: max |param - {} N={}| = {:.2e}", run_label(r), r.n,
                                   it->second.first, r.n, max_abs_diff(p, it->second.second)));
    const double dacc = r.test_accuracy - base->test_accuracy;
    // Float sums in another order differ by ~1e-7 relative; over many steps a ReLU or a
    // max-pool choice that flips on one sample lets trajectories drift apart (seen: 2e-3
    // after 100 MLP steps, 2e-2 for the CNN, accuracy within 0.15 points). So the verdict
    // is the accuracy, as the issue asks; the parameter gap is shown, and the short test
    // (tests/compare) holds it to 1e-5 after 4 steps, before any drift.
    // 16-bit runs (--precision fp16 / bf16) round every weight and gradient to 2^-11 or
    // 2^-8: trajectories part sooner, so they are held to the bound, 1 point.
    const double bound = cfg.precision == "fp32" ? 0.5 : 1.0;
    const bool acc_ok = std::fabs(dacc) <= bound;
    a.ok = a.ok && acc_ok;
    a.lines.push_back(
        fmt::format("{:>6} N={}: max |param - single| = {:.2e} (largest |param| {:.2f}), accuracy "
                    "{:+.2f} points{}",
                    run_label(r), r.n, max_diff, max_ref, dacc,
                    acc_ok ? "" : fmt::format(" (DISAGREES: beyond {} points)", bound)));
  }
  a.lines.insert(a.lines.end(), same_n.begin(), same_n.end());
  return a;
}

std::string format_table(const std::vector<RunResult>& runs) {
  std::string s = fmt::format("{:<10} {:>2} {:>9} {:>6} {:>5} {:>8} {:>8} {:>7} {:>7} {:>21} {:>15} "
                              "{:>15} {:>6} {:>6} {:>15}\n",
                              "mode", "N", "samples/s", "speed", "eff%", "step ms", "compute",
                              "comm", "wait", "peak MiB max/min (x)", "dev0 MiB out/in",
                              "other out/in", "acc%", "loss", "pred ms (err%)");
  for (const RunResult& r : runs) {
    const Derived d = derive(r, runs);
    const std::string pred =
        r.predicted_step_s > 0
            ? fmt::format("{:.1f} ({:+.0f}%)", 1e3 * r.predicted_step_s, prediction_error_pct(r))
            : "-";
    s += fmt::format("{:<10} {:>2} {:>9.0f} {:>5.2f}x {:>5.0f} {:>8.1f} {:>8.1f} {:>7.1f} {:>7.1f} "
                     "{:>9.1f}/{:>6.1f} ({:.2f}) "
                     "{:>7.2f}/{:<7.2f} {:>7.2f}/{:<7.2f} {:>6.2f} {:>6.3f} {:>15}\n",
                     run_label(r), r.n, r.samples_per_s(), d.speedup, 100 * d.efficiency,
                     1e3 * r.step_s(), 1e3 * r.compute_s, 1e3 * r.comm_s, 1e3 * r.wait_s, d.mem_max,
                     d.mem_min, d.imbalance, d.master_sent, d.master_recv, d.other_sent,
                     d.other_recv, r.test_accuracy, r.test_loss, pred);
  }
  return s;
}

// Per device: the peak and what holds it (fill_memory in training.cpp), in MiB.
std::string format_memory_table(const std::vector<RunResult>& runs) {
  std::string s =
      fmt::format("{:<10} {:>2} {:>3} {:>9} {:>9} {:>9} {:>11} {:>9} {:>9}\n", "mode", "N", "dev",
                  "params", "grads", "optim", "activations", "other", "peak MiB");
  for (const RunResult& r : runs)
    for (size_t i = 0; i < r.devices.size(); ++i) {
      const DeviceFigures& d = r.devices[i];
      const int64_t other =
          d.peak_bytes - d.param_bytes - d.grad_bytes - d.optim_state_bytes - d.activation_bytes;
      s += fmt::format("{:<10} {:>2} {:>3} {:>9.2f} {:>9.2f} {:>9.2f} {:>11.2f} {:>9.2f} {:>9.2f}\n",
                       run_label(r), r.n, i, mib(double(d.param_bytes)), mib(double(d.grad_bytes)),
                       mib(double(d.optim_state_bytes)), mib(double(d.activation_bytes)),
                       mib(double(std::max<int64_t>(0, other))), mib(double(d.peak_bytes)));
    }
  return s;
}

void write_results_csv(const std::string& path, const std::vector<RunResult>& runs) {
  std::ofstream f(path);
  const auto& cols = csv_columns();
  for (size_t i = 0; i < cols.size(); ++i) f << (i ? "," : "") << cols[i];
  f << '\n';
  for (const RunResult& r : runs) {
    const Derived d = derive(r, runs);
    const double pred_ms = r.predicted_step_s > 0 ? 1e3 * r.predicted_step_s : NAN;
    f << fmt::format(
        "{},{},{},{},{},{:.3f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},",
        r.mode, r.precision, r.n, r.global_batch, r.timed_steps, r.samples_per_s(), d.speedup,
        d.efficiency, 1e3 * r.step_s(), 1e3 * r.compute_s, 1e3 * r.comm_s, 1e3 * r.wait_s,
        d.mem_max, d.mem_min, d.imbalance);
    f << fmt::format("{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.4f},{:.5f},{},{:."
                     "4f},{:.2f},{:g},{},{},{:.2f},{:.6f},{:.6f}\n",
                     d.master_sent, d.master_recv, d.other_sent, d.other_recv, d.master_weight_sent,
                     d.master_weight_recv, d.other_weight_sent, d.other_weight_recv,
                     r.test_accuracy, r.test_loss, r.param_count, pred_ms, prediction_error_pct(r),
                     r.link_gbps, r.servers, r.link, emulated_error_pct(r, runs), wire_mib(r.wire_sent, r),
                     wire_mib(r.wire_received, r));
  }
  DPLAB_CHECK(f.good(), "could not write {}", path);
}

void write_per_device_csv(const std::string& path, const std::vector<RunResult>& runs) {
  std::ofstream f(path);
  f << "mode,N,device,peak_mib,sent_mib_per_step,recv_mib_per_step,weight_sent_mib_per_step,weight_"
       "recv_mib_per_step,"
       "param_bytes,grad_bytes,optim_state_bytes,activation_bytes\n";
  for (const RunResult& r : runs) {
    const double steps = std::max<double>(1, double(r.timed_steps));
    for (size_t i = 0; i < r.devices.size(); ++i) {
      const DeviceFigures& x = r.devices[i];
      f << fmt::format("{},{},{},{:.4f},{:.6f},{:.6f},{:.6f},{:.6f},{},{},{},{}\n", run_label(r), r.n, i,
                       mib(double(x.peak_bytes)), mib(double(x.bytes_sent)) / steps,
                       mib(double(x.bytes_received)) / steps,
                       mib(double(x.weight_bytes_sent)) / steps,
                       mib(double(x.weight_bytes_received)) / steps, x.param_bytes, x.grad_bytes,
                       x.optim_state_bytes, x.activation_bytes);
    }
  }
  DPLAB_CHECK(f.good(), "could not write {}", path);
}

std::string link_note(const Config& cfg) {
  const double gbps =
      link_gbps(cfg, "ring", 2);  // what every multi-device dp/star/ring run crosses
  if (gbps <= 0)
    return "Links: none emulated: ranks and devices copy at shared-memory speed, so every rank "
           "shares one "
           "memory bus and the parameter server's master has no link of its own to saturate.";
  return fmt::format(
      "Links: every device / rank sits behind an emulated full-duplex {:g} Gbit/s link "
      "(--link-gbps; parallel/transport/link_model.h), as machines on a network do: the "
      "parameter server's master moves (N-1)x a worker's bytes through its one link. "
      "The mpi, nccl and gloo modes, if run, use their own transports without it.",
      gbps);
}

void write_report_md(const std::string& path, const Config& cfg, const std::vector<RunResult>& runs,
                     const Agreement& agreement, const std::optional<AlphaBeta>& ab,
                     const std::vector<std::string>& plots, const std::string& plot_note) {
  std::ofstream f(path);
  f << "# dplab-compare: parameter server vs ring\n\n";
  // the data: Fashion-MNIST's subsets, or the GPT's text windows (workload.h)
  const std::string data =
      cfg.model == "gpt"
          ? fmt::format("byte windows of a text file ({}), {} validation windows",
                        cfg.data_root.empty() ? "the Jargon File" : cfg.data_root, cfg.test_limit)
          : fmt::format("Fashion-MNIST train subset {}, test subset {}", cfg.train_limit, cfg.test_limit);
  f << fmt::format(
      "Model `{}`, {} steps ({} timed), global batch {} split evenly over N devices ({}), "
      "SGD lr {} momentum {}, bucket cap {} MiB, {}.\n\n",
      cfg.model, cfg.steps, runs.empty() ? 0 : runs[0].timed_steps, cfg.global_batch, cfg.device,
      cfg.lr, cfg.momentum, cfg.bucket_cap_mb, data);
  f << link_note(cfg) << "\n\n";
  f << "| mode | N | samples/s | speed-up | efficiency | step ms | compute ms | comm ms | wait ms "
       "| "
       "peak MiB max | min | max/min | dev0 sent/recv MiB | others sent/recv MiB | acc % | loss | "
       "predicted ms (err) |\n";
  f << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const RunResult& r : runs) {
    const Derived d = derive(r, runs);
    f << fmt::format(
        "| {} | {} | {:.0f} | {:.2f}x | {:.0f}% | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | "
        "{:.1f} | "
        "{:.2f} | {:.2f} / {:.2f} | {:.2f} / {:.2f} | {:.2f} | {:.3f} | {} |\n",
        run_label(r), r.n, r.samples_per_s(), d.speedup, 100 * d.efficiency, 1e3 * r.step_s(),
        1e3 * r.compute_s, 1e3 * r.comm_s, 1e3 * r.wait_s, d.mem_max, d.mem_min, d.imbalance,
        d.master_sent, d.master_recv, d.other_sent, d.other_recv, r.test_accuracy, r.test_loss,
        r.predicted_step_s > 0
            ? fmt::format("{:.1f} ({:+.0f}%)", 1e3 * r.predicted_step_s, prediction_error_pct(r))
            : "-");
  }
  f << "\nModes: `single` one device; `dp` DataParallel (parameter server, threads, one process); "
       "`star` DDP with the star all-reduce (parameter server over processes); `ring` DDP with the "
       "ring "
       "all-reduce; `zero1` / `zero2` ZeRO stage 1 / 2 over the ring (tutorials/18_zero.md); "
       "`ps-s<S>` the sharded parameter server with S servers co-located with the training ranks, "
       "`ps-s<S>-sep` with S server processes of their own (devices N.. are the servers; "
       "docs/parameter_server.md). "
       "Traffic is MiB "
       "per step; device 0 is the master for `dp` and `star`. "
       "Column meanings: benchmarks/compare/report.cpp; formulas: tutorials/16_ps_vs_ring.md.\n\n";
  f << "## Memory per device\n\nMiB; parameters, gradients and optimizer state after training, "
       "activations "
       "at the end of forward, other = the rest of the peak (backward's and the collectives' "
       "transient "
       "buffers).\n\n```\n"
    << format_memory_table(runs) << "```\n\n";
  if (const std::vector<std::string> ps = ps_findings(runs); !ps.empty()) {
    f << "## The sharded parameter server against the ring\n\n";
    for (const std::string& l : ps) f << "- " << l << '\n';
    f << "\nBytes are the push and pull (weight traffic) per step; a ring rank moves "
         "2(N-1)/N of the parameter bytes each way (parallel/algorithms/cost.h).\n\n";
  }
  f << "## Agreement with the single device\n\n";
  for (const std::string& l : agreement.lines) f << "- " << l << '\n';
  f << (agreement.ok
            ? "\nAll modes agree (parameters within tolerance, accuracy within 0.5 points).\n"
            : "\n**Some modes DISAGREE with the single device (see above).**\n");
  if (ab)
    f << fmt::format(
        "\n## Alpha-beta model\n\nPing-pong over the process group (same links): alpha = {:.2f} "
        "us, "
        "beta = {:.4f} ns/byte ({:.2f} GB/s). Projection: `projection.csv`, `projection.png`.\n",
        1e6 * ab->alpha, 1e9 * ab->beta, ab->bandwidth_gbs());
  f << "\n## Plots\n\n";
  for (const std::string& p : plots) f << fmt::format("![{}]({})\n", p, p);
  if (plots.empty()) f << plot_note << '\n';
  DPLAB_CHECK(f.good(), "could not write {}", path);
}

std::vector<std::string> make_plots(const Config& cfg, const std::string& script,
                                    std::string& note) {
  const bench::PlotRun run = bench::run_plot_script(script, {cfg.out});
  note = run.note;
  if (!run.ok) return {};
  std::vector<std::string> out;
  for (const char* name :
       {"throughput.png", "memory.png", "traffic.png", "step_split.png", "projection.png"})
    if (std::filesystem::exists(std::filesystem::path(cfg.out) / name)) out.emplace_back(name);
  note = fmt::format("{} {}", out.size(), run.note);  // "5 plots written with python3"
  return out;
}

}  // namespace dplab::compare
