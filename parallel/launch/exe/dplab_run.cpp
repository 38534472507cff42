// dplab_run.cpp: the dplab-run launcher (torchrun's conventions).
//   dplab-run --nproc-per-node 4 [--master-addr A --master-port P] [--tee] PROGRAM ARGS...
//   dplab-run --nnodes 2 --node-rank R --nproc-per-node 4 --master-addr A --master-port P PROGRAM
// starts PROGRAM 4 times on this node with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
// GROUP_RANK, MASTER_ADDR and MASTER_PORT set, forwards Ctrl-C/SIGTERM, and if a rank fails
// stops the others and exits 1 naming it. With --nnodes M, one dplab-run runs on each node;
// rank 0 (node 0) hosts the store at A:P, so every node must be given the same A and P, and
// the same DPLAB_JOB_TOKEN (on one node dplab-run draws a random one when it is unset).
// Across nodes the launchers watch each other through that store (node_watch.h): a rank
// that fails on one node, or a node whose dplab-run dies, stops every node's ranks, and each
// launcher exits 1 naming the node and the rank.
// Ctrl-C/SIGTERM during the start-up ends it at once and stops the ranks already started.
// A second Ctrl-C (or SIGTERM, SIGHUP) during the grace period kills the ranks at once.
// Bad arguments exit 2. The process handling lives in supervisor.cpp; this file only parses
// arguments (CLI11 is slow to compile: keep it to this one file).
// Read next: parallel/launch/supervisor.h.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "framework/error.h"
#include "parallel/launch/node_watch.h"
#include "parallel/launch/supervisor.h"
#include "parallel/rendezvous/job_token.h"
#include "parallel/rendezvous/tcp_store.h"

namespace {

namespace par = dplab::parallel;

constexpr int kUsageError = 2;  // bad arguments, like argparse and torchrun
constexpr int kRankFailed = 1;
constexpr double kMaxGraceSeconds = 3600;

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "dplab-run: error: %s\nRun with --help for more information.\n",
               msg.c_str());
  return kUsageError;
}

// The command line: torchrun's options, then PROGRAM ARGS...
struct LaunchOptions {
  int nproc = 1, nnodes = 1, node_rank = 0, master_port = 0, nproc_limit = par::kDefaultNprocLimit;
  std::string master_addr = "127.0.0.1";
  bool master_addr_given = false;
  bool tee = false;
  double grace = 5.0, node_timeout = 15.0;
  std::vector<std::string> program;  // PROGRAM ARGS...
  bool separated = false;            // a `--` came before PROGRAM
};

void add_options(CLI::App& app, LaunchOptions& o) {
  app.add_option("--nproc-per-node,--nproc_per_node", o.nproc, "ranks to start on this node")
      ->default_val(1);
  app.add_option("--nproc-limit", o.nproc_limit,
                 "the most ranks --nproc-per-node may ask for (>= 1)")
      ->default_val(par::kDefaultNprocLimit);
  app.add_option("--nnodes", o.nnodes,
                 "nodes in the job: one dplab-run per node (ring and star "
                 "run on one node; across nodes use the mpi or nccl engine)")
      ->default_val(1);
  app.add_option("--node-rank,--node_rank", o.node_rank, "this node's index in [0, nnodes)")
      ->default_val(0);
  app.add_option("--master-addr,--master_addr", o.master_addr,
                 "address of rank 0's store (node 0; required with --nnodes > 1)")
      ->default_val("127.0.0.1");
  app.add_option("--master-port,--master_port", o.master_port,
                 "port of rank 0's store (default: a free port)")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            bool digits = !s.empty() && s.size() <= 5 &&
                          s.find_first_not_of("0123456789") == std::string::npos;
            if (digits && std::stoi(s) <= 65535) return "";
            return "expected a port number in 0..65535 (0 = pick a free one), got '" + s + "'";
          },
          "PORT"));
  app.add_flag("--tee", o.tee, "prefix each output line with \"[rank r] \"");
  app.add_option("--grace-period", o.grace,
                 "seconds between SIGTERM and SIGKILL when stopping ranks "
                 "(> 0, at most 3600); a second Ctrl-C cuts it short")
      ->default_val(5.0);
  app.add_option("--node-timeout", o.node_timeout,
                 "with --nnodes > 1: seconds without a heartbeat from another node's dplab-run "
                 "before this node stops its ranks and names that node (> 0, at most 3600)")
      ->default_val(15.0);
  // Everything from PROGRAM on belongs to the program, options included.
  app.prefix_command();
  app.footer(
      "\nPROGRAM [ARGS...] follow the options: everything from PROGRAM on is passed to it.\n"
      "Ctrl-C (SIGINT), SIGTERM and SIGHUP are forwarded to every rank, and SIGKILL follows\n"
      "after --grace-period; a second one during the grace period kills the ranks at once.\n"
      "Example: dplab-run --nproc-per-node 4 --tee ./train --epochs 2\n");
}

