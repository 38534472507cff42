// test_checkpoint.cpp: model + optimizer + epoch in one file, resumed exactly; loading onto
// a chosen device; a model-only file laid out as PyTorch's safetensors writes it; and a file
// whose optimizer or scaler state could only train into NaN (a NaN momentum, a subnormal
// scale), refused with nothing changed.
#include <doctest/doctest.h>

#include <functional>
#include <limits>
#include <memory>

#include "framework/amp/grad_scaler.h"
#include "framework/io/checkpoint.h"
#include "framework/io/safetensors.h"
#include "framework/nn/layers.h"
#include "framework/ops/ops.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "tests/io/io_test_util.h"

using namespace dplab;
using dplab::test::TempDir;

namespace {

// PyTorch's  class Net(nn.Module): fc1 = Linear(4, 3); fc2 = Linear(3, 2)
struct Net : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  Net() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, 3));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(3, 2));
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(relu(fc1->forward(x))); }
};

Tensor input() { return from_vector(std::vector<float>{1, -2, 3, 0.5f, -1, 2, 0.25f, 4}, {2, 4}); }

void train_step(Net& net, optim::Optimizer& opt) {
  opt.zero_grad();
  Tensor loss = net.forward(input()).pow(2.f).sum();
  loss.backward();
  opt.step();
}

void check_same_params(const nn::Module& a, const nn::Module& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    INFO(pa[i].first);
    CHECK(pa[i].first == pb[i].first);
    CHECK(pa[i].second.to_vector<float>() == pb[i].second.to_vector<float>());
  }
}

}  // namespace

TEST_CASE("checkpoint: model, SGD momentum and epoch resume exactly") {
  TempDir dir;
  manual_seed(1);
  Net net;
  optim::SGD opt(net.parameters(), {.lr = 0.05, .momentum = 0.9});
  train_step(net, opt);
  train_step(net, opt);
  save_checkpoint(dir.file("ckpt.safetensors"), net, &opt, {{"epoch", "3"}, {"step", "20"}});

  // The file itself: model keys as PyTorch names them, optimizer state under "optim.".
  Loaded raw = load_safetensors(dir.file("ckpt.safetensors"));
  for (const char* k : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias",
                        "optim.state.0.momentum_buffer", "optim.state.3.momentum_buffer"})
    CHECK_MESSAGE(raw.tensors.contains(k), k);
  CHECK(raw.metadata.at("format") == "pt");
  CHECK(raw.metadata.at("optim.type") == "SGD");

  manual_seed(2);  // a different initialisation, then overwritten by the load
  Net resumed;
  optim::SGD resumed_opt(resumed.parameters(), {.lr = 1.0});
  Metadata meta = load_checkpoint(dir.file("ckpt.safetensors"), resumed, &resumed_opt);
  CHECK(meta.at("epoch") == "3");
  CHECK(meta.at("step") == "20");
  CHECK(resumed_opt.lr() == doctest::Approx(0.05));
  check_same_params(net, resumed);
  // Momentum was restored: the next step is the same in both.
  train_step(net, opt);
  train_step(resumed, resumed_opt);
  check_same_params(net, resumed);
}

TEST_CASE("checkpoint: map_location and a model living on cpu:2") {
  TempDir dir;
  manual_seed(3);
  Net net;
  save_checkpoint(dir.file("m.safetensors"), net, nullptr, {{"epoch", "1"}});
  Net other;
  other.to(Device("cpu:2"));
  Metadata meta = load_checkpoint(dir.file("m.safetensors"), other, nullptr, Device("cpu:2"));
  CHECK(meta.at("epoch") == "1");
  CHECK(meta.count("optim.type") == 0);
  for (const Tensor& p : other.parameters()) CHECK(p.device() == Device("cpu:2"));
  check_same_params(net, other);
  // Asking for optimizer state from a model-only file is an error that says why.
  optim::SGD opt(other.parameters(), {.lr = 0.1});
  CHECK_THROWS_WITH(load_checkpoint(dir.file("m.safetensors"), other, &opt),
                    doctest::Contains("holds no optimizer state"));
}

TEST_CASE("checkpoint: a file from safetensors.torch.save_file(model.state_dict()) loads") {
  // Python: save_file(Net().state_dict(), "net.safetensors"): no optimizer, keys sorted by
  // name in the header and the data, header padded with spaces to a multiple of 8.
  TempDir dir;
  std::vector<float> b1{0.1f, 0.2f, 0.3f}, w1(12), b2{-1.f, 1.f}, w2(6);
  for (int i = 0; i < 12; ++i) w1[i] = 0.01f * static_cast<float>(i);
  for (int i = 0; i < 6; ++i) w2[i] = -0.5f * static_cast<float>(i);
  std::string header = R"({"fc1.bias":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                       R"("fc1.weight":{"dtype":"F32","shape":[3,4],"data_offsets":[12,60]},)"
                       R"("fc2.bias":{"dtype":"F32","shape":[2],"data_offsets":[60,68]},)"
                       R"("fc2.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[68,92]}})";
  std::string data =
      test::le_bytes(b1) + test::le_bytes(w1) + test::le_bytes(b2) + test::le_bytes(w2);
  test::write_bytes(dir.file("net.safetensors"), test::safetensors_bytes(header, data));
  Net net;
  Metadata meta = load_checkpoint(dir.file("net.safetensors"), net);
  CHECK(meta.empty());
  CHECK(net.fc1->weight.to_vector<float>() == w1);
  CHECK(net.fc1->bias.to_vector<float>() == b1);
  CHECK(net.fc2->weight.to_vector<float>() == w2);
  CHECK(net.fc2->bias.to_vector<float>() == b2);
  CHECK(net.fc1->weight.shape() == Shape{3, 4});
}

