// test_store.cpp: TCPStore and FileStore (set/get/add/wait/check across threads and forked
// processes, timeouts, port in use, a dead server), and the rendezvous on top of them.
// A wait given 1 s says so in its error and never ends sooner; the only upper bound on time
// is kNotTheDefault, far above anything load makes of 1 s.
// Read next: test_launch.cpp (rank variables, dplab-run, spawn).
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "framework/error.h"
#include "parallel/comm/init.h"
#include "parallel/engines/collective_engine.h"
#include "parallel/rendezvous/file_store.h"
#include "parallel/rendezvous/hash_store.h"
#include "parallel/rendezvous/job_token.h"
#include "parallel/rendezvous/prefix_store.h"
#include "parallel/rendezvous/tcp_store.h"

namespace par = dplab::parallel;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kToken = "test-store-token-0123456789";

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A wait given 1 s that took this long did not use its timeout (the default is 60 s): a
// guard against that bug, not a measure of how fast the store is.
constexpr double kNotTheDefault = 20.0;
// The timeout of waits that succeed: it only ends a hang, so it is long.
const par::Seconds kGuard{30.0};

// Runs fn in n forked children; returns how many exited with status 0.
int run_forked(int n, const std::function<bool(int)>& fn) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      bool ok = false;
      try {
        ok = fn(i);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", i, e.what());
      }
      _exit(ok ? 0 : 1);  // never return into doctest in a child
    }
    pids.push_back(pid);
  }
  int good = 0;
  for (pid_t pid : pids) {
    int st = 0;
    waitpid(pid, &st, 0);
    good += (WIFEXITED(st) && WEXITSTATUS(st) == 0) ? 1 : 0;
  }
  return good;
}

std::string temp_path(const char* tag) {
  return (std::filesystem::temp_directory_path() /
          ("dplab_" + std::string(tag) + "_" + std::to_string(getpid())))
      .string();
}

}  // namespace

TEST_CASE("TCPStore: set/get/add/wait/check across threads") {
  par::TCPStore server("127.0.0.1", 0, true, kGuard, kToken);
  const int port = server.port();
  REQUIRE(port > 0);
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      par::TCPStore client("127.0.0.1", port, false, kGuard, kToken);
      client.set("key/" + std::to_string(t), "value" + std::to_string(t));
      client.add("counter", t + 1);
      std::vector<std::string> keys;
      for (int u = 0; u < kThreads; ++u) keys.push_back("key/" + std::to_string(u));
      client.wait(keys);
      bool good = client.check(keys) && client.get("key/" + std::to_string((t + 1) % kThreads)) ==
                                            "value" + std::to_string((t + 1) % kThreads);
      ok += good ? 1 : 0;
    });
  }
  for (auto& th : threads) th.join();
  CHECK(ok == kThreads);
  CHECK(server.add("counter", 0) == 1 + 2 + 3 + 4);
  CHECK_FALSE(server.check({"key/0", "nope"}));
  server.set("key/0", "overwritten");
  CHECK(server.get("key/0") == "overwritten");
  server.set("binary", std::string("a\0b\n", 4));
  CHECK(server.get("binary") == std::string("a\0b\n", 4));
}

TEST_CASE("TCPStore: get waits for a key another client sets later") {
  // The setter sets the key 200 ms after the main thread says it is about to get it: get
  // returns after the set (its value proves it), so at least 200 ms after that moment, as a
  // sleep never ends early.
  par::TCPStore server("127.0.0.1", 0, true, kGuard, kToken);
  std::atomic<bool> getting{false};
  std::thread setter([port = server.port(), &getting] {
    par::TCPStore client("127.0.0.1", port, false, kGuard, kToken);
    while (!getting) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    client.set("late", "here");
  });
  auto t0 = Clock::now();
  getting = true;
  CHECK(server.get("late") == "here");
  CHECK(seconds_since(t0) >= 0.2);
  setter.join();
}

