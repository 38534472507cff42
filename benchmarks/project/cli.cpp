// cli.cpp: dplab-project's main: "will it scale to 128 GPUs?" for a cluster and a model the
// user describes, with no training run (tutorials/23_will_it_scale.md).
//   dplab-project --nodes 32 --devices-per-node 4 --intra pcie --inter 25gbe --params 44.5e6
//                 --batch 64 --samples-per-s 110 --algorithm ring,ps --bucket-cap-mb 64
//   (--model gpt2-small or gpt instead of --params: the count models/gpt.h gives)
// Every input is printed with where it came from: given (the command line), preset (links.h),
// measured (a --calibration or --trace file made here) or default. Writes projection.csv,
// timeline.csv and projection.png (plot_projection.py) into --out.
// CLI11 lives in this file only (it is slow to compile).
// Read next: projection.h, timeline.h, parallel/algorithms/cost_topology.h.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <optional>

#include "benchmarks/cli_numbers.h"
#include "benchmarks/plot_runner.h"
#include "benchmarks/project/links.h"
#include "benchmarks/project/projection.h"
#include "benchmarks/project/trace_profile.h"
#include "framework/error.h"
#include "models/models.h"

using namespace dplab;
using namespace dplab::projection;
using parallel::ClusterAlgorithm;