TEST_CASE("checkpoint: mismatches are errors") {
  TempDir dir;
  // A file missing fc2: the strict model load lists what is missing.
  std::string header = R"({"fc1.bias":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                       R"("fc1.weight":{"dtype":"F32","shape":[3,4],"data_offsets":[12,60]}})";
  test::write_bytes(dir.file("half.safetensors"),
                    test::safetensors_bytes(header, std::string(60, '\0')));
  Net net;
  CHECK_THROWS_WITH(load_checkpoint(dir.file("half.safetensors"), net),
                    doctest::Contains("fc2.weight"));

  // A model whose own keys start with "optim." cannot be saved unambiguously.
  struct Odd : nn::Module {
    Odd() { register_module("optim", std::make_shared<nn::Linear>(2, 2)); }
  } odd;
  CHECK_THROWS_WITH(save_checkpoint(dir.file("odd.safetensors"), odd),
                    doctest::Contains("reserve for the optimizer"));
  CHECK(dir.entries() == std::vector<std::string>{"half.safetensors"});

  optim::SGD opt(net.parameters(), {.lr = 0.1});
  CHECK_THROWS_WITH(save_checkpoint(dir.file("c.safetensors"), net, &opt, {{"optim.lr", "9"}}),
                    doctest::Contains("collides with the optimizer's"));
}

TEST_CASE(
    "checkpoint: a NaN momentum or a subnormal scale is refused, naming it; nothing changes") {
  TempDir dir;
  manual_seed(5);
  Net net;
  optim::SGD opt(net.parameters(), {.lr = 0.05, .momentum = 0.9});
  amp::GradScaler scaler({.init_scale = 1024.0});
  train_step(net, opt);
  Metadata extra{{"epoch", "1"}};
  scaler.state_dict(extra);
  save_checkpoint(dir.file("good.safetensors"), net, &opt, extra);
  const Loaded good = load_safetensors(dir.file("good.safetensors"));

  // Each forgery: the good file with one entry changed.
  struct Forgery {
    std::string what, message;
    std::function<void(Loaded&)> edit;
  };
  const std::vector<Forgery> forgeries{
      {"a NaN in a momentum buffer",
       "\"state.2.momentum_buffer\" holds nan at element 1: optimizer state must be finite",
       [](Loaded& f) {
    std::vector<float> m = f.tensors.at("optim.state.2.momentum_buffer").to_vector<float>();
    m[1] = std::numeric_limits<float>::quiet_NaN();
    f.tensors.insert("optim.state.2.momentum_buffer", from_vector(m, {2, 3}));
       }},
      {"an infinite momentum buffer", "\"state.0.momentum_buffer\" holds inf at element 0",
       [](Loaded& f) {
    std::vector<float> m = f.tensors.at("optim.state.0.momentum_buffer").to_vector<float>();
    m[0] = std::numeric_limits<float>::infinity();
    f.tensors.insert("optim.state.0.momentum_buffer", from_vector(m, {3, 4}));
       }},
      {"a subnormal scale",
       "scale must be a finite value in (0, 3.40282e+38] (float32's "
       "largest) and a normal float32, at least 1.17549e-38, got 1e-45",
       [](Loaded& f) { f.metadata["scaler.scale"] = "1e-45"; }},
      };
  for (const Forgery& forgery : forgeries) {
    CAPTURE(forgery.what);
    Loaded bad = good;
    forgery.edit(bad);
    save_safetensors(dir.file("bad.safetensors"), bad.tensors, bad.metadata);

    manual_seed(6);
    Net fresh;
    optim::SGD fresh_opt(fresh.parameters(), {.lr = 0.5, .momentum = 0.5});
    amp::GradScaler fresh_scaler({.init_scale = 8.0});
    train_step(fresh, fresh_opt);  // momentum of its own, to keep
    StateDict opt_before;
    Metadata opt_meta_before;
    fresh_opt.state_dict(opt_before, opt_meta_before);
    const StateDict model_before = fresh.state_dict();
    CHECK_THROWS_WITH_AS(load_checkpoint(dir.file("bad.safetensors"), fresh, &fresh_opt,
                                         Device("cpu"), &fresh_scaler),
                         doctest::Contains(forgery.message.c_str()), Error);
    CHECK_THROWS_WITH_AS(load_checkpoint(dir.file("bad.safetensors"), fresh, &fresh_opt,
                                         Device("cpu"), &fresh_scaler),
                         doctest::Contains("; nothing was loaded"), Error);
    for (const auto& [name, t] : fresh.state_dict()) {
      CAPTURE(name);
      CHECK(t.to_vector<float>() == model_before.at(name).to_vector<float>());
    }
    StateDict opt_after;
    Metadata opt_meta_after;
    fresh_opt.state_dict(opt_after, opt_meta_after);
    CHECK(opt_meta_after == opt_meta_before);
    for (const std::string& key : opt_before.keys()) {
      CAPTURE(key);
      CHECK(opt_after.at(key).to_vector<float>() == opt_before.at(key).to_vector<float>());
    }
    CHECK(fresh_scaler.get_scale() == 8.0);
  }
  // the good file loads all three
  Net resumed;
  optim::SGD resumed_opt(resumed.parameters(), {.lr = 1.0});
  amp::GradScaler resumed_scaler;
  load_checkpoint(dir.file("good.safetensors"), resumed, &resumed_opt, Device("cpu"),
                  &resumed_scaler);
  check_same_params(net, resumed);
  CHECK(resumed_scaler.get_scale() == 1024.0);
}
