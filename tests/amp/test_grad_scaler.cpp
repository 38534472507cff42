// GradScaler: PyTorch's rules, step by step. Steps whose gradients hold inf or NaN are
// skipped (exactly those) and halve the scale; 2000 clean steps in a row double it (not
// 1999); unscale_ divides by the scale (so clipping sees true gradients); misuse is an
// error; the state survives a checkpoint, and a state outside float32's normal range is
// refused. And Apex O2's master weights, whose load refuses NaN and changes nothing then.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "framework/amp/grad_scaler.h"
#include "framework/amp/master_weights.h"
#include "framework/dplab.h"
#include "framework/io/checkpoint.h"
#include "framework/nn/layers.h"
#include "framework/optim/sgd.h"

using namespace dplab;

namespace {

// A one-layer model whose gradient we set by hand: p.grad = value * scale.
struct Setup {
  std::shared_ptr<nn::Linear> model =
      std::make_shared<nn::Linear>(2, 1, nn::LinearOptions{.bias = false});
  Tensor& w() { return model->weight; }
};

void set_grad(Tensor& p, float scaled_value) { p.set_grad(full(p.shape(), scaled_value)); }

}  // namespace

TEST_CASE(
    "GradScaler: scale, unscale, and the step skipped exactly when a gradient is inf or NaN") {
  Setup s;
  optim::SGD opt(s.model->parameters(), {.lr = 1.0});
  amp::GradScaler scaler;
  CHECK(scaler.get_scale() == 65536.0);
  CHECK(scaler.scale(full({}, 2.0)).item() == 131072.0f);

  const float inf = std::numeric_limits<float>::infinity(),
              nan = std::numeric_limits<float>::quiet_NaN();
  // step k's gradient, as backward of the scaled loss would leave it (scale * 0.25, or bad)
  const std::vector<float> bad_values = {0, 0, inf, 0, nan, -inf, 0, 0};  // 0 = a good step
  double expected_scale = 65536.0;
  int64_t skipped = 0;
  for (size_t k = 0; k < bad_values.size(); ++k) {
    CAPTURE(k);
    const bool bad = bad_values[k] != 0 || std::isnan(bad_values[k]);
    const std::vector<float> before = s.w().to_vector<float>();
    set_grad(s.w(), bad ? bad_values[k] : static_cast<float>(0.25 * scaler.get_scale()));
    const bool stepped = scaler.step(opt);
    scaler.update();
    CHECK(stepped == !bad);
    const std::vector<float> after = s.w().to_vector<float>();
    for (size_t i = 0; i < after.size(); ++i)
      CHECK(after[i] ==
            doctest::Approx(bad ? before[i] : before[i] - 0.25f));  // lr 1 * true grad 0.25
    if (bad) {
      expected_scale *= 0.5;
      ++skipped;
    }
    CHECK(scaler.get_scale() == expected_scale);
    CHECK(scaler.growth_tracker() == (bad ? 0 : scaler.growth_tracker()));
  }
  CHECK(scaler.skipped_steps() == skipped);
  CHECK(scaler.get_scale() == 65536.0 / 8);
}

TEST_CASE("GradScaler: the scale doubles after exactly 2000 clean steps") {
  Setup s;
  optim::SGD opt(s.model->parameters(), {.lr = 0.0});
  amp::GradScaler scaler;
  for (int k = 1; k <= 2000; ++k) {
    set_grad(s.w(), 1.0f);
    scaler.step(opt);
    scaler.update();
    if (k == 1999) {
      CHECK(scaler.get_scale() == 65536.0);
      CHECK(scaler.growth_tracker() == 1999);
    }
  }
  CHECK(scaler.get_scale() == 131072.0);
  CHECK(scaler.growth_tracker() == 0);
  // an overflow resets the count: 1999 clean steps after it do not double again
  set_grad(s.w(), std::numeric_limits<float>::infinity());
  scaler.step(opt);
  scaler.update();
  CHECK(scaler.get_scale() == 65536.0);
  CHECK(scaler.growth_tracker() == 0);
}

