// test_project_cli.cpp: dplab-project as a user runs it (each run takes milliseconds).
//   - the validation table of tutorials/23_will_it_scale.md: every row's command is run and
//     its efficiency at the largest N must be the one the page prints, and the page's error
//     column must be that prediction less the published figure: the page cannot drift from
//     the code;
//   - the files it writes, the origin it gives each input, a calibration file taking over;
//   - bad input: a message saying what was expected, never a crash, a hang or memory that
//     grows (each bad run under `timeout` and `ulimit -v`, so a regression fails, not stalls);
//   - a cluster of a million devices, projected.
// Usage: test_project_cli PATH/TO/dplab-project PATH/TO/23_will_it_scale.md [doctest options]
// Read next: tutorials/23_will_it_scale.md.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "tests/program_run.h"

namespace fs = std::filesystem;
using dplab::testing::ProgramRun;
using dplab::testing::read_csv;
using dplab::testing::run_program;

namespace {

std::string g_exe, g_page;
const fs::path g_scratch = fs::temp_directory_path() / ("dplab-project-cli-" + std::to_string(::getpid()));

ProgramRun project(const std::string& args, const fs::path& out) {
  return run_program("'" + g_exe + "' " + args + " --out '" + out.string() + "'");
}

// For bad input: 4 GB of address space and 30 s, far more than a refusal takes, so that a
// regression that allocates without end or never answers ends here, not in the suite's timeout.
ProgramRun project_guarded(const std::string& args, const fs::path& out) {
  return run_program("ulimit -v 4000000; timeout 30 '" + g_exe + "' " + args + " --out '" + out.string() + "'");
}

struct ValidationRow {
  std::string label, command;
  double published = 0, predicted = 0, error = 0;
};

// The rows between the page's validation markers: | row | published | command | predicted | error |
std::vector<ValidationRow> validation_rows() {
  std::ifstream f(g_page);
  REQUIRE_MESSAGE(f.good(), "missing " << g_page);
  std::vector<ValidationRow> rows;
  bool inside = false;
  const std::regex row(R"(^\| *([^|]+?) *\| *([0-9.]+)%[^|]*\| *`([^`]+)` *\| *([0-9.]+)% *\| *([-+][0-9.]+) *\|)");
  for (std::string line; std::getline(f, line);) {
    if (line.find("<!-- validation: begin") != std::string::npos) inside = true;
    if (line.find("<!-- validation: end") != std::string::npos) inside = false;
    std::smatch m;
    if (inside && std::regex_search(line, m, row))
      rows.push_back({m[1], m[3], std::stod(m[2]), std::stod(m[4]), std::stod(m[5])});
  }
  return rows;
}

}  // namespace

TEST_CASE("the tutorial's validation table is what dplab-project prints") {
  const std::vector<ValidationRow> rows = validation_rows();
  REQUIRE(rows.size() >= 4);  // Inception V3 and ResNet-101, ring and parameter server
  int within_ten = 0;
  for (const ValidationRow& r : rows) {
    CAPTURE(r.label);
    CAPTURE(r.command);
    const fs::path out = g_scratch / "validation";
    const ProgramRun run = project(r.command + " --no-plot", out);
    CAPTURE(run.output);
    REQUIRE(run.rc == 0);
    const auto csv = read_csv(out / "projection.csv");
    REQUIRE(!csv.empty());
    // the largest N of the command's one algorithm
    const auto& last = csv.back();
    CHECK(std::abs(100 * std::stod(last.at("efficiency")) - r.predicted) < 0.051);
    CHECK(r.error == doctest::Approx(r.predicted - r.published).epsilon(0.002));
    if (std::abs(r.error) <= 10) ++within_ten;
  }
  // the page's claim: the ring rows and the parameter server with whole tensors (4 rows) reach the
  // target; the rows beyond it name the term the model lacks
  MESSAGE(within_ten << " of " << rows.size() << " rows within 10 points of the published figure");
  CHECK(within_ten >= 4);
}

