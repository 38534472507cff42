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

constexpr int kUsageError = 2;  // bad arguments, like argparse and torchrun
constexpr int kRankFailed = 1;
constexpr double kMaxGraceSeconds = 3600;

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "dplab-run: error: %s\nRun with --help for more information.\n",
               msg.c_str());
  return kUsageError;
}

}  // namespace

int main(int argc, char** argv) {
  namespace par = dplab::parallel;
  CLI::App app{"dplab-run: start N ranks of PROGRAM on this node (torchrun's conventions)",
               "dplab-run"};
  int nproc = 1, nnodes = 1, node_rank = 0, master_port = 0, nproc_limit = par::kDefaultNprocLimit;
  std::string master_addr = "127.0.0.1";
  bool tee = false;
  double grace = 5.0, node_timeout = 15.0;
  app.add_option("--nproc-per-node,--nproc_per_node", nproc, "ranks to start on this node")
      ->default_val(1);
  app.add_option("--nproc-limit", nproc_limit, "the most ranks --nproc-per-node may ask for (>= 1)")
      ->default_val(par::kDefaultNprocLimit);
  app.add_option("--nnodes", nnodes,
                 "nodes in the job: one dplab-run per node (ring and star "
                 "run on one node; across nodes use the mpi or nccl engine)")
      ->default_val(1);
  app.add_option("--node-rank,--node_rank", node_rank, "this node's index in [0, nnodes)")
      ->default_val(0);
  auto* addr_opt = app.add_option("--master-addr,--master_addr", master_addr,
                                  "address of rank 0's store (node 0; required with --nnodes > 1)")
                       ->default_val("127.0.0.1");
  app.add_option("--master-port,--master_port", master_port,
                 "port of rank 0's store (default: a free port)")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            bool digits = !s.empty() && s.size() <= 5 &&
                          s.find_first_not_of("0123456789") == std::string::npos;
            if (digits && std::stoi(s) <= 65535) return "";
            return "expected a port number in 0..65535 (0 = pick a free one), got '" + s + "'";
          },
          "PORT"));
  app.add_flag("--tee", tee, "prefix each output line with \"[rank r] \"");
  app.add_option("--grace-period", grace,
                 "seconds between SIGTERM and SIGKILL when stopping ranks "
                 "(> 0, at most 3600); a second Ctrl-C cuts it short")
      ->default_val(5.0);
  app.add_option("--node-timeout", node_timeout,
                 "with --nnodes > 1: seconds without a heartbeat from another node's dplab-run "
                 "before this node stops its ranks and names that node (> 0, at most 3600)")
      ->default_val(15.0);
  // Everything from PROGRAM on belongs to the program, options included.
  app.prefix_command();
  app.footer("\nPROGRAM [ARGS...] follow the options: everything from PROGRAM on is passed to it.\n"
             "Ctrl-C (SIGINT), SIGTERM and SIGHUP are forwarded to every rank, and SIGKILL follows\n"
             "after --grace-period; a second one during the grace period kills the ranks at once.\n"
             "Example: dplab-run --nproc-per-node 4 --tee ./train --epochs 2\n");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);  // prints help (code 0) or the message
    return code == 0 ? 0 : kUsageError;
  }
  std::vector<std::string> program = app.remaining();
  const bool separated = !program.empty() && program.front() == "--";
  if (separated) program.erase(program.begin());
  if (program.empty())
    return usage_error("missing PROGRAM to run (dplab-run [options] PROGRAM ARGS...)");
  // prefix_command() hands an unknown option over as the program: a typo, not a program.
  if (!separated && program.front().starts_with("-")) {
    return usage_error("unknown option '" + program.front() +
                       "' (options come before PROGRAM; "
                       "put -- before a program whose name starts with '-')");
  }
  if (nproc <= 0) return usage_error("--nproc-per-node must be >= 1, got " + std::to_string(nproc));
  if (nproc_limit <= 0)
    return usage_error("--nproc-limit must be >= 1, got " + std::to_string(nproc_limit));
  if (const std::string over = par::nproc_over_limit("--nproc-per-node " + std::to_string(nproc),
                                                     nproc, nproc_limit);
      !over.empty())
    return usage_error(over);
  if (!std::isfinite(grace) || grace <= 0 || grace > kMaxGraceSeconds) {
    return usage_error(fmt::format("--grace-period must be a number of seconds in (0, {:.0f}], got "
                                   "{}",
                                   kMaxGraceSeconds, grace));
  }
  if (!std::isfinite(node_timeout) || node_timeout <= 0 || node_timeout > kMaxGraceSeconds) {
    return usage_error(fmt::format("--node-timeout must be a number of seconds in (0, {:.0f}], "
                                   "got {}",
                                   kMaxGraceSeconds, node_timeout));
  }
  if (nnodes <= 0) return usage_error("--nnodes must be >= 1, got " + std::to_string(nnodes));
  if (node_rank < 0 || node_rank >= nnodes) {
    return usage_error("--node-rank must be in [0, " + std::to_string(nnodes) + ") for --nnodes " +
                       std::to_string(nnodes) + ", got " + std::to_string(node_rank));
  }
  if (nnodes > 1 && addr_opt->count() == 0) {
    return usage_error("--nnodes " + std::to_string(nnodes) +
                       " needs --master-addr: the address "
                       "of node 0, where rank 0 hosts the store (the same on every node)");
  }
  if (nnodes > 1 && master_port == 0) {
    return usage_error("--nnodes " + std::to_string(nnodes) +
                       " needs --master-port (not 0): every "
                       "node must name the same port, so it cannot be picked per node");
  }

  try {
    if (master_port == 0) master_port = par::find_free_port(master_addr);
    // Across nodes every dplab-run must hand its ranks the same token: the user sets it.
    if (nnodes > 1 && std::getenv(par::kJobTokenVariable) == nullptr) {
      return usage_error(fmt::format("--nnodes {} needs {} set to the same value on every node "
                                     "(rank 0's store admits only the job's ranks); e.g. `export "
                                     "{}=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \\n')` on "
                                     "node 0, and the same value on the others",
                                     nnodes, par::kJobTokenVariable, par::kJobTokenVariable));
    }
    const std::string token = par::job_token_for_launch();
    const par::NodePlacement where{
        .nnodes = nnodes, .node_rank = node_rank, .nproc_per_node = nproc};
    std::vector<par::RankProcess> procs(static_cast<size_t>(nproc));
    for (int r = 0; r < nproc; ++r) {
      procs[r].argv = program;
      procs[r].env = par::rank_env(r, where, master_addr, master_port);
      procs[r].env[par::kJobTokenVariable] = token;
    }
    par::SuperviseOptions sopts{.tee = tee,
                                .grace = par::Seconds(grace),
                                .first_rank = node_rank * nproc,
                                .on_interrupt = [grace](int sig) {
                                  std::fprintf(stderr,
                                               "dplab-run: got signal %d: forwarded it to every "
                                               "rank; SIGKILL follows after the grace period of "
                                               "%g s, or at once on a second Ctrl-C\n",
                                               sig, grace);
                                }};
    std::unique_ptr<par::NodeWatch> watch;
    if (nnodes > 1) {
      watch = std::make_unique<par::NodeWatch>(master_addr, master_port, token, nnodes, node_rank,
                                               par::Seconds(node_timeout));
      sopts.remote_failure = [&] { return watch->remote_failure(); };
      sopts.on_failure = [&](const std::string& what) { watch->report_failure(what); };
    }
    par::SuperviseResult res = par::supervise(procs, sopts);
    int stopped = 0;
    for (const auto& r : res.ranks) stopped += r.stopped_by_us ? 1 : 0;
    if (res.failed_rank >= 0) {
      std::fprintf(stderr, "dplab-run: %s%s; stopped the other %d running rank(s)\n",
                   nnodes > 1 ? fmt::format("node {}: ", node_rank).c_str() : "",
                   res.failure.c_str(), stopped);
      return kRankFailed;
    }
    if (!res.remote_failure.empty()) {
      std::fprintf(stderr, "dplab-run: %s; stopped this node's %d running rank(s)\n",
                   res.remote_failure.c_str(), stopped);
      return kRankFailed;
    }
    if (res.interrupted_by != 0) {
      if (watch)
        watch->report_failure(fmt::format("its dplab-run was interrupted by signal {}",
                                          res.interrupted_by));
      if (res.killed_at_once) {
        std::fprintf(stderr,
                     "dplab-run: interrupted by signal %d, and again during the grace period: "
                     "killed every rank (SIGKILL)\n",
                     res.interrupted_by);
      } else if (res.started < nproc) {
        std::fprintf(stderr,
                     "dplab-run: interrupted by signal %d during the start-up: started %d "
                     "of %d ranks, forwarded it to those\n",
                     res.interrupted_by, res.started, nproc);
      } else {
        std::fprintf(stderr, "dplab-run: interrupted by signal %d; forwarded it to every rank\n",
                     res.interrupted_by);
      }
      return 128 + res.interrupted_by;  // the shell convention for "killed by signal"
    }
    if (watch) watch->report_done();
    return 0;
  } catch (const dplab::Error& e) {
    std::fprintf(stderr, "dplab-run: %s\n", e.what());
    return kRankFailed;
  }
}
