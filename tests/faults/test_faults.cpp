// test_faults.cpp: the fault-injection suite. Each case starts fault_trainer under dplab-run
// (or mpirun), hits it at a random moment (kill -9 a rank, SIGSTOP a rank, kill or hang up
// or interrupt the launcher, kill during the shared-memory set-up or a checkpoint save), and
// asserts what a user would check: the exit status, that the message names the right rank,
// that the job ends, that no process of the job is left (by session id), that /dev/shm holds
// nothing of ours, and that a checkpoint's final path never holds half a file.
// No verdict rests on how fast a loaded machine is. Start-up has the long
// DPLAB_RENDEZVOUS_TIMEOUT and only training's collectives the short DPLAB_TIMEOUT
// (fault_trainer.cpp). dplab-run reaps every rank before it exits, so "nothing is left" is
// checked the moment the launcher has ended; only where the launcher itself was killed do the
// ranks end on their own (the parent-death signal), and there a generous guard waits for them.
// Every other wait is a hang guard of tens of seconds, never a speed limit.
// Timing is random (FAULT_SEED replays it; FAULT_TRIALS=k runs k times as many trials).
// Read next: fault_harness.h, fault_trainer.cpp.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "framework/io/safetensors.h"
#include "framework/ops/ops.h"
#include "tests/faults/fault_harness.h"

using namespace dplab::faults;
namespace fs = std::filesystem;

