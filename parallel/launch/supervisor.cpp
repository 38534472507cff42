// supervisor.cpp: fork/exec of rank processes and the watch loop.
// The loop wakes every 50 ms at most (or when output arrives, or a signal interrupts poll):
// it relays tee'd output line by line, reaps exited ranks with waitpid(pid, WNOHANG) (only
// our own pids: spawn() runs inside a user's program that may have other children), and
// escalates SIGTERM -> SIGKILL once the grace period is over.
// Read next: spawn.cpp, exe/dplab_run.cpp.
#include "parallel/launch/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "framework/error.h"
#include "parallel/transport/hang_report.h"

extern char** environ;

namespace dplab::parallel {

namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_pending_signal = 0;
void on_signal(int sig) { g_pending_signal = sig; }

// Installs the forwarding handlers for one supervise() call and restores the old ones.
class SignalForwarding {
 public:
  explicit SignalForwarding(bool on) : on_(on) {
    if (!on_) return;
    g_pending_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: poll() returns EINTR at once
    for (size_t i = 0; i < kForwarded.size(); ++i) sigaction(kForwarded[i], &sa, &old_[i]);
  }
  ~SignalForwarding() {
    if (!on_) return;
    for (size_t i = 0; i < kForwarded.size(); ++i) sigaction(kForwarded[i], &old_[i], nullptr);
  }

 private:
  // Ctrl-C, kill, and a closed terminal: each stops the ranks before the launcher goes.
  static constexpr std::array<int, 3> kForwarded{SIGINT, SIGTERM, SIGHUP};
  bool on_;
  std::array<struct sigaction, 3> old_{};
};

struct Child {
  int rank;
  int pid = -1;
  bool alive = false;
  int pipe_fd[2] = {-1, -1};  // tee: read ends of the child's stdout and stderr
  std::string partial[2];     // tee: bytes after the last newline
};

void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our own stdout is gone; nothing sensible to do
    off += static_cast<size_t>(n);
  }
}

// Reads what is available on one tee pipe and prints complete lines with the rank prefix.
// Returns false at EOF (the pipe is then closed).
bool relay(Child& c, int which) {
  char buf[8192];
  ssize_t n = ::read(c.pipe_fd[which], buf, sizeof(buf));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  std::string& part = c.partial[which];
  std::string out;
  std::string prefix = fmt::format("[rank {}] ", c.rank);
  if (n > 0) {
    part.append(buf, static_cast<size_t>(n));
    size_t start = 0, nl;
    while ((nl = part.find('\n', start)) != std::string::npos) {
      out += prefix + part.substr(start, nl - start + 1);
      start = nl + 1;
    }
    part.erase(0, start);
  } else {
    if (!part.empty()) out += prefix + part + "\n";  // last line without a newline
    part.clear();
    ::close(c.pipe_fd[which]);
    c.pipe_fd[which] = -1;
  }
  write_all(which == 0 ? STDOUT_FILENO : STDERR_FILENO, out);
  return n > 0;
}

std::vector<std::string> merged_env(const std::map<std::string, std::string>& extra) {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos && extra.count(kv.substr(0, eq))) continue;
    out.push_back(std::move(kv));
  }
  for (const auto& [k, v] : extra) out.push_back(k + "=" + v);
  return out;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

void signal_group(const Child& c, int sig) {
  if (c.pid > 0) ::kill(-c.pid, sig);  // the rank's whole process group
}

// fork + exec one rank. Returns the pid; throws Error if exec fails (reported by the child
// through a close-on-exec pipe: EOF means exec succeeded).
int start_one(const RankProcess& p, Child& c, bool tee) {
  DPLAB_CHECK(!p.argv.empty(), "supervise: rank {} has no program to run", c.rank);
  std::vector<std::string> argv_s = p.argv, env_s = merged_env(p.env);
  std::vector<char*> argv = c_strings(argv_s), envp = c_strings(env_s);
  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, exec_pipe[2];
  DPLAB_CHECK(::pipe2(exec_pipe, O_CLOEXEC) == 0, "supervise: pipe2 failed: {}",
              std::strerror(errno));
  if (tee) {
    DPLAB_CHECK(::pipe2(out_pipe, O_CLOEXEC) == 0 && ::pipe2(err_pipe, O_CLOEXEC) == 0,
                "supervise: pipe2 failed: {}", std::strerror(errno));
  }
  const pid_t parent = ::getpid();
  int pid = ::fork();
  DPLAB_CHECK(pid >= 0, "supervise: fork failed for rank {}: {}", c.rank, std::strerror(errno));
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    ::setpgid(0, 0);
    die_with_parent(parent);
    if (tee) {
      ::dup2(out_pipe[1], STDOUT_FILENO);
      ::dup2(err_pipe[1], STDERR_FILENO);
    }
    ::execvpe(argv[0], argv.data(), envp.data());
    int err = errno;
    [[maybe_unused]] ssize_t n = ::write(exec_pipe[1], &err, sizeof(err));
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here: whichever of parent and child runs first wins the race
  ::close(exec_pipe[1]);
  if (tee) {
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    c.pipe_fd[0] = out_pipe[0];
    c.pipe_fd[1] = err_pipe[0];
  }
  c.pid = pid;
  c.alive = true;
  int err = 0;
  ssize_t n;
  do {
    n = ::read(exec_pipe[0], &err, sizeof(err));
  } while (n < 0 && errno == EINTR);
  ::close(exec_pipe[0]);
  if (n == sizeof(err)) {
    ::waitpid(pid, nullptr, 0);
    c.alive = false;
    for (int& fd : c.pipe_fd) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
    DPLAB_FAIL("cannot start rank {}: '{}': {}", c.rank, p.argv[0], std::strerror(err));
  }
  return pid;
}

}  // namespace

