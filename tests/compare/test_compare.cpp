// test_compare.cpp: a short run of dplab-compare (every mode, N = 1, 2, 3, a few steps on a
// tiny Fashion-MNIST subset) and checks on what it wrote: every mode ends with the single
// device's parameters, results.csv has every column, the parameter server's master moves
// (N-1)x a worker's weight bytes while ring ranks move equal bytes, and the plots exist
// (that check alone is skipped, and says so, when matplotlib is missing). Mode ps (the sharded
// parameter server, S = 1 and N, co-located and separate) ends with the ring's parameters and
// moves cost.h's bytes on every rank.
// The program's path comes as the first argument (tests/compare/meson.build).
// Read next: benchmarks/compare/cli.cpp.
// own main below: the program's path comes first (doctest itself: tests/doctest_impl.cpp)
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/program_run.h"

namespace fs = std::filesystem;
using dplab::testing::ProgramRun;
using dplab::testing::read_csv;
using dplab::testing::max_abs_diff;
using dplab::testing::read_floats;
using dplab::testing::run_program;

namespace {

std::string g_exe;  // set in main below

struct Run : dplab::testing::ProgramRun {
  fs::path out;
};

// Runs dplab-compare once for all test cases (it takes ~20 s), with stdout and stderr kept.
const Run& short_run() {
  static Run run = [] {
    Run r;
    r.out = fs::temp_directory_path() / ("dplab-compare-test-" + std::to_string(::getpid()));
    fs::remove_all(r.out);
    static_cast<dplab::testing::ProgramRun&>(r) = dplab::testing::run_program(
        "DPLAB_NUM_THREADS=1 DPLAB_PROGRESS=off '" + g_exe +
        "' --model mlp --ns 1,2,3 --steps 4 --warmup 1 --global-batch 48 --train-limit 240 "
        "--test-limit 200 --bucket-cap-mb 0.25 --trace --out '" +
        r.out.string() + "'");
    return r;
  }();
  return run;
}

}  // namespace

TEST_CASE("bad options exit with a message saying what was expected, never a crash") {
  struct Bad {
    std::string args, says;
  };
  for (const Bad& bad :
       {Bad{"--ns 0", "device counts >= 1, got '0'"},
        Bad{"--ns -1 --modes dp", "device counts >= 1, got '-1'"},
        Bad{"--ns 1,0,2", "device counts >= 1, got '0'"}, Bad{"--steps 0", "steps >= 1, got '0'"},
        Bad{"--link-gbps -1", "a link speed >= 0 Gbit/s"},
        Bad{"--links fast", "--links expects emulated, netns or netns:RATE (e.g. netns:1gbit), got 'fast'"},
        Bad{"--links netns:1gb", "expects a rate as tc writes it (e.g. 1gbit, 500mbit), got '1gb'"},
        Bad{"--links netns --link-gbps 0", "--links netns takes its rate from --link-gbps, which is 0"},
        Bad{"--links netns:1gbit --link-gbps 10", "--links netns:1gbit and --link-gbps 10 disagree"},
        Bad{"--global-batch 0", "a global batch >= 1"}, Bad{"--lr nan", "a learning rate >= 0"},
        Bad{"--modes ps --servers 0", "expected server counts >= 1 or N, got '0'"},
        Bad{"--modes ps --servers 2,M", "expected server counts >= 1 or N, got 'M'"},
        Bad{"--modes ps --ps-placement apart", "apart not in {colocated,separate}"},
        // more processes than dplab-run starts per node: refused before any starts, in its words
        Bad{"--ns 100000", "--ns 100000 is over the limit of 256 ranks per node (each rank is a process of its own); "
                           "if you mean it, add --nproc-limit 100000"},
        Bad{"--ns 2,300 --modes ring", "--ns 300 is over the limit of 256 ranks per node"},
        Bad{"--ns 200 --modes ps --servers 1,N --ps-placement separate",
            "--ns 200 with --servers N --ps-placement separate (400 processes) is over the limit of 256 ranks per node "
            "(each rank is a process of its own); if you mean it, add --nproc-limit 400"},
        Bad{"--nproc-limit 0", "a process limit >= 1, got '0'"}}) {
    CAPTURE(bad.args);
    const ProgramRun run =
        run_program("'" + g_exe + "' " + bad.args + " --out /nonexistent/never-written");
    CAPTURE(run.output);
    CHECK(run.rc > 0);  // an exit status: not killed by SIGFPE or SIGSEGV (-1), not success
    CHECK(run.output.find(bad.says) != std::string::npos);
  }
  // --nproc-limit raises the limit, as dplab-run's does: the next check, a refused precision,
  // is the one that stops this run, before anything starts
  const ProgramRun raised = run_program("'" + g_exe + "' --ns 300 --nproc-limit 300 --modes dp --precision fp16 "
                                        "--out /nonexistent/never-written");
  CAPTURE(raised.output);
  CHECK(raised.rc == 1);
  CHECK(raised.output.find("over the limit") == std::string::npos);
  CHECK(raised.output.find("--precision fp16: mode dp is not supported") != std::string::npos);
}

