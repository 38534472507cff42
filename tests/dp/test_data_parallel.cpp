// DataParallel: same results as one device, Tensor.chunk's scatter, exact traffic volumes,
// and clear errors.
#include <doctest/doctest.h>

#include <chrono>
#include <mutex>

#include "framework/autograd/grad_mode.h"
#include "framework/backend/backend.h"
#include "framework/nn/layers.h"
#include "framework/ops/ops.h"
#include "framework/tensor/random.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "parallel/dp/data_parallel.h"

using namespace dplab;
using dplab::parallel::DataParallel;
using dplab::parallel::DpPhase;

namespace {

std::vector<Device> cpus(int n) {
  std::vector<Device> d;
  for (int i = 0; i < n; ++i) d.push_back(Device(DeviceKind::CPU, i));
  return d;
}

// One SGD step (lr 0.1) of `model` on (x, y); returns the loss.
float sgd_step(nn::Module& model, const Tensor& x, const Tensor& y) {
  for (Tensor& p : model.parameters()) p.set_grad({});
  Tensor loss = cross_entropy(model.forward(x), y);
  loss.backward();
  NoGradGuard g;
  for (Tensor& p : model.parameters()) p.add_(p.grad(), -0.1f);
  return loss.item();
}

void check_close(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(std::abs(a[i] - b[i]) <= tol * (1 + std::abs(b[i])));
}

// Records the batch size each replica sees.
struct SizeRecorder : nn::Module {
  std::shared_ptr<nn::Linear> fc;
  std::shared_ptr<std::vector<int64_t>> seen = std::make_shared<std::vector<int64_t>>();
  std::shared_ptr<std::mutex> m = std::make_shared<std::mutex>();
  SizeRecorder() { fc = register_module("fc", std::make_shared<nn::Linear>(5, 2)); }
  Tensor forward(const Tensor& x) override {
    std::lock_guard lock(*m);
    seen->push_back(x.size(0));
    return fc->forward(x);
  }
  std::shared_ptr<nn::Module> make_empty_copy() const override {
    auto c = std::make_shared<SizeRecorder>();
    c->seen = seen;
    c->m = m;
    return c;
  }
};

}  // namespace

TEST_CASE("DataParallel on 1-4 devices equals one device: loss and updated weights") {
  manual_seed(1);
  Tensor x = randn({30, 784});
  Tensor y = randint(0, 10, {30});
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    manual_seed(2);
    auto single = std::make_shared<models::MLP>();
    manual_seed(2);
    auto master = std::make_shared<models::MLP>();
    DataParallel dp(master, cpus(n));
    for (int step = 0; step < 3; ++step) {
      float l1 = sgd_step(*single, x, y);
      float l2 = sgd_step(dp, x, y);
      CHECK(l2 == doctest::Approx(l1).epsilon(1e-5));
    }
    auto a = single->parameters(), b = master->parameters();
    for (size_t k = 0; k < a.size(); ++k)
      check_close(b[k].to_vector<float>(), a[k].to_vector<float>(), 1e-5f);
  }
}

// GPT's head is tied to its token embedding: each replica (a new GPT from make_empty_copy)
// ties its own pair, parameters() lists the tensor once everywhere, so the master sends it
// once per replica and sums its gradient, both uses included, once.
TEST_CASE("DataParallel of a GPT with its tied head equals one device: loss, gradients, bytes") {
  const models::GPTConfig cfg{
      .vocab_size = 11, .block_size = 6, .n_layer = 2, .n_head = 2, .n_embd = 8};
  const std::vector<int64_t> ids = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9,
                                    3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3, 8, 3, 2, 7};
  std::vector<int64_t> next(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) next[i] = (ids[i] * 7 + 1) % 11;
  const Tensor x = from_vector(ids, {5, 6}), y = from_vector(next, {5, 6});  // 5 rows: 2, 2, 1
  manual_seed(21);
  auto single = std::make_shared<models::GPT>(cfg);
  auto master = std::dynamic_pointer_cast<models::GPT>(single->clone_to(Device("cpu:0")));
  DataParallel dp(master, cpus(3));
  dp.reset_stats();

  Tensor want = single->loss(x, y);
  want.backward();
  Tensor got = models::lm_loss(dp.forward(x), y);
  got.backward();
  CHECK(got.item() == doctest::Approx(want.item()).epsilon(1e-5));
  auto a = single->parameters(), b = master->parameters();
  REQUIRE(a.size() == b.size());
  for (size_t k = 0; k < a.size(); ++k)
    check_close(b[k].grad().to_vector<float>(), a[k].grad().to_vector<float>(), 1e-5f);
  const int64_t P = master->num_params() * 4;  // bytes, the tied tensor counted once
  for (int i = 1; i < 3; ++i) {
    CHECK(dp.traffic().bytes(DpPhase::Replicate, 0, i) == P);
    CHECK(dp.traffic().bytes(DpPhase::Reduce, i, 0) == P);
  }
}

