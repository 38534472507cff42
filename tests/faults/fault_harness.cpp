// fault_harness.cpp: process plumbing for the fault-injection suite (see fault_harness.h).
// Read next: test_faults.cpp.
#include "tests/faults/fault_harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace dplab::faults {
namespace fs = std::filesystem;

namespace {

std::map<pid_t, int>& reaped() {  // wait statuses collected by reap(), by pid
  static std::map<pid_t, int> m;
  return m;
}

// Collects every exited child: launchers, and ranks re-parented to us (we are a subreaper).
void reap() {
  int st = 0;
  pid_t p;
  while ((p = ::waitpid(-1, &st, WNOHANG)) > 0) reaped()[p] = st;
}

void become_subreaper() {
  static bool done = false;
  if (!done) ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  done = true;
}

// Field 6 of /proc/<pid>/stat is the session id; field 3 the state.
bool session_and_state(pid_t pid, pid_t& sid, char& state) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return false;
  auto close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(line.substr(close + 2));
  long ppid = 0, pgrp = 0, session = 0;
  rest >> state >> ppid >> pgrp >> session;
  sid = static_cast<pid_t>(session);
  return static_cast<bool>(rest);
}

}  // namespace

Job start_job(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  become_subreaper();
  static std::atomic<int> count{0};
  Job job;
  job.log = fs::temp_directory_path() /
            ("dplab_faults_" + std::to_string(::getpid()) + "_" + std::to_string(count++) + ".log");
  std::fflush(nullptr);
  job.started = Clock::now();
  job.pid = ::fork();
  if (job.pid == 0) {
    ::setsid();
    int fd = ::open(job.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "cannot exec %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  return job;
}

std::string output(const Job& job) {
  std::ifstream f(job.log);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool wait_for_output(const Job& job, const std::string& text, double timeout_s) {
  auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < deadline) {
    if (output(job).find(text) != std::string::npos) return true;
    reap();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

std::map<int, pid_t> rank_pids(const Job& job) {
  std::map<int, pid_t> pids;
  std::istringstream in(output(job));
  std::string line;
  while (std::getline(in, line)) {
    int rank = -1, pid = -1;
    if (std::sscanf(line.c_str(), "rank %d pid %d ready", &rank, &pid) == 2) pids[rank] = pid;
  }
  return pids;
}

std::optional<int> wait_exit(const Job& job, double timeout_s) {
  auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    reap();
    if (auto it = reaped().find(job.pid); it != reaped().end()) return it->second;
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::vector<pid_t> alive_in_session(pid_t sid) {
  reap();
  std::vector<pid_t> alive;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return alive;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    pid_t s = 0;
    char state = '?';
    if (session_and_state(static_cast<pid_t>(pid), s, state) && s == sid && state != 'Z' &&
        state != 'X')
      alive.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(d);
  return alive;
}

std::optional<double> wait_session_gone(pid_t sid, double timeout_s) {
  auto t0 = Clock::now();
  auto deadline = t0 + std::chrono::duration<double>(timeout_s);
  for (;;) {
    if (alive_in_session(sid).empty())
      return std::chrono::duration<double>(Clock::now() - t0).count();
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void kill_job(const Job& job) {
  for (int round = 0; round < 100; ++round) {
    std::vector<pid_t> left = alive_in_session(job.pid);
    if (left.empty()) break;
    for (pid_t p : left) ::kill(p, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  wait_exit(job, 2.0);
  std::error_code ec;
  fs::remove(job.log, ec);
}

std::vector<std::string> dplab_shm_entries() { return files_starting_with("/dev/shm", "dplab-"); }

std::vector<std::string> files_starting_with(const fs::path& dir, const std::string& prefix) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.starts_with(prefix)) found.push_back(name);
  }
  return found;
}

int exit_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

std::mt19937& rng() {
  static std::mt19937 gen = [] {
    const char* s = std::getenv("FAULT_SEED");
    unsigned seed = s ? static_cast<unsigned>(std::strtoul(s, nullptr, 10))
                      : static_cast<unsigned>(Clock::now().time_since_epoch().count());
    std::printf("fault suite: FAULT_SEED=%u (set it to replay these trials)\n", seed);
    return std::mt19937(seed);
  }();
  return gen;
}

int trials(int n) {
  const char* s = std::getenv("FAULT_TRIALS");
  int scale = s ? std::max(1, std::atoi(s)) : 1;
  return n * scale;
}

double uniform(double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(rng());
}

}  // namespace dplab::faults
