// test_timeline.cpp: the step timeline on hand-made buckets, worked out on paper. Forward
// 10 ms, backward 30 ms, optimizer 5 ms; three equal buckets ready evenly over backward, so at
// 20, 30 and 40 ms from the step's start.
// Read next: test_project_inputs.cpp.
#include <doctest/doctest.h>

#include "benchmarks/project/timeline.h"
#include "framework/error.h"

using namespace dplab::projection;
using dplab::parallel::Channel;
using dplab::parallel::Stage;

namespace {

const Compute kCompute{.forward_s = 0.010, .backward_s = 0.030, .optimizer_s = 0.005};
const std::vector<double> kThree{1e6, 1e6, 1e6};

StagesOf one_stage(double seconds) {
  return [seconds](double) { return std::vector<Stage>{{"ring", seconds, Channel::Both}}; };
}
StagesOf push_pull(double seconds, Channel push, Channel pull) {
  return [=](double) { return std::vector<Stage>{{"push", seconds, push}, {"pull", seconds, pull}}; };
}

}  // namespace

TEST_CASE("all-reduces that keep up with backward hide; only the last bucket's shows") {
  const StepTimeline t = simulate_step(kCompute, {}, kThree, one_stage(0.005));
  REQUIRE(t.ready_s.size() == 3);
  CHECK(t.ready_s[0] == doctest::Approx(0.020));
  CHECK(t.ready_s[1] == doctest::Approx(0.030));
  CHECK(t.ready_s[2] == doctest::Approx(0.040));
  REQUIRE(t.stages.size() == 3);
  CHECK(t.stages[2].start_s == doctest::Approx(0.040));
  CHECK(t.stages[2].end_s == doctest::Approx(0.045));
  CHECK(t.step_s == doctest::Approx(0.050));  // 45 ms + the optimizer
  CHECK(t.comm_s == doctest::Approx(0.015));
  CHECK(t.exposed_s == doctest::Approx(0.005));
  CHECK(t.overlap() == doctest::Approx(2.0 / 3));
  CHECK(t.efficiency() == doctest::Approx(0.045 / 0.050));
}

TEST_CASE("all-reduces slower than backward queue on the link: each starts when the previous ends") {
  const StepTimeline t = simulate_step(kCompute, {}, kThree, one_stage(0.015));
  CHECK(t.stages[0].start_s == doctest::Approx(0.020));
  CHECK(t.stages[1].start_s == doctest::Approx(0.035));  // ready at 30, link busy until 35
  CHECK(t.stages[2].start_s == doctest::Approx(0.050));
  CHECK(t.step_s == doctest::Approx(0.070));
  CHECK(t.exposed_s == doctest::Approx(0.025));
  CHECK(t.overlap() == doctest::Approx(1 - 25.0 / 45));
}

TEST_CASE("a parameter server's push and pull: one channel, two directions, or a barrier") {
  SUBCASE("co-located (both stages on both directions): push 1, pull 1, push 2, ...") {
    const StepTimeline t = simulate_step(kCompute, {}, kThree, push_pull(0.005, Channel::Both, Channel::Both));
    CHECK(t.stages.back().end_s == doctest::Approx(0.050));
    CHECK(t.step_s == doctest::Approx(0.055));
  }
  SUBCASE("synchronous: every pull waits for the last push (45 ms), then 3 pulls") {
    const StepTimeline t =
        simulate_step(kCompute, {}, kThree, push_pull(0.005, Channel::Both, Channel::Both), /*barrier=*/true);
    CHECK(t.stages[3].stage == "pull");
    CHECK(t.stages[3].start_s == doctest::Approx(0.045));
    CHECK(t.step_s == doctest::Approx(0.065));
  }
  SUBCASE("separate servers: a pull runs beside the next push (Up and Down)") {
    const StepTimeline t = simulate_step(kCompute, {}, kThree, push_pull(0.015, Channel::Up, Channel::Down));
    // push 20-35, 35-50, 50-65 on Up; pull 35-50, 50-65, 65-80 on Down
    CHECK(t.stages.back().start_s == doctest::Approx(0.065));
    CHECK(t.step_s == doctest::Approx(0.085));
    CHECK(t.comm_s == doctest::Approx(0.090));  // more than the step's communication time: two channels
  }
}

