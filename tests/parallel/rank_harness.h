// rank_harness.h: run N ranks of a test, as threads (HashStore, thread transport) or as
// forked processes (FileStore, shm transport), and give their failures back to the test.
// Threads: every rank's exception is captured and the first is rethrown in the test body
// (the gloo way). Processes: each child runs the body, reports "ok" or its error message
// through a pipe, and _exits; the parent collects one Outcome per rank.
// Read next: test_collectives_threads.cpp, test_collectives_shm.cpp.
#pragma once
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "parallel/comm/process_group.h"
#include "parallel/rendezvous/file_store.h"
#include "parallel/rendezvous/hash_store.h"

namespace dplab::parallel::testing {

using RankBody = std::function<void(ProcessGroup& pg)>;

// The harness owns each rank's group; APIs that keep a shared_ptr (DDP, Horovod) get a
// non-owning one.
inline std::shared_ptr<ProcessGroup> borrow(ProcessGroup& pg) {
  return std::shared_ptr<ProcessGroup>(&pg, [](ProcessGroup*) {});
}

// Start-up waits kHarnessTimeout, and so do collectives unless a test asks for less: long
// enough to hold on a loaded machine (load 7 on 2 cores made 10 s too short for a forked
// start-up); a test that expects a timeout sets its own short one, which then only ever
// measures its collectives (start_together).
inline constexpr Seconds kHarnessTimeout{30.0};

// Every rank checks in on the store (whose timeout is kHarnessTimeout) before any group is
// made: a thread or a child that the scheduler starts late cannot run out a test's short
// timeout before the test's first collective, and the group's own set-up then meets ranks
// that are all there.
inline void start_together(Store& store, int rank, int n) {
  store.set("harness/here/" + std::to_string(rank), "1");
  std::vector<std::string> keys;
  for (int r = 0; r < n; ++r) keys.push_back("harness/here/" + std::to_string(r));
  store.wait(keys);
}

// Runs body on `n` threads, one process group each; rethrows the first rank's exception.
inline void run_threads(int n, const RankBody& body, ProcessGroupOptions opts = {}) {
  if (opts.timeout == kDefaultTimeout) opts.timeout = kHarnessTimeout;
  auto store = std::make_shared<HashStore>(kHarnessTimeout);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        start_together(*store, r, n);
        auto pg = create_process_group(store, r, n, opts);
        body(*pg);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

struct Outcome {
  bool ok = false;
  std::string message;  // "ok", or the exception's what()
  int signal = 0;       // non-zero when the child was killed
};

inline std::string unique_store_path() {
  static std::atomic<int> counter{0};
  return "/tmp/dplab-test-store-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

// Forks n children; child r builds a FileStore + process group (shm transport) and runs
// body. Returns each rank's outcome, in rank order. No CUDA is touched, so fork is safe.
inline std::vector<Outcome> run_processes(int n, const RankBody& body,
                                          ProcessGroupOptions opts = {}) {
  if (opts.timeout == kDefaultTimeout) opts.timeout = kHarnessTimeout;
  std::string path = unique_store_path();
  ::unlink(path.c_str());
  std::vector<pid_t> pids(n);
  std::vector<int> read_ends(n);
  std::fflush(nullptr);
  for (int r = 0; r < n; ++r) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      ::close(fds[0]);
      std::string msg = "ok";
      int code = 0;
      try {
        auto store = std::make_shared<FileStore>(path, n, kHarnessTimeout);
        start_together(*store, r, n);
        auto pg = create_process_group(store, r, n, opts);
        body(*pg);
      } catch (const std::exception& e) {
        msg = e.what();
        code = 1;
      } catch (...) {
        msg = "unknown exception";
        code = 1;
      }
      ssize_t w = ::write(fds[1], msg.data(), msg.size());
      (void)w;
      ::_exit(code);  // skip the parent's atexit handlers (doctest's reporter)
    }
    ::close(fds[1]);
    pids[r] = pid;
    read_ends[r] = fds[0];
  }
  std::vector<Outcome> out(n);
  for (int r = 0; r < n; ++r) {
    std::string msg;
    char buf[4096];
    ssize_t got;
    while ((got = ::read(read_ends[r], buf, sizeof(buf))) > 0) msg.append(buf, got);
    ::close(read_ends[r]);
    int status = 0;
    ::waitpid(pids[r], &status, 0);
    out[r].signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    out[r].ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    out[r].message = msg.empty() ? "(no message)" : msg;
  }
  ::unlink(path.c_str());
  return out;
}

}  // namespace dplab::parallel::testing