TEST_CASE("GradScaler: unscale_ for clipping, misuse, disabled, state in a checkpoint") {
  Setup s;
  optim::SGD opt(s.model->parameters(), {.lr = 0.0});
  amp::GradScaler scaler({.init_scale = 1024.0});
  set_grad(s.w(), 512.0f);
  scaler.unscale_(opt);
  CHECK(s.w().grad().to_vector<float>() == std::vector<float>{0.5f, 0.5f});  // the true gradient
  CHECK_THROWS_WITH_AS(scaler.unscale_(opt), doctest::Contains("already unscaled"), Error);
  CHECK(scaler.step(opt));  // uses the unscale_ above, does not divide again
  CHECK(s.w().grad().to_vector<float>() == std::vector<float>{0.5f, 0.5f});
  CHECK_THROWS_WITH_AS(scaler.step(opt), doctest::Contains("already called"), Error);
  scaler.update();
  amp::GradScaler fresh;
  CHECK_THROWS_WITH_AS(fresh.update(), doctest::Contains("no inf checks"), Error);
  CHECK_THROWS_WITH_AS(amp::GradScaler({.backoff_factor = 1.5}),
                       doctest::Contains("backoff_factor"), Error);

  amp::GradScaler off({.enabled = false});
  CHECK(off.scale(full({}, 3.0)).item() == 3.0f);
  CHECK(off.get_scale() == 1.0);

  // state_dict through a checkpoint file
  for (int k = 0; k < 7; ++k) {
    set_grad(s.w(), 1.0f);
    scaler.step(opt);
    scaler.update();
  }
  Metadata extra;
  scaler.state_dict(extra);
  const auto path = std::filesystem::temp_directory_path() / "dplab_test_scaler.safetensors";
  save_checkpoint(path.string(), *s.model, &opt, extra);
  Metadata meta = load_checkpoint(path.string(), *s.model, &opt);
  std::filesystem::remove(path);
  amp::GradScaler restored;
  restored.load_state_dict(meta);
  CHECK(restored.get_scale() == scaler.get_scale());
  CHECK(restored.growth_tracker() == 8);
  CHECK_THROWS_WITH_AS(restored.load_state_dict(Metadata{}),
                       doctest::Contains("missing \"scaler.scale\""), Error);
}

TEST_CASE("GradScaler: inf in the first of two parameters' gradients skips the step") {
  // two parameters: found_inf must come from all gradients, not the last one only
  auto model = std::make_shared<nn::Linear>(2, 1);  // weight, then bias
  optim::SGD opt(model->parameters(), {.lr = 1.0});
  amp::GradScaler scaler({.init_scale = 4.0});
  const auto w = model->weight.to_vector<float>(), b = model->bias.to_vector<float>();
  model->weight.set_grad(full({1, 2}, std::numeric_limits<float>::infinity()));
  model->bias.set_grad(full({1}, 4.0f));
  CHECK_FALSE(scaler.step(opt));
  scaler.update();
  CHECK(model->weight.to_vector<float>() == w);  // no -inf written into a weight
  CHECK(model->bias.to_vector<float>() == b);
  CHECK(scaler.get_scale() == 2.0);
  CHECK(scaler.skipped_steps() == 1);
}

TEST_CASE("GradScaler: its factors are checked when made and when loaded; a refused state changes "
          "nothing") {
  const double inf = std::numeric_limits<double>::infinity(),
               nan = std::numeric_limits<double>::quiet_NaN();
  for (double g : {nan, inf, 0.0, 1.0})
    CHECK_THROWS_WITH_AS(amp::GradScaler({.growth_factor = g}),
                         doctest::Contains("growth_factor must be a finite value > 1"), Error);
  CHECK_THROWS_WITH_AS(amp::GradScaler({.init_scale = 1e39}),
                       doctest::Contains("scale must be a finite "
                                         "value in (0, 3.40282e+38]"),
                       Error);
  // a subnormal scale (1e-45 is float32's smallest) has lost its precision; one backoff
  // takes it to 0: refused, like one past float32's largest
  for (double tiny : {1e-45, 1e-39})
    CHECK_THROWS_WITH_AS(amp::GradScaler({.init_scale = tiny}),
                         doctest::Contains("and a normal float32, at least 1.17549e-38"), Error);
  amp::GradScaler scaler({.init_scale = 8.0, .growth_interval = 5});
  Metadata good;
  scaler.state_dict(good);
  struct Bad {
    const char* key;
    const char* value;
    const char* message;
  };
  for (const Bad& bad :
       {Bad{"scaler.scale", "inf", "scale must be a finite value in (0, "},
        Bad{"scaler.scale", "nan", "scale must be a finite value in (0, "},
        Bad{"scaler.scale", "-1", "scale must be a finite value in (0, "},
        Bad{"scaler.scale", "1e-45", "and a normal float32, at least 1.17549e-38, got 1e-45"},
        Bad{"scaler.scale", "0", "scale must be a finite value in (0, "},
        Bad{"scaler.growth_factor", "inf", "growth_factor must be a finite value > 1"},
        Bad{"scaler.growth_factor", "0", "growth_factor must be a finite value > 1"},
        Bad{"scaler.backoff_factor", "1", "backoff_factor must lie in (0, 1)"},
        Bad{"scaler.growth_interval", "0", "growth_interval must be >= 1"},
        Bad{"scaler.growth_interval", "2x", "\"scaler.growth_interval\" should be an integer"},
        Bad{"scaler.growth_tracker", "-1",
            "growth_tracker must lie in [0, growth_interval = 5)"}}) {
    CAPTURE(bad.key);
    CAPTURE(bad.value);
    Metadata meta = good;
    meta[bad.key] = bad.value;
    CHECK_THROWS_WITH_AS(scaler.load_state_dict(meta), doctest::Contains(bad.message), Error);
    CHECK(scaler.get_scale() == 8.0);  // the refused value did not stay
    Metadata now;
    scaler.state_dict(now);
    CHECK(now == good);
  }
}