namespace {

struct Options {
  int nodes = 1, per_node = 1, nics = 1;
  std::string intra = "pcie", inter = "10gbe";
  double intra_gbps = 0, inter_gbps = 0;
  std::vector<double> alpha_us;
  std::string calibration;
  double params = 0, gradient_bytes = 0;
  std::string model;  // a preset for params: gpt2-small | gpt (model_params below)
  std::string dtype = "fp32";
  double compute_ms = -1, forward_ms = -1, backward_ms = -1, optimizer_ms = -1;
  double batch = 0, samples_per_s = 0;
  std::string trace, trace_run;
  std::vector<std::string> algorithms{"ring"};
  int servers = 0;
  std::string placement = "colocated", ps_sync = "barrier";
  double largest_tensor_mb = 0;
  double bucket_cap_mb = 25;
  std::vector<int> ns;
  std::string out = "projection";
  bool plot = true;
  std::string plot_script;
};

// One line of the inputs block: what, its value, where it came from.
struct Input {
  std::string what, value, origin;
};

// 1, 2, 4, ... up to G, then G, 2G, 4G, ... up to M·G, and M·G itself (M·G checked to fit).
std::vector<int> default_ns(int m, int g) {
  std::vector<int> ns;
  for (int64_t n = 1; n < g; n *= 2) ns.push_back(static_cast<int>(n));
  for (int64_t k = 1; k < m; k *= 2) ns.push_back(static_cast<int>(k * g));
  ns.push_back(m * g);
  return ns;
}

// --model: a parameter count dplab's own code gives (models/gpt.h counts a GPT's parameters
// from its configuration, without building it).
double model_params(const std::string& name) {
  if (name == "gpt2-small") return double(models::gpt_param_count(models::GPTConfig{}));
  DPLAB_CHECK(name == "gpt", "--model: expected gpt2-small or gpt, got '{}'", name);
  return double(models::gpt_param_count(models::byte_gpt_config()));
}

// Everything but the timeline: links, gradient, compute, profile, each with its origin.
ProjectionInputs build_inputs(const Options& o, std::vector<Input>& said) {
  ProjectionInputs in{.devices_per_node = o.per_node, .nics_per_node = o.nics};
  const int64_t devices = int64_t{o.nodes} * o.per_node;
  DPLAB_CHECK(devices <= parallel::kMaxClusterDevices,
              "--nodes {} x --devices-per-node {} = {} devices: expected at most {}", o.nodes,
              o.per_node, devices, parallel::kMaxClusterDevices);
  DPLAB_CHECK(o.alpha_us.size() <= 2, "--alpha-us: expected A (both levels) or INTRA,INTER (microseconds), got {} values",
              o.alpha_us.size());
  said.push_back({"cluster", fmt::format("{} node(s) x {} device(s), {} NIC(s) per node", o.nodes, o.per_node, o.nics),
                  "given"});
  // links: preset, then a given speed or alpha over it, then a calibration over both
  std::vector<CalibrationRow> cal;
  if (!o.calibration.empty()) cal = read_calibration(o.calibration);
  for (const std::string level : {"intra", "inter"}) {
    const bool intra = level == "intra";
    const LinkPreset& p = link_preset(intra ? o.intra : o.inter, level);
    double gbps = p.gbps, alpha = p.alpha_us;
    std::string g_from = "preset " + p.name, a_from = "preset " + p.name + " (assumed)";
    if (const double given = intra ? o.intra_gbps : o.inter_gbps; given > 0) gbps = given, g_from = "given";
    if (!o.alpha_us.empty()) alpha = o.alpha_us[intra || o.alpha_us.size() == 1 ? 0 : 1], a_from = "given";
    for (const CalibrationRow& r : cal)
      if (r.level == level) {
        gbps = r.gbps, alpha = r.alpha_us;
        g_from = a_from = "measured: " + o.calibration + (r.source.empty() ? "" : " (" + r.source + ")");
      }
    (intra ? in.intra : in.inter) = level_link(gbps, alpha);
    said.push_back({level + " link", fmt::format("{:.4g} Gbit/s one way", gbps), g_from});
    said.push_back({level + " alpha", fmt::format("{:.4g} us per message", alpha), a_from});
  }
  // the gradient
  const double elem = o.dtype == "fp32" ? 4 : 2;
  DPLAB_CHECK(o.model.empty() || (o.params == 0 && o.gradient_bytes == 0),
              "--model {} gives the gradient's size: drop --params / --gradient-bytes", o.model);
  const double params = o.model.empty() ? o.params : model_params(o.model);
  DPLAB_CHECK((params > 0) != (o.gradient_bytes > 0),
              "expected the gradient's size as --params P or --gradient-bytes B (one of them), got {}",
              params > 0 ? "both" : "neither");
  in.gradient_bytes = params > 0 ? params * elem : o.gradient_bytes;
  const std::string count = o.model.empty() ? fmt::format("{:.4g} parameters", params)
                                            : fmt::format("{}: {:.0f} parameters", o.model, params);
  said.push_back({"gradient", params > 0 ? fmt::format("{} x {} bytes ({}) = {:.1f} MiB", count, elem, o.dtype,
                                                       in.gradient_bytes / (1 << 20))
                                         : fmt::format("{:.1f} MiB", in.gradient_bytes / (1 << 20)),
                  o.model.empty() ? "given" : "preset (models/gpt.h's gpt_param_count)"});
  in.bucket_cap_bytes = o.bucket_cap_mb * (1 << 20);
  const size_t buckets = bucket_bytes(in.gradient_bytes, in.bucket_cap_bytes).size();
  said.push_back({"buckets", fmt::format("cap {:.4g} MiB: {} bucket(s)", o.bucket_cap_mb, buckets),
                  o.bucket_cap_mb == 25 ? "default (DDP's 25 MiB)" : "given"});
  // compute: forward + backward from one of three sources; the trace gives the shape
  std::optional<TraceProfile> tp;
  if (!o.trace.empty()) tp = read_trace_profile(o.trace, o.trace_run);
  const int sources = (o.compute_ms >= 0) + (o.forward_ms >= 0 || o.backward_ms >= 0) + (o.batch > 0 || o.samples_per_s > 0);
  DPLAB_CHECK(sources <= 1, "expected the compute per step one way: --compute-ms, --forward-ms with --backward-ms, or "
              "--batch with --samples-per-s; got {} of them", sources);
  double fwd_share = 1.0 / 3;  // backward costs about twice forward (gradients for inputs and weights)
  std::string split_from = "default (backward = 2 x forward)";
  if (tp) {
    fwd_share = tp->compute.forward_s / (tp->compute.forward_s + tp->compute.backward_s);
    split_from = "measured: " + o.trace;
  }
  std::string c_from;
  double fb_s = 0;  // forward + backward
  if (o.forward_ms >= 0 || o.backward_ms >= 0) {
    DPLAB_CHECK(o.forward_ms >= 0 && o.backward_ms >= 0, "--forward-ms and --backward-ms go together: got only {}",
                o.forward_ms >= 0 ? "--forward-ms" : "--backward-ms");
    in.compute.forward_s = 1e-3 * o.forward_ms, in.compute.backward_s = 1e-3 * o.backward_ms;
    c_from = "given", split_from = "given";
  } else {
    if (o.compute_ms >= 0) fb_s = 1e-3 * o.compute_ms, c_from = "given";
    else if (o.batch > 0 || o.samples_per_s > 0) {
      DPLAB_CHECK(o.batch > 0 && o.samples_per_s > 0, "--batch and --samples-per-s go together: got only {}",
                  o.batch > 0 ? "--batch" : "--samples-per-s");
      fb_s = o.batch / o.samples_per_s;
      c_from = fmt::format("given (batch {:.4g} / {:.4g} samples/s)", o.batch, o.samples_per_s);
    } else {
      DPLAB_CHECK(tp.has_value(), "expected the compute per step: --compute-ms, --forward-ms with --backward-ms, "
                  "--batch with --samples-per-s, or a --trace to take it from");
      fb_s = tp->compute.forward_s + tp->compute.backward_s, c_from = "measured: " + o.trace;
    }
    in.compute.forward_s = fwd_share * fb_s, in.compute.backward_s = (1 - fwd_share) * fb_s;
  }
  if (o.optimizer_ms >= 0) in.compute.optimizer_s = 1e-3 * o.optimizer_ms;
  else if (tp) in.compute.optimizer_s = tp->compute.optimizer_s / (tp->compute.forward_s + tp->compute.backward_s) *
                                        (in.compute.forward_s + in.compute.backward_s);
  said.push_back({"compute", fmt::format("forward {:.2f} ms + backward {:.2f} ms", 1e3 * in.compute.forward_s,
                                         1e3 * in.compute.backward_s), c_from});
  said.push_back({"  split", fmt::format("forward {:.0f}% of forward + backward", 100 * in.compute.forward_s /
                                         std::max(1e-30, in.compute.forward_s + in.compute.backward_s)), split_from});
  said.push_back({"optimizer", fmt::format("{:.2f} ms", 1e3 * in.compute.optimizer_s),
                  o.optimizer_ms >= 0 ? std::string("given") : tp ? "measured: " + o.trace + " (scaled)" : "default"});
  if (tp) {
    in.profile = tp->profile;
    said.push_back({"readiness", fmt::format("trace run '{}', rank 0, {} steps, {} buckets ({})", tp->run, tp->steps,
                                             tp->buckets, tp->ready_events ? "ready events" : "all-reduce starts: late by "
                                             "any wait for the previous bucket"), "measured: " + o.trace});
    std::string points;  // "bytes ready by then @ fraction of backward"
    for (size_t i = 0; i < tp->profile.bytes.size(); ++i)
      points += fmt::format("{}{:.0f}%@{:.0f}%", i ? " " : "", 100 * tp->profile.bytes[i], 100 * tp->profile.time[i]);
    said.push_back({"  profile", "bytes ready @ backward: " + points, "measured: " + o.trace});
  } else {
    said.push_back({"readiness", "gradient bytes ready at a constant rate over backward", "default (no --trace)"});
  }
  // algorithms and servers
  in.algorithms.clear();
  for (const std::string& a : o.algorithms) in.algorithms.push_back(parallel::cluster_algorithm_from_name(a));
  in.servers = o.servers;
  in.colocated = o.placement == "colocated";
  in.ps_barrier = o.ps_sync == "barrier";
  in.largest_tensor_bytes = o.largest_tensor_mb * (1 << 20);
  if (std::find(in.algorithms.begin(), in.algorithms.end(), ClusterAlgorithm::ParameterServer) != in.algorithms.end())
    said.push_back({"ps servers", fmt::format("{} {}, {}", o.servers > 0 ? std::to_string(o.servers) : "one per node",
                                              o.placement, in.ps_barrier ? "pulls after every push (synchronous)"
                                                                         : "each bucket pulled after its push"),
                    o.servers > 0 ? "given" : "default"});
  if (o.largest_tensor_mb > 0)
    said.push_back({"ps shards", fmt::format("whole tensors: the busiest server holds >= the largest, {:.4g} MiB",
                                             o.largest_tensor_mb), "given"});
  in.ns = o.ns.empty() ? default_ns(o.nodes, o.per_node) : o.ns;
  return in;
}

// Every count of devices the model takes: 1 to cost_topology.h's bound (its formulas form 2N).
CLI::Validator device_count(const std::string& what) {
  return bench::number_in(1, parallel::kMaxClusterDevices,
                          fmt::format("{} from 1 to {}", what, parallel::kMaxClusterDevices));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dplab-project: will it scale? The step time and scaling efficiency of data-parallel training on a "
               "cluster you describe, from a timeline of its gradient buckets (tutorials/23_will_it_scale.md)"};
  Options o;
  std::vector<std::string> algorithms;
  using bench::at_least;
  app.add_option("--nodes", o.nodes, "machines (M): the default --ns goes up to M x G")->check(device_count("nodes"));
  app.add_option("--devices-per-node", o.per_node, "GPUs per machine (G)")->check(device_count("devices per node"));
  app.add_option("--nics-per-node", o.nics, "NICs per machine, shared by its G devices (K)")
      ->check(at_least(1, "NICs per node >= 1"));
  app.add_option("--intra", o.intra, "intra-node link preset: pcie | nvlink");
  app.add_option("--inter", o.inter, "inter-node link preset: 10gbe | 25gbe | 100gbe | infiniband");
  app.add_option("--intra-gbps", o.intra_gbps, "intra-node link, Gbit/s one way (over the preset)")
      ->check(at_least(1e-9, "a link speed > 0 Gbit/s"));
  app.add_option("--inter-gbps", o.inter_gbps, "inter-node link (a NIC), Gbit/s one way (over the preset)")
      ->check(at_least(1e-9, "a link speed > 0 Gbit/s"));
  app.add_option("--alpha-us", o.alpha_us, "per-message cost in us: A (both levels) or INTRA,INTER (over the presets')")
      ->delimiter(',')->check(at_least(0, "an alpha >= 0 us"));
  app.add_option("--calibration", o.calibration, "CSV of measured alpha and Gbit/s per level (level,alpha_us,gbps,"
                 "source), as dplab-compare writes it: replaces the given terms");
  app.add_option("--params", o.params, "parameters of the model (1e6, 44.5e6, ...)")->check(at_least(1, "params >= 1"));
  app.add_option("--model", o.model, "instead of --params, a model's count: gpt2-small (GPT-2 small, 124,439,808) "
                 "or gpt (dplab-compare --model gpt's byte-level GPT, 3,257,856)")
      ->check(CLI::IsMember({"gpt2-small", "gpt"}));
  app.add_option("--gradient-bytes", o.gradient_bytes, "bytes of gradient per step (instead of --params)")
      ->check(at_least(1, "gradient bytes >= 1"));
  app.add_option("--dtype", o.dtype, "gradient type: fp32 | fp16 | bf16")->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  app.add_option("--compute-ms", o.compute_ms, "forward + backward per step, ms (split 1:2, or as the trace)")
      ->check(at_least(0, "a compute time >= 0 ms"));
  app.add_option("--forward-ms", o.forward_ms, "forward per step, ms")->check(at_least(0, "a time >= 0 ms"));
  app.add_option("--backward-ms", o.backward_ms, "backward per step, ms")->check(at_least(0, "a time >= 0 ms"));
  app.add_option("--optimizer-ms", o.optimizer_ms, "optimizer step, ms (default 0, or the trace's share)")
      ->check(at_least(0, "a time >= 0 ms"));
  app.add_option("--batch", o.batch, "samples per device per step (with --samples-per-s)")
      ->check(at_least(1, "a batch >= 1"));
  app.add_option("--samples-per-s", o.samples_per_s, "one device's training throughput, samples/s (a published "
                 "single-GPU benchmark): compute = batch / samples-per-s")->check(at_least(1e-9, "samples/s > 0"));
  app.add_option("--trace", o.trace, "trace.json of dplab-compare --trace: when buckets become ready in backward, "
                 "scaled to the given compute");
  app.add_option("--trace-run", o.trace_run, "the trace's run, e.g. 'ring N=2' (default: the largest ring)");
  app.add_option("--algorithm", algorithms, "any of ring,hierarchical,halving-doubling,star,ps (default ring)")->delimiter(',')
      ->check(CLI::IsMember({"ring", "hierarchical", "halving-doubling", "star", "ps"}));
  app.add_option("--servers", o.servers, "ps: servers S (default: one per node)")->check(at_least(1, "servers >= 1"));
  app.add_option("--ps-placement", o.placement, "ps: colocated (on worker nodes) | separate (own machines)")
      ->check(CLI::IsMember({"colocated", "separate"}));
  app.add_option("--ps-sync", o.ps_sync, "ps: barrier (pulls after all pushes, synchronous) | bucket")
      ->check(CLI::IsMember({"barrier", "bucket"}));
  app.add_option("--largest-tensor-mb", o.largest_tensor_mb, "ps: servers hold whole tensors (as TensorFlow places "
                 "variables); the busiest holds at least this, MiB (default: perfectly even shards)")
      ->check(at_least(0, "a tensor size >= 0 MiB"));
  app.add_option("--bucket-cap-mb", o.bucket_cap_mb, "bucket (fusion buffer) size, MiB")
      ->check(at_least(1e-6, "a bucket size > 0 MiB"));
  app.add_option("--ns", o.ns, "device counts (default 1, 2, 4, ... up to nodes x devices per node)")->delimiter(',')
      ->check(device_count("device counts"));
  app.add_option("--out", o.out, "output directory (projection.csv, timeline.csv, projection.png)");
  app.add_flag("!--no-plot", o.plot, "skip plot_projection.py");
  app.add_option("--plot-script", o.plot_script, "path of plot_projection.py (default: next to the source)");
  CLI11_PARSE(app, argc, argv);
  if (!algorithms.empty()) o.algorithms = algorithms;

