// netns_links.cpp: the bed's life (up, down, down on SIGINT / SIGTERM), a rank's entry into
// its node, the real-link runs and ping-pong, and the side-by-side section of the report.
// The bed is scripts/netns_cluster.sh's (one tested place that knows veth, bridges and tc);
// this file only calls it. A rank enters its node with setns(2) on /run/netns/<bed>-n<rank>
// (where `ip netns add` keeps the namespace) before any thread of its own exists, so gloo's
// threads, started later, are born inside the node too.
// Read next: run_ddp.cpp (ddp_rank, which calls enter_node), report.cpp.
#include "benchmarks/compare/netns_links.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>

#include "benchmarks/project/projection.h"
#include "framework/error.h"
#include "parallel/engines/collective_engine.h"

namespace dplab::compare {

namespace {

// The bed's `down`, prepared before any signal can come: the handler may only fork, exec
// and wait (async-signal-safe), not build strings.
struct DownCommand {
  std::string bash = "/bin/bash", script, flag = "--name", name, verb = "down";
  char* argv[6] = {};
};
DownCommand g_down;
volatile sig_atomic_t g_bed_up = 0;
struct sigaction g_old_int {}, g_old_term {};

void run_down_from_handler() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execv(g_down.argv[0], g_down.argv);
    ::_exit(127);
  }
  if (pid > 0) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  }
}

void on_signal(int sig) {
  if (g_bed_up) {
    g_bed_up = 0;
    run_down_from_handler();
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);  // the usual death (the workers follow: die_with_parent)
}

// Runs `bash script args...` and returns its exit status (its messages go to stderr).
int run_script(const std::string& script, const std::vector<std::string>& args) {
  std::vector<std::string> all{"/bin/bash", script};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  const pid_t pid = ::fork();
  DPLAB_CHECK(pid >= 0, "--links netns: fork failed: {}", std::strerror(errno));
  if (pid == 0) {
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string fmt_ms(double s) { return s > 0 ? fmt::format("{:.1f}", 1e3 * s) : "-"; }
std::string fmt_pct(double p) { return std::isfinite(p) ? fmt::format("{:+.1f}%", p) : "-"; }

}  // namespace

double rate_to_gbps(const std::string& rate) {
  static const std::regex re("^([0-9]+)(kbit|mbit|gbit)$");
  std::smatch m;
  DPLAB_CHECK(std::regex_match(rate, m, re),
              "--links netns:RATE expects a rate as tc writes it (e.g. 1gbit, 500mbit), got '{}'",
              rate);
  const double v = std::stod(m[1]), unit = m[2] == "kbit" ? 1e-6 : m[2] == "mbit" ? 1e-3 : 1.0;
  DPLAB_CHECK(v > 0, "--links netns:RATE: the rate must be > 0, got '{}'", rate);
  return v * unit;
}

std::optional<NetnsLinks> parse_links(const std::string& spec, double emulated_gbps) {
  if (spec == "emulated") return std::nullopt;
  if (spec == "netns") {
    DPLAB_CHECK(emulated_gbps > 0,
                "--links netns takes its rate from --link-gbps, which is 0 here: give one "
                "(--link-gbps 1) or name the rate (--links netns:1gbit)");
    const long mbit = std::lround(emulated_gbps * 1000);
    DPLAB_CHECK(mbit >= 1, "--links netns: --link-gbps {} is below 1 Mbit/s", emulated_gbps);
    return NetnsLinks{.rate = fmt::format("{}mbit", mbit), .gbps = double(mbit) / 1000};
  }
  const std::string prefix = "netns:";
  DPLAB_CHECK(spec.rfind(prefix, 0) == 0,
              "--links expects emulated, netns or netns:RATE (e.g. netns:1gbit), got '{}'", spec);
  const std::string rate = spec.substr(prefix.size());
  return NetnsLinks{.rate = rate, .gbps = rate_to_gbps(rate)};
}

bool runs_on_netns(const std::string& mode) {
  // ps with separate servers has more ranks than nodes (one rank per node here)
  const bool separate_ps = mode.rfind("ps-", 0) == 0 && mode.ends_with("-sep");
  return mode != "single" && mode != "dp" && mode != "mpi" && mode != "nccl" && !separate_ps;
}

NetnsBed::NetnsBed(const std::string& script, int nodes, const std::string& rate)
    : script_(script), name_(fmt::format("cmp{}", ::getpid() % 10000000)) {
  DPLAB_CHECK(::geteuid() == 0,
              "--links netns needs root (it creates network namespaces, veth links and tc "
              "shaping), but runs as uid {}: run it with sudo, or use --links emulated (the "
              "default)",
              ::geteuid());
  DPLAB_CHECK(parallel::gloo_built(),
              "--links netns: dplab-compare was built without gloo, whose TCP wire carries the "
              "bytes between the namespaces (install libgloo-dev, reconfigure with -Dgloo=enabled)");
  DPLAB_CHECK(std::filesystem::exists(script_), "--links netns: the bed's script {} is missing",
              script_);
  g_down.script = script_;
  g_down.name = name_;
  char** a = g_down.argv;
  a[0] = g_down.bash.data(), a[1] = g_down.script.data(), a[2] = g_down.flag.data();
  a[3] = g_down.name.data(), a[4] = g_down.verb.data(), a[5] = nullptr;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  // A SIGINT ignored at start (a background job of a script) stays ignored.
  ::sigaction(SIGINT, nullptr, &g_old_int);
  if (g_old_int.sa_handler != SIG_IGN) ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, &g_old_term);
  g_bed_up = 1;  // from here a signal takes down whatever `up` made (up also cleans up itself)
  // tbf's bucket: the smallest the bed allows (`--burst 0`, two packets), so a link never
  // runs much faster than its rate, as a NIC's wire cannot. The bed's default (10 ms of the
  // rate) lets a step's whole bucket of gradients through at memory speed once the link has
  // idled for 10 ms, which a training step does between its all-reduces.
  const int rc = run_script(
      script_, {"--name", name_, "--rate", rate, "--burst", "0", "up", std::to_string(nodes)});
  if (rc != 0) {
    g_bed_up = 0;
    ::sigaction(SIGINT, &g_old_int, nullptr);
    ::sigaction(SIGTERM, &g_old_term, nullptr);
    DPLAB_FAIL("--links netns: `{} up {} --rate {}` failed with exit status {}{} (its message is "
               "above)",
               script_, nodes, rate, rc,
               rc == 5 ? ": network namespaces are not available here"
               : rc == 4 ? ": ip or tc (iproute2) is missing" : "");
  }
  std::cout << fmt::format("network namespaces: {} nodes ({}-n0..{}-n{}, 198.18.0.1..{}), each "
                           "behind a tbf-shaped {} link\n",
                           nodes, name_, name_, nodes - 1, nodes, rate);
}