TEST_CASE("GradScaler: the scale stays a finite float32, however long it grows") {
  Setup s;
  optim::SGD opt(s.model->parameters(), {.lr = 0.0});
  amp::GradScaler scaler({.init_scale = 1e38, .growth_factor = 16.0, .growth_interval = 1});
  set_grad(s.w(), 1.0f);
  scaler.step(opt);
  scaler.update();
  CHECK(std::isfinite(static_cast<float>(scaler.get_scale())));
  CHECK(scaler.get_scale() == amp::kMaxScale);
}

TEST_CASE("Apex O2: 16-bit model weights, float32 master weights, batch norm kept float32") {
  for (DType low : {DType::Float16, DType::BFloat16}) {
    CAPTURE(dtype_name(low));
    manual_seed(5);
    auto model =
        std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
            std::make_shared<nn::Linear>(6, 4), std::make_shared<nn::BatchNorm1d>(4)});
    amp::cast_module_(*model, low);
    for (const auto& [name, p] : model->named_parameters()) {
      CAPTURE(name);
      CHECK(p.dtype() == (name.rfind("1.", 0) == 0 ? DType::Float32 : low));
    }
    amp::MasterWeightOptimizer opt(model->parameters(), [](std::vector<Tensor> masters) {
      return std::make_unique<optim::SGD>(masters, optim::SGDOptions{.lr = 0.5});
    });
    for (const Tensor& m : opt.params()) CHECK(m.dtype() == DType::Float32);
    // An update smaller than half an ulp of the 16-bit weight: lost if applied to it, kept
    // in the master, and it reaches the model once enough of them add up.
    Tensor w16 = model->parameters()[0];
    const float w0 = w16.detach().to(DType::Float32).to_vector<float>()[0];
    const double ulp =
        std::ldexp(1.0, std::ilogb(std::fabs(w0)) - (low == DType::Float16 ? 10 : 7));
    const float tiny_grad = static_cast<float>(ulp / 8 / 0.5);  // lr * g = ulp / 8
    for (int k = 0; k < 8; ++k) {
      for (const Tensor& p : model->parameters())
        const_cast<Tensor&>(p).set_grad(full(p.shape(), tiny_grad).to(p.dtype()));
      opt.step();
      CHECK(!opt.params()[0].grad().defined());  // the masters' gradients are freed after the step
      opt.zero_grad();
      CHECK(!model->parameters()[0].grad().defined());
    }
    const float w_after = w16.detach().to(DType::Float32).to_vector<float>()[0];
    const float master_after = opt.params()[0].to_vector<float>()[0];
    CHECK(master_after == doctest::Approx(w0 - ulp).epsilon(1e-3));
    CHECK(std::fabs(w_after - (w0 - ulp)) <= ulp / 2);  // the model followed its master
  }
}

TEST_CASE("Apex O2: a state dict with a NaN master weight is refused and changes nothing") {
  manual_seed(6);
  auto model = std::make_shared<nn::Linear>(3, 2);
  amp::cast_module_(*model, DType::Float16);
  auto make = [&] {
    return amp::MasterWeightOptimizer(model->parameters(), [](std::vector<Tensor> masters) {
      return std::make_unique<optim::SGD>(masters, optim::SGDOptions{.lr = 0.5, .momentum = 0.9});
    });
  };
  amp::MasterWeightOptimizer saved = make();
  for (const Tensor& p : model->parameters())
    const_cast<Tensor&>(p).set_grad(full(p.shape(), 0.25f).to(p.dtype()));
  saved.step();
  StateDict sd;
  Metadata meta;
  saved.state_dict(sd, meta);
  std::vector<float> forged = sd.at("master.0").to_vector<float>();
  forged[3] = std::numeric_limits<float>::quiet_NaN();
  sd.insert("master.0", from_vector(forged, sd.at("master.0").shape()));

  amp::MasterWeightOptimizer fresh = make();
  const std::vector<float> master = fresh.params()[0].to_vector<float>(),
                           weight = model->weight.detach().to(DType::Float32).to_vector<float>();
  CHECK_THROWS_WITH_AS(fresh.load_state_dict(sd, meta),
                       doctest::Contains("\"master.0\" holds a NaN or an infinity"), Error);
  CHECK(fresh.params()[0].to_vector<float>() == master);
  CHECK(model->weight.detach().to(DType::Float32).to_vector<float>() == weight);
  StateDict inner;
  Metadata inner_meta;
  fresh.inner().state_dict(inner, inner_meta);
  CHECK_FALSE(inner.contains("state.0.momentum_buffer"));  // the inner SGD loaded nothing
}
