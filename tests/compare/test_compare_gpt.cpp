// test_compare_gpt.cpp: dplab-compare --model gpt, a tiny GPT (2 layers, 2 heads, 64
// channels, 16-byte context) for a few steps on a small text file the test writes, in every
// mode (single, dp, star, ring, ps with S = 1 and N) at N = 1, 2, 4. It checks that every mode
// ends with the single device's parameters and that every device's weight traffic is the
// textbook's for the GPT's parameter bytes: algorithms/cost.h's formulas, through
// engines/textbook_traffic.h where it has them (the star's master moves (N-1)x a worker's
// bytes, a ring rank 2(N-1)/N of them, a sharded server its shards'). No wall clock decides.
// The program's path comes as the first argument (tests/compare/meson.build).
// Read next: benchmarks/compare/workload.h, tests/compare/test_compare.cpp (the CNN's checks).
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "framework/ops/ops.h"
#include "models/models.h"
#include "parallel/algorithms/cost.h"
#include "parallel/algorithms/server_plan.h"
#include "parallel/engines/textbook_traffic.h"
#include "tests/program_run.h"

namespace fs = std::filesystem;
using dplab::testing::ProgramRun;
using dplab::testing::read_csv;
using dplab::testing::max_abs_diff;
using dplab::testing::read_floats;

namespace {

std::string g_exe;  // set in main below
const fs::path g_scratch =
    fs::temp_directory_path() / ("dplab-compare-gpt-test-" + std::to_string(::getpid()));

// The tiny GPT's shape, as given to dplab-compare and to models::GPT here.
dplab::models::GPTConfig tiny_config() {
  dplab::models::GPTConfig c = dplab::models::byte_gpt_config();
  c.n_layer = 2, c.n_head = 2, c.n_embd = 64, c.block_size = 16;
  return c;
}
const char* const kTinyFlags = "--model gpt --n-layer 2 --n-head 2 --n-embd 64 --block-size 16";

// About 40 KB of English-like lines that do not repeat exactly (a linear congruential
// generator picks the words), so the windows of different steps differ.
fs::path write_corpus(const fs::path& dir) {
  const std::vector<std::string> words{"the",    "ring",  "sends",  "every",     "gradient",
                                       "to",     "its",   "right",  "neighbour", "while",
                                       "master", "waits", "for",    "all",       "workers",
                                       "and",    "a",     "bucket", "of",        "bytes"};
  fs::create_directories(dir);
  const fs::path path = dir / "corpus.txt";
  std::ofstream f(path);
  uint32_t state = 12345;
  for (int line = 0; line < 800; ++line) {
    for (int w = 0; w < 8; ++w) {
      state = state * 1664525u + 1013904223u;
      f << words[(state >> 16) % words.size()] << (w < 7 ? " " : ".\n");
    }
  }
  return path;
}

struct Run : ProgramRun {
  fs::path out;
};

// One run for all test cases (a few seconds of training per mode).
const Run& gpt_run() {
  static Run run = [] {
    Run r;
    r.out = g_scratch / "out";
    const fs::path corpus = write_corpus(g_scratch);
    static_cast<ProgramRun&>(r) = dplab::testing::run_program(
        "DPLAB_NUM_THREADS=1 DPLAB_PROGRESS=off '" + g_exe + "' " + kTinyFlags + " --data '" +
        corpus.string() +
        "' --modes single,dp,star,ring,ps --servers 1,N --ns 1,2,4 --steps 4 --warmup 1 "
        "--global-batch 8 --test-limit 8 --no-projection --trace --out '" +
        r.out.string() + "'");
    return r;
  }();
  return run;
}

int64_t tiny_params() {
  dplab::models::GPT gpt(tiny_config());
  return gpt.num_params();
}

}  // namespace

TEST_CASE("gpt: every mode at N = 1, 2, 4 ends with the single device's parameters") {
  const Run& r = gpt_run();
  INFO(r.output);
  REQUIRE(r.rc == 0);  // 0: every run within 0.5 next-byte accuracy points of the single device
  const std::vector<float> ref = read_floats(r.out / "runs" / "single_n1.params");
  REQUIRE(int64_t(ref.size()) == tiny_params());
  for (const char* mode : {"dp", "star", "ring", "ps-s1", "ps-s2", "ps-s4"})
    for (int n : {1, 2, 4}) {
      const std::string file = std::string(mode) + "_n" + std::to_string(n) + ".params";
      if (!fs::exists(r.out / "runs" / file)) continue;  // ps-s2 only at N = 2, ps-s4 at 4
      CAPTURE(file);
      const std::vector<float> p = read_floats(r.out / "runs" / file);
      REQUIRE(p.size() == ref.size());
      CHECK(max_abs_diff(p, ref) < 1e-5);
    }
  CHECK(r.output.find("all modes agree") != std::string::npos);
  // one row per run: single, then dp, star, ring at N = 1, 2, 4, then ps S = 1 (N = 1, 2, 4)
  // and S = N (N = 2, 4)
  CHECK(read_csv(r.out / "results.csv").size() == 1 + 3 * 3 + 3 + 2);
}