TEST_CASE("TCPStore: forked processes share one server") {
  par::TCPStore server("127.0.0.1", 0, true, kGuard, kToken);
  const int port = server.port();
  constexpr int kProcs = 3;
  int good = run_forked(kProcs, [port](int i) {
    par::TCPStore client("127.0.0.1", port, false, kGuard, kToken);
    client.set("proc/" + std::to_string(i), std::to_string(i * i));
    client.add("arrived", 1);
    std::vector<std::string> keys;
    for (int j = 0; j < kProcs; ++j) keys.push_back("proc/" + std::to_string(j));
    client.wait(keys);
    int64_t sum = 0;
    for (int j = 0; j < kProcs; ++j) sum += std::stoll(client.get("proc/" + std::to_string(j)));
    return sum == 0 + 1 + 4;
  });
  CHECK(good == kProcs);
  CHECK(server.add("arrived", 0) == kProcs);
}

TEST_CASE("TCPStore: waits end in CommError within about the timeout") {
  par::TCPStore store("127.0.0.1", 0, true, par::Seconds(1.0), kToken);
  auto t0 = Clock::now();
  CHECK_THROWS_WITH_AS(store.get("missing"),
                       doctest::Contains("timed out after 1.0 s; still missing: 'missing'"),
                       dplab::CommError);
  double got = seconds_since(t0);
  CHECK(got >= 0.9);
  CHECK(got < kNotTheDefault);
  store.set("present", "1");
  t0 = Clock::now();
  CHECK_THROWS_WITH_AS(store.wait({"present", "absent"}),
                       doctest::Contains("timed out after 1.0 s; still missing: 'absent'"),
                       dplab::CommError);
  got = seconds_since(t0);
  CHECK(got >= 0.9);
  CHECK(got < kNotTheDefault);
  // The connection is still usable after a timeout.
  CHECK(store.get("present") == "1");
}

TEST_CASE("TCPStore: no server -> CommError after the connect timeout") {
  int port = par::find_free_port();
  auto t0 = Clock::now();
  CHECK_THROWS_WITH_AS(par::TCPStore("127.0.0.1", port, false, par::Seconds(1.0), kToken),
                       doctest::Contains("could not reach the store server"), dplab::CommError);
  double got = seconds_since(t0);
  CHECK(got >= 0.9);
  CHECK(got < kNotTheDefault);
}

TEST_CASE("TCPStore: port in use") {
  par::TCPStore first("127.0.0.1", 0, true, par::Seconds(1.0), kToken);
  std::string expected =
      "port " + std::to_string(first.port()) + " on 127.0.0.1 is in use; pick another MASTER_PORT";
  CHECK_THROWS_WITH_AS(par::TCPStore("127.0.0.1", first.port(), true, par::Seconds(1.0), kToken),
                       doctest::Contains(expected.c_str()), dplab::CommError);
}

TEST_CASE("TCPStore: a server that dies fails the waiting client, not hangs it") {
  auto server = std::make_unique<par::TCPStore>("127.0.0.1", 0, true, par::Seconds(30.0), kToken);
  par::TCPStore client("127.0.0.1", server->port(), false, par::Seconds(30.0), kToken);
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    server.reset();
  });
  // the server's end closing, not the 30 s timeout, ends the wait: the message says which
  CHECK_THROWS_WITH_AS(client.get("never"), doctest::Contains("closed the connection"),
                       dplab::CommError);
  killer.join();
}

TEST_CASE("TCPStore: add on a non-integer value is an error") {
  par::TCPStore store("127.0.0.1", 0, true, par::Seconds(1.0), kToken);
  store.set("word", "hello");
  CHECK_THROWS_WITH_AS(store.add("word", 1), doctest::Contains("not an integer"), dplab::CommError);
  CHECK(store.add("fresh", -5) == -5);
}

