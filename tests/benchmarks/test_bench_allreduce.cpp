// test_bench_allreduce.cpp: a small run of bench_allreduce (N = 2 and 3, 4 and 16 KiB, every
// algorithm of dplab's, no MPI) and checks on what it wrote: a CSV row for every N, algorithm
// and size with the bus bandwidth of its time, auto's rows running what the model of cost.h
// picks, the PNG beside the CSV (that check alone is skipped, and says so, without
// matplotlib); with --ranks-per-node, hierarchical's and the ring's inter-node bytes per
// row; with --nodes, a job token that reaches the launchers through their environment and
// never a command line; and a clear message and exit status 2 for bad arguments.
// The program's path comes as the first argument (tests/benchmarks/meson.build).
// Read next: benchmarks/allreduce.cpp.
// own main below: the program's path comes first (doctest itself: tests/doctest_impl.cpp)
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "parallel/algorithms/cost.h"
#include "parallel/transport/mailbox_transport.h"  // cpu_cores, shm_segment_bytes
#include "tests/program_run.h"

namespace fs = std::filesystem;
using namespace dplab::parallel;
using dplab::testing::ProgramRun;
using dplab::testing::read_csv;
using dplab::testing::run_program;

namespace {

std::string g_exe;  // set in main below

fs::path scratch() {
  return fs::temp_directory_path() / ("dplab-bench-allreduce-test-" + std::to_string(::getpid()));
}

}  // namespace

TEST_CASE("a small run: every row, auto's choices, bus bandwidth, the plot") {
  fs::create_directories(scratch());
  const fs::path csv = scratch() / "allreduce.csv";
  const ProgramRun run =
      run_program("'" + g_exe + "' --ranks 2,3 --max-bytes 16384 --trials 1 --no-mpi --csv '" +
                  csv.string() + "'");
  INFO(run.output);
  REQUIRE(run.rc == 0);
  const auto rows = read_csv(csv);
  const std::set<std::string> algos{
      "ring", "recursive_doubling", "halving_doubling", "one_shot", "auto", "star"};
  CHECK(rows.size() == 2 * algos.size() * 2);  // N = 2, 3; every algorithm; 4 and 16 KiB
  std::set<std::string> seen;
  for (const auto& row : rows) {
    const int n = std::stoi(row.at("ranks"));
    const double bytes = std::stod(row.at("bytes")), secs = std::stod(row.at("seconds"));
    const std::string algo = row.at("algorithm"), ran = row.at("ran");
    CAPTURE(n);
    CAPTURE(algo);
    CAPTURE(bytes);
    seen.insert(algo);
    CHECK((n == 2 || n == 3));
    CHECK((bytes == 4096 || bytes == 16384));
    CHECK(secs > 0);
    CHECK(std::stod(row.at("busbw_gbs")) ==
          doctest::Approx(2.0 * (n - 1) / n * bytes / secs / 1e9).epsilon(1e-3));
    if (algo == "auto") {
      // what the engine's model picks for this size (both sizes fit one slot of any default size)
      LinkCost link = shm_link_cost(cpu_cores());
      link.segment = double(shm_segment_bytes(n));
      CHECK(ran == algorithm_name(choose_all_reduce(n, bytes, link)));
    } else {
      CHECK(ran == algo);
    }
  }
  CHECK(seen == algos);
  if (run.output.find("plots skipped") != std::string::npos) {
    MESSAGE("plot check skipped: " << run.output.substr(run.output.find("plots skipped"), 80));
  } else {
    CHECK(run.output.find("plots written") != std::string::npos);
    CHECK(fs::file_size(scratch() / "allreduce.png") > 10000);
  }
}

TEST_CASE("pretend nodes: hierarchical runs, and each row's inter-node bytes are the formula's") {
  fs::create_directories(scratch());
  const fs::path csv = scratch() / "nodes.csv";
  const ProgramRun run = run_program("'" + g_exe +
                                     "' --engine ring,hierarchical --ranks 4 --ranks-per-node 2 "
                                     "--max-bytes 16384 --trials 1 --no-mpi --no-plot --csv '" +
                                     csv.string() + "'");
  INFO(run.output);
  REQUIRE(run.rc == 0);
  CHECK(run.output.find("pretend nodes of 2 ranks") != std::string::npos);
  const auto rows = read_csv(csv);
  CHECK(rows.size() == 2 * 2);  // two algorithms, 4 and 16 KiB
  for (const auto& row : rows) {
    const int64_t bytes = std::stoll(row.at("bytes"));
    const std::string algo = row.at("algorithm");
    CAPTURE(algo);
    CAPTURE(bytes);
    CHECK(row.at("ranks_per_node") == "2");
    CHECK(row.at("ran") == algo);
    // the busiest rank: the ring's node-edge rank sends all its 2(N-1)/N·S across (1.5 S at
    // 2x2); hierarchical's ranks each send 2(K-1)/K·S/L (S/2) and no more
    const int64_t want = algo == "ring" ? 3 * bytes / 2 : bytes / 2;
    CHECK(std::stoll(row.at("inter_node_bytes")) == want);
  }
}