NetnsBed::~NetnsBed() {
  g_bed_up = 0;
  const int rc = run_script(script_, {"--name", name_, "down"});
  ::sigaction(SIGINT, &g_old_int, nullptr);
  ::sigaction(SIGTERM, &g_old_term, nullptr);
  if (rc != 0)
    std::cerr << fmt::format("dplab-compare: could not take the bed down (status {}): run `{} "
                             "--name {} down`\n",
                             rc, script_, name_);
}

void enter_node(const std::string& bed, int node) {
  const std::string path = fmt::format("/run/netns/{}-n{}", bed, node);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DPLAB_CHECK(fd >= 0, "rank {}: cannot open its node's namespace {}: {} (is the bed up?)", node,
              path, std::strerror(errno));
  const int rc = ::setns(fd, CLONE_NEWNET);
  const int err = errno;
  ::close(fd);
  DPLAB_CHECK(rc == 0, "rank {}: setns({}) failed: {}", node, path, std::strerror(err));
  ::setenv("GLOO_SOCKET_IFNAME", "eth0", 1);
  ::setenv("LOCAL_WORLD_SIZE", "1", 1);
  ::setenv("LOCAL_RANK", "0", 1);
}

LinkBytes node_link_bytes() {
  std::ifstream f("/proc/self/net/dev");
  DPLAB_CHECK(f.good(), "cannot read /proc/self/net/dev");
  for (std::string line; std::getline(f, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos || line.substr(0, colon).find("eth0") == std::string::npos)
      continue;
    std::istringstream in(line.substr(colon + 1));
    int64_t v[16] = {};
    for (int64_t& x : v) in >> x;
    DPLAB_CHECK(!in.fail(), "/proc/self/net/dev: malformed line for eth0: '{}'", line);
    return {.sent = v[8], .received = v[0]};  // receive: bytes first; transmit: 9th field
  }
  DPLAB_FAIL("/proc/self/net/dev has no eth0: this rank is not inside a node of the bed");
}

LinkBytes link_bytes_settled(parallel::ProcessGroup& pg) {
  pg.barrier();
  return node_link_bytes();
}

void write_link_bytes(const std::string& path, LinkBytes begin, LinkBytes end) {
  std::ofstream f(path);
  f << (end.sent - begin.sent) << ' ' << (end.received - begin.received) << '\n';
  DPLAB_CHECK(f.good(), "could not write {}", path);
}

std::string netns_init_method(const Config& cfg, const std::string& label, int n) {
  return "file://" + std::filesystem::absolute(run_file(cfg, label, n, -1, "store")).string();
}