TEST_CASE("FileStore: set/get/add/wait between stores and processes, then cleanup") {
  std::string path = temp_path("filestore");
  std::filesystem::remove(path);
  {
    par::FileStore a(path, 2, kGuard);
    par::FileStore b(path, 2, kGuard);
    a.set("x", "1");
    CHECK(b.get("x") == "1");
    CHECK(a.add("n", 2) == 2);
    CHECK(b.add("n", 3) == 5);
    b.set("x", "2");
    CHECK(a.get("x") == "2");
    CHECK(a.check({"x", "n"}));
    CHECK_FALSE(a.check({"x", "y"}));
    int good = run_forked(3, [&path](int i) {
      par::FileStore s(path, -1, kGuard);
      s.add("forked", 1);
      s.set("child/" + std::to_string(i), "ok");
      s.wait({"child/0", "child/1", "child/2"});
      return true;
    });
    CHECK(good == 3);
    CHECK(a.add("forked", 0) == 3);
    CHECK(std::filesystem::exists(path));
  }
  // Both of the world_size = 2 stores were destroyed: the file is gone.
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("FileStore: waits end in CommError within about the timeout") {
  std::string path = temp_path("filestore_timeout");
  std::filesystem::remove(path);
  par::FileStore s(path, 1, par::Seconds(1.0));
  auto t0 = Clock::now();
  CHECK_THROWS_WITH_AS(s.get("absent"),
                       doctest::Contains("timed out after 1.0 s; still missing: 'absent'"),
                       dplab::CommError);
  double got = seconds_since(t0);
  CHECK(got >= 0.9);
  CHECK(got < kNotTheDefault);
}

// --- rendezvous: ranks as threads, each with its own TCPStore connection ---

namespace {
// Runs rendezvous for the given (rank, world_size) pairs; returns each rank's error ("" = ok).
std::vector<std::string> rendezvous_threads(const std::vector<std::pair<int, int>>& ranks,
                                            double timeout_s) {
  int port = par::find_free_port();
  ::setenv("DPLAB_JOB_TOKEN", kToken.c_str(), 1);  // make_store reads it
  std::vector<std::string> errors(ranks.size());
  std::vector<std::thread> threads;
  std::atomic<int> others_done{0};
  int others = 0;
  for (const auto& rw : ranks) others += rw.first != 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      auto [rank, world] = ranks[i];
      std::shared_ptr<par::Store> store;
      try {
        store = par::make_store("tcp://127.0.0.1:" + std::to_string(port), rank, world,
                                par::Seconds(timeout_s));
        par::rendezvous(*store, rank, world, par::Seconds(timeout_s));
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
      // Rank 0 hosts the server: keep it up until every other thread is done with it.
      if (rank != 0) {
        ++others_done;
      } else {
        while (others_done < others) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  }
  for (auto& t : threads) t.join();
  ::unsetenv("DPLAB_JOB_TOKEN");
  return errors;
}
}  // namespace

TEST_CASE("rendezvous: three ranks meet") {
  auto errors = rendezvous_threads({{2, 3}, {0, 3}, {1, 3}}, 30.0);  // a guard: they meet at once
  for (const auto& e : errors) CHECK(e == "");
}

TEST_CASE("rendezvous: a rank that never shows up is named") {
  // Ranks 0 and 1 must both check in before either gives up on rank 2: 5 s leaves that to
  // a thread the scheduler starts late. The time it took is no verdict: the message is.
  auto errors = rendezvous_threads({{0, 3}, {1, 3}}, 5.0);
  for (const auto& e : errors) {
    CHECK_MESSAGE(e.find("rank(s) 2 never checked in") != std::string::npos, e);
  }
}

// Both found without waiting for a timeout; the long one only lets every thread get there.
TEST_CASE("rendezvous: ranks that disagree on the world size are told so") {
  auto errors = rendezvous_threads({{0, 2}, {1, 3}}, 20.0);
  for (const auto& e : errors) {
    CHECK(e.find("ranks disagree on the world size: rank 0 has WORLD_SIZE=2, rank 1 has "
                 "WORLD_SIZE=3") != std::string::npos);
  }
}

TEST_CASE("rendezvous: a rank claimed twice is an error") {
  auto errors = rendezvous_threads({{0, 2}, {1, 2}, {1, 2}}, 20.0);
  int claimed_twice = 0;
  for (const auto& e : errors)
    claimed_twice += e.find("two processes claim rank 1") != std::string::npos;
  CHECK(claimed_twice >= 1);
}

TEST_CASE("make_store / init_process_group: bad arguments") {
  CHECK_THROWS_WITH_AS(par::make_store("udp://x", 0, 1, par::Seconds(1.0)),
                       doctest::Contains("expected env://, tcp://host:port or file:///path"),
                       dplab::Error);
  CHECK_THROWS_WITH_AS(par::make_store("tcp://127.0.0.1:http", 0, 1, par::Seconds(1.0)),
                       doctest::Contains("is not an integer"), dplab::Error);
  CHECK_THROWS_WITH_AS(par::init_process_group({.engine = "bogus"}),
                       doctest::Contains("unknown engine 'bogus': expected 'ring', 'star', "),
                       dplab::Error);
  CHECK_FALSE(par::is_initialized());
  CHECK_THROWS_WITH_AS(par::default_process_group(), doctest::Contains("init_process_group"),
                       dplab::Error);
}

namespace {
// Sets launcher variables for one test and restores the environment after it.
struct ScopedEnv {
  std::vector<std::string> names;
  explicit ScopedEnv(const std::vector<std::pair<std::string, std::string>>& vars) {
    for (const auto& [k, v] : vars) {
      ::setenv(k.c_str(), v.c_str(), 1);
      names.push_back(k);
    }
  }
  ~ScopedEnv() {
    for (const auto& k : names) ::unsetenv(k.c_str());
  }
};
}  // namespace

// With gloo built, dplab's engines cross nodes over gloo's wire instead (tests/gloo/).
TEST_CASE("init_process_group: ring and star refuse a job that spans nodes, naming mpi and nccl" *
          doctest::skip(par::gloo_built())) {
  ScopedEnv env(
      {{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"}});
  for (const char* b : {"ring", "star"}) {
    CHECK_THROWS_WITH_AS(par::init_process_group({.engine = b}),
                         doctest::Contains("use the 'mpi' engine (CPUs, started by mpirun) or the "
                                           "'nccl' engine (GPUs)"),
                         dplab::Error);
  }
  CHECK_FALSE(par::is_initialized());
}

TEST_CASE(
    "init_process_group: mpi under a launcher that is not mpirun is refused before MPI starts") {
  ScopedEnv env({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr) return;  // this test itself runs under mpirun
  CHECK_THROWS_WITH_AS(par::init_process_group({.engine = "mpi"}),
                       doctest::Contains(par::mpi_built() ? "the mpi engine needs mpirun"
                                                          : "the mpi engine is not built"),
                       dplab::Error);
  CHECK_FALSE(par::is_initialized());
}

// --- PrefixStore and the job token ---

TEST_CASE(
    "PrefixStore: a view whose keys live under prefix/ in its base; two views never collide") {
  auto base = std::make_shared<par::HashStore>(par::Seconds(1.0));
  par::PrefixStore a("dplab/pg0", base), b("dplab/pg1", base);
  a.set("shm_block", "A");
  b.set("shm_block", "B");
  CHECK(base->get("dplab/pg0/shm_block") == "A");
  CHECK(base->get("dplab/pg1/shm_block") == "B");
  CHECK(a.get("shm_block") == "A");
  CHECK(a.add("count", 2) == 2);
  CHECK(b.add("count", 5) == 5);
  CHECK(base->add("dplab/pg0/count", 0) == 2);
  CHECK(a.check({"shm_block", "count"}));
  CHECK_FALSE(a.check({"mapped/1"}));
  a.set_timeout(par::Seconds(0.2));
  CHECK_THROWS_WITH_AS(a.wait({"mapped/1"}), doctest::Contains("'dplab/pg0/mapped/1'"),
                       dplab::CommError);
  par::PrefixStore nested("watchdog", std::make_shared<par::PrefixStore>("dplab/pg0", base));
  nested.set("3", "x");
  CHECK(base->get("dplab/pg0/watchdog/3") == "x");
  CHECK_THROWS_WITH_AS(par::PrefixStore("", base), doctest::Contains("the prefix is empty"),
                       dplab::Error);
}

TEST_CASE("job token: drawn at random, checked for length and form, never echoed") {
  const std::string t1 = par::make_job_token(), t2 = par::make_job_token();
  CHECK(t1.size() == 32);
  CHECK(t1 != t2);
  CHECK(t1.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK_THROWS_WITH_AS(
      par::check_job_token("short-secret", "DPLAB_JOB_TOKEN"),
      doctest::Contains("DPLAB_JOB_TOKEN holds 12 characters; a job token needs 16 to 1024"),
      dplab::Error);
  try {
    par::check_job_token("has a space in it, and is long", "DPLAB_JOB_TOKEN");
    FAIL("a token with spaces was accepted");
  } catch (const dplab::Error& e) {
    CHECK(std::string(e.what()).find("has a space") == std::string::npos);  // not echoed
    CHECK(std::string(e.what()).find("printable ASCII without spaces") != std::string::npos);
  }
  ::unsetenv("DPLAB_JOB_TOKEN");
  CHECK_THROWS_WITH_AS(par::job_token_from_env(),
                       doctest::Contains("DPLAB_JOB_TOKEN is not set: the TCP store "
                                         "admits only connections that prove the job's token"),
                       dplab::Error);
  CHECK_THROWS_WITH_AS(par::make_store("tcp://127.0.0.1:1", 0, 1, par::Seconds(1.0)),
                       doctest::Contains("DPLAB_JOB_TOKEN is not set"), dplab::Error);
  CHECK(par::job_token_for_launch().size() == 32);  // unset: a fresh one
  // a TCPStore with another job's token is refused by the server, and says so
  par::TCPStore server("127.0.0.1", 0, true, par::Seconds(2.0), t1);
  CHECK_THROWS_WITH_AS(par::TCPStore("127.0.0.1", server.port(), false, par::Seconds(2.0), t2),
                       doctest::Contains("refused this rank: wrong job token"), dplab::CommError);
  CHECK(server.refused_connections() == 1);
  auto again = server.connect_again(par::Seconds(2.0));
  again->set("k", "v");
  CHECK(server.get("k") == "v");
}

TEST_CASE("FileStore: a symbolic link or a file others may write is refused, not used") {
  const std::string target = temp_path("fs_target"), link = temp_path("fs_link"),
                    loose = temp_path("fs_loose");
  const std::string content = "a file of the user's that a planted link points at\n";
  { std::ofstream(target) << content; }
  std::filesystem::remove(link);
  std::filesystem::create_symlink(target, link);
  CHECK_THROWS_WITH_AS(
      par::FileStore(link, 1, par::Seconds(1.0)),
      doctest::Contains("(it is a symbolic link; the store takes a plain file only)"),
      dplab::Error);
  CHECK(std::filesystem::file_size(target) == content.size());  // nothing appended through the link
  { std::ofstream(loose) << ""; }
  std::filesystem::permissions(loose, std::filesystem::perms::all);  // 0777: anyone may write
  CHECK_THROWS_WITH_AS(par::FileStore(loose, 1, par::Seconds(1.0)),
                       doctest::Contains("another user could forge the job's keys there"),
                       dplab::Error);
  for (const auto& p : {target, link, loose}) std::filesystem::remove(p);
}