TEST_CASE("the short run succeeds and every mode ends with the single device's parameters") {
  const Run& r = short_run();
  INFO(r.output);
  REQUIRE(r.rc == 0);
  const std::vector<float> ref = read_floats(r.out / "runs" / "single_n1.params");
  REQUIRE(ref.size() == 235146);  // MLP 784-256-128-10
  for (const char* mode : {"dp", "star", "ring"})
    for (int n : {1, 2, 3}) {
      CAPTURE(mode);
      CAPTURE(n);
      const std::vector<float> p =
          read_floats(r.out / "runs" / (std::string(mode) + "_n" + std::to_string(n) + ".params"));
      REQUIRE(p.size() == ref.size());
      CHECK(max_abs_diff(p, ref) < 1e-5);
    }
  CHECK(r.output.find("all modes agree") != std::string::npos);
}

TEST_CASE("results.csv has every column and one row per mode and N") {
  const Run& r = short_run();
  REQUIRE(r.rc == 0);
  std::vector<std::string> header;
  const auto rows = read_csv(r.out / "results.csv", &header);
  const std::vector<std::string> expected{"mode",
                                          "precision",
                                          "N",
                                          "global_batch",
                                          "timed_steps",
                                          "samples_per_s",
                                          "speedup",
                                          "efficiency",
                                          "step_ms",
                                          "compute_ms",
                                          "comm_ms",
                                          "wait_ms",
                                          "peak_mem_max_mib",
                                          "peak_mem_min_mib",
                                          "mem_imbalance",
                                          "master_sent_mib",
                                          "master_recv_mib",
                                          "other_sent_mib",
                                          "other_recv_mib",
                                          "master_weight_sent_mib",
                                          "master_weight_recv_mib",
                                          "other_weight_sent_mib",
                                          "other_weight_recv_mib",
                                          "test_accuracy",
                                          "test_loss",
                                          "params",
                                          "predicted_step_ms",
                                          "prediction_error_pct",
                                          "link_gbps",
                                          "servers",
                                          "link",
                                          "emulated_vs_real_pct",
                                          "master_wire_sent_mib",
                                          "master_wire_recv_mib"};
  CHECK(header == expected);
  CHECK(rows.size() == 10);  // single + 3 x {dp, star, ring}
  for (const auto& row : rows) {
    CAPTURE(row.at("mode"));
    CHECK(std::stod(row.at("samples_per_s")) > 0);
    CHECK(std::stoll(row.at("timed_steps")) == 3);
    CHECK(std::stod(row.at("peak_mem_max_mib")) > 0);
    const double acc = std::stod(row.at("test_accuracy"));
    CHECK(acc > 0);
    CHECK(acc <= 100);
    if (row.at("mode") == "ring" || row.at("mode") == "star") {
      // the prediction: the run's own compute plus what the model says communication adds:
      // nothing on one rank; past that at least the compute (the buckets before the last hide
      // under it), and at least the all-reduces, whose gradients cross a 10 Gbit/s link
      const double pred = std::stod(row.at("predicted_step_ms")),
                   compute = std::stod(row.at("compute_ms"));
      const double wire_ms = 4.0 * std::stod(row.at("params")) / (10e9 / 8) * 1e3;
      if (row.at("N") == "1") CHECK(pred == doctest::Approx(compute).epsilon(1e-3));
      else CHECK(pred >= std::max(compute, wire_ms) * 0.99);
    }
    // cpu's default: every device with company sits behind a 10 Gbit/s link; alone, none
    CHECK(std::stod(row.at("link_gbps")) == (std::stoi(row.at("N")) > 1 ? 10.0 : 0.0));
    CHECK(row.at("link") == (std::stoi(row.at("N")) > 1 ? "emulated" : "none"));
    CHECK(row.at("emulated_vs_real_pct") == "nan");  // no --links netns: no real twin
    CHECK(row.at("master_wire_sent_mib") == "nan");  // nor a real link to count bytes on
  }
}

