// test_save_faults.cpp: what a checkpoint save or load leaves when things go wrong around
// it: a save stopped by SIGTERM removes its temporary (and the final path holds the old
// file or the new one, whole), a temporary left by a process that died by SIGKILL is
// removed by the next save of that path, a FIFO is refused instead of blocking forever, and
// a checkpoint whose hyper-parameters are not finite numbers does not load.
// Read next: framework/io/temp_file.h.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <limits>
#include <thread>

#include "framework/io/checkpoint.h"
#include "framework/io/safetensors.h"
#include "framework/io/temp_file.h"
#include "framework/nn/layers.h"
#include "framework/ops/ops.h"
#include "framework/optim/sgd.h"
#include "tests/io/io_test_util.h"

using namespace dplab;
using dplab::test::TempDir;

namespace {

bool has_temporary(const TempDir& dir) {
  for (const std::string& name : dir.entries())
    if (name.find(".tmp-") != std::string::npos) return true;
  return false;
}

// A pid that no process has now: a child that has exited and been reaped.
pid_t dead_pid() {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

}  // namespace

TEST_CASE("a save stopped by SIGTERM removes its temporary; the final path stays whole") {
  TempDir dir;
  const std::string path = dir.file("big.safetensors");
  StateDict big;
  big.insert("w", zeros({int64_t{48} << 18}));  // 48 MiB: a save takes a while
  for (int trial = 0; trial < 3; ++trial) {
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {            // saves over and over until the signal comes
      signal(SIGTERM, SIG_DFL);  // as in a plain program (doctest catches it in this process)
      for (;;) save_safetensors(path, big);
    }
    // wait until a temporary exists, i.e. a save is under way, then stop it
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!has_temporary(dir) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    kill(child, SIGTERM);
    int st = 0;
    waitpid(child, &st, 0);
    CHECK(WIFSIGNALED(st));  // the handler removed the file, then SIGTERM took its course
    CHECK(WTERMSIG(st) == SIGTERM);
    CHECK_FALSE(has_temporary(dir));
    if (std::filesystem::exists(path))
      CHECK(load_safetensors(path).tensors.at("w").numel() == (int64_t{48} << 18));
  }
}

TEST_CASE("a save removes temporaries of its path left by dead processes, and only those") {
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  const pid_t dead = dead_pid();
  const std::string stale = fmt::format("x.safetensors.tmp-{}-0", dead);
  const std::string live = fmt::format("x.safetensors.tmp-{}-99", getpid());  // a save in flight
  const std::string other_path = fmt::format("y.safetensors.tmp-{}-0", dead);
  const std::string not_ours = "x.safetensors.tmp-notes";
  for (const std::string& name : {stale, live, other_path, not_ours})
    test::write_bytes(dir.file(name), "half");
  StateDict sd;
  sd.insert("a", ones({2}));
  save_safetensors(path, sd);
  std::vector<std::string> expect{live, not_ours, "x.safetensors", other_path};
  std::sort(expect.begin(), expect.end());
  CHECK(dir.entries() == expect);
  CHECK(remove_stale_temporaries(dir.file("y.safetensors")) == 1);
}

TEST_CASE(
    "a save to a relative path removes the stale temporaries beside it, in the working directory") {
  TempDir dir;
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path);
  const pid_t dead = dead_pid();
  const std::string stale = fmt::format("rel.safetensors.tmp-{}-0", dead);
  test::write_bytes(stale, "half");
  test::write_bytes(fmt::format(".{}", stale), "a file named like the old mistake: not ours");
  CHECK(remove_stale_temporaries("rel.safetensors") == 1);
  CHECK_FALSE(std::filesystem::exists(stale));
  test::write_bytes(stale, "half");
  StateDict sd;
  sd.insert("a", ones({2}));
  save_safetensors("rel.safetensors", sd);  // a path without a directory part
  CHECK_FALSE(std::filesystem::exists(stale));
  CHECK(std::filesystem::exists("." + stale));  // only our own naming goes
  CHECK(load_safetensors("rel.safetensors").tensors.at("a").numel() == 2);
  std::filesystem::current_path(cwd);
}

TEST_CASE("loading a FIFO is refused at once instead of waiting for a writer") {
  TempDir dir;
  const std::string fifo = dir.file("pipe.safetensors");
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  auto result = std::async(std::launch::async, [&]() -> std::string {
    try {
      load_safetensors(fifo);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  });
  if (result.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    int fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // unblock the reader so the test ends
    if (fd >= 0) close(fd);
    FAIL("load_safetensors blocked on a FIFO");
  }
  CHECK(result.get().find("is not a regular file") != std::string::npos);
}

TEST_CASE(
    "hyper-parameters that are not finite are refused, in a checkpoint and in the constructor") {
  TempDir dir;
  nn::Linear net(3, 2);
  optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9});
  const std::string path = dir.file("c.safetensors");
  save_checkpoint(path, net, &opt);
  for (const char* bad : {"inf", "-inf", "nan"}) {
    CAPTURE(bad);
    Loaded file = load_safetensors(path);
    file.metadata["optim.lr"] = bad;  // as if edited, or written by a buggy tool
    save_safetensors(path, file.tensors, file.metadata);
    CHECK_THROWS_WITH_AS(load_checkpoint(path, net, &opt),
                         doctest::Contains("\"optim.lr\" should be a finite number"), Error);
  }
  const double inf = std::numeric_limits<double>::infinity();
  CHECK_THROWS_WITH_AS(optim::SGD(net.parameters(), {.lr = inf}), doctest::Contains("finite"),
                       Error);
  CHECK_THROWS_WITH_AS(optim::SGD(net.parameters(), {.lr = 0.1, .momentum = std::nan("")}),
                       doctest::Contains("finite"), Error);
}
