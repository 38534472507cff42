// test_checkpoint.cpp: model + optimizer + epoch in one file, resumed exactly; loading onto
// a chosen device; and a model-only file laid out as PyTorch's safetensors writes it.
#include <doctest/doctest.h>

#include <memory>

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
