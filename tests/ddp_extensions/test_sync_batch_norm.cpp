// SyncBatchNorm on N ranks (threads), each with a slice of the batch, equals BatchNorm on
// the whole batch: outputs, input gradients, weight / bias gradients after DDP's averaging,
// and running statistics, for BatchNorm1d and BatchNorm2d, with equal and UNEQUAL slices.
// Loss convention: the reference loss is mean over the B rows of f(y_i) = sum_j y_ij R_ij;
// rank r's loss is (W / B) * sum over its rows of f, so the mean over ranks (DDP's objective)
// is the reference loss. Its parameter gradients, averaged by DDP, equal the reference's;
// x.grad on a rank is the gradient of the SUM of rank losses, i.e. W times the reference's.
#include <doctest/doctest.h>

#include <numeric>

#include "framework/autograd/grad_mode.h"
#include "framework/backend/backend.h"
#include "framework/backend/cuda/virtual_gpus.h"
#include "framework/ops/ops.h"
#include "framework/tensor/random.h"
#include "models/resnet.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/ddp/sync_batch_norm.h"
#include "tests/parallel/rank_harness.h"

using dplab::parallel::testing::borrow;

using namespace dplab;
using namespace dplab::parallel;
using dplab::parallel::testing::run_threads;

namespace {

constexpr int kSteps = 2;
constexpr int64_t kC = 3;

Shape input_shape(int64_t rows, bool two_d) {
  return two_d ? Shape{rows, kC, 2, 3} : Shape{rows, kC};
}

// Step s's global input and loss weights; mean 2 so that E[x^2] - E[x]^2 is exercised.
Tensor global_x(int s, int64_t rows, bool two_d) {
  Generator g(300 + s);
  return add_scalar(randn(input_shape(rows, two_d), {}, &g), 2.0f);
}
Tensor global_r(int s, int64_t rows, bool two_d) {
  Generator g(400 + s);
  return randn(input_shape(rows, two_d), {}, &g);
}

std::shared_ptr<nn::BatchNorm> make_bn(bool two_d) {
  std::shared_ptr<nn::BatchNorm> bn;
  if (two_d) bn = std::make_shared<nn::BatchNorm2d>(kC, nn::BatchNormOptions{.momentum = 0.3});
  else bn = std::make_shared<nn::BatchNorm1d>(kC, nn::BatchNormOptions{.momentum = 0.3});
  NoGradGuard no_grad;
  bn->weight.copy_(from_vector(std::vector<float>{0.5f, 1.5f, -2.0f}, {kC}));
  bn->bias.copy_(from_vector(std::vector<float>{0.1f, -0.2f, 0.3f}, {kC}));
  return bn;
}

struct StepResult {
  std::vector<float> y, x_grad, w_grad, b_grad, running_mean, running_var;
};

std::vector<StepResult> reference(int64_t rows, bool two_d) {
  auto bn = make_bn(two_d);
  std::vector<StepResult> out;
  for (int s = 0; s < kSteps; ++s) {
    bn->zero_grad();
    Tensor x = global_x(s, rows, two_d).requires_grad_();
    Tensor y = bn->forward(x);
    mul_scalar(sum(mul(y, global_r(s, rows, two_d))), 1.0f / static_cast<float>(rows)).backward();
    out.push_back({y.to_vector<float>(), x.grad().to_vector<float>(),
                   bn->weight.grad().to_vector<float>(), bn->bias.grad().to_vector<float>(),
                   bn->running_mean.to_vector<float>(), bn->running_var.to_vector<float>()});
  }
  return out;
}

void check_close(const std::vector<float>& got, const std::vector<float>& want, size_t offset = 0,
                 float scale = 1.0f) {
  for (size_t i = 0; i < got.size(); ++i) {
    REQUIRE(offset + i < want.size());
    CHECK(got[i] == doctest::Approx(scale * want[offset + i]).epsilon(2e-4).scale(1.0));
  }
}

// on_gpu: rank r's layer and tensors on cuda:r (logical GPUs may share one card); the
// statistics and DDP's buckets then travel over cuda_ipc. The reference stays on the CPU.
void run_sync(const std::vector<int64_t>& slices, bool two_d, bool on_gpu = false) {
  const int world = static_cast<int>(slices.size());
  const int64_t rows = std::accumulate(slices.begin(), slices.end(), int64_t{0});
  const int64_t per_row = two_d ? kC * 6 : kC;
  auto expected = reference(rows, two_d);
  run_threads(world, [&](ProcessGroup& pg) {
    const int r = pg.rank();
    const int64_t start = std::accumulate(slices.begin(), slices.begin() + r, int64_t{0});
    // A Sequential holding a plain BatchNorm, converted: what a user does to a real model.
    auto seq = std::make_shared<nn::Sequential>();
    seq->push_back(make_bn(two_d));
    auto model = convert_sync_batchnorm(seq, borrow(pg));
    auto sbn = std::dynamic_pointer_cast<SyncBatchNorm>(model->named_children()[0].second);
    REQUIRE(sbn != nullptr);
    const Device dev = on_gpu ? Device(DeviceKind::CUDA, r) : Device("cpu");
    model->to(dev);
    DistributedDataParallel ddp(model, {.process_group = borrow(pg)});
    auto host = [](const Tensor& t) { return t.to(Device("cpu")).to_vector<float>(); };
    for (int s = 0; s < kSteps; ++s) {
      ddp.zero_grad();
      Tensor x = global_x(s, rows, two_d)
                     .narrow(start, slices[static_cast<size_t>(r)])
                     .clone()
                     .to(dev)
                     .requires_grad_();
      Tensor rr = global_r(s, rows, two_d).narrow(start, slices[static_cast<size_t>(r)]).to(dev);
      Tensor y = ddp.forward(x);
      mul_scalar(sum(mul(y, rr)), static_cast<float>(world) / static_cast<float>(rows)).backward();
      const auto& e = expected[static_cast<size_t>(s)];
      const auto off = static_cast<size_t>(start * per_row);
      check_close(host(y), e.y, off);
      check_close(host(x.grad()), e.x_grad, off, static_cast<float>(world));
      check_close(host(sbn->weight.grad()), e.w_grad);
      check_close(host(sbn->bias.grad()), e.b_grad);
      check_close(host(sbn->running_mean), e.running_mean);
      check_close(host(sbn->running_var), e.running_var);
    }
    CHECK(sbn->num_batches_tracked.item_int() == kSteps);
  });
}

}  // namespace

