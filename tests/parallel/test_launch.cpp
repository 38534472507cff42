// test_launch.cpp: rank discovery from launcher variables, the dplab-run launcher and spawn().
// dplab-run and the helper programs are real executables; Meson passes their paths in the
// environment (DPLAB_RUN, LAUNCH_CHILD, SPAWN_CHILD), and each test runs them as a child
// process with stdout/stderr captured to files, then checks exit code and output. Time is
// only a lower bound (a grace period is waited out) or a guard: a run still going after 60 s
// is killed (SIGALRM), which shows as its status, so a launcher that hangs fails the test.
// Read next: launch_child.cpp, spawn_child.cpp (what the launched programs do).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <sstream>
#include <thread>

#include "framework/error.h"
#include "parallel/comm/init.h"
#include "parallel/engines/collective_engine.h"
#include "parallel/rendezvous/tcp_store.h"

namespace par = dplab::parallel;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct Ran {
  int status = -1;  // exit status, or 128 + signal
  std::string out, err;
  double seconds = 0;
};

std::string program(const char* var) {
  const char* p = std::getenv(var);
  REQUIRE_MESSAGE(p != nullptr, var << " is not set: run this test through `meson test`");
  return p;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool has(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

constexpr int kKilledAsStray = 128 + SIGALRM;  // the status of a run that the 60 s alarm ended

// A signal a test sends, once the run's stdout holds `stdout_lines` lines and its stderr
// holds `stderr_text` (the ranks said they are up, the launcher said what it did): a user
// pressing Ctrl-C on a running job, not on a launcher still starting.
struct SignalWhen {
  int sig;
  int stdout_lines = 0;
  std::string stderr_text = "";
};

// Runs argv with stdout/stderr captured; a stray run is killed after 60 s. Sends each of
// `signals` in turn when its moment comes.
Ran run(const std::vector<std::string>& args, const std::vector<SignalWhen>& signals) {
  static std::atomic<int> runs{0};  // two runs may be in flight at once (two "nodes")
  fs::path dir = fs::temp_directory_path() /
                 ("dplab_run_" + std::to_string(getpid()) + "_" + std::to_string(runs++));
  fs::create_directories(dir);
  fs::path out = dir / "out", err = dir / "err";
  auto t0 = Clock::now();
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(o, 1);
    dup2(e, 2);
    alarm(60);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  for (const SignalWhen& when : signals) {
    auto ready = [&] {
      const std::string text = slurp(out);
      return std::count(text.begin(), text.end(), '\n') >= when.stdout_lines &&
             has(slurp(err), when.stderr_text);
    };
    auto running = [&] {  // looks without reaping: the waitpid below gets the status
      siginfo_t info{};
      return waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0;
    };
    // the 60 s alarm ends a run whose ranks never come up; then the signal finds no one
    while (!ready() && running()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    kill(pid, when.sig);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  Ran r;
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = slurp(out);
  r.err = slurp(err);
  fs::remove_all(dir);
  return r;
}

Ran run(const std::vector<std::string>& args, int sig = 0, int ready_lines = 0) {
  if (sig == 0) return run(args, std::vector<SignalWhen>{});
  return run(args, {{.sig = sig, .stdout_lines = ready_lines}});
}

}  // namespace

// --- rank_info_from_env ---

TEST_CASE("rank_info_from_env: torchrun / dplab-run variables") {
  auto info = par::rank_info_from_env({{"RANK", "3"},
                                       {"WORLD_SIZE", "8"},
                                       {"LOCAL_RANK", "1"},
                                       {"LOCAL_WORLD_SIZE", "2"},
                                       {"MASTER_ADDR", "10.0.0.1"},
                                       {"MASTER_PORT", "1234"}});
  CHECK(info.rank == 3);
  CHECK(info.world_size == 8);
  CHECK(info.local_rank == 1);
  CHECK(info.local_world_size == 2);
  CHECK(info.master_addr == "10.0.0.1");
  CHECK(info.master_port == 1234);
  // Single node defaults, and torch's default address and port.
  auto one = par::rank_info_from_env({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  CHECK(one.local_world_size == 1);
  CHECK(one.master_addr == "127.0.0.1");
  CHECK(one.master_port == 29500);
}

TEST_CASE("rank_info_from_env: OpenMPI and Slurm variables") {
  auto mpi = par::rank_info_from_env({{"OMPI_COMM_WORLD_RANK", "5"},
                                      {"OMPI_COMM_WORLD_SIZE", "6"},
                                      {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}});
  CHECK(mpi.rank == 5);
  CHECK(mpi.world_size == 6);
  CHECK(mpi.local_rank == 2);
  CHECK(mpi.local_world_size == 3);
  // Nodes 0-2 run 2 tasks, node 3 runs 1: this is the lone task on node 3.
  auto slurm = par::rank_info_from_env({{"SLURM_PROCID", "6"},
                                        {"SLURM_NTASKS", "7"},
                                        {"SLURM_LOCALID", "0"},
                                        {"SLURM_NODEID", "3"},
                                        {"SLURM_TASKS_PER_NODE", "2(x3),1"}});
  CHECK(slurm.rank == 6);
  CHECK(slurm.world_size == 7);
  CHECK(slurm.local_rank == 0);
  CHECK(slurm.local_world_size == 1);
  // torchrun variables win over the others when both exist (torchrun under srun).
  auto both = par::rank_info_from_env(
      {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  CHECK(both.rank == 1);
}

TEST_CASE("rank_info_from_env: missing and malformed values") {
  using Env = std::map<std::string, std::string>;
  auto fails_with = [](const Env& env, const char* text) {
    CHECK_THROWS_WITH_AS(par::rank_info_from_env(env), doctest::Contains(text), dplab::Error);
  };
  fails_with({}, "no rank information in the environment");
  fails_with({{"RANK", "x"}, {"WORLD_SIZE", "2"}}, "RANK='x' is not an integer");
  fails_with({{"RANK", "1"}, {"WORLD_SIZE", "2x"}}, "WORLD_SIZE='2x' is not an integer");
  fails_with({{"RANK", "1"}}, "WORLD_SIZE is not set");
  fails_with({{"WORLD_SIZE", "4"}}, "RANK is not set");
  fails_with({{"RANK", "4"}, {"WORLD_SIZE", "4"}}, "rank 4 is not in [0, 4)");
  fails_with({{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "world size must be >= 1");
  fails_with({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "http"}},
             "MASTER_PORT='http' is not an integer");
  fails_with({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}},
             "MASTER_PORT=70000 is not a port");
  fails_with({{"OMPI_COMM_WORLD_RANK", "0"}}, "OMPI_COMM_WORLD_SIZE is not set");
  fails_with({{"SLURM_PROCID", "0"},
              {"SLURM_NTASKS", "2"},
              {"SLURM_TASKS_PER_NODE", "2"},
              {"SLURM_NODEID", "1"}},
             "lists 1 nodes, but SLURM_NODEID is 1");
}

// --- dplab-run ---

TEST_CASE("dplab-run: bad arguments exit 2 with a message") {
  std::string run_bin = program("DPLAB_RUN"), child = program("LAUNCH_CHILD");
  Ran r = run({run_bin, "--nproc-per-node", "0", child});
  CHECK(r.status == 2);
  CHECK(has(r.err, "--nproc-per-node must be >= 1, got 0"));
  r = run({run_bin, "--nproc-per-node", "2"});
  CHECK(r.status == 2);
  CHECK(has(r.err, "missing PROGRAM"));
  r = run({run_bin, "--nproc-per-node", "2", "--master-port", "abc", child});
  CHECK(r.status == 2);
  CHECK(has(r.err,
            "--master-port: expected a port number in 0..65535 (0 = pick a free one), got 'abc'"));
  r = run({run_bin, "--nproc-per-node", "two", child});
  CHECK(r.status == 2);
  CHECK(has(r.err, "--nproc-per-node"));
  r = run({run_bin, "--nproc-per-node", "1", "/nonexistent/program"});
  CHECK(r.status == 1);
  CHECK(has(r.err, "cannot start rank 0"));
  // an unknown option is a typo, not a program to run
  r = run({run_bin, "--bogus", child});
  CHECK(r.status == 2);
  CHECK(has(r.err, "unknown option '--bogus'"));
  // a limit that no count can meet is a typo too, not a refusal of every --nproc-per-node
  r = run({run_bin, "--nproc-limit", "-5", child});
  CHECK(r.status == 2);
  CHECK_MESSAGE(has(r.err, "--nproc-limit must be >= 1, got -5"), r.err);
  r = run({run_bin, "--nproc-per-node", "300", child});
  CHECK(r.status == 2);
  CHECK_MESSAGE(has(r.err, "--nproc-per-node 300 is over the limit of 256 ranks per node (each rank is a process "
                           "of its own); if you mean it, add --nproc-limit 300"),
                r.err);
}

TEST_CASE("dplab-run: N = 3 ranks each see their rendezvous variables") {
  Ran r = run({program("DPLAB_RUN"), "--nproc-per-node", "3", "--nnodes", "1", "--node-rank", "0",
               program("LAUNCH_CHILD"), "print"});
  REQUIRE(r.status == 0);
  for (int rank = 0; rank < 3; ++rank) {
    std::string want = "RANK=" + std::to_string(rank) +
                       " WORLD_SIZE=3 LOCAL_RANK=" + std::to_string(rank) +
                       " LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=";
    CHECK_MESSAGE(has(r.out, want), r.out);
  }
  CHECK(has(r.out, "OMP_NUM_THREADS=1"));
  CHECK_FALSE(has(r.out, "MASTER_PORT=0 "));  // a free port was picked, not 0
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 3);
}

TEST_CASE("dplab-run: ranks rendezvous through the TCPStore; a world-size lie is reported") {
  Ran r =
      run({program("DPLAB_RUN"), "--nproc-per-node", "3", program("LAUNCH_CHILD"), "rendezvous"});
  CHECK_MESSAGE(r.status == 0, r.err);
  for (int rank = 0; rank < 3; ++rank)
    CHECK(has(r.out, "rank " + std::to_string(rank) + " sum 60"));
  r = run({program("DPLAB_RUN"), "--nproc-per-node", "2", "--grace-period", "1",
           program("LAUNCH_CHILD"), "wrong-world"});
  CHECK(r.status == 1);  // the ranks found it and failed; a run that hung would be the alarm's
  CHECK_MESSAGE(has(r.err, "ranks disagree on the world size"), r.err);
}

TEST_CASE("dplab-run + init_process_group: env:// and file:// both give a working group") {
  fs::path file = fs::temp_directory_path() / ("dplab_init_" + std::to_string(getpid()));
  fs::remove(file);
  for (std::string method : {std::string("env://"), "file://" + file.string()}) {
    Ran r = run(
        {program("DPLAB_RUN"), "--nproc-per-node", "3", program("LAUNCH_CHILD"), "init", method});
    CHECK_MESSAGE(r.status == 0, method << ": " << r.err);
    for (int rank = 0; rank < 3; ++rank)  // 1 + 2 + 3
      CHECK_MESSAGE(has(r.out, "rank " + std::to_string(rank) + " of 3 all_reduce 6"), r.out);
  }
  CHECK_FALSE(fs::exists(file));  // the last FileStore removed its file
}

TEST_CASE("dplab-run: a failing rank stops the others and is named") {
  Ran r = run({program("DPLAB_RUN"), "--nproc-per-node", "3", "--grace-period", "1",
               program("LAUNCH_CHILD"), "fail", "1", "3"});
  CHECK(r.status == 1);
  CHECK_MESSAGE(has(r.err, "rank 1 (pid "), r.err);
  CHECK(has(r.err, "exited with status 3"));
  // The other ranks sleep 60 s: had dplab-run not stopped them, it would still be waiting
  // on them when the 60 s alarm ends it (status kKilledAsStray, not 1).
  CHECK(has(r.err, "stopped the other 2 running rank(s)"));
}

TEST_CASE("dplab-run: ranks that ignore SIGTERM get SIGKILL after the grace period") {
  Ran r = run({program("DPLAB_RUN"), "--nproc-per-node", "3", "--grace-period", "1",
               program("LAUNCH_CHILD"), "stubborn", "0", "4"});
  CHECK(r.status == 1);
  CHECK_MESSAGE(has(r.err, "rank 0 (pid "), r.err);
  CHECK(has(r.err, "exited with status 4"));
  // 0.3 s until rank 0 fails + 1 s of grace, at least; without the SIGKILL the ranks that
  // ignore SIGTERM would sleep until the 60 s alarm ends dplab-run (status kKilledAsStray)
  CHECK(r.seconds >= 1.2);
}

TEST_CASE("dplab-run: SIGINT is forwarded to every rank") {
  // No rank 99: all three ranks say they sleep, then sleep 60 s until the forwarded SIGINT
  // ends them. The signal goes once all three have said so: dplab-run is supervising them.
  Ran r = run(
      {program("DPLAB_RUN"), "--nproc-per-node", "3", program("LAUNCH_CHILD"), "fail", "99", "1"},
      SIGINT, 3);
  CHECK(r.status == 128 + SIGINT);  // not the alarm's: the ranks did not sleep on
  CHECK_MESSAGE(has(r.err, "interrupted by signal 2; forwarded it to every rank"), r.err);
}

TEST_CASE("dplab-run: a second Ctrl-C during the grace period kills the ranks at once") {
  // The ranks ignore SIGINT, SIGTERM and SIGHUP (an ignored signal stays ignored across exec):
  // only SIGKILL ends them, and they would sleep past the 60 s alarm. The first Ctrl-C goes
  // once both said "up", and starts a grace period of 600 s; the second once dplab-run said
  // so. Without its SIGKILL the alarm would end dplab-run (kKilledAsStray).
  const Ran r = run({program("DPLAB_RUN"), "--nproc-per-node", "2", "--grace-period", "600", "/bin/sh", "-c",
                     "trap '' INT TERM HUP; echo up $$; exec sleep 120"},
                    {{.sig = SIGINT, .stdout_lines = 2}, {.sig = SIGINT, .stderr_text = "grace period of 600 s"}});
  CHECK_MESSAGE(r.status == 128 + SIGINT, r.err);
  CHECK_MESSAGE(has(r.err, "got signal 2: forwarded it to every rank; SIGKILL follows after the grace period "
                           "of 600 s, or at once on a second Ctrl-C"),
                r.err);
  CHECK_MESSAGE(has(r.err, "interrupted by signal 2, and again during the grace period: killed every rank "
                           "(SIGKILL)"),
                r.err);
  // and they are gone, reaped by dplab-run: each rank's shell printed its pid, the pid of
  // the sleep it became
  std::istringstream lines(r.out);
  int ranks = 0;
  for (std::string word, pid; lines >> word >> pid; ++ranks) {
    REQUIRE(word == "up");
    const bool gone = kill(std::stoi(pid), 0) != 0 && errno == ESRCH;
    CHECK_MESSAGE(gone, "rank pid " << pid << " is still there");
    if (!gone) kill(-std::stoi(pid), SIGKILL);  // no stray sleeper after a failed check
  }
  CHECK(ranks == 2);
}

TEST_CASE("dplab-run: --tee prefixes every line with its rank") {
  Ran r = run(
      {program("DPLAB_RUN"), "--nproc-per-node", "2", "--tee", program("LAUNCH_CHILD"), "lines"});
  REQUIRE(r.status == 0);
  for (int rank = 0; rank < 2; ++rank) {
    std::string p = "[rank " + std::to_string(rank) + "] ";
    CHECK(has(r.out, p + "hello from " + std::to_string(rank) + "\n"));
    CHECK(has(r.out, p + "no newline at the end\n"));
    CHECK(has(r.err, p + "warning from " + std::to_string(rank) + "\n"));
  }
  // Without --tee the output is passed through untouched.
  r = run({program("DPLAB_RUN"), "--nproc-per-node", "1", program("LAUNCH_CHILD"), "lines"});
  CHECK(r.out == "hello from 0\nno newline at the end");
}

// --- dplab-run on several nodes (two launchers on this machine stand for two nodes) ---

TEST_CASE("dplab-run --nnodes: bad node arguments exit 2 and say what was expected") {
  std::string run_bin = program("DPLAB_RUN"), child = program("LAUNCH_CHILD");
  auto fails_with = [&](std::vector<std::string> args, const char* text) {
    args.insert(args.begin(), run_bin);
    args.push_back(child);
    Ran r = run(args);
    CHECK(r.status == 2);
    CHECK_MESSAGE(has(r.err, text), r.err);
  };
  fails_with({"--nnodes", "0"}, "--nnodes must be >= 1, got 0");
  fails_with(
      {"--nnodes", "2", "--node-rank", "2", "--master-addr", "127.0.0.1", "--master-port", "29999"},
      "--node-rank must be in [0, 2) for --nnodes 2, got 2");
  fails_with({"--node-rank", "1"}, "--node-rank must be in [0, 1) for --nnodes 1, got 1");
  fails_with({"--nnodes", "2", "--node-rank", "1"}, "--nnodes 2 needs --master-addr");
  fails_with({"--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1"},
             "--nnodes 2 needs --master-port (not 0)");
  fails_with(
      {"--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--master-port", "29999"},
      "--nnodes 2 needs DPLAB_JOB_TOKEN set to the same value on every node");
}

namespace {
// Node 0 and node 1 of a 2-node job of 2 ranks each, both launched here at once.
// Both get the same DPLAB_JOB_TOKEN, as a user sets it on every node.
std::pair<Ran, Ran> two_nodes(const std::vector<std::string>& child_args) {
  const std::string port = std::to_string(par::find_free_port());
  ::setenv("DPLAB_JOB_TOKEN", "two-nodes-one-job-token", 1);
  auto node = [&](int k) {
    std::vector<std::string> args = {program("DPLAB_RUN"),
                                     "--nnodes",
                                     "2",
                                     "--node-rank",
                                     std::to_string(k),
                                     "--nproc-per-node",
                                     "2",
                                     "--master-addr",
                                     "127.0.0.1",
                                     "--master-port",
                                     port,
                                     "--grace-period",
                                     "1",
                                     program("LAUNCH_CHILD")};
    args.insert(args.end(), child_args.begin(), child_args.end());
    return std::async(std::launch::async, [args] { return run(args); });
  };
  auto n0 = node(0), n1 = node(1);
  std::pair<Ran, Ran> out{n0.get(), n1.get()};
  ::unsetenv("DPLAB_JOB_TOKEN");
  return out;
}
}  // namespace

TEST_CASE("dplab-run --nnodes 2: global ranks, local ranks and GROUP_RANK per node") {
  auto [n0, n1] = two_nodes({"print"});
  REQUIRE(n0.status == 0);
  REQUIRE(n1.status == 0);
  for (int local = 0; local < 2; ++local)
    for (int node = 0; node < 2; ++node) {
      const std::string& out = node == 0 ? n0.out : n1.out;
      std::string want = "RANK=" + std::to_string(node * 2 + local) +
                         " WORLD_SIZE=4 LOCAL_RANK=" + std::to_string(local) +
                         " LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1";
      CHECK_MESSAGE(has(out, want), out);
      CHECK(has(out, "GROUP_RANK=" + std::to_string(node) + "\n"));
    }
}

TEST_CASE("dplab-run --nnodes 2: the ranks of both nodes meet in node 0's store") {
  auto [n0, n1] = two_nodes({"rendezvous"});
  CHECK_MESSAGE(n0.status == 0, n0.err);
  CHECK_MESSAGE(n1.status == 0, n1.err);
  for (int rank = 0; rank < 4; ++rank)  // 10 + 20 + 30 + 40
    CHECK(has(rank < 2 ? n0.out : n1.out, "rank " + std::to_string(rank) + " sum 100"));
}

TEST_CASE("dplab-run --nnodes 2: the ring engine runs over gloo's wire, or refuses without gloo") {
  for (const char* engine : {"ring", "star"}) {
    auto [n0, n1] = two_nodes({"init", "env://", engine});
    if (par::gloo_built()) {  // shm in each node, gloo between them: 1 + 2 + 3 + 4 on every rank
      CHECK_MESSAGE(n0.status == 0, n0.err);
      CHECK_MESSAGE(n1.status == 0, n1.err);
      CHECK(has(n0.out, "rank 0 of 4 all_reduce 10"));
      CHECK(has(n1.out, "rank 3 of 4 all_reduce 10"));
      continue;
    }
    CHECK(n0.status == 1);
    CHECK(n1.status == 1);
    for (const Ran* r : {&n0, &n1}) {
      CHECK_MESSAGE(has(r->err, std::string("the '") + engine + "' engine runs on one node"),
                    r->err);
      CHECK(has(r->err, "WORLD_SIZE=4, LOCAL_WORLD_SIZE=2"));
      CHECK(has(r->err, "the 'mpi' engine"));
      CHECK(has(r->err, "the 'nccl' engine"));
    }
  }
}

// --- the mpi engine: MPI has no timeouts, so a rank leaving early must end the job ---

TEST_CASE("mpi engine: a rank that returns early ends the job after the timeout, saying why" *
          doctest::skip(std::getenv("MPIRUN") == nullptr)) {
  Ran r = run({std::getenv("MPIRUN"), "--bind-to", "none", "-np", "2", program("LAUNCH_CHILD"),
               "mpi-early-exit"});
  CHECK(r.status != 0);
  CHECK_MESSAGE(has(r.err, "rank 1 leaves early"), r.err);
  CHECK(has(r.err, "rank 1 is exiting, but the other ranks did not reach the end of the program "
                   "within 5.0 s"));
  CHECK(r.status != kKilledAsStray);  // not a hang: 5 s of grace, then mpirun stops every rank
}

// --- spawn ---

TEST_CASE("spawn: fn runs once on each of N ranks") {
  fs::path dir = fs::temp_directory_path() / ("dplab_spawn_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  Ran r = run({program("SPAWN_CHILD"), "ok", "3", dir.string()});
  CHECK_MESSAGE(r.status == 0, r.err);
  for (int rank = 0; rank < 3; ++rank) {
    std::string text = slurp(dir / ("rank" + std::to_string(rank) + ".txt"));
    CHECK(has(text, "rank " + std::to_string(rank) + " RANK " + std::to_string(rank) +
                        " WORLD_SIZE 3 MASTER_PORT "));
  }
  // Only the parent gets past spawn(): the children ended inside it.
  CHECK(slurp(dir / "parent.txt") == "parent done\n");
  fs::remove_all(dir);
}

TEST_CASE("spawn: a failing rank becomes an Error in the parent naming it") {
  fs::path dir = fs::temp_directory_path();
  Ran r = run({program("SPAWN_CHILD"), "fail", "3", dir.string()});
  CHECK(r.status == 3);
  CHECK_MESSAGE(has(r.out, "spawn failed: spawn: rank 1 (pid "), r.out);
  CHECK(has(r.out, "exited with status 1"));
  CHECK(has(r.err, "rank 1 gives up"));  // the child printed its exception
}

TEST_CASE("spawn under dplab-run refuses, saying what to do, instead of starting two jobs") {
  fs::path dir = fs::temp_directory_path() / ("dplab_spawn_rdzv_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  Ran r = run({program("DPLAB_RUN"), "--nproc-per-node", "2", program("SPAWN_CHILD"), "ok", "2",
               dir.string()});
  CHECK(r.status != 0);  // each rank's spawn() threw, spawn_child exits 3, dplab-run fails
  CHECK_MESSAGE(has(r.out, "spawn failed: spawn: this process is already rank"), r.out);
  CHECK(has(r.out, "of 2 of a job started by a launcher"));
  CHECK(has(r.out, "call init_process_group()"));
  // no rank ran fn, and no parent got past spawn()
  CHECK_FALSE(fs::exists(dir / "rank0.txt"));
  CHECK_FALSE(fs::exists(dir / "rank1.txt"));
  CHECK_FALSE(fs::exists(dir / "parent.txt"));
  fs::remove_all(dir);
}