RunResult run_ddp_netns(const Config& cfg, const std::string& mode, int n, const NetnsLinks& links,
                        const std::string& bed, const std::string& self_exe,
                        const std::vector<std::string>& worker_args) {
  const std::string label = mode + "_netns";
  for (int r = 0; r < n; ++r)
    for (const char* ext : {"txt", "link"}) std::filesystem::remove(run_file(cfg, label, n, r, ext));
  std::filesystem::remove(run_file(cfg, label, n, -1, "store"));
  std::vector<std::string> args = worker_args;
  for (const std::string& a :
       {std::string("--worker"), mode, std::string("--worker-n"), std::to_string(n),
        std::string("--worker-netns"), bed})
    args.push_back(a);
  run_worker_process(self_exe, args, fmt::format("{} N={} on netns links", mode, n));
  RunResult r{.mode = mode, .n = n, .global_batch = cfg.global_batch};
  r.devices.resize(static_cast<size_t>(n));
  for (int rank = 0; rank < n; ++rank) {
    read_rank_file(run_file(cfg, label, n, rank, "txt"), r, rank);
    std::ifstream f(run_file(cfg, label, n, rank, "link"));
    int64_t sent = -1, received = -1;
    f >> sent >> received;
    DPLAB_CHECK(!f.fail(), "rank {} of the {} N={} run on netns links left no link counters",
                rank, mode, n);
    r.wire_sent.push_back(sent);
    r.wire_received.push_back(received);
  }
  r.link = "netns";
  r.link_gbps = links.gbps;
  return r;
}

AlphaBeta fit_real_links(const std::vector<PingPongSample>& samples) {
  AlphaBeta ab = fit_alpha_beta(samples);
  const PingPongSample* largest = nullptr;
  for (const PingPongSample& s : samples)
    if (!largest || s.bytes > largest->bytes) largest = &s;
  if (largest && largest->seconds > ab.alpha)
    ab.beta = (largest->seconds - ab.alpha) / double(largest->bytes);
  return ab;
}

void add_real_link_predictions(std::vector<RunResult>& runs, const AlphaBeta& real,
                               const Config& cfg) {
  using parallel::ClusterAlgorithm;
  for (RunResult& r : runs) {
    if (r.link != "netns") continue;
    r.predicted_step_s = r.predicted_fair_s = -1;
    const bool ps = r.mode.rfind("ps-s", 0) == 0;  // co-located (runs_on_netns)
    if (r.mode != "ring" && r.mode != "star" && !ps) continue;
    // dplab-project's model (benchmarks/project/projection.h): N nodes of one device behind
    // the real links' alpha and beta, this run's compute (split 1:2, as dplab-project's
    // --compute-ms), DDP's buckets; the ps exchanges its whole gradient after backward
    projection::ProjectionInputs in{
        .inter = {.alpha = real.alpha, .beta = real.beta},
        .ns = {r.n},
        .gradient_bytes = 4.0 * double(r.param_count),
        .bucket_cap_bytes = ps ? 4.0 * double(r.param_count) : cfg.bucket_cap_mb * (1 << 20),
        .compute = {.forward_s = r.compute_s / 3, .backward_s = 2 * r.compute_s / 3},
        .algorithms = {r.mode == "ring"   ? ClusterAlgorithm::Ring
                       : r.mode == "star" ? ClusterAlgorithm::Star
                                          : ClusterAlgorithm::ParameterServer},
        .servers = ps ? std::stoi(r.mode.substr(4)) : 0};
    const projection::ProjectionRow row = projection::run_projection(in).at(0);
    r.predicted_step_s = row.one_master ? row.pipelined_step_s : row.step.step_s;
    if (row.one_master) r.predicted_fair_s = row.step.step_s;
  }
}

double emulated_error_pct(const RunResult& r, const std::vector<RunResult>& runs) {
  if (r.link != "emulated" || r.step_s() <= 0) return NAN;
  for (const RunResult& t : runs)
    if (t.link == "netns" && t.mode == r.mode && t.n == r.n && t.step_s() > 0)
      return 100.0 * (r.step_s() - t.step_s()) / t.step_s();
  return NAN;
}

double formula_sent_bytes(const std::string& mode, int n, int rank, double grad_bytes) {
  if (n < 2) return 0;
  if (mode == "ring") return 2.0 * (n - 1) / n * grad_bytes;
  if (mode.rfind("ps-s", 0) == 0 && !mode.ends_with("-sep")) {  // co-located: S of N serve
    // a worker pushes each of the S shards (S/N of them its own) and pulls them back; a
    // server sends its shard back to N-1 others: rank 0 both trains and serves
    const int s = std::stoi(mode.substr(4));
    const double shard = grad_bytes / s, others = (n - 1) * shard;
    const double as_worker = (s - (rank < s ? 1 : 0)) * shard;  // its pushes
    return as_worker + (rank < s ? others : 0);                 // + a server's pulls out
  }
  if (mode == "star") return rank == 0 ? (n - 1) * grad_bytes : grad_bytes;
  return NAN;
}