void die_with_parent(pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  // The parent may have died between fork() and prctl(): then nobody would ever signal us.
  if (::getppid() != parent) ::_exit(128 + SIGTERM);
}

std::string describe_wait_status(int st) {
  if (WIFEXITED(st)) return fmt::format("exited with status {}", WEXITSTATUS(st));
  if (WIFSIGNALED(st)) {
    return fmt::format("was killed by signal {} ({})", WTERMSIG(st), strsignal(WTERMSIG(st)));
  }
  return fmt::format("ended with wait status {:#x}", st);
}

std::string nproc_over_limit(const std::string& asked, int64_t n, int limit) {
  if (n <= limit) return "";
  return fmt::format("{} is over the limit of {} ranks per node (each rank is a process of its own); if you mean "
                     "it, add --nproc-limit {}",
                     asked, limit, n);
}

std::map<std::string, std::string> rank_env(int rank, int nprocs, const std::string& master_addr,
                                            int master_port) {
  return rank_env(rank, NodePlacement{.nnodes = 1, .node_rank = 0, .nproc_per_node = nprocs},
                  master_addr, master_port);
}

std::map<std::string, std::string> rank_env(int local_rank, const NodePlacement& where,
                                            const std::string& master_addr, int master_port) {
  const int rank = where.node_rank * where.nproc_per_node + local_rank;
  const int world = where.nnodes * where.nproc_per_node;
  std::map<std::string, std::string> env{{"RANK", std::to_string(rank)},
                                         {"LOCAL_RANK", std::to_string(local_rank)},
                                         {"WORLD_SIZE", std::to_string(world)},
                                         {"LOCAL_WORLD_SIZE", std::to_string(where.nproc_per_node)},
                                         {"GROUP_RANK", std::to_string(where.node_rank)},
                                         {"NODE_RANK", std::to_string(where.node_rank)},
                                         {"GROUP_WORLD_SIZE", std::to_string(where.nnodes)},
                                         {"MASTER_ADDR", master_addr},
                                         {"MASTER_PORT", std::to_string(master_port)}};
  // N ranks on few cores: one thread each, unless the user chose otherwise.
  for (const char* var : {"OMP_NUM_THREADS", "DPLAB_NUM_THREADS"})
    if (std::getenv(var) == nullptr) env.emplace(var, std::string(1, '1'));
  return env;
}

