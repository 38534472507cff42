// test_project_inputs.cpp: where a projection's inputs come from. A calibration file (read,
// written, refused with a message when malformed); a readiness profile from a trace written by
// dplab-compare's own trace writer (benchmarks/compare/trace.h), so the reader follows the
// writer; and the layout of N devices on nodes.
// Read next: test_project_cli.cpp.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "benchmarks/compare/trace.h"
#include "benchmarks/project/links.h"
#include "benchmarks/project/projection.h"
#include "benchmarks/project/trace_profile.h"
#include "framework/error.h"

using namespace dplab::projection;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("dplab-project-inputs-" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

fs::path write_text(const std::string& name, const std::string& text) {
  const fs::path p = temp_dir() / name;
  std::ofstream(p) << text;
  return p;
}

// One DDP step of rank 0 as dplab-compare records it, starting at t0 us: forward 100 us,
// backward's compute 300 us with a 3 MiB bucket ready at `first` of it and a 1 MiB one at 90%,
// then the wait for the all-reduces (50 us) and the optimizer (30 us).
void record_step(dplab::compare::TraceRecorder& rec, double t0, double first, bool ready_events) {
  const double b0 = t0 + 100;
  rec.add("forward", 0, t0, b0);
  if (ready_events) {
    rec.add("ready bucket 0 (3145728 bytes)", 0, b0 + 300 * first, b0 + 300 * first);
    rec.add("ready bucket 1 (1048576 bytes)", 0, b0 + 270, b0 + 270);
  }
  rec.add("allreduce bucket 0 (3.00 MiB)", 0, b0 + 300 * first, b0 + 300 * first + 60);
  rec.add("allreduce bucket 1 (1.00 MiB)", 0, b0 + 270, b0 + 340);
  rec.add("wait bucket 1", 0, b0 + 300, b0 + 350);
  rec.add("backward", 0, b0, b0 + 350);
  rec.add("optimizer step", 0, b0 + 350, b0 + 380);
}

// A trace with a single-device run, a star run at N = 4 and a ring run at N = 2 (4 steps each;
// the first, a warm-up, has its big bucket ready at 10% instead of 50%).
fs::path make_trace(const std::string& name, bool ready_events) {
  using dplab::compare::TraceRecorder;
  std::vector<dplab::compare::TraceRun> runs;
  for (const std::string label : {"single N=1", "star N=4", "ring N=2"}) {
    TraceRecorder rec(true);
    for (int step = 0; step < 4; ++step) {
      if (label == "single N=1") rec.add("forward", 0, step * 1000.0, step * 1000.0 + 100);
      else record_step(rec, step * 1000.0, step == 0 ? 0.1 : label == "star N=4" ? 0.2 : 0.5, ready_events);
    }
    const fs::path frag = temp_dir() / (name + label.substr(0, 4) + ".frag");
    rec.write_fragment(frag.string());
    runs.push_back({.label = label, .fragments = {frag.string()}, .track_names = {"rank 0"}});
  }
  const fs::path out = temp_dir() / name;
  dplab::compare::merge_traces(runs, out.string());
  return out;
}

}  // namespace

TEST_CASE("calibration: written and read back; each malformed file refused with its line") {
  const fs::path p = temp_dir() / "calibration.csv";
  write_calibration(p.string(), {{"inter", 48.25, 9.41, "ping-pong, over a link"}, {"intra", 1.5, 120, ""}});
  const std::vector<CalibrationRow> rows = read_calibration(p.string());
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].level == "inter");
  CHECK(rows[0].alpha_us == doctest::Approx(48.25));
  CHECK(rows[0].gbps == doctest::Approx(9.41));
  CHECK(rows[0].source == "ping-pong; over a link");  // a comma would split the cell
  CHECK(rows[1].level == "intra");
  struct Bad {
    std::string text, says;
  };
  for (const Bad& bad : {Bad{"alpha,beta\ninter,1,2\n", ":1: expected the header 'level,alpha_us,gbps,source'"},
                         Bad{"level,alpha_us,gbps\nedge,1,2\n", ":2: expected level intra or inter, got 'edge'"},
                         Bad{"level,alpha_us,gbps\ninter,1,0\n", ":2: expected gbps > 0, got 0"},
                         Bad{"level,alpha_us,gbps\ninter,-1,5\n", ":2: expected alpha_us >= 0, got -1"},
                         Bad{"level,alpha_us,gbps\ninter,x,5\n", ":2: expected a number for alpha_us, got 'x'"},
                         Bad{"level,alpha_us,gbps\ninter,1,5\ninter,2,5\n", ":3: level inter appears twice"},
                         Bad{"# only a comment\nlevel,alpha_us,gbps,source\n", "has a header but no rows"},
                         Bad{"level,alpha_us,gbps\ninter,1\n", ":2: expected 3 or 4 cells"}}) {
    CAPTURE(bad.text);
    CHECK_THROWS_WITH_AS(read_calibration(write_text("bad.csv", bad.text).string()), doctest::Contains(bad.says.c_str()),
                         dplab::Error);
  }
  CHECK_THROWS_WITH_AS(read_calibration("/nonexistent/c.csv"), doctest::Contains("cannot open '/nonexistent/c.csv'"),
                       dplab::Error);
}

