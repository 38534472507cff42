// spawn.cpp: spawn() by re-execution. The parent reads its own argv from /proc/self/cmdline
// and starts /proc/self/exe once per rank with DPLAB_SPAWN_RANK, DPLAB_SPAWN_NPROCS and
// DPLAB_SPAWN_CALL (which spawn() call of the program this child belongs to) plus the
// torchrun variables; the child's main() then reaches spawn() again and runs fn(rank).
// Read next: supervisor.cpp.
#include "parallel/launch/spawn.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "framework/error.h"
#include "parallel/launch/supervisor.h"
#include "parallel/rendezvous/job_token.h"
#include "parallel/rendezvous/tcp_store.h"

namespace dplab::parallel {

namespace {

std::atomic<int> g_spawn_calls{0};  // how many times this process has called spawn()
std::atomic<bool> g_in_child_fn{false};

std::vector<std::string> own_argv() {
  int fd = ::open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  DPLAB_CHECK(fd >= 0, "spawn: cannot read /proc/self/cmdline (spawn needs Linux /proc)");
  std::string all;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) all.append(buf, static_cast<size_t>(n));
  ::close(fd);
  std::vector<std::string> argv;
  size_t start = 0;
  while (start < all.size()) {
    size_t end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    argv.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  DPLAB_CHECK(!argv.empty(), "spawn: /proc/self/cmdline is empty");
  return argv;
}

int env_int(const char* name) {
  const char* v = std::getenv(name);
  DPLAB_CHECK(v != nullptr, "spawn: {} is not set in a spawned child", name);
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  DPLAB_CHECK(end != v && *end == '\0', "spawn: {}='{}' is not an integer", name, v);
  return static_cast<int>(x);
}

[[noreturn]] void run_child(const std::function<void(int)>& fn, int nprocs) {
  int rank = -1;
  try {
    rank = env_int("DPLAB_SPAWN_RANK");
    int expected = env_int("DPLAB_SPAWN_NPROCS");
    DPLAB_CHECK(expected == nprocs,
                "spawn: this child was started for {} ranks but spawn() now asks for {}; the "
                "code before spawn() must make the same calls in every process",
                expected, nprocs);
    g_in_child_fn = true;
    fn(rank);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] spawn: fn raised: %s\n", rank, e.what());
    std::fflush(stderr);
    std::exit(1);
  } catch (...) {
    std::fprintf(stderr, "[rank %d] spawn: fn raised a non-std exception\n", rank);
    std::fflush(stderr);
    std::exit(1);
  }
  std::fflush(stdout);
  std::exit(0);  // the child's job ends here: main() after spawn() is the parent's
}

// A launcher (dplab-run, torchrun) already started this process as one rank of a job and
// set RANK and WORLD_SIZE: spawn() here would start nprocs more from every rank, each set a
// job of its own with its own store, and every line printed twice. Refuse, saying what to
// do instead. (Not in spawn()'s own children: they carry the same variables, set by it.)
void refuse_under_launcher(int nprocs) {
  const char* rank = std::getenv("RANK");
  const char* world = std::getenv("WORLD_SIZE");
  if (rank == nullptr && world == nullptr) return;
  DPLAB_FAIL("spawn: this process is already rank {} of {} of a job started by a launcher "
             "(dplab-run or torchrun set RANK and WORLD_SIZE), so spawn() would start {} more "
             "ranks from each of them as separate jobs. Either run the program without the "
             "launcher and let spawn() start the ranks, or keep the launcher and call "
             "init_process_group() where the program calls spawn()",
             rank ? rank : "?", world ? world : "?", nprocs);
}

}  // namespace

bool is_spawned_child() { return std::getenv("DPLAB_SPAWN_RANK") != nullptr; }

void spawn(const std::function<void(int)>& fn, int nprocs, const SpawnOptions& opts) {
  DPLAB_CHECK(nprocs >= 1, "spawn: nprocs must be >= 1, got {}", nprocs);
  DPLAB_CHECK(!g_in_child_fn, "spawn: called from inside a spawned rank's fn; nested spawn is "
                              "not supported");
  int call = g_spawn_calls++;
  if (is_spawned_child()) {
    int target = env_int("DPLAB_SPAWN_CALL");
    if (call < target) return;  // an earlier spawn() of main(); its own children ran it
    DPLAB_CHECK(call == target,
                "spawn: child of spawn() call #{} reached call #{}; main() "
                "must make the same spawn() calls in every process",
                target, call);
    run_child(fn, nprocs);
  }
  refuse_under_launcher(nprocs);

  int port = opts.master_port > 0 ? opts.master_port : find_free_port(opts.master_addr);
  std::vector<std::string> argv = own_argv();
  // Exec the parent's own file, whatever argv[0] says (a relative path, a name from PATH).
  char exe[4096];
  ssize_t len = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  DPLAB_CHECK(len > 0, "spawn: cannot resolve /proc/self/exe");
  argv[0] = std::string(exe, static_cast<size_t>(len));

  // one token per job: only these ranks get into its store (job_token.h)
  const std::string token = job_token_for_launch();
  std::vector<RankProcess> procs(static_cast<size_t>(nprocs));
  for (int r = 0; r < nprocs; ++r) {
    procs[r].argv = argv;
    procs[r].env = rank_env(r, nprocs, opts.master_addr, port);
    procs[r].env[kJobTokenVariable] = token;
    procs[r].env["DPLAB_SPAWN_RANK"] = std::to_string(r);
    procs[r].env["DPLAB_SPAWN_NPROCS"] = std::to_string(nprocs);
    procs[r].env["DPLAB_SPAWN_CALL"] = std::to_string(call);
  }
  SuperviseResult res = supervise(procs, {.tee = opts.tee, .grace = opts.grace});
  if (res.failed_rank >= 0) {
    DPLAB_FAIL("spawn: {}; the other ranks were stopped", res.failure);
  }
  if (res.interrupted_by != 0) {
    DPLAB_FAIL("spawn: interrupted by signal {} ({}); the signal was forwarded to all {} ranks",
               res.interrupted_by, strsignal(res.interrupted_by), nprocs);
  }
}

}  // namespace dplab::parallel