TEST_CASE(
    "SyncBatchNorm1d on N ranks equals BatchNorm1d on the whole batch, equal and unequal slices") {
  for (const auto& slices : std::vector<std::vector<int64_t>>{{4, 4}, {3, 5, 2}, {2, 1, 4, 3}}) {
    CAPTURE(slices.size());
    run_sync(slices, /*two_d=*/false);
  }
}

TEST_CASE("SyncBatchNorm2d on N ranks equals BatchNorm2d on the whole batch, unequal slices") {
  for (const auto& slices : std::vector<std::vector<int64_t>>{{2, 2}, {3, 5, 2}}) {
    CAPTURE(slices.size());
    run_sync(slices, /*two_d=*/true);
  }
}

TEST_CASE(
    "SyncBatchNorm on one rank is BatchNorm; per-rank statistics would differ from global ones") {
  // World 1: the op must reduce to plain batch norm exactly (forward and backward).
  run_sync({6}, false);
  // The point of syncing: with 2 rows per rank, per-rank BatchNorm outputs differ from the
  // full-batch ones (so the equality above is not an accident of the data).
  Tensor x = global_x(0, 6, false);
  auto bn_full = make_bn(false), bn_part = make_bn(false);
  auto full = bn_full->forward(x).to_vector<float>();
  auto part = bn_part->forward(x.narrow(0, 2)).to_vector<float>();
  float max_diff = 0;
  for (size_t i = 0; i < part.size(); ++i)
    max_diff = std::max(max_diff, std::abs(part[i] - full[i]));
  CHECK(max_diff > 0.1f);
}

TEST_CASE("SyncBatchNorm in eval mode uses the running statistics, like BatchNorm, with no "
          "communication") {
  run_threads(2, [](ProcessGroup& pg) {
    auto bn = make_bn(false);
    {
      NoGradGuard no_grad;
      bn->running_mean.copy_(from_vector(std::vector<float>{1, 2, 3}, {kC}));
      bn->running_var.copy_(from_vector(std::vector<float>{4, 0.5, 2}, {kC}));
    }
    Tensor x = global_x(pg.rank(), 5, false);
    bn->eval();
    auto sbn = std::dynamic_pointer_cast<SyncBatchNorm>(convert_sync_batchnorm(bn, borrow(pg)));
    REQUIRE(sbn != nullptr);
    CHECK(!sbn->is_training());
    pg.reset_comm_stats();
    auto got = sbn->forward(x).to_vector<float>();
    auto expect = bn->forward(x).to_vector<float>();
    check_close(got, expect);
    CHECK(pg.comm_stats().total.calls == 0);
  });
}