TEST_CASE("links: presets by level, speeds and alphas checked") {
  CHECK(link_preset("25gbe", "inter").gbps == 25);
  CHECK(gbps_of(level_link(25, 50)) == doctest::Approx(25));
  CHECK(level_link(8, 3).alpha == doctest::Approx(3e-6));
  CHECK(level_link(8, 3).beta == doctest::Approx(1e-9));  // 8 Gbit/s: 1 ns a byte
  CHECK_THROWS_WITH_AS(link_preset("pcie", "inter"),
                       doctest::Contains("expected an inter-node link preset (10gbe, 25gbe, 100gbe, infiniband), got 'pcie'"),
                       dplab::Error);
  CHECK_THROWS_WITH_AS(level_link(0, 1), doctest::Contains("link speed > 0 Gbit/s, got 0"), dplab::Error);
}

TEST_CASE("trace: the largest ring run's steps, the warm-up left out, ready times as fractions of backward") {
  const TraceProfile tp = read_trace_profile(make_trace("with_ready.json", true).string());
  CHECK(tp.run == "ring N=2");
  CHECK(tp.steps == 3);
  CHECK(tp.buckets == 2);
  CHECK(tp.ready_events);
  CHECK(tp.compute.forward_s == doctest::Approx(100e-6));
  CHECK(tp.compute.backward_s == doctest::Approx(300e-6));  // to the first wait, not backward's end
  CHECK(tp.compute.optimizer_s == doctest::Approx(30e-6));
  REQUIRE(tp.profile.bytes.size() == 2);
  CHECK(tp.profile.bytes[0] == doctest::Approx(0.75));
  CHECK(tp.profile.time[0] == doctest::Approx(0.5));
  CHECK(tp.profile.time[1] == doctest::Approx(0.9));
  SUBCASE("a run named on the command line") {
    const TraceProfile star = read_trace_profile(make_trace("named.json", true).string(), "star N=4");
    CHECK(star.profile.time[0] == doctest::Approx(0.2));
  }
  SUBCASE("an older trace without ready events: the all-reduce starts, said so") {
    const TraceProfile old = read_trace_profile(make_trace("old.json", false).string());
    CHECK_FALSE(old.ready_events);
    CHECK(old.profile.time[0] == doctest::Approx(0.5));
  }
  SUBCASE("bad traces") {
    CHECK_THROWS_WITH_AS(read_trace_profile(write_text("empty.json", "{}\n").string()),
                         doctest::Contains("has no trace events"), dplab::Error);
    CHECK_THROWS_WITH_AS(read_trace_profile(make_trace("n.json", true).string(), "ring N=8"),
                         doctest::Contains("expected the run 'ring N=8' with gradient buckets"), dplab::Error);
    CHECK_THROWS_WITH_AS(read_trace_profile("/nonexistent/t.json"), doctest::Contains("cannot open"), dplab::Error);
  }
}

TEST_CASE("projection: N devices fill nodes of G; whole tensors unbalance the servers") {
  ProjectionInputs in{.devices_per_node = 4};
  CHECK(cluster_for(2, in).nodes == 1);
  CHECK(cluster_for(2, in).devices_per_node == 2);
  CHECK(cluster_for(8, in).nodes == 2);
  CHECK_THROWS_WITH_AS(cluster_for(6, in),
                       doctest::Contains("N = 6 devices do not fill nodes of 4 devices: expected N < 4 or a multiple of 4"),
                       dplab::Error);
  in.intra = level_link(100, 0);
  in.inter = level_link(8, 0);
  in.ns = {1, 16};
  in.gradient_bytes = 64e6;
  in.compute = {.forward_s = 0.1, .backward_s = 0.2};
  in.algorithms = {dplab::parallel::ClusterAlgorithm::ParameterServer};
  const std::vector<ProjectionRow> even = run_projection(in);
  REQUIRE(even.size() == 2);
  CHECK(even[0].step.efficiency() == doctest::Approx(1));  // N = 1
  CHECK(even[1].servers == 4);                             // one per node
  CHECK(even[1].imbalance == 1);
  in.largest_tensor_bytes = 32e6;  // half the gradient on one server: twice its share of 4
  const std::vector<ProjectionRow> whole = run_projection(in);
  CHECK(whole[1].imbalance == doctest::Approx(2));
  CHECK(whole[1].step.step_s > even[1].step.step_s);
}

TEST_CASE("one master: the pipelined step hides all pushes but the last leaf's behind the pulls") {
  // N = 4 nodes of one device, 1 Gbit/s and alpha 50 us, one bucket of 8 MB after backward:
  // fair, compute + 2(N-1)(alpha + S·beta); pipelined, compute + N(alpha + S·beta)
  ProjectionInputs in{.devices_per_node = 1};
  in.intra = level_link(100, 0);
  in.inter = level_link(1, 50);
  in.ns = {2, 4};
  in.gradient_bytes = 8e6;
  in.bucket_cap_bytes = 8e6;
  in.compute = {.forward_s = 0.01, .backward_s = 0.02};
  in.servers = 1;
  in.algorithms = {dplab::parallel::ClusterAlgorithm::Star, dplab::parallel::ClusterAlgorithm::ParameterServer,
                   dplab::parallel::ClusterAlgorithm::Ring};
  const std::vector<ProjectionRow> rows = run_projection(in);
  REQUIRE(rows.size() == 6);
  const double message = 50e-6 + 8e6 * 8 / 1e9;
  for (int i : {1, 3}) {  // star and ps S=1 at N = 4
    CHECK(rows[i].one_master);
    CHECK(rows[i].step.step_s == doctest::Approx(0.03 + 6 * message));
    CHECK(rows[i].pipelined_step_s == doctest::Approx(0.03 + 4 * message));
  }
  CHECK(rows[0].pipelined_step_s == doctest::Approx(rows[0].step.step_s));  // N = 2: nothing to hide
  CHECK(!rows[5].one_master);
  CHECK(rows[5].pipelined_step_s == rows[5].step.step_s);  // the ring has no master
}