SuperviseResult supervise(const std::vector<RankProcess>& procs, const SuperviseOptions& opts) {
  DPLAB_CHECK(!procs.empty(), "supervise: no processes to start");
  SignalForwarding forwarding(opts.forward_signals);
  std::fflush(nullptr);  // the parent's earlier output comes before the ranks' output
  std::vector<Child> kids(procs.size());
  SuperviseResult res;
  res.ranks.resize(procs.size());
  // A signal during the start-up stops it at once: the ranks not started yet never start,
  // and the watch loop below forwards the signal to those that did.
  size_t started = 0;
  for (size_t r = 0; r < procs.size(); ++r) kids[r].rank = opts.first_rank + static_cast<int>(r);
  for (; started < procs.size() && g_pending_signal == 0; ++started) {
    try {
      res.ranks[started].pid = start_one(procs[started], kids[started], opts.tee);
    } catch (const Error&) {
      for (size_t q = 0; q < started; ++q) {
        signal_group(kids[q], SIGKILL);
        ::waitpid(kids[q].pid, nullptr, 0);
        for (int fd : kids[q].pipe_fd)
          if (fd >= 0) ::close(fd);
      }
      throw;
    }
  }
  res.started = static_cast<int>(started);

  bool stopping = false;
  Clock::time_point kill_at{};
  auto stop_all = [&](int sig) {
    for (size_t r = 0; r < kids.size(); ++r) {
      if (!kids[r].alive) continue;
      signal_group(kids[r], sig);
      signal_group(kids[r], SIGCONT);  // a stopped rank acts on the signal only when continued
      res.ranks[r].stopped_by_us = true;
    }
    if (!stopping) kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(opts.grace);
    stopping = true;
  };

  size_t alive = started;
  std::optional<Clock::time_point> drain_until;
  // A signal is forwarded and starts the grace period; one more while the ranks stop (on a
  // signal or a failure) ends it: the user will not wait for ranks that ignore the first.
  auto handle_signal = [&](int sig) {
    if (res.interrupted_by == 0) res.interrupted_by = sig;
    if (stopping) {
      res.killed_at_once = true;
      kill_at = Clock::now();                     // the SIGKILL below, in this pass
      if (drain_until) drain_until = Clock::now();  // and no more waiting for output
      return;
    }
    stop_all(sig);
    if (opts.on_interrupt) opts.on_interrupt(sig);
  };
  if (int sig = g_pending_signal; sig != 0) {  // the start-up was cut short
    g_pending_signal = 0;
    handle_signal(sig);
  }
  if (alive == 0) drain_until = Clock::now();
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Child*, int>> owners;
    for (auto& c : kids)
      for (int w = 0; w < 2; ++w)
        if (c.pipe_fd[w] >= 0) {
          fds.push_back({c.pipe_fd[w], POLLIN, 0});
          owners.emplace_back(&c, w);
        }
    if (alive == 0 && (fds.empty() || Clock::now() >= *drain_until)) break;
    int rc = ::poll(fds.data(), fds.size(), 50);
    for (size_t i = 0; rc > 0 && i < fds.size(); ++i)
      if (fds[i].revents != 0) relay(*owners[i].first, owners[i].second);

    if (int sig = g_pending_signal; sig != 0) {
      g_pending_signal = 0;
      handle_signal(sig);
    }
    // Reap everything that ended, then name one cause. A rank killed by a signal and the
    // peers that then fail because it died often end within the same pass: the signal is
    // the cause, the peers' error exits are its echo.
    int cause = -1;
    auto reap = [&](size_t r, int flags) {
      int st = 0;
      if (::waitpid(kids[r].pid, &st, flags) != kids[r].pid) return;
      kids[r].alive = false;
      --alive;
      res.ranks[r].wait_status = st;
      bool failed = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
      if (!failed || res.ranks[r].stopped_by_us || res.failed_rank >= 0 || res.interrupted_by != 0)
        return;
      const bool by_signal = WIFSIGNALED(st);
      if (cause < 0 || (by_signal && !WIFSIGNALED(res.ranks[cause].wait_status)))
        cause = static_cast<int>(r);
    };
    for (size_t r = 0; r < kids.size(); ++r)
      if (kids[r].alive) reap(r, WNOHANG);
    // A killed rank's main thread shows 'Z' while its other threads still exit, and waitpid
    // reaps it only after them: its peers may see it dead (mailbox_transport.h: pid_alive)
    // and exit first, on a busy machine within this pass. It is already dying: wait for it.
    if (cause >= 0 && !WIFSIGNALED(res.ranks[cause].wait_status))
      for (size_t r = 0; r < kids.size(); ++r)
        if (kids[r].alive && process_state(kids[r].pid) == 'Z') reap(r, 0);
    if (cause >= 0) {
      res.failed_rank = cause;
      res.failure = fmt::format("rank {} (pid {}) {}", kids[cause].rank, kids[cause].pid,
                                describe_wait_status(res.ranks[cause].wait_status));
      // A rank that was stopped (kill -STOP, a debugger) makes its peers time out: the
      // first to time out is only the messenger, so name the stopped one too.
      for (const Child& c : kids)
        if (c.alive && process_state(c.pid) == 'T')
          res.failure += fmt::format("; rank {} (pid {}) is stopped (SIGSTOP or a debugger): "
                                     "it stopped making progress",
                                     c.rank, c.pid);
      if (opts.on_failure) opts.on_failure(res.failure);
      stop_all(SIGTERM);
    }
    if (!stopping && alive > 0 && opts.remote_failure) {
      if (auto f = opts.remote_failure()) {
        res.remote_failure = *f;
        stop_all(SIGTERM);
      }
    }
    if (stopping && alive > 0 && Clock::now() >= kill_at) {
      for (auto& c : kids)
        if (c.alive) signal_group(c, SIGKILL);
    }
    // After the last rank ends, give its output (and any grandchild still holding the pipe)
    // a moment to drain, then stop reading; not after a second signal: the user wants out.
    if (alive == 0 && !drain_until)
      drain_until = Clock::now() + (res.killed_at_once ? Clock::duration{0} : std::chrono::seconds(2));
  }
  for (auto& c : kids)
    for (int fd : c.pipe_fd)
      if (fd >= 0) ::close(fd);
  return res;
}

}  // namespace dplab::parallel