// What is wrong with the parsed command line, the first thing found; empty when nothing is.
std::string usage_problem(const LaunchOptions& o) {
  if (o.program.empty()) return "missing PROGRAM to run (dplab-run [options] PROGRAM ARGS...)";
  // prefix_command() hands an unknown option over as the program: a typo, not a program.
  if (!o.separated && o.program.front().starts_with("-"))
    return "unknown option '" + o.program.front() +
           "' (options come before PROGRAM; put -- before a program whose name starts with '-')";
  if (o.nproc <= 0) return "--nproc-per-node must be >= 1, got " + std::to_string(o.nproc);
  if (o.nproc_limit <= 0) return "--nproc-limit must be >= 1, got " + std::to_string(o.nproc_limit);
  if (const std::string over = par::nproc_over_limit("--nproc-per-node " + std::to_string(o.nproc),
                                                     o.nproc, o.nproc_limit);
      !over.empty())
    return over;
  if (!std::isfinite(o.grace) || o.grace <= 0 || o.grace > kMaxGraceSeconds)
    return fmt::format("--grace-period must be a number of seconds in (0, {:.0f}], got {}",
                       kMaxGraceSeconds, o.grace);
  if (!std::isfinite(o.node_timeout) || o.node_timeout <= 0 || o.node_timeout > kMaxGraceSeconds)
    return fmt::format("--node-timeout must be a number of seconds in (0, {:.0f}], got {}",
                       kMaxGraceSeconds, o.node_timeout);
  if (o.nnodes <= 0) return "--nnodes must be >= 1, got " + std::to_string(o.nnodes);
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    return "--node-rank must be in [0, " + std::to_string(o.nnodes) + ") for --nnodes " +
           std::to_string(o.nnodes) + ", got " + std::to_string(o.node_rank);
  if (o.nnodes > 1 && !o.master_addr_given)
    return "--nnodes " + std::to_string(o.nnodes) +
           " needs --master-addr: the address of node 0, where rank 0 hosts the store (the same "
           "on every node)";
  if (o.nnodes > 1 && o.master_port == 0)
    return "--nnodes " + std::to_string(o.nnodes) +
           " needs --master-port (not 0): every node must name the same port, so it cannot be "
           "picked per node";
  return "";
}

// This node's ranks: PROGRAM with torchrun's environment and the job's token.
std::vector<par::RankProcess> rank_processes(const LaunchOptions& o, const std::string& token) {
  const par::NodePlacement where{
      .nnodes = o.nnodes, .node_rank = o.node_rank, .nproc_per_node = o.nproc};
  std::vector<par::RankProcess> procs(static_cast<size_t>(o.nproc));
  for (int r = 0; r < o.nproc; ++r) {
    procs[r].argv = o.program;
    procs[r].env = par::rank_env(r, where, o.master_addr, o.master_port);
    procs[r].env[par::kJobTokenVariable] = token;
  }
  return procs;
}

par::SuperviseOptions supervise_options(const LaunchOptions& o) {
  return {.tee = o.tee,
          .grace = par::Seconds(o.grace),
          .first_rank = o.node_rank * o.nproc,
          .on_interrupt = [grace = o.grace](int sig) {
            std::fprintf(stderr,
                         "dplab-run: got signal %d: forwarded it to every rank; SIGKILL follows "
                         "after the grace period of %g s, or at once on a second Ctrl-C\n",
                         sig, grace);
          }};
}