TEST_CASE("a projection: its table, its CSVs, where each input came from, the plot or why not") {
  const fs::path out = g_scratch / "basic";
  const ProgramRun run = project("--nodes 4 --devices-per-node 2 --params 1e6 --compute-ms 30 --algorithm ring,ps", out);
  CAPTURE(run.output);
  REQUIRE(run.rc == 0);
  for (const char* said : {"4 node(s) x 2 device(s)", "preset pcie", "preset 10gbe (assumed)", "default (no --trace)",
                           "default (backward = 2 x forward)", "forward 10.00 ms + backward 20.00 ms"})
    CHECK_MESSAGE(run.output.find(said) != std::string::npos, "missing: " << said);
  const auto rows = read_csv(out / "projection.csv");
  REQUIRE(rows.size() == 8);  // N = 1, 2, 4, 8 for each algorithm
  CHECK(rows[0].at("N") == "1");
  CHECK(std::stod(rows[0].at("efficiency")) == 1);
  CHECK(rows[3].at("N") == "8");
  CHECK(rows[3].at("nodes") == "4");
  CHECK(rows[7].at("algorithm") == "ps");
  CHECK(rows[7].at("servers") == "4");
  for (const auto& r : rows) CHECK(std::stod(r.at("efficiency")) <= 1.0);
  const auto timeline = read_csv(out / "timeline.csv");
  CHECK(timeline.front().at("what") == "forward");
  CHECK(timeline.front().at("N") == "8");
  if (run.output.find("plots skipped") != std::string::npos) {
    MESSAGE("plot check skipped: no matplotlib");
  } else {
    CHECK(fs::exists(out / "projection.png"));
    if (fs::exists(out / "projection.png")) CHECK(fs::file_size(out / "projection.png") > 1000);
  }
}

TEST_CASE("--model gpt2-small: GPT-2 small's 124,439,808 parameters (models/gpt.h), as --params would give them") {
  const std::string rest = " --nodes 4 --devices-per-node 2 --compute-ms 100 --algorithm ring,star";
  const ProgramRun run = project("--model gpt2-small" + rest, g_scratch / "gpt2");
  CAPTURE(run.output);
  REQUIRE(run.rc == 0);
  CHECK(run.output.find("gpt2-small: 124439808 parameters x 4 bytes (fp32) = 474.7 MiB") != std::string::npos);
  CHECK(run.output.find("preset (models/gpt.h's gpt_param_count)") != std::string::npos);
  const ProgramRun given = project("--params 124439808" + rest, g_scratch / "gpt2_given");
  REQUIRE(given.rc == 0);
  const auto rows = read_csv(g_scratch / "gpt2" / "projection.csv");
  REQUIRE(rows.size() == 8);  // N = 1, 2, 4, 8, ring and star
  CHECK(rows == read_csv(g_scratch / "gpt2_given" / "projection.csv"));
  // dplab-compare --model gpt's byte-level GPT, and a preset that contradicts --params
  const ProgramRun small = project("--model gpt" + rest, g_scratch / "gpt");
  CHECK(small.output.find("gpt: 3257856 parameters x 4 bytes (fp32) = 12.4 MiB") != std::string::npos);
  const ProgramRun both = project_guarded("--model gpt2-small --params 1e6" + rest, g_scratch / "both");
  CHECK(both.rc == 1);
  CHECK(both.output.find("--model gpt2-small gives the gradient's size: drop --params") != std::string::npos);
}

TEST_CASE("a calibration file's terms replace the preset's, and say so") {
  fs::create_directories(g_scratch);
  const fs::path cal = g_scratch / "calibration.csv";
  std::ofstream(cal) << "# from a test\nlevel,alpha_us,gbps,source\ninter,20,9.41,the test's bed\n";
  const ProgramRun run = project("--nodes 2 --params 1e6 --compute-ms 10 --calibration '" + cal.string() + "'",
                                 g_scratch / "cal");
  CAPTURE(run.output);
  REQUIRE(run.rc == 0);
  CHECK(run.output.find("9.41 Gbit/s one way") != std::string::npos);
  CHECK(run.output.find("measured: " + cal.string() + " (the test's bed)") != std::string::npos);
  CHECK(run.output.find("preset pcie") != std::string::npos);  // the intra level was not calibrated
}