TEST_CASE("DataParallel with BatchNorm in eval mode equals one device") {
  manual_seed(3);
  auto make = [] {
    auto s = std::make_shared<nn::Sequential>();
    s->push_back(std::make_shared<nn::Linear>(6, 8));
    s->push_back(std::make_shared<nn::BatchNorm1d>(8));
    s->push_back(std::make_shared<nn::ReLU>());
    s->push_back(std::make_shared<nn::Linear>(8, 3));
    return s;
  };
  manual_seed(4);
  auto single = make();
  manual_seed(4);
  auto master = make();
  {  // give the running stats non-trivial values, identically
    NoGradGuard g;
    Tensor warm = randn({16, 6});
    single->forward(warm);
    master->forward(warm);
  }
  single->eval();
  master->eval();
  DataParallel dp(master, cpus(3));
  Tensor x = randn({11, 6});
  Tensor y = randint(0, 3, {11});
  CHECK(sgd_step(dp, x, y) == doctest::Approx(sgd_step(*single, x, y)).epsilon(1e-5));
  auto a = single->parameters(), b = master->parameters();
  for (size_t k = 0; k < a.size(); ++k)
    check_close(b[k].to_vector<float>(), a[k].to_vector<float>(), 1e-5f);
}

TEST_CASE("scatter follows Tensor.chunk, and the input gradient comes back whole") {
  auto check_sizes = [](int64_t rows, int n, std::vector<int64_t> expected) {
    auto model = std::make_shared<SizeRecorder>();
    DataParallel dp(model, cpus(n));
    Tensor out = dp.forward(randn({rows, 5}));
    CHECK(out.shape() == Shape{rows, 2});
    auto seen = *model->seen;
    std::sort(seen.begin(), seen.end(), std::greater<>());
    std::sort(expected.begin(), expected.end(), std::greater<>());
    CHECK(seen == expected);
  };
  check_sizes(30, 8, {4, 4, 4, 4, 4, 4, 4, 2});
  check_sizes(30, 3, {10, 10, 10});
  check_sizes(2, 4, {1, 1});
  check_sizes(7, 2, {4, 3});

  auto model = std::make_shared<SizeRecorder>();
  DataParallel dp(model, cpus(3));
  Tensor x = randn({7, 5});
  x.requires_grad_(true);
  dp.forward(x).sum().backward();
  // d sum(x W^T + b)/dx = column sums of W, the same for every row
  Tensor expected = sum(model->fc->weight, {0}, true).detach();
  for (int64_t r = 0; r < 7; ++r)
    check_close(x.grad().narrow(r, 1).to_vector<float>(), expected.to_vector<float>(), 1e-6f);
}

TEST_CASE(
    "over emulated links DataParallel computes the same, and the master's link sets the pace") {
  // 0.05 Gbit/s: the MLP's P = 0.94 MB of weights leave the master N-1 times per step, which
  // alone takes (N-1) * P / 6.25e6 = 0.45 s; gradients come back through its ingress the same
  // way. A step with links is a step without them plus that link time: each copy is booked
  // once and waited for where it is used, not compounded. Both are timed here, a step of each
  // in turn, so the plain steps are the baseline under the same load; and the link time is
  // far above the compute of an MLP step on 32 rows, so load cannot pass for link time.
  const int n = 4;
  manual_seed(1);
  Tensor x = randn({32, 784});
  Tensor y = randint(0, 10, {32});
  manual_seed(2);
  auto plain = std::make_shared<models::MLP>();
  manual_seed(2);
  auto linked = std::make_shared<models::MLP>();
  DataParallel dp_plain(plain, cpus(n)), dp_linked(linked, cpus(n));
  const double gbps = 0.05;
  dp_linked.emulate_links(gbps);
  double P = 0;
  for (const Tensor& p : plain->parameters()) P += double(p.nbytes());
  // out through egress, back through ingress: what the master's link alone needs per step
  const double link_s = 2 * (n - 1) * P / (gbps * 1.25e8);
  auto timed_step = [&](DataParallel& dp, double& total) {
    const auto start = std::chrono::steady_clock::now();
    const float loss = sgd_step(dp, x, y);
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return loss;
  };
  const int steps = 2;
  double plain_s = 0, linked_s = 0;
  for (int step = 0; step < steps; ++step) {
    float l1 = timed_step(dp_plain, plain_s);
    float l2 = timed_step(dp_linked, linked_s);
    CHECK(l2 == l1);  // same arithmetic, only later
  }
  auto a = plain->parameters(), b = linked->parameters();
  for (size_t k = 0; k < a.size(); ++k) CHECK(b[k].to_vector<float>() == a[k].to_vector<float>());
  MESSAGE(steps, " steps over ", gbps, " Gbit/s links: ", linked_s, " s, without links ", plain_s,
          " s; the master's link alone needs ", steps * link_s, " s");
  CHECK(linked_s >= steps * link_s);  // the virtual clock's floor: a wait never ends early
  // Compounded waits (a copy booked twice, arrivals that add up instead of overlapping)
  // would cost another link time or more on top; the baseline takes the compute and the
  // load out, and what is left must stay below 1.5 link times (half a link time, 0.9 s, of
  // room for the load to treat the two runs differently).
  CHECK(linked_s - plain_s < 1.5 * steps * link_s);
  CHECK_THROWS_WITH_AS(dp_linked.emulate_links(-1), doctest::Contains("must be >= 0 Gbit/s"),
                       Error);
}