TEST_CASE("limits: one bucket hides nothing, zero compute hides nothing, N = 1 costs nothing") {
  SUBCASE("one bucket is ready when backward ends") {
    const StepTimeline t = simulate_step(kCompute, {}, {3e6}, one_stage(0.012));
    CHECK(t.step_s == doctest::Approx(0.040 + 0.012 + 0.005));
    CHECK(t.overlap() == doctest::Approx(0));
  }
  SUBCASE("zero compute: every bucket is ready at once, the step is the sum of the all-reduces") {
    const StepTimeline t = simulate_step({}, {}, kThree, one_stage(0.004));
    CHECK(t.step_s == doctest::Approx(0.012));
    CHECK(t.efficiency() == doctest::Approx(0));
  }
  SUBCASE("no stages (one device): the step is the compute") {
    const StepTimeline t = simulate_step(kCompute, {}, kThree, [](double) { return std::vector<Stage>{}; });
    CHECK(t.step_s == doctest::Approx(kCompute.total()));
    CHECK(t.efficiency() == doctest::Approx(1));
    CHECK(t.overlap() == doctest::Approx(1));
  }
  SUBCASE("no gradient") {
    CHECK(simulate_step(kCompute, {}, {}, one_stage(1)).step_s == doctest::Approx(kCompute.total()));
  }
}

TEST_CASE("readiness profile: bytes late or early in backward move the buckets' ready times") {
  // half the bytes ready after 10% of backward (large last layers), the rest evenly after
  const ReadinessProfile early{.bytes = {0.5, 1.0}, .time = {0.1, 1.0}};
  CHECK(early.time_at(0.25) == doctest::Approx(0.05));
  CHECK(early.time_at(0.75) == doctest::Approx(0.55));
  CHECK(early.time_at(1.0) == doctest::Approx(1.0));
  const StepTimeline t = simulate_step(kCompute, early, {1.5e6, 1.5e6}, one_stage(0.020));
  CHECK(t.ready_s[0] == doctest::Approx(0.010 + 0.003));
  CHECK(t.stages[0].end_s == doctest::Approx(0.033));
  CHECK(t.step_s == doctest::Approx(0.040 + 0.020 + 0.005));  // the second is ready at 40 ms, the link free at 33
  CHECK_THROWS_WITH_AS(ReadinessProfile({.bytes = {0.5, 0.4}, .time = {0.1, 1}}).check(),
                       doctest::Contains("point 1 is (0.4, 1)"), dplab::Error);
  CHECK_THROWS_WITH_AS(ReadinessProfile({.bytes = {0.5}, .time = {0.1}}).check(),
                       doctest::Contains("must hold all bytes (1), got 0.5"), dplab::Error);
}

TEST_CASE("buckets: full ones first, the remainder last") {
  const double mib = 1 << 20;
  CHECK(bucket_bytes(100 * mib, 25 * mib) == std::vector<double>(4, 25 * mib));
  CHECK(bucket_bytes(60 * mib, 25 * mib) == std::vector<double>{25 * mib, 25 * mib, 10 * mib});
  CHECK(bucket_bytes(10 * mib, 25 * mib) == std::vector<double>{10 * mib});
  CHECK(bucket_bytes(0, 25 * mib).empty());
  CHECK_THROWS_WITH_AS(bucket_bytes(1, 0), doctest::Contains("bucket cap > 0 bytes, got 0"), dplab::Error);
  CHECK_THROWS_WITH_AS(bucket_bytes(1e12, 1), doctest::Contains("at most a million"), dplab::Error);
}