TEST_CASE(
    "convert_sync_batchnorm keeps the tensors, options and mode, and refuses hidden handles") {
  auto bn = make_bn(true);
  auto seq = std::make_shared<nn::Sequential>(
      std::initializer_list<std::shared_ptr<nn::Module>>{std::make_shared<nn::Linear>(3, 3)});
  seq->push_back(bn);
  // `bn` is still held here: the converted tree would not be what this handle runs.
  CHECK_THROWS_WITH_AS(convert_sync_batchnorm(seq),
                       doctest::Contains("held outside the module tree"), Error);
  bn.reset();
  auto seq2 = std::make_shared<nn::Sequential>();
  seq2->push_back(std::make_shared<nn::Linear>(3, 3));
  seq2->push_back(make_bn(false));
  Tensor w2 = std::dynamic_pointer_cast<nn::BatchNorm>((*seq2)[1])->weight;
  auto out = convert_sync_batchnorm(seq2);
  CHECK(out == seq2);
  auto sbn = std::dynamic_pointer_cast<SyncBatchNorm>((*seq2)[1]);
  REQUIRE(sbn != nullptr);
  CHECK(sbn->weight.is_same(w2));
  CHECK(sbn->parameters()[0].is_same(w2));
  CHECK(sbn->momentum == doctest::Approx(0.3));
  CHECK(sbn->eps == doctest::Approx(1e-5));
  CHECK(std::dynamic_pointer_cast<nn::Linear>((*seq2)[0]) != nullptr);
  CHECK(seq2->state_dict().keys().size() == 7);  // linear w, b; bn w, b, mean, var, counter
}

TEST_CASE("convert_sync_batchnorm converts dplab's ResNet (typed members) and equals BatchNorm on "
          "one rank") {
  // models::ResNet calls bn1->forward() through typed members; rebind_child points them at
  // the SyncBatchNorms, so the converted net on 2 ranks (4 rows each) computes what the
  // plain net computes on all 8 rows.
  manual_seed(5);
  const StateDict init = models::ResNet().state_dict();
  Generator g(11);
  Tensor x = randn({8, 1, 8, 8}, {}, &g);
  auto ref = std::make_shared<models::ResNet>();
  ref->load_state_dict(init);
  const std::vector<float> want =
      ref->forward(x).to_vector<float>();  // training mode: batch statistics
  const std::vector<float> want_mean = ref->bn1->running_mean.to_vector<float>();
  run_threads(2, [&](ProcessGroup& pg) {
    auto net = std::make_shared<models::ResNet>();
    net->load_state_dict(init);
    Tensor bn1_weight = net->bn1->weight;  // a tensor handle, not a handle on the layer
    REQUIRE(convert_sync_batchnorm(net, borrow(pg)) == net);
    int converted = 0, plain = 0;
    for (auto& [n, m] : net->named_modules()) {
      converted += std::dynamic_pointer_cast<SyncBatchNorm>(m) != nullptr;
      plain += std::dynamic_pointer_cast<nn::BatchNorm>(m) != nullptr &&
               !std::dynamic_pointer_cast<SyncBatchNorm>(m);
    }
    CHECK(converted == 1 + 2 * 3 + 2);  // stem, two per block, two projections
    CHECK(plain == 0);
    CHECK(std::dynamic_pointer_cast<SyncBatchNorm>(net->bn1) != nullptr);  // the typed member too
    auto block = std::dynamic_pointer_cast<models::BasicBlock>((*net->layer2)[0]);
    CHECK(std::dynamic_pointer_cast<SyncBatchNorm>(block->bn2) != nullptr);
    CHECK(net->bn1->weight.is_same(bn1_weight));  // same tensors: an optimizer carries over
    Tensor y = net->forward(x.narrow(pg.rank() * 4, 4));
    check_close(y.to_vector<float>(), want, static_cast<size_t>(pg.rank() * 4 * 10));
    check_close(net->bn1->running_mean.to_vector<float>(), want_mean);
  });
}

TEST_CASE("convert_sync_batchnorm still refuses a BatchNorm the caller holds a handle to") {
  auto net = std::make_shared<models::ResNet>();
  auto extra = (*net->layer1)[0];  // a block, fine; but a kept BatchNorm handle is not:
  auto held = std::dynamic_pointer_cast<models::BasicBlock>(extra)->bn1;
  CHECK_THROWS_WITH_AS(convert_sync_batchnorm(net),
                       doctest::Contains("'layer1.0.bn1' (BatchNorm2d"), Error);
  int converted = 0;
  for (auto& [n, m] : net->named_modules())
    converted += std::dynamic_pointer_cast<SyncBatchNorm>(m) != nullptr;
  CHECK(converted == 0);  // checked before anything was replaced
}

TEST_CASE("SyncBatchNorm on CUDA: 2 ranks on cuda:0, cuda:1 equal BatchNorm on the CPU, 1d and 2d" *
          doctest::skip(cuda_device_count() == 0)) {
  set_virtual_gpus(2);  // logical GPUs: works on a machine with one card
  run_sync({3, 5}, /*two_d=*/true, /*on_gpu=*/true);
  run_sync({4, 2}, /*two_d=*/false, /*on_gpu=*/true);
}