TEST_CASE("--nodes: the job token reaches the launchers through the environment, no command line") {
  // DPLAB_RUN is a wrapper that writes down what `ps` shows of itself and of its parent (the
  // shell bench_allreduce starts the launchers from), and the token it was given, then runs
  // the real dplab-run. Anyone on the machine may read a command line; only the job its
  // environment.
  fs::create_directories(scratch());
  const fs::path log = scratch() / "command_lines.txt", tokens = scratch() / "tokens.txt";
  const fs::path wrapper = scratch() / "dplab-run-wrapper";
  const fs::path real_run =
      fs::path(g_exe).parent_path() / ".." / "parallel" / "launch" / "exe" / "dplab-run";
  {
    std::ofstream w(wrapper);
    w << "#!/bin/sh\n"
      << "{ tr '\\0' ' ' </proc/$$/cmdline; echo; tr '\\0' ' ' </proc/$PPID/cmdline; echo; } >>'"
      << log.string() << "'\n"
      << "echo \"$DPLAB_JOB_TOKEN\" >>'" << tokens.string() << "'\n"
      << "exec '" << real_run.string() << "' \"$@\"\n";
  }
  fs::permissions(wrapper, fs::perms::owner_all);
  const ProgramRun run = run_program("DPLAB_RUN='" + wrapper.string() + "' '" + g_exe +
                                     "' --engine ring --ranks 2 --nodes 2 --max-bytes 4096 "
                                     "--trials 1 --no-mpi --no-plot --csv '" +
                                     (scratch() / "nodes2.csv").string() + "'");
  INFO(run.output);
  if (run.rc != 0 && run.output.find("without gloo") != std::string::npos) {
    MESSAGE("skipped: this build has no gloo, which --nodes needs");
    return;
  }
  REQUIRE(run.rc == 0);
  std::ifstream tf(tokens), lf(log);
  std::set<std::string> seen;
  for (std::string t; std::getline(tf, t);) seen.insert(t);
  REQUIRE(seen.size() == 1);  // both launchers of the job, one token
  const std::string token = *seen.begin();
  CHECK(token.size() >= 16);
  int lines = 0;
  for (std::string line; std::getline(lf, line); ++lines) {
    CAPTURE(line);
    CHECK(line.find(token) == std::string::npos);
    CHECK(line.find("DPLAB_JOB_TOKEN") == std::string::npos);
  }
  CHECK(lines == 4);  // two launchers, each itself and its parent
}

TEST_CASE("bad arguments: exit status 2 and a message saying what was expected") {
  struct Bad {
    std::string args, says;
  };
  for (const Bad& bad : {Bad{"--ranks 0", "--ranks takes counts >= 1, got 0"},
                         Bad{"--trials 0", "--trials must be >= 1, got 0"},
                         Bad{"--engine ring,tree", "hierarchical or auto, got \"tree\""},
                         Bad{"--link-gbps -1", "--link-gbps must be >= 0"},
                         Bad{"--ranks 3 --ranks-per-node 2",
                             "--ranks-per-node must be 0 (one node) or divide every --ranks "
                             "count, got 2 for 3 ranks"},
                         Bad{"--mpi-btl ib", "--mpi-btl takes vader or tcp, got 'ib'"},
                         Bad{"--frobnicate", "usage:"}}) {
    CAPTURE(bad.args);
    const ProgramRun run =
        run_program("'" + g_exe + "' " + bad.args + " --no-mpi --max-bytes 4096");
    CAPTURE(run.output);
    CHECK(run.rc == 2);
    CHECK(run.output.find(bad.says) != std::string::npos);
  }
}

// The program's path comes first on the command line, doctest's options after.
int main(int argc, char** argv) {
  return dplab::testing::program_test_main(argc, argv, g_exe, scratch());
}