  try {
    std::vector<Input> said;
    const ProjectionInputs in = build_inputs(o, said);
    const std::vector<ProjectionRow> rows = run_projection(in);
    std::cout << "inputs (given: on the command line; preset: links.h's table; measured: a file measured here; "
                 "default: not given):\n";
    for (const Input& i : said) std::cout << fmt::format("  {:<12} {:<58} {}\n", i.what, i.value, i.origin);
    std::cout << "\nweak scaling: every device keeps its batch; eff% = compute / step. comm = all stages of all "
                 "buckets; exposed = what nothing hid (step - compute); NIC / server MiB: per step through the busiest "
                 "node's NICs / server's link, one direction\n"
              << format_table(rows);
    std::filesystem::create_directories(o.out);
    const std::filesystem::path out(o.out);
    write_projection_csv((out / "projection.csv").string(), rows);
    write_timeline_csv((out / "timeline.csv").string(), rows);
    std::string note = "plot not asked for (--no-plot)";
    if (o.plot) {
      std::cout.flush();  // the script prints too
      const bench::PlotRun pr = bench::run_plot_script(
          o.plot_script.empty() ? DPLAB_PROJECT_PLOT_SCRIPT : o.plot_script,
          {(out / "projection.csv").string(), (out / "timeline.csv").string(), (out / "projection.png").string()});
      note = pr.note;
      if (pr.failed) std::cerr << note << '\n';
    }
    std::cout << note << '\n'
              << fmt::format("wrote {}, {}\n", (out / "projection.csv").string(), (out / "timeline.csv").string());
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "dplab-project: " << e.what() << '\n';
    return 1;
  }
}