TEST_CASE("gpt: each device's weight bytes per step are cost.h's for the GPT's parameter bytes") {
  const Run& r = gpt_run();
  REQUIRE(r.rc == 0);
  const int64_t bytes = 4 * tiny_params();  // float32 gradients, one bucket (cap 25 MiB)
  const auto rows = read_csv(r.out / "per_device.csv");
  auto device_rows = [&](const std::string& mode, int n) {
    std::vector<std::map<std::string, std::string>> v;
    for (const auto& row : rows)
      if (row.at("mode") == mode && std::stoi(row.at("N")) == n) v.push_back(row);
    return v;
  };
  const double mib = 1 << 20;
  auto check = [&](const std::map<std::string, std::string>& row, dplab::parallel::Traffic t) {
    CHECK(std::stod(row.at("weight_sent_mib_per_step")) ==
          doctest::Approx(double(t.sent) / mib).epsilon(1e-5));
    CHECK(std::stod(row.at("weight_recv_mib_per_step")) ==
          doctest::Approx(double(t.received) / mib).epsilon(1e-5));
  };
  const dplab::Tensor gradient = dplab::zeros({tiny_params()});
  for (int n : {2, 4}) {
    CAPTURE(n);
    for (const char* mode : {"star", "dp"}) {  // DataParallel: replicate out, reduce in
      CAPTURE(mode);
      const auto devs = device_rows(mode, n);
      REQUIRE(devs.size() == size_t(n));
      for (int d = 0; d < n; ++d)
        check(devs[d], dplab::parallel::star_all_reduce_cost(bytes, d, n));
      // in words: the master moves (N-1)x a worker's bytes
      CHECK(std::stod(devs[0].at("weight_sent_mib_per_step")) ==
            doctest::Approx((n - 1) * std::stod(devs[1].at("weight_recv_mib_per_step")))
                .epsilon(1e-5));
    }
    const auto ring = device_rows("ring", n);
    REQUIRE(ring.size() == size_t(n));
    for (int d = 0; d < n; ++d)
      check(ring[d], dplab::parallel::TextbookTraffic{.rank = d, .size = n}.all_reduce(gradient));
    for (const int servers : {1, n}) {
      const std::string mode = "ps-s" + std::to_string(servers);
      CAPTURE(mode);
      const auto devs = device_rows(mode, n);
      REQUIRE(devs.size() == size_t(n));
      const dplab::parallel::ServerPlan plan =
          dplab::parallel::make_server_plan(tiny_params(), n, servers, true);
      for (int d = 0; d < n; ++d) {
        const dplab::parallel::Traffic push = dplab::parallel::ps_push_cost(plan, 4, d, n);
        const dplab::parallel::Traffic pull = dplab::parallel::ps_pull_cost(plan, 4, d, n);
        check(devs[d], {.sent = push.sent + pull.sent, .received = push.received + pull.received});
      }
    }
  }
}

TEST_CASE("gpt: the report names its text file; the plots and the trace are written") {
  const Run& r = gpt_run();
  REQUIRE(r.rc == 0);
  std::ifstream report(r.out / "report.md");
  const std::string md((std::istreambuf_iterator<char>(report)), std::istreambuf_iterator<char>());
  CHECK(md.find("byte windows of a text file (") != std::string::npos);
  CHECK(md.find("corpus.txt") != std::string::npos);
  CHECK(md.find("Fashion-MNIST") == std::string::npos);
  std::ifstream trace(r.out / "trace.json");
  const std::string text((std::istreambuf_iterator<char>(trace)), std::istreambuf_iterator<char>());
  CHECK(text.find("allreduce bucket") != std::string::npos);
  if (r.output.find("plots skipped") != std::string::npos) {
    MESSAGE("plot check skipped: " << r.output.substr(r.output.find("plots skipped"), 80));
    return;
  }
  for (const char* png : {"throughput.png", "memory.png", "traffic.png", "step_split.png"}) {
    CAPTURE(png);
    CHECK(fs::exists(r.out / png));
  }
}

TEST_CASE("gpt: a missing text file and a shape that does not split are refused with a message") {
  const ProgramRun missing = dplab::testing::run_program(
      "'" + g_exe + "' --model gpt --modes single --ns 1 --data /nonexistent/corpus.txt --out '" +
      (g_scratch / "bad").string() + "'");
  CHECK(missing.rc == 1);
  CHECK(missing.output.find("/nonexistent/corpus.txt") != std::string::npos);
  const ProgramRun heads =
      dplab::testing::run_program("'" + g_exe + "' --model gpt --n-embd 30 --n-head 4 --out '" +
                                  (g_scratch / "bad").string() + "'");
  CHECK(heads.rc == 1);
  CHECK(heads.output.find("--n-embd 30 does not split into --n-head 4 heads") != std::string::npos);
  const ProgramRun image_shape = dplab::testing::run_program(
      "'" + g_exe + "' --model mlp --n-layer 2 --out '" + (g_scratch / "bad").string() + "'");
  CHECK(image_shape.rc == 1);
  CHECK(image_shape.output.find("shape --model gpt, not --model mlp") != std::string::npos);
}

// The program's path comes first on the command line, doctest's options after.
int main(int argc, char** argv) {
  return dplab::testing::program_test_main(argc, argv, g_exe, g_scratch);
}