TEST_CASE("PS master moves (N-1)x a worker's weight bytes; ring ranks move equal bytes") {
  const Run& r = short_run();
  REQUIRE(r.rc == 0);
  const auto rows = read_csv(r.out / "per_device.csv", nullptr);
  auto dev = [&](const std::string& mode, int n, int d) {
    for (const auto& row : rows)
      if (row.at("mode") == mode && std::stoi(row.at("N")) == n && std::stoi(row.at("device")) == d)
        return row;
    FAIL("no per_device row for " << mode << " N=" << n << " device " << d);
    return rows.front();
  };
  auto val = [](const std::map<std::string, std::string>& row, const char* k) {
    return std::stod(row.at(k));
  };
  const int n = 3;
  const double grad_mib = 235146 * 4.0 / (1 << 20);
  // Star (DDP) and DataParallel: the master sends the weights (or reduced gradients) to each
  // of the N-1 others and receives N-1 gradients; each worker sends and receives one copy.
  for (const char* mode : {"star", "dp"}) {
    CAPTURE(mode);
    const auto master = dev(mode, n, 0);
    for (int w = 1; w < n; ++w) {
      const auto worker = dev(mode, n, w);
      CHECK(val(master, "weight_sent_mib_per_step") ==
            doctest::Approx((n - 1) * val(worker, "weight_recv_mib_per_step")).epsilon(1e-4));
      CHECK(val(master, "weight_recv_mib_per_step") ==
            doctest::Approx((n - 1) * val(worker, "weight_sent_mib_per_step")).epsilon(1e-4));
      CHECK(val(worker, "weight_sent_mib_per_step") == doctest::Approx(grad_mib).epsilon(1e-4));
    }
  }
  // Ring: every rank sends and receives 2(N-1)/N of the gradient bytes (up to one element
  // per chunk when the buffer does not split evenly).
  for (int d = 0; d < n; ++d) {
    const auto rank = dev("ring", n, d);
    CHECK(val(rank, "weight_sent_mib_per_step") ==
          doctest::Approx(2.0 * (n - 1) / n * grad_mib).epsilon(1e-3));
    CHECK(val(rank, "weight_recv_mib_per_step") ==
          doctest::Approx(2.0 * (n - 1) / n * grad_mib).epsilon(1e-3));
  }
}

