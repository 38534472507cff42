// test_log_progress.cpp: log level and rank filtering, and the progress bar's output in
// plain and terminal mode, with the output stream and the clock injected so every
// character can be checked.
#include <doctest/doctest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "framework/error.h"
#include "framework/io/log.h"
#include "framework/io/progress.h"

using namespace dplab;

namespace {

// Sends log lines to a string for one test, and restores the defaults afterwards.
struct CapturedLog {
  std::ostringstream out;
  CapturedLog() {
    set_log_stream(&out);
    set_log_level(LogLevel::Info);
    set_log_prefix("");
    set_log_rank(-1);
    set_log_timestamps(false);
  }
  ~CapturedLog() {
    set_log_stream(nullptr);
    set_log_level(LogLevel::Info);
    set_log_prefix("");
    set_log_rank(-1);
  }
  std::string take() {
    std::string s = out.str();
    out.str("");
    return s;
  }
};

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

TEST_CASE("log: levels filter, lines are formatted with the level and prefix") {
  CapturedLog log;
  log_debug("hidden {}", 1);
  log_info("loss {:.2f} at step {}", 0.4123, 7);
  log_warning("slow");
  log_error("bad {}", "thing");
  CHECK(log.take() == "INFO: loss 0.41 at step 7\nWARNING: slow\nERROR: bad thing\n");

  set_log_level(LogLevel::Debug);
  log_debug("now shown");
  CHECK(log.take() == "DEBUG: now shown\n");

  set_log_level(LogLevel::Warning);
  log_info("hidden");
  log_warning("shown");
  CHECK(log.take() == "WARNING: shown\n");
  CHECK(!log_enabled(LogLevel::Info));

  set_log_level(LogLevel::Error);
  log_warning("hidden");
  log_error("shown");
  CHECK(log.take() == "ERROR: shown\n");

  set_log_level(LogLevel::Info);
  set_log_prefix("[rank 1] ");
  CHECK(log_prefix() == "[rank 1] ");
  log_info("hello");
  CHECK(log.take() == "[rank 1] INFO: hello\n");

  set_log_timestamps(true);
  log_info("t");
  std::string stamped = log.take();  // "HH:MM:SS.mmm [rank 1] INFO: t\n"
  CHECK(stamped.size() == 13 + std::string("[rank 1] INFO: t\n").size());
  CHECK(stamped.substr(13) == "[rank 1] INFO: t\n");
  set_log_timestamps(false);
}

TEST_CASE("log: set_log_rank prints info on rank 0 only, warnings and errors everywhere") {
  CapturedLog log;
  set_log_rank(1);
  log_info("rank 1 info");
  log_debug("rank 1 debug");
  log_warning("rank 1 warning");
  log_error("rank 1 error");
  CHECK(log.take() == "WARNING: rank 1 warning\nERROR: rank 1 error\n");
  set_log_rank(0);
  log_info("rank 0 info");
  CHECK(log.take() == "INFO: rank 0 info\n");
  set_log_rank(-1);
  log_info("no filter");
  CHECK(log.take() == "INFO: no filter\n");
}

TEST_CASE("log: level names parse, anything else is an error") {
  CHECK(parse_log_level("debug") == LogLevel::Debug);
  CHECK(parse_log_level("INFO") == LogLevel::Info);
  CHECK(parse_log_level("Warn") == LogLevel::Warning);
  CHECK(parse_log_level("warning") == LogLevel::Warning);
  CHECK(parse_log_level("error") == LogLevel::Error);
  CHECK_THROWS_WITH(parse_log_level("verbose"),
                    doctest::Contains("expected debug, info, warning or error, got \"verbose\""));
  CHECK(log_level_name(LogLevel::Warning) == "WARNING");
}

// The level is read from the environment once, on first use, so it is checked in a fresh
// copy of this test program (re-run with a filter selecting only this test case).
TEST_CASE("log: DPLAB_LOG_LEVEL sets the starting level; a bad value warns and keeps info") {
  if (const char* expect = std::getenv("DPLAB_IO_TEST_EXPECT_LEVEL")) {  // in the child
    std::ostringstream out;
    set_log_stream(&out);
    CHECK(log_level_name(log_level()) == std::string(expect));
    log_error("e");
    if (std::getenv("DPLAB_IO_TEST_EXPECT_WARNING") != nullptr) {
      CHECK(out.str() == "WARNING: DPLAB_LOG_LEVEL=\"loud\" is not one of debug, info, warning, "
                         "error; using info\n"
                         "ERROR: e\n");
    } else {
      CHECK(out.str() == "ERROR: e\n");
    }
    set_log_stream(nullptr);
    return;
  }
  // Runs this test alone in a child with DPLAB_LOG_LEVEL=value; true if its checks pass.
  auto child_passes = [](const std::string& value, const std::string& expect, bool warning) {
    std::string cmd = "DPLAB_LOG_LEVEL=" + value + " DPLAB_IO_TEST_EXPECT_LEVEL=" + expect +
                      (warning ? " DPLAB_IO_TEST_EXPECT_WARNING=1" : "") + " /proc/" +
                      std::to_string(getpid()) +
                      "/exe -tc='log: DPLAB_LOG_LEVEL*' > /dev/null 2>&1";
    return std::system(cmd.c_str()) == 0;
  };
  CHECK(child_passes("error", "ERROR", false));
  CHECK(child_passes("Debug", "DEBUG", false));
  CHECK(child_passes("loud", "INFO", true));
  CHECK(!child_passes("error", "DEBUG", false));  // the child's check can fail
}

TEST_CASE("progress: plain mode prints a line every 10% with rate and ETA") {
  double t = 100.0;  // a fake clock: every update takes 0.5 s
  std::ostringstream out;
  ProgressBar bar({.total = 100,
                   .desc = "epoch 1/5",
                   .unit = "samples",
                   .out = &out,
                   .mode = ProgressMode::Plain,
                   .clock = [&t] { return t; }});
  CHECK(bar.mode() == ProgressMode::Plain);
  for (int i = 0; i < 20; ++i) {
    t += 0.5;
    bar.update(5, {{"loss", 1.0 - 0.01 * i}});
  }
  bar.close();
  bar.close();  // idempotent
  auto lines = lines_of(out.str());
  REQUIRE(lines.size() == 10);
  CHECK(lines[0] == "epoch 1/5: 10/100 (10%) loss=0.9900 10.0 samples/s ETA 0:09");
  CHECK(lines[4] == "epoch 1/5: 50/100 (50%) loss=0.9100 10.0 samples/s ETA 0:05");
  CHECK(lines[9] == "epoch 1/5: 100/100 (100%) loss=0.8100 10.0 samples/s in 0:10");
  CHECK(out.str().find('\r') == std::string::npos);
  CHECK_THROWS_WITH(bar.update(1), doctest::Contains("after close()"));
}

TEST_CASE(
    "progress: plain mode ends with a final line when stopped early, and big jumps print once") {
  double t = 0.0;
  std::ostringstream out;
  {
    ProgressBar bar({.total = 1000,
                     .desc = "eval",
                     .unit = "it",
                     .out = &out,
                     .mode = ProgressMode::Plain,
                     .clock = [&t] { return t; }});
    t = 2.0;
    bar.update(450);  // crosses 10%..40% at once: one line
    t = 3.0;
    bar.update(5, {{"acc", 0.875}, {"lr", 1e-5}});
    // destructor closes
  }
  auto lines = lines_of(out.str());
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "eval: 450/1000 (45%) 225.0 it/s ETA 0:02");
  CHECK(lines[1] == "eval: 455/1000 (45%) acc=0.8750 lr=1.000e-05 151.7 it/s in 0:03");
}