// A Ctrl-C or SIGTERM ended the job: say what became of the ranks. Exit status: 128 + signal,
// the shell's convention for "killed by signal".
int interrupted(const LaunchOptions& o, const par::SuperviseResult& res, par::NodeWatch* watch) {
  if (watch)
    watch->report_failure(
        fmt::format("its dplab-run was interrupted by signal {}", res.interrupted_by));
  if (res.killed_at_once) {
    std::fprintf(stderr,
                 "dplab-run: interrupted by signal %d, and again during the grace period: "
                 "killed every rank (SIGKILL)\n",
                 res.interrupted_by);
  } else if (res.started < o.nproc) {
    std::fprintf(stderr,
                 "dplab-run: interrupted by signal %d during the start-up: started %d "
                 "of %d ranks, forwarded it to those\n",
                 res.interrupted_by, res.started, o.nproc);
  } else {
    std::fprintf(stderr, "dplab-run: interrupted by signal %d; forwarded it to every rank\n",
                 res.interrupted_by);
  }
  return 128 + res.interrupted_by;
}

// How the ranks ended, as dplab-run's exit status, with a line naming what failed.
int exit_status(const LaunchOptions& o, const par::SuperviseResult& res, par::NodeWatch* watch) {
  int stopped = 0;
  for (const auto& r : res.ranks) stopped += r.stopped_by_us ? 1 : 0;
  if (res.failed_rank >= 0) {
    std::fprintf(stderr, "dplab-run: %s%s; stopped the other %d running rank(s)\n",
                 o.nnodes > 1 ? fmt::format("node {}: ", o.node_rank).c_str() : "",
                 res.failure.c_str(), stopped);
    return kRankFailed;
  }
  if (!res.remote_failure.empty()) {
    std::fprintf(stderr, "dplab-run: %s; stopped this node's %d running rank(s)\n",
                 res.remote_failure.c_str(), stopped);
    return kRankFailed;
  }
  if (res.interrupted_by != 0) return interrupted(o, res, watch);
  if (watch) watch->report_done();
  return 0;
}

// Starts this node's ranks and supervises them to the end; across nodes, with the other
// nodes' launchers watching each other through rank 0's store.
int launch(LaunchOptions& o) {
  if (o.master_port == 0) o.master_port = par::find_free_port(o.master_addr);
  // Across nodes every dplab-run must hand its ranks the same token: the user sets it.
  if (o.nnodes > 1 && std::getenv(par::kJobTokenVariable) == nullptr) {
    return usage_error(fmt::format("--nnodes {} needs {} set to the same value on every node "
                                   "(rank 0's store admits only the job's ranks); e.g. `export "
                                   "{}=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \\n')` on "
                                   "node 0, and the same value on the others",
                                   o.nnodes, par::kJobTokenVariable, par::kJobTokenVariable));
  }
  const std::string token = par::job_token_for_launch();
  std::vector<par::RankProcess> procs = rank_processes(o, token);
  par::SuperviseOptions sopts = supervise_options(o);
  std::unique_ptr<par::NodeWatch> watch;
  if (o.nnodes > 1) {
    watch = std::make_unique<par::NodeWatch>(o.master_addr, o.master_port, token, o.nnodes,
                                             o.node_rank, par::Seconds(o.node_timeout));
    sopts.remote_failure = [&] { return watch->remote_failure(); };
    sopts.on_failure = [&](const std::string& what) { watch->report_failure(what); };
  }
  const par::SuperviseResult res = par::supervise(procs, sopts);
  return exit_status(o, res, watch.get());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dplab-run: start N ranks of PROGRAM on this node (torchrun's conventions)",
               "dplab-run"};
  LaunchOptions o;
  add_options(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);  // prints help (code 0) or the message
    return code == 0 ? 0 : kUsageError;
  }
  o.master_addr_given = app.count("--master-addr") > 0;
  o.program = app.remaining();
  o.separated = !o.program.empty() && o.program.front() == "--";
  if (o.separated) o.program.erase(o.program.begin());
  if (const std::string problem = usage_problem(o); !problem.empty()) return usage_error(problem);
  try {
    return launch(o);
  } catch (const dplab::Error& e) {
    std::fprintf(stderr, "dplab-run: %s\n", e.what());
    return kRankFailed;
  }
}