TEST_CASE("traffic counters equal the parameter-server formulas") {
  for (int n = 2; n <= 4; ++n) {
    CAPTURE(n);
    manual_seed(5);
    auto model = std::make_shared<models::MLP>();
    int64_t P = 0;
    for (const Tensor& p : model->parameters()) P += p.nbytes();
    CHECK(P == 235146 * 4);
    DataParallel dp(model, cpus(n));
    Tensor x = randn({30, 784});
    Tensor y = randint(0, 10, {30});
    dp.reset_stats();
    sgd_step(dp, x, y);
    const auto& t = dp.traffic();
    // replicate: the master sends P bytes to each of the N-1 others; reduce: P back from each
    CHECK(t.phase_bytes_out(DpPhase::Replicate, 0) == (n - 1) * P);
    CHECK(t.phase_bytes_in(DpPhase::Reduce, 0) == (n - 1) * P);
    for (int i = 1; i < n; ++i) {
      CHECK(t.bytes(DpPhase::Replicate, 0, i) == P);
      CHECK(t.bytes(DpPhase::Reduce, i, 0) == P);
      CHECK(t.phase_bytes_out(DpPhase::Replicate, i) == 0);
    }
    // the batch: 30 rows of 784 floats, all but the master's chunk leave the master
    int64_t rows_elsewhere = 30 - chunk(x, n, 0)[0].size(0);
    CHECK(t.phase_bytes_out(DpPhase::Scatter, 0) == rows_elsewhere * 784 * 4);
    CHECK(t.phase_bytes_in(DpPhase::Gather, 0) == rows_elsewhere * 10 * 4);
    // every byte a worker moves goes to or from the master: a star
    int64_t workers = 0;
    for (int i = 1; i < n; ++i) workers += t.bytes_out(i) + t.bytes_in(i);
    CHECK(t.bytes_out(0) + t.bytes_in(0) == workers);
    // and for the weights the master moves exactly (N-1)x what any worker does
    auto weight_traffic = [&](int i) {
      return t.phase_bytes_out(DpPhase::Replicate, i) + t.phase_bytes_in(DpPhase::Replicate, i) +
             t.phase_bytes_out(DpPhase::Reduce, i) + t.phase_bytes_in(DpPhase::Reduce, i);
    };
    CHECK(weight_traffic(0) == (n - 1) * weight_traffic(1));
    auto loads = dp.load();
    CHECK(loads.size() == static_cast<size_t>(n));
    CHECK(dp.report().find("<- master") != std::string::npos);
  }
}

TEST_CASE("DataParallel errors say what is wrong") {
  auto model = std::make_shared<models::MLP>();
  CHECK_THROWS_WITH_AS(DataParallel(model, {}), doctest::Contains("device_ids is empty"), Error);
  CHECK_THROWS_WITH_AS(DataParallel(model, {Device("cpu:1"), Device("cpu:0")}),
                       doctest::Contains("must be on device_ids[0] = cpu:1"), Error);
  CHECK_THROWS_WITH_AS(DataParallel(model, {Device("cpu:0"), Device("cpu:0")}),
                       doctest::Contains("twice"), Error);
  if (cuda_device_count() == 0)
    CHECK_THROWS_WITH_AS(DataParallel(model, {Device("cpu:0"), Device("cuda:0")}),
                         doctest::Contains("cuda:0 is not usable"), Error);
  DataParallel dp(model, cpus(2));
  CHECK_THROWS_WITH_AS(dp.forward(zeros({0, 784})), doctest::Contains("size 0 along dim 0"), Error);
}
