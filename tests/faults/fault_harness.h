// fault_harness.h: starting a job, hitting it, and checking what it left behind.
// A job is dplab-run (or mpirun) started in a session of its own (setsid), with its output
// in a file. Every process the job starts stays in that session, even after its launcher
// dies and it is re-parented, so "is anything of the job still running?" is a scan of
// /proc for that session id. The test process is a child subreaper: orphaned ranks become
// its children, and reap() collects them instead of leaving zombies.
// Read next: test_faults.cpp.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace dplab::faults {

using Clock = std::chrono::steady_clock;

struct Job {
  pid_t pid = -1;             // the launcher; also the session id
  std::filesystem::path log;  // stdout and stderr of the launcher and every rank
  Clock::time_point started;
};

// Starts argv in a new session with `env` added; output goes to a fresh log file.
Job start_job(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env);

// The job's output so far.
std::string output(const Job& job);

// Waits until the output contains `text`; false after `timeout_s`.
bool wait_for_output(const Job& job, const std::string& text, double timeout_s);

// "rank R pid P ready" lines: R -> P (fault_trainer prints them).
std::map<int, pid_t> rank_pids(const Job& job);

// Waits up to timeout_s for the launcher to end; its wait status, or none if still running.
std::optional<int> wait_exit(const Job& job, double timeout_s);

// Processes of the job's session still alive (zombies excluded).
std::vector<pid_t> alive_in_session(pid_t sid);

// Waits up to timeout_s for every process of the session to be gone; seconds it took, or
// none if some still live then.
std::optional<double> wait_session_gone(pid_t sid, double timeout_s);

// SIGKILL whatever is left of the job and reap it: a failed check never leaks processes.
void kill_job(const Job& job);

// Entries named dplab-* in /dev/shm.
std::vector<std::string> dplab_shm_entries();

// Files in dir whose name starts with prefix.
std::vector<std::string> files_starting_with(const std::filesystem::path& dir,
                                             const std::string& prefix);

// The exit code of a wait status: WEXITSTATUS, or 128 + the signal.
int exit_code(int wait_status);

// Random timing for trials: seeded from FAULT_SEED if set (printed either way), so that a
// failing trial can be replayed. trials(n) scales n by FAULT_TRIALS (default 1).
std::mt19937& rng();
int trials(int n);
double uniform(double lo, double hi);

}  // namespace dplab::faults