TEST_CASE("progress: unknown total prints every plain_interval_s") {
  double t = 0.0;
  std::ostringstream out;
  ProgressBar bar({.total = 0,
                   .desc = "stream",
                   .unit = "batches",
                   .out = &out,
                   .mode = ProgressMode::Plain,
                   .plain_interval_s = 10.0,
                   .clock = [&t] { return t; }});
  for (int i = 0; i < 25; ++i) {
    t += 1.0;
    bar.update(2);
  }
  bar.close();
  auto lines = lines_of(out.str());
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == "stream: 20 batches 2.0 batches/s");
  CHECK(lines[1] == "stream: 40 batches 2.0 batches/s");
  CHECK(lines[2] == "stream: 50 batches 2.0 batches/s in 0:25");
}

TEST_CASE("progress: terminal mode redraws one line with \\r, at most 10 times a second") {
  double t = 0.0;  // steps of 1/64 s are exact in binary, so the pacing is deterministic
  std::ostringstream out;
  ProgressBar bar({.total = 640,
                   .desc = "epoch 2/5",
                   .unit = "samples",
                   .out = &out,
                   .mode = ProgressMode::Bar,
                   .clock = [&t] { return t; }});
  for (int i = 0; i < 64; ++i) {  // 64 updates over 1 s
    t += 1.0 / 64;
    bar.update(10, {{"loss", 0.5}});
  }
  std::string before_close = out.str();
  // Draws at updates 1, 8, 15, ..., 57 (>= 0.1 s apart) and 64 (done): 10 in one second.
  CHECK(std::count(before_close.begin(), before_close.end(), '\r') == 10);
  bar.close();
  std::string s = out.str();
  CHECK(std::count(s.begin(), s.end(), '\r') == 11);
  CHECK(std::count(s.begin(), s.end(), '\n') == 1);
  CHECK(s.back() == '\n');
  std::string last = s.substr(s.rfind('\r') + 1);
  CHECK(last ==
        "epoch 2/5 [####################] 640/640 100% loss=0.5000 640.0 samples/s in 0:01\n");
  // Update 29: 290 of 640 done at t = 29/64 s: 9 of 20 cells, 45%, 0.55 s left.
  CHECK(s.find("\repoch 2/5 [#########...........] 290/640 45% loss=0.5000 640.0 samples/s ETA "
               "0:01\r") != std::string::npos);
}