TEST_CASE("report, trace and plots are written") {
  const Run& r = short_run();
  REQUIRE(r.rc == 0);
  CHECK(fs::file_size(r.out / "report.md") > 500);
  CHECK(fs::file_size(r.out / "projection.csv") > 100);
  // the projection's rows: the MLP as measured, ResNet-50's size and GPT-2 small's exact count
  std::map<std::string, std::string> params_of;
  for (const auto& row : read_csv(r.out / "projection.csv"))
    params_of[row.at("model")] = row.at("params");
  CHECK(params_of["mlp"] == "235146");
  CHECK(params_of["gpt2-small"] == "124439808");
  std::ifstream trace(r.out / "trace.json");
  std::string text((std::istreambuf_iterator<char>(trace)), std::istreambuf_iterator<char>());
  CHECK(text.rfind("{\"displayTimeUnit\"", 0) == 0);
  CHECK(text.find("allreduce bucket") != std::string::npos);
  CHECK(text.find("wait bucket") != std::string::npos);
  CHECK(text.find("ready bucket") != std::string::npos);  // dplab-project --trace reads these
  // the ping-pong as a calibration file for dplab-project --calibration
  std::ifstream cal(r.out / "calibration.csv");
  std::string cal_text((std::istreambuf_iterator<char>(cal)), std::istreambuf_iterator<char>());
  CHECK(cal_text.find("\nlevel,alpha_us,gbps,source\ninter,") != std::string::npos);
  if (r.output.find("plots skipped") != std::string::npos) {
    MESSAGE("plot check skipped: " << r.output.substr(r.output.find("plots skipped"), 80));
    return;
  }
  for (const char* png :
       {"throughput.png", "memory.png", "traffic.png", "step_split.png", "projection.png"}) {
    CAPTURE(png);
    CHECK(fs::exists(r.out / png));
    if (fs::exists(r.out / png)) CHECK(fs::file_size(r.out / png) > 1000);
  }
}

TEST_CASE("zero1 and zero2: the ring's parameters and bytes, 1/N optimizer state (zero2: 1/N "
          "gradients too)") {
  const fs::path out =
      fs::temp_directory_path() / ("dplab-compare-zero-test-" + std::to_string(::getpid()));
  fs::remove_all(out);
  const std::string cmd =
      "DPLAB_NUM_THREADS=1 DPLAB_PROGRESS=off '" + g_exe +
      "' --model mlp --modes ring,zero1,zero2 --ns 3 --steps 3 --warmup 1 --global-batch 48 "
      "--train-limit 240 --test-limit 200 --no-projection --no-plots --out '" +
      out.string() + "' >/dev/null 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  const int n = 3;
  const int64_t p4 = 235146 * 4;  // the MLP's parameter bytes; SGD momentum is as many again
  const std::vector<float> ring = read_floats(out / "runs" / "ring_n3.params");
  const auto rows = read_csv(out / "per_device.csv", nullptr);
  auto sum = [&](const std::string& mode, const char* key) {
    int64_t total = 0;
    for (const auto& row : rows)
      if (row.at("mode") == mode) total += std::stoll(row.at(key));
    return total;
  };
  auto sent = [&](const std::string& mode, int d) {
    for (const auto& row : rows)
      if (row.at("mode") == mode && std::stoi(row.at("device")) == d)
        return std::stod(row.at("weight_sent_mib_per_step"));
    return -1.0;
  };
  for (const std::string mode : {"zero1", "zero2"}) {
    CAPTURE(mode);
    const std::vector<float> p = read_floats(out / "runs" / (mode + "_n3.params"));
    REQUIRE(p.size() == ring.size());
    CHECK(max_abs_diff(p, ring) < 1e-5);
    for (int d = 0; d < n; ++d)
      CHECK(sent(mode, d) == doctest::Approx(sent("ring", d)).epsilon(1e-4));
    CHECK(sum(mode, "param_bytes") == n * p4);
    CHECK(sum(mode, "optim_state_bytes") == p4);  // the shards add up to one copy
    CHECK(sum(mode, "grad_bytes") == (mode == "zero1" ? n * p4 : p4));
  }
  CHECK(sum("ring", "optim_state_bytes") == n * p4);  // a full copy on every rank
  CHECK(sum("ring", "grad_bytes") == n * p4);
  CHECK(sum("ring", "activation_bytes") > 0);
  fs::remove_all(out);
}