namespace {

constexpr double kTimeout = 3.0;   // DPLAB_TIMEOUT for training: a stopped rank is found after it
constexpr double kStartUp = 60.0;  // DPLAB_RENDEZVOUS_TIMEOUT: exec, loading and meeting
constexpr double kGrace = 1.0;     // dplab-run --grace-period: SIGTERM, then SIGKILL after it
// How long a job may take to end, or its ranks to go, before we call it hung. Only a hang
// takes this long; it is no verdict on speed. It stays below kStartUp, so that a rank left
// waiting in the rendezvous for a peer that was never started is still caught.
constexpr double kHangGuard = 30.0;
constexpr int kForever = 1000000;  // steps: the job runs until we hit it

std::string env_path(const char* var) {
  const char* p = std::getenv(var);
  REQUIRE_MESSAGE(p != nullptr, var << " is not set: run this suite through `meson test`");
  return p;
}

std::map<std::string, std::string> job_env(double timeout = kTimeout) {
  return {{"DPLAB_TIMEOUT", fmt::format("{}", timeout)},
          {"DPLAB_RENDEZVOUS_TIMEOUT", fmt::format("{}", kStartUp)},
          {"OMP_NUM_THREADS", "1"},
          {"DPLAB_NUM_THREADS", "1"}};
}

std::vector<std::string> dplab_run(const std::string& engine, int n,
                                   const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv{env_path("DPLAB_RUN"),
                                "--nproc-per-node",
                                std::to_string(n),
                                "--grace-period",
                                fmt::format("{}", kGrace),
                                env_path("FAULT_TRAINER"),
                                engine,
                                std::to_string(kForever)};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

// Waits until all n ranks said "ready"; their pids by rank. The guard is above the start-up's
// own timeout: a start-up that fails says why in the output.
std::map<int, pid_t> wait_ready(const Job& job, int n) {
  auto deadline = Clock::now() + std::chrono::duration<double>(kStartUp + kHangGuard);
  std::map<int, pid_t> pids;
  while (Clock::now() < deadline && static_cast<int>(pids.size()) < n) {
    wait_for_output(job, "ready", 0.05);
    pids = rank_pids(job);
  }
  REQUIRE_MESSAGE(static_cast<int>(pids.size()) == n, "not every rank started:\n" << output(job));
  return pids;
}

// Every job must end whole: nothing of its session left, nothing of ours in /dev/shm.
// Called once dplab-run has ended by itself: it waits for every rank it started before it
// exits, so a process of the job still alive now outlived it (no waiting: an event).
void check_nothing_left(const Job& job, const std::string& what) {
  const auto left = alive_in_session(job.pid);
  CHECK_MESSAGE(left.empty(), what << ": " << left.size()
                                   << " process(es) of the job outlived its launcher:\n"
                                   << output(job));
  CHECK_MESSAGE(dplab_shm_entries().empty(), what << ": /dev/shm still holds dplab entries");
}

// The same where the launcher could not wait for its ranks (it was killed, and they end on
// the parent-death signal; or mpirun, whose ranks end as MPI tears the job down): they must
// be gone within the hang guard.
void check_nothing_left_after_guard(const Job& job, const std::string& what) {
  CHECK_MESSAGE(wait_session_gone(job.pid, kHangGuard).has_value(),
                what << ": processes of the job still run " << kHangGuard << " s later:\n"
                     << output(job));
  CHECK_MESSAGE(dplab_shm_entries().empty(), what << ": /dev/shm still holds dplab entries");
}

// One trial's blow: start the job, wait until its n ranks are ready, let it train for a
// random moment, then send `sig` to a random rank.
struct Hit {
  Job job;
  int victim;
  pid_t pid;
};
Hit hit_random_rank(const std::vector<std::string>& argv, int n, int sig,
                    double timeout = kTimeout) {
  Job job = start_job(argv, job_env(timeout));
  auto pids = wait_ready(job, n);
  std::this_thread::sleep_for(std::chrono::duration<double>(uniform(0.0, 0.5)));
  const int victim = std::uniform_int_distribution<int>(0, n - 1)(rng());
  ::kill(pids[victim], sig);
  return {job, victim, pids[victim]};
}

struct Setup {
  std::string engine;
  int n;
};
const std::vector<Setup> kSetups{{"ring", 2}, {"ring", 4}, {"star", 2}, {"star", 4}};

}  // namespace

TEST_CASE("a rank killed by SIGKILL mid-training: the launcher names it and stops the rest") {
  int count = 0;
  double worst = 0;
  for (const Setup& s : kSetups) {
    for (int t = 0; t < trials(2); ++t, ++count) {
      const auto [job, victim, pid] = hit_random_rank(dplab_run(s.engine, s.n), s.n, SIGKILL);
      const auto hit = Clock::now();
      auto st = wait_exit(job, kHangGuard);
      const double took = std::chrono::duration<double>(Clock::now() - hit).count();
      worst = std::max(worst, took);
      const std::string what = fmt::format("{} N={} rank {} killed", s.engine, s.n, victim);
      REQUIRE_MESSAGE(st.has_value(), what << ": the launcher did not end:\n" << output(job));
      CHECK(exit_code(*st) == 1);
      CHECK_MESSAGE(output(job).find(fmt::format("rank {} (pid {}) was killed by signal 9", victim,
                                                 pid)) != std::string::npos,
                    what << ":\n"
                         << output(job));
      check_nothing_left(job, what);
      kill_job(job);
    }
  }
  // a figure for the log, not a verdict: it depends on how busy the machine is
  fmt::print("kill -9 a rank: {} trials, the launcher ended at most {:.2f} s after the kill\n",
             count, worst);
}

TEST_CASE("a stopped rank (SIGSTOP) is named by its peers and by the launcher") {
  // Each trial waits out the ranks' timeout: the jobs are stopped one after the other and then
  // waited for together, so the waits overlap instead of adding up.
  std::vector<std::pair<Setup, Hit>> hits;
  struct KillAll {  // a failed REQUIRE must not leave the other trials' jobs behind
    std::vector<std::pair<Setup, Hit>>& hits;
    ~KillAll() {
      for (const auto& h : hits) kill_job(h.second.job);
    }
  } kill_all{hits};
  for (const Setup& s : kSetups)
    for (int t = 0; t < trials(1); ++t)
      hits.emplace_back(s, hit_random_rank(dplab_run(s.engine, s.n), s.n, SIGSTOP));
  for (const auto& [s, hit] : hits) {
    const auto& [job, victim, pid] = hit;
    auto st = wait_exit(job, kTimeout + kGrace + kHangGuard);
    const std::string what = fmt::format("{} N={} rank {} stopped", s.engine, s.n, victim);
    REQUIRE_MESSAGE(st.has_value(), what << ": the launcher did not end:\n" << output(job));
    CHECK(exit_code(*st) == 1);
    const std::string out = output(job);
    // the ranks' diagnosis and the launcher's line both name the stopped rank
    CHECK_MESSAGE(out.find(fmt::format("rank {} stopped making progress", victim)) !=
                      std::string::npos, what << ":\n" << out);
    CHECK_MESSAGE(out.find(fmt::format("rank {} (pid {}) is stopped", victim, pid)) !=
                      std::string::npos, what << ":\n" << out);
    check_nothing_left(job, what);
  }
  fmt::print("SIGSTOP a rank: {} trials at once, each named the stopped rank\n", hits.size());
}

TEST_CASE("the launcher killed, hung up or interrupted: no rank outlives it") {
  struct Hit {
    int sig;
    int expect_exit;  // the launcher's own exit code; -1: it dies by the signal
  };
  int count = 0;
  double worst = 0;
  for (Hit hit : {Hit{SIGKILL, 128 + SIGKILL}, Hit{SIGHUP, 128 + SIGHUP}, Hit{SIGINT, 128 + SIGINT},
                  Hit{SIGTERM, 128 + SIGTERM}}) {
    for (const Setup& s : {Setup{"ring", 2}, Setup{"star", 4}}) {
      for (int t = 0; t < trials(1); ++t, ++count) {
        Job job = start_job(dplab_run(s.engine, s.n), job_env());
        wait_ready(job, s.n);
        std::this_thread::sleep_for(std::chrono::duration<double>(uniform(0.0, 0.5)));
        const auto t0 = Clock::now();
        ::kill(job.pid, hit.sig);
        const std::string what =
            fmt::format("{} N={}, launcher got {}", s.engine, s.n, strsignal(hit.sig));
        auto st = wait_exit(job, kHangGuard);
        REQUIRE_MESSAGE(st.has_value(), what << ": the launcher did not end");
        CHECK_MESSAGE(exit_code(*st) == hit.expect_exit, what << ":\n" << output(job));
        // The target: no rank outlives the launcher. A launcher that gets SIGHUP, SIGINT or
        // SIGTERM forwards it and waits for its ranks, so none is left when it has ended. One
        // killed by SIGKILL cannot: its ranks end on the parent-death signal, by themselves,
        // and would otherwise train on forever, so the guard cannot hide one that stays.
        if (hit.sig == SIGKILL) check_nothing_left_after_guard(job, what);
        else check_nothing_left(job, what);
        worst = std::max(worst, std::chrono::duration<double>(Clock::now() - t0).count());
        kill_job(job);
      }
    }
  }
  fmt::print("launcher killed / hung up / interrupted / terminated: {} trials, every rank gone at "
             "most {:.2f} s after the signal (a figure, not a verdict)\n",
             count, worst);
}

TEST_CASE("a rank killed, or Ctrl-C, during start-up (rendezvous, shared-memory set-up)") {
  int count = 0;
  for (const Setup& s : kSetups) {
    for (int t = 0; t < trials(2); ++t, ++count) {
      Job job = start_job(dplab_run(s.engine, s.n), job_env());
      // Somewhere between exec and the first step: ranks connect to the store, rank 0
      // creates the shared block, the others map it.
      std::this_thread::sleep_for(std::chrono::duration<double>(uniform(0.0, 0.3)));
      const bool interrupt = t % 2 == 1;
      std::string what = fmt::format("{} N={}, {} during start-up", s.engine, s.n,
                                     interrupt ? "Ctrl-C" : "kill -9 of a rank");
      bool launcher_killed = false;
      if (interrupt) {
        ::kill(job.pid, SIGINT);
      } else {
        std::vector<pid_t> ranks;
        for (pid_t p : alive_in_session(job.pid))
          if (p != job.pid) ranks.push_back(p);
        if (!ranks.empty()) {
          ::kill(ranks[std::uniform_int_distribution<size_t>(0, ranks.size() - 1)(rng())], SIGKILL);
        } else {  // nothing started yet: the launcher itself
          ::kill(job.pid, SIGKILL);
          launcher_killed = true;
          what += " (the launcher: no rank was up yet)";
        }
      }
      // A rank left waiting in the rendezvous for one that died would wait kStartUp (60 s):
      // the launcher must stop it well before the guard runs out.
      auto st = wait_exit(job, kHangGuard);
      REQUIRE_MESSAGE(st.has_value(), what << ": the launcher did not end:\n" << output(job));
      CHECK_MESSAGE(exit_code(*st) != 0, what << ": the job claims success:\n" << output(job));
      if (launcher_killed) check_nothing_left_after_guard(job, what);
      else check_nothing_left(job, what);
      kill_job(job);
    }
  }
  fmt::print("kill / Ctrl-C during start-up: {} trials, no process and no /dev/shm entry left\n",
             count);
}

TEST_CASE("killed during a checkpoint save: the final path is whole or absent, temporaries go") {
  const fs::path dir = fs::temp_directory_path() / fmt::format("dplab_faults_ckpt_{}", ::getpid());
  fs::create_directories(dir);
  const fs::path ckpt = dir / "model.safetensors";
  constexpr int kMb = 48;
  int count = 0, landed_in_save = 0;
  for (int sig : {SIGTERM, SIGINT, SIGKILL}) {
    for (int t = 0; t < trials(2); ++t, ++count) {
      fs::remove(ckpt);
      Job job = start_job(dplab_run("ring", 2, {ckpt.string(), std::to_string(kMb)}), job_env());
      auto pids = wait_ready(job, 2);
      const int step = std::uniform_int_distribution<int>(1, 3)(rng());
      REQUIRE_MESSAGE(wait_for_output(job, fmt::format("saving {}", step), 30), "no save started:\n"
                                                                                    << output(job));
      std::this_thread::sleep_for(std::chrono::duration<double>(uniform(0.0, 0.03)));
      landed_in_save += output(job).find(fmt::format("saved {}", step)) == std::string::npos;
      // SIGINT as from Ctrl-C goes to the launcher, which forwards it; the others hit rank 0
      ::kill(sig == SIGINT ? job.pid : pids[0], sig);
      const std::string what = fmt::format("{} during save {}", strsignal(sig), step);
      REQUIRE_MESSAGE(wait_exit(job, kHangGuard).has_value(), what);
      check_nothing_left(job, what);
      if (fs::exists(ckpt)) {  // whole: it loads, and holds every byte of the padding
        auto loaded = dplab::load_safetensors(ckpt.string());
        CHECK(loaded.tensors.at("padding").numel() == (int64_t{kMb} << 18));
      }
      auto temps = files_starting_with(dir, "model.safetensors.tmp-");
      if (sig != SIGKILL) {
        CHECK_MESSAGE(temps.empty(), what << ": a temporary was left: " << temps.front());
      } else if (!temps.empty()) {
        // SIGKILL cannot be caught: the next save of that path removes it
        dplab::save_safetensors(ckpt.string(), {});
        CHECK_MESSAGE(files_starting_with(dir, "model.safetensors.tmp-").empty(),
                      what << ": the next save did not remove the dead process's temporary");
      }
      kill_job(job);
    }
  }
  fs::remove_all(dir);
  fmt::print("signals during checkpoint saves: {} trials ({} landed while the file was being "
             "written); no half file at the final path\n",
             count, landed_in_save);
}

// ---- the mpi engine: mpirun is the launcher; the engine's watchdog names a stopped rank ----

namespace {

bool have_mpirun() { return std::getenv("MPIRUN") != nullptr; }

std::vector<std::string> mpirun(int n) {
  return {env_path("MPIRUN"),
          "--bind-to",
          "none",
          "-np",
          std::to_string(n),
          env_path("FAULT_TRAINER"),
          "mpi",
          std::to_string(kForever)};
}

}  // namespace

// kill -9 or SIGSTOP a random rank of an mpirun job: mpirun must end the job (the watchdog
// aborts it when a rank is stopped, naming it), leaving nothing behind.
// A stopped rank's job runs with a 10 s timeout: the ranks whose collective timed out give
// each other timeout/2 (5 s) to file that they are stuck, and one that files later is named
// as a stopped one too, so on a loaded machine, where a healthy rank's watchdog may wake a
// second late, 3 s (a grace of 1.5 s) would name the wrong ranks.
static void mpi_trials(int sig, const char* label) {
  const double timeout = sig == SIGSTOP ? 10.0 : kTimeout;
  // The jobs are hit one after the other and then waited for together: a stopped rank's job
  // waits out the watchdog's timeout, and those waits overlap instead of adding up.
  std::vector<std::pair<int, Hit>> hits;
  struct KillAll {  // a failed REQUIRE must not leave the other trials' jobs behind
    std::vector<std::pair<int, Hit>>& hits;
    ~KillAll() {
      for (const auto& h : hits) {
        ::kill(h.second.pid, SIGCONT);  // if mpirun left it stopped, let kill_job's SIGKILL land
        kill_job(h.second.job);
      }
    }
  } kill_all{hits};
  for (int n : {2, 3})
    for (int t = 0; t < trials(1); ++t)
      hits.emplace_back(n, hit_random_rank(mpirun(n), n, sig, timeout));
  for (const auto& [n, hit] : hits) {
    const auto& [job, victim, pid] = hit;
    const std::string what = fmt::format("mpi N={} rank {} got {}", n, victim, strsignal(sig));
    auto st = wait_exit(job, timeout + kHangGuard);
    REQUIRE_MESSAGE(st.has_value(), what << ": mpirun did not end:\n" << output(job));
    CHECK(exit_code(*st) != 0);
    if (sig == SIGSTOP) {
      CHECK_MESSAGE(output(job).find(fmt::format("rank {} stopped making progress", victim)) !=
                        std::string::npos, what << ":\n" << output(job));
      ::kill(pid, SIGCONT);  // if mpirun left it stopped, let kill_job's SIGKILL land
    }
    check_nothing_left_after_guard(job, what);
  }
  fmt::print("mpi, {}: {} trials, the job ended each time{}\n", label, hits.size(),
             sig == SIGSTOP ? " and the watchdog named the stopped rank" : "");
}

TEST_CASE("mpi: a rank killed by SIGKILL ends the whole job" * doctest::skip(!have_mpirun())) {
  mpi_trials(SIGKILL, "kill -9 a rank");
}

TEST_CASE("mpi: a stopped rank is named by the watchdog, which aborts the job" *
          doctest::skip(!have_mpirun())) {
  mpi_trials(SIGSTOP, "SIGSTOP a rank");
}
