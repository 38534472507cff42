// train_parity.cpp: whole training steps of the example models on two devices.
// The model is built once on the CPU (manual_seed(0)) and copied to the device under test
// with clone_to(), so both start from the same weights; both see the same fixed batch (37
// samples: not a multiple of a warp) and take SGD steps with momentum. After each step the
// loss, every gradient and every parameter must agree within a GEMM tolerance: the errors
// of a few float32 reorderings, not of a wrong kernel (which is off by O(1)).
// Read next: test_ops_cuda.cpp.
#include <doctest/doctest.h>

#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "models/models.h"
#include "tests/ops_cuda/parity.h"

namespace dplab::parity {

void check_training_steps(const std::string& name, Device d, int steps, bool exact) {
  INFO("model " << name << " on " << d.str());
  manual_seed(0);
  std::shared_ptr<nn::Module> ref = models::make_model(name);
  std::shared_ptr<nn::Module> dut = ref->clone_to(d);
  ref->train();
  dut->train();

  // Same initial weights, exactly: clone_to copies bytes.
  auto ref_params = ref->named_parameters(), dut_params = dut->named_parameters();
  REQUIRE(ref_params.size() == dut_params.size());
  for (std::size_t i = 0; i < ref_params.size(); ++i) {
    REQUIRE(ref_params[i].first == dut_params[i].first);
    CHECK(dut_params[i].second.device() == d);
    check_close(dut_params[i].second, ref_params[i].second, "initial " + ref_params[i].first, {},
                true);
  }

  Generator gen(77);
  const int64_t batch = 37;
  Tensor xb = randn({batch, 1, 28, 28}, {}, &gen);
  Tensor yb = randint(0, 10, {batch}, {.dtype = DType::Int64}, &gen);
  Tensor xd = xb.to(d), yd = yb.to(d);

  const optim::SGDOptions options{.lr = 0.05, .momentum = 0.9};
  optim::SGD opt_ref(ref->parameters(), options), opt_dut(dut->parameters(), options);
  const Tol tol = kGemm;
  for (int step = 1; step <= steps; ++step) {
    const std::string at = " at step " + std::to_string(step);
    opt_ref.zero_grad();
    opt_dut.zero_grad();
    Tensor loss_ref = cross_entropy(ref->forward(xb), yb);
    Tensor loss_dut = cross_entropy(dut->forward(xd), yd);
    CHECK(loss_dut.device() == d);
    check_close(loss_dut, loss_ref, name + ": loss" + at, tol, exact);
    loss_ref.backward();
    loss_dut.backward();
    auto pr = ref->named_parameters(), pd = dut->named_parameters();
    for (std::size_t i = 0; i < pr.size(); ++i) {
      check_close(pd[i].second.grad(), pr[i].second.grad(), name + ": grad of " + pr[i].first + at,
                  tol, exact);
    }
    opt_ref.step();
    opt_dut.step();
    for (std::size_t i = 0; i < pr.size(); ++i) {
      check_close(pd[i].second, pr[i].second,
                  name + ": " + pr[i].first + " after step " + std::to_string(step), tol, exact);
    }
    auto br = ref->named_buffers(), bd = dut->named_buffers();
    REQUIRE(br.size() == bd.size());
    for (std::size_t i = 0; i < br.size(); ++i) {
      check_close(bd[i].second, br[i].second, name + ": buffer " + br[i].first + at, tol, exact);
    }
  }
}

}  // namespace dplab::parity