TEST_CASE("--precision fp16 / bf16: a precision column, half the gradient bytes, half the "
          "parameter bytes") {
  auto run = [](const std::string& precision, const fs::path& out) {
    fs::remove_all(out);
    const std::string cmd =
        "DPLAB_NUM_THREADS=1 DPLAB_PROGRESS=off '" + g_exe +
        "' --model mlp --modes single,ring --ns 1,2 --steps 3 --warmup 1 --global-batch 48 "
        "--train-limit 240 --test-limit 200 --no-projection --no-plots --precision " +
        precision + " --out '" + out.string() + "' >/dev/null 2>&1";
    return std::system(cmd.c_str());
  };
  const fs::path base =
      fs::temp_directory_path() / ("dplab-compare-prec-" + std::to_string(::getpid()));
  REQUIRE(run("fp32", base / "fp32") == 0);
  const auto fp32 = read_csv(base / "fp32" / "per_device.csv", nullptr);
  auto value = [](const std::vector<std::map<std::string, std::string>>& rows,
                  const std::string& mode, int n, int d, const char* key) {
    for (const auto& row : rows)
      if (row.at("mode") == mode && std::stoi(row.at("N")) == n && std::stoi(row.at("device")) == d)
        return std::stod(row.at(key));
    return -1.0;
  };
  const int64_t params = 235146;  // the MLP
  for (const std::string precision : {"fp16", "bf16"}) {
    CAPTURE(precision);
    const fs::path out = base / precision;
    REQUIRE(run(precision, out) == 0);  // exit 0: accuracy within 1 point of its single device
    for (const auto& row : read_csv(out / "results.csv", nullptr))
      CHECK(row.at("precision") == precision);
    const auto rows = read_csv(out / "per_device.csv", nullptr);
    for (int d = 0; d < 2; ++d) {
      CAPTURE(d);
      CHECK(value(fp32, "ring", 2, d, "weight_sent_mib_per_step") > 0);
      CHECK(
          value(rows, "ring", 2, d, "weight_sent_mib_per_step") ==
          doctest::Approx(value(fp32, "ring", 2, d, "weight_sent_mib_per_step") / 2).epsilon(1e-6));
      CHECK(value(rows, "ring", 2, d, "param_bytes") == 2 * params);  // 16-bit weights
      CHECK(value(rows, "ring", 2, d, "grad_bytes") == 2 * params);   // 16-bit gradients
      CHECK(value(rows, "ring", 2, d, "optim_state_bytes") ==
            8 * params);  // momentum + float32 master
    }
    // activations: the single device's (a DDP rank's first timed step may also hold the
    // buckets DDP rebuilds after its first iteration, on one rank or the other)
    CHECK(value(rows, "single", 1, 0, "activation_bytes") <
          0.55 * value(fp32, "single", 1, 0, "activation_bytes"));
    CHECK(value(rows, "single", 1, 0, "activation_bytes") >
          0.45 * value(fp32, "single", 1, 0, "activation_bytes"));
  }
  const ProgramRun bad =
      run_program("'" + g_exe + "' --precision fp16 --modes dp --out /nonexistent/never");
  CHECK(bad.rc != 0);
  CHECK(bad.output.find("--precision fp16: mode dp is not supported") != std::string::npos);
  fs::remove_all(base);
}