void write_netns_section(std::ostream& f, const NetnsLinks& links,
                         const std::vector<RunResult>& runs, const std::optional<AlphaBeta>& real) {
  f << "\n## Emulated and real links side by side\n\n";
  f << fmt::format(
      "`--links netns:{}`: in the `real` columns every rank ran in a network namespace of its own (a "
      "node, scripts/netns_cluster.sh) behind a veth link that tc tbf shapes to {} in each "
      "direction, and the bytes crossed it over TCP (dplab's own algorithm on the node transport: "
      "gloo's wire between namespaces). The `emulated` columns are the same runs on the emulated "
      "link (a shared-memory copy, then a sleep for the wire's time, parallel/transport/"
      "link_model.h). Error = (emulated - real) / real; the issue's target is within 15%. "
      "Traffic: MiB a rank sends per step (dev0 is the star's master), with the textbook "
      "formula for S gradient bytes: ring 2(N-1)/N S, star master (N-1) S; the wire column is "
      "what the kernel counted on dev0's link (headers and acknowledgements included).\n\n",
      links.rate, links.rate);
  f << "| mode | N | emulated step ms | real step ms | emulated error | dplab-project (real fit) ms "
       "| its error | dev0 sent MiB (real) | formula | busiest other (real) | formula | dev0 "
       "link out/in MiB (wire) |\n";
  f << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const RunResult& r : runs) {
    if (r.link != "netns") continue;
    const RunResult* emu = nullptr;
    for (const RunResult& e : runs)
      if (e.link == "emulated" && e.mode == r.mode && e.n == r.n) emu = &e;
    const double steps = std::max<double>(1, double(r.timed_steps)), mib = 1 << 20;
    const double grad_bytes = 4.0 * double(r.param_count);
    double other = 0;
    for (size_t i = 1; i < r.devices.size(); ++i)
      other = std::max(other, double(r.devices[i].weight_bytes_sent) / steps / mib);
    const double dev0 = r.devices.empty() ? 0 : double(r.devices[0].weight_bytes_sent) / steps / mib;
    const double f0 = formula_sent_bytes(r.mode, r.n, 0, grad_bytes) / mib;
    const double f1 = formula_sent_bytes(r.mode, r.n, 1, grad_bytes) / mib;
    const double pred_err = r.predicted_step_s > 0
                                ? 100.0 * (r.predicted_step_s - r.step_s()) / r.step_s()
                                : NAN;
    const std::string wire =
        r.wire_sent.empty() ? "-"
                            : fmt::format("{:.3f} / {:.3f}", double(r.wire_sent[0]) / steps / mib,
                                          double(r.wire_received[0]) / steps / mib);
    f << fmt::format("| {} | {} | {} | {} | {} | {} | {} | {:.3f} | {} | {:.3f} | {} | {} |\n", r.mode,
                     r.n, emu ? fmt_ms(emu->step_s()) : "-", fmt_ms(r.step_s()),
                     emu ? fmt_pct(emulated_error_pct(*emu, runs)) : "-",
                     r.predicted_fair_s > 0 ? fmt_ms(r.predicted_step_s) + " (fair " +
                                                  fmt_ms(r.predicted_fair_s) + ")"
                                            : fmt_ms(r.predicted_step_s),
                     fmt_pct(pred_err), dev0,
                     std::isfinite(f0) ? fmt::format("{:.3f}", f0) : "-", other,
                     std::isfinite(f1) ? fmt::format("{:.3f}", f1) : "-", wire);
  }
  if (real)
    f << fmt::format(
        "\nPing-pong between two nodes of the bed: alpha = {:.1f} us (the fit), beta = {:.3f} "
        "ns/byte from the 16 MiB message, the sustained rate ({:.3f} Gbit/s of TCP payload "
        "against the {:g} Gbit/s the links are shaped to; every size: "
        "runs/pingpong_netns_n2.txt); calibration.csv carries these terms for dplab-project. The "
        "dplab-project column is its step timeline (tutorials/23_will_it_scale.md) on these terms "
        "and each run's own compute. For one master (star, ps S=1) it is the pipelined step: the "
        "bed's links send the master's replies in the order written, so a leaf served first "
        "pushes its next gradient while the others still pull; in brackets its step on a link "
        "shared fairly among the replies, as a queue per flow (fq_codel) would.\n",
        1e6 * real->alpha, 1e9 * real->beta, 8 * real->bandwidth_gbs(), links.gbps);
}

}  // namespace dplab::compare