TEST_CASE("progress: a log line first erases the terminal bar") {
  CapturedLog log;
  double t = 0.0;
  std::ostringstream out;
  {
    ProgressBar bar(
        {.total = 10, .desc = "e", .out = &out, .mode = ProgressMode::Bar, .clock = [&t] {
           return t;
         }});
    t = 1.0;
    bar.update(1);
    std::string drawn = out.str();
    REQUIRE(!drawn.empty());
    size_t width = drawn.size() - 1;  // minus the leading \r
    log_info("checkpoint saved");
    CHECK(out.str() == drawn + "\r" + std::string(width, ' ') + "\r");
    CHECK(log.take() == "INFO: checkpoint saved\n");
    bar.close();
  }
  // After close the hook is gone: logging no longer touches the bar's stream.
  std::string before = out.str();
  log_info("after");
  CHECK(out.str() == before);
}

TEST_CASE("progress: mode from DPLAB_PROGRESS, plain when stdout is not a terminal") {
  setenv("DPLAB_PROGRESS", "off", 1);
  {
    std::ostringstream out;
    ProgressBar bar({.total = 4, .out = &out});
    bar.update(4);
    bar.close();
    CHECK(bar.mode() == ProgressMode::Off);
    CHECK(out.str().empty());
  }
  setenv("DPLAB_PROGRESS", "bar", 1);
  {
    std::ostringstream out;
    ProgressBar bar({.total = 4, .out = &out});
    CHECK(bar.mode() == ProgressMode::Bar);
  }
  unsetenv("DPLAB_PROGRESS");
  {
    std::ostringstream out;
    ProgressBar bar({.total = 4, .out = &out});
    CHECK(bar.mode() == ProgressMode::Plain);  // an injected stream is never a terminal
    ProgressBar on_stdout(
        {.total = 4, .desc = "(progress mode check on stdout)", .mode = ProgressMode::Auto});
    CHECK(on_stdout.mode() == (isatty(STDOUT_FILENO) ? ProgressMode::Bar : ProgressMode::Plain));
  }
  CHECK_THROWS_WITH(ProgressBar({.total = -1}), doctest::Contains("total must be >= 0"));
  CHECK(format_duration(7) == "0:07");
  CHECK(format_duration(754) == "12:34");
  CHECK(format_duration(3723) == "1:02:03");
}