TEST_CASE("bad input: a message saying what was expected, never a crash") {
  struct Bad {
    std::string args, says;
  };
  const std::string ok = " --params 1e6 --compute-ms 10";
  for (const Bad& bad : {
           Bad{"--params 1e6", "expected the compute per step"},
           Bad{"--compute-ms 10", "--params P or --gradient-bytes B (one of them), got neither"},
           Bad{"--params 1e6 --gradient-bytes 5 --compute-ms 1", "got both"},
           Bad{"--inter pcie" + ok, "expected an inter-node link preset (10gbe, 25gbe, 100gbe, infiniband), got 'pcie'"},
           Bad{"--devices-per-node 4 --ns 6" + ok, "N = 6 devices do not fill nodes of 4 devices"},
           Bad{"--alpha-us 1,2,3" + ok, "expected A (both levels) or INTRA,INTER"},
           Bad{"--params 1e6 --forward-ms 5", "--forward-ms and --backward-ms go together"},
           Bad{"--params 1e6 --batch 64", "--batch and --samples-per-s go together"},
           Bad{"--compute-ms 5 --batch 64 --samples-per-s 10 --params 1e6", "one way"},
           Bad{"--calibration /nonexistent/c.csv" + ok, "cannot open '/nonexistent/c.csv'"},
           Bad{"--trace /nonexistent/t.json" + ok, "cannot open '/nonexistent/t.json'"},
           Bad{"--algorithm tree" + ok, "tree"},
           Bad{"--nodes 0" + ok, "expected nodes from 1 to 16777216, got '0'"},
           // counts past cost_topology.h's bound: refused, not doubled past INT_MAX or listed
           Bad{"--nodes 2147483647" + ok, "expected nodes from 1 to 16777216, got '2147483647'"},
           Bad{"--devices-per-node 2147483647" + ok, "expected devices per node from 1 to 16777216, got '2147483647'"},
           Bad{"--nodes 100000 --devices-per-node 100000" + ok,
               "--nodes 100000 x --devices-per-node 100000 = 10000000000 devices: expected at most 16777216"},
           Bad{"--ns 2147483647" + ok, "expected device counts from 1 to 16777216, got '2147483647'"},
           Bad{"--ns 4,16777217" + ok, "expected device counts from 1 to 16777216, got '16777217'"},
           // a file that never ends is refused after its first 64 KiB
           Bad{"--calibration /dev/zero" + ok, "expected a CSV of a few lines (at most 64 KiB), '/dev/zero' holds more"},
           Bad{"--servers 0" + ok, "servers >= 1, got '0'"},
           Bad{"--inter-gbps 0" + ok, "a link speed > 0 Gbit/s, got '0'"},
       }) {
    CAPTURE(bad.args);
    const ProgramRun run = project_guarded(bad.args + " --no-plot", g_scratch / "bad");
    CAPTURE(run.output);
    CHECK(run.rc != 0);
    CHECK(run.rc != -1);   // not killed by a signal
    CHECK(run.rc != 124);  // not stopped by the timeout
    CHECK(run.output.find(bad.says) != std::string::npos);
    CHECK(run.output.find("terminate") == std::string::npos);
  }
}

TEST_CASE("a cluster of a million devices is projected, every algorithm") {
  const fs::path out = g_scratch / "million";
  const ProgramRun run = project_guarded("--nodes 125000 --devices-per-node 8 --params 25.6e6 --compute-ms 100 "
                                         "--algorithm ring,hierarchical,halving-doubling,star,ps --no-plot",
                                         out);
  CAPTURE(run.output);
  REQUIRE(run.rc == 0);
  const auto rows = read_csv(out / "projection.csv");
  REQUIRE(!rows.empty());
  int at_a_million = 0;
  for (const auto& r : rows) {
    if (r.at("N") != "1000000") continue;
    ++at_a_million;
    CHECK(r.at("nodes") == "125000");
    CHECK(std::stod(r.at("step_ms")) >= 100);  // at least the compute
    CHECK(std::stod(r.at("efficiency")) <= 1);
  }
  CHECK(at_a_million == 5);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s PATH/TO/dplab-project PATH/TO/23_will_it_scale.md [doctest options]\n", argv[0]);
    return 2;
  }
  g_exe = argv[1], g_page = argv[2];
  doctest::Context ctx(argc - 2, argv + 2);
  const int rc = ctx.run();
  std::error_code ec;
  fs::remove_all(g_scratch, ec);
  return rc;
}