TEST_CASE("ps: S = 1 and S = N, co-located and separate, train like the ring; every rank's "
          "bytes are cost.h's formulas; a server holds its shard's optimizer state") {
  const fs::path out =
      fs::temp_directory_path() / ("dplab-compare-ps-test-" + std::to_string(::getpid()));
  fs::remove_all(out);
  const ProgramRun run = run_program(
      "DPLAB_NUM_THREADS=1 DPLAB_PROGRESS=off '" + g_exe +
      "' --model mlp --modes single,ring,ps --ns 1,3 --servers 1,N --ps-placement "
      "colocated,separate --steps 3 --warmup 1 --global-batch 48 --train-limit 240 "
      "--test-limit 200 --no-projection --no-plots --out '" + out.string() + "'");
  INFO(run.output);
  REQUIRE(run.rc == 0);  // 0: every run within 0.5 accuracy points of the single device
  const int n = 3;
  const int64_t p = 235146, p4 = 4 * p;  // the MLP's parameters and their bytes
  const std::vector<float> ring = read_floats(out / "runs" / "ring_n3.params");
  const auto rows = read_csv(out / "per_device.csv", nullptr);
  auto device_rows = [&](const std::string& mode) {
    std::vector<std::map<std::string, std::string>> v;
    for (const auto& row : rows)
      if (row.at("mode") == mode && std::stoi(row.at("N")) == n) v.push_back(row);
    return v;
  };
  // shard s of S: the first P mod S shards one element longer (server_plan.h)
  auto shard_bytes = [&](int s, int servers) { return 4 * (p / servers + (s < p % servers)); };
  const double mib = 1 << 20;
  for (const int servers : {1, n})
    for (const bool separate : {false, true}) {
      const std::string mode = "ps-s" + std::to_string(servers) + (separate ? "-sep" : "");
      CAPTURE(mode);
      const std::vector<float> got = read_floats(out / "runs" / (mode + "_n3.params"));
      REQUIRE(got.size() == ring.size());
      CHECK(max_abs_diff(got, ring) < 1e-5);
      const auto devs = device_rows(mode);
      REQUIRE(devs.size() == size_t(separate ? n + servers : n));
      int64_t state_sum = 0;
      for (size_t r = 0; r < devs.size(); ++r) {
        CAPTURE(r);
        // which shard rank r serves: co-located servers sit at ranks s*N/S, separate ones last
        int shard = -1;
        for (int s = 0; s < servers; ++s)
          if ((separate ? n + s : s * n / servers) == int(r)) shard = s;
        const int64_t b = shard >= 0 ? shard_bytes(shard, servers) : 0;
        // push + pull, each direction: a worker moves P minus its own shard plus the other
        // workers' copies of it; a separate server W copies of its shard
        const int64_t expected = separate ? (shard >= 0 ? n * b : p4) : p4 + (n - 2) * b;
        CHECK(std::stod(devs[r].at("weight_sent_mib_per_step")) ==
              doctest::Approx(expected / mib).epsilon(1e-5));
        CHECK(std::stod(devs[r].at("weight_recv_mib_per_step")) ==
              doctest::Approx(expected / mib).epsilon(1e-5));
        // a server holds its shard's float32 master weights and momentum; a worker holds none
        CHECK(std::stoll(devs[r].at("optim_state_bytes")) == 2 * b);
        CHECK(std::stoll(devs[r].at("param_bytes")) == (shard >= 0 && separate ? 0 : p4));
        state_sum += std::stoll(devs[r].at("optim_state_bytes"));
      }
      CHECK(state_sum == 2 * p4);  // the shards add up to one copy of the state
    }
  for (const auto& row : read_csv(out / "results.csv", nullptr))
    if (row.at("mode").rfind("ps-s", 0) == 0)
      CHECK(row.at("servers") == row.at("mode").substr(4, 1));
  std::ifstream report(out / "report.md");
  const std::string text((std::istreambuf_iterator<char>(report)), std::istreambuf_iterator<char>());
  CHECK(text.find("## The sharded parameter server against the ring") != std::string::npos);
  CHECK(text.find("ps-s3 N=3: the busiest link (rank 0) moves 1.20 out / 1.20 in MiB per step, "
                  "1.00x a ring rank's 1.20 each way; max/min over the 3 ranks 1.00: matches the "
                  "ring") != std::string::npos);
  CHECK(text.find("ps-s1 N=3: the busiest link (rank 0) moves 1.79 out / 1.79 in MiB per step, "
                  "1.50x a ring rank's 1.20 each way; max/min over the 3 ranks 2.00: loses on the "
                  "server's link") != std::string::npos);
  // S > N co-located is refused before any process starts, with what was expected
  const ProgramRun bad = run_program("'" + g_exe + "' --modes ps --ns 3 --global-batch 48 --servers 4 --out '" +
                                     (out / "bad").string() + "'");
  CHECK(bad.rc == 1);
  CHECK(bad.output.find("--servers 4: expected 1 to N = 3 co-located servers") != std::string::npos);
  fs::remove_all(out);
}

// The program's path comes first on the command line, doctest's options after.
int main(int argc, char** argv) {
  return dplab::testing::program_test_main(
      argc, argv, g_exe,
      fs::temp_directory_path() / ("dplab-compare-test-" + std::to_string(::getpid())));
}
