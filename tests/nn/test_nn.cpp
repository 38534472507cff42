// test_nn.cpp: nn::Module's bookkeeping: registration order, dotted names, counts, state
// dicts (PyTorch's keys, strict and non-strict loading), to(device), clone_to, train/eval,
// zero_grad, describe(). The layers' numerics are in test_nn_layers.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "framework/autograd/grad_mode.h"
#include "framework/backend/backend.h"
#include "framework/backend/cpu/cpu_dispatch.h"
#include "framework/nn/layers.h"
#include "framework/ops/ops.h"
#include "framework/tensor/allocator.h"
#include "framework/tensor/random.h"
#include "models/lenet.h"
#include "models/mlp.h"
#include "models/models.h"
#include "models/resnet.h"
#include "models/toy.h"

using namespace dplab;

namespace {

// fc1, then a Sequential inside, then a BatchNorm: names must nest with dots.
struct Net : nn::Module {
  std::shared_ptr<nn::Linear> fc1;
  std::shared_ptr<nn::Sequential> seq;
  std::shared_ptr<nn::BatchNorm1d> bn;
  Net() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, 3));
    seq = register_module(
        "seq", std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
                   std::make_shared<nn::Linear>(3, 3), std::make_shared<nn::ReLU>(),
                   std::make_shared<nn::Linear>(3, 2)}));
    bn = register_module("bn", std::make_shared<nn::BatchNorm1d>(2));
  }
  Tensor forward(const Tensor& x) override { return bn->forward(seq->forward(fc1->forward(x))); }
  std::string name() const override { return "Net"; }
  std::shared_ptr<nn::Module> make_empty_copy() const override { return std::make_shared<Net>(); }
};

template <typename P>
std::vector<std::string> names_of(const std::vector<P>& pairs) {
  std::vector<std::string> out;
  for (const auto& p : pairs) out.push_back(p.first);
  return out;
}

int64_t count_params(const nn::Module& m) {
  int64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.numel();
  return n;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool has_gpu() { return cuda_device_count() > 0; }

}  // namespace

TEST_CASE("parameters, buffers and modules come in registration order with dotted names") {
  Net net;
  CHECK(names_of(net.named_parameters()) ==
        std::vector<std::string>{"fc1.weight", "fc1.bias", "seq.0.weight", "seq.0.bias",
                                 "seq.2.weight", "seq.2.bias", "bn.weight", "bn.bias"});
  CHECK(names_of(net.named_buffers()) ==
        std::vector<std::string>{"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"});
  CHECK(names_of(net.named_children()) == std::vector<std::string>{"fc1", "seq", "bn"});
  CHECK(names_of(net.named_modules()) ==
        std::vector<std::string>{"", "fc1", "seq", "seq.0", "seq.1", "seq.2", "bn"});
  CHECK(net.parameters(/*recurse=*/false).empty());
  CHECK(net.seq->parameters(false).empty());
  CHECK(net.fc1->parameters(false).size() == 2);
  // The layer's public member and the registry are one tensor.
  CHECK(net.parameters()[0].is_same(net.fc1->weight));
  CHECK(net.fc1->weight.shape() == Shape{3, 4});  // [out_features, in_features]
  CHECK(net.fc1->parameter("bias").is_same(net.fc1->bias));
  CHECK(error_of([&] { net.fc1->parameter("gamma"); }).find("weight, bias") != std::string::npos);
  CHECK(error_of([&] { net.register_buffer("fc1", zeros({1})); }).find("already used") !=
        std::string::npos);
  CHECK(error_of([&] { net.register_parameter("a.b", zeros({1})); }).find("without '.'") !=
        std::string::npos);
}

TEST_CASE("LeNet's fused stages give the modules' numbers: output and every gradient") {
  // LeNet::forward calls conv2d_relu_max_pool2d per stage; DPLAB_FUSE's setting off, the
  // same op runs conv2d, relu and max_pool2d (test_cpu_conv_fused.cpp compares the ops).
  auto run = [](bool fused) {
    const bool before = fused_conv();
    set_fused_conv(fused);
    manual_seed(5);
    models::LeNet net;
    Tensor x = randn({3, 1, 28, 28});
    Tensor y = net.forward(x);
    (y * y).sum().backward();
    std::vector<std::vector<float>> out{y.to_vector<float>()};
    for (const Tensor& p : net.parameters()) out.push_back(p.grad().to_vector<float>());
    set_fused_conv(before);
    return out;
  };
  const auto fused = run(true), unfused = run(false);
  REQUIRE(fused.size() == 7);  // y and 6 parameters
  for (size_t k = 0; k < fused.size(); ++k) {
    CAPTURE(k);
    CHECK(fused[k] == unfused[k]);
  }
}

TEST_CASE("parameter counts of the models") {
  CHECK(count_params(models::MLP()) == 235146);  // 784*256+256 + 256*128+128 + 128*10+10
  // LeNet: conv1 16*1*5*5+16 = 416, conv2 32*16*5*5+32 = 12832, fc 1568*10+10 = 15690.
  CHECK(count_params(models::LeNet()) == 416 + 12832 + 15690);
  // ResNet: conv1 144 + bn1 32; layer1 2*(16*16*9) + 2*32 = 4672;
  // layer2 16*32*9 + 32*32*9 + 2*64 + (16*32 + 64) = 14528;
  // layer3 32*64*9 + 64*64*9 + 2*128 + (32*64 + 128) = 57728; fc 64*10+10 = 650.
  CHECK(count_params(models::ResNet()) == 144 + 32 + 4672 + 14528 + 57728 + 650);
  CHECK(count_params(models::ToyModel()) == 110 + 55);
}

TEST_CASE("state_dict keys are PyTorch's") {
  auto mlp = models::make_model("mlp");
  CHECK(mlp->state_dict().keys() ==
        std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"});
  nn::BatchNorm2d bn(16);
  StateDict sd = bn.state_dict();
  CHECK(sd.keys() == std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                              "num_batches_tracked"});
  CHECK(sd.at("num_batches_tracked").dtype() == DType::Int64);
  CHECK(sd.at("num_batches_tracked").shape() == Shape{});
  CHECK(sd.at("running_var").shape() == Shape{16});
  // The dict shares storage with the module and carries no autograd.
  CHECK(sd.at("weight").raw_data() == bn.weight.raw_data());
  CHECK_FALSE(sd.at("weight").requires_grad());
  auto res = models::make_model("resnet")->state_dict().keys();
  CHECK(res[0] == "conv1.weight");
  CHECK(std::find(res.begin(), res.end(), "layer2.0.downsample.1.running_var") != res.end());
}

TEST_CASE("strict load_state_dict lists missing, unexpected and wrongly shaped keys at once") {
  manual_seed(1);
  Net a;
  manual_seed(2);
  Net b;
  StateDict good = b.state_dict();
  StateDict bad;
  for (const auto& [k, t] : good) {
    if (k == "fc1.bias") continue;                           // missing
    bad.insert(k, k == "seq.2.weight" ? zeros({5, 5}) : t);  // wrongly shaped
  }
  bad.insert("fc2.weight", zeros({1}));  // unexpected
  const float before = a.fc1->weight.at({0, 0});
  std::string msg = error_of([&] { a.load_state_dict(bad); });
  CHECK(msg.find("missing keys: fc1.bias") != std::string::npos);
  CHECK(msg.find("unexpected keys: fc2.weight") != std::string::npos);
  CHECK(msg.find("seq.2.weight (expected [2, 3] float32, got [5, 5] float32)") !=
        std::string::npos);
  CHECK(a.fc1->weight.at({0, 0}) == before);  // nothing loaded by a failed load

  // Non-strict: missing and unexpected keys are ignored, the rest is loaded.
  StateDict partial;
  for (const auto& [k, t] : good)
    if (k != "fc1.bias") partial.insert(k, t);
  partial.insert("fc2.weight", zeros({1}));
  const float bias_before = a.fc1->bias.at({0});
  a.load_state_dict(partial, /*strict=*/false);
  CHECK(a.fc1->weight.at({0, 0}) == b.fc1->weight.at({0, 0}));
  CHECK(a.seq->operator[](2)->parameter("weight").to_vector<float>() ==
        b.seq->operator[](2)->parameter("weight").to_vector<float>());
  CHECK(a.fc1->bias.at({0}) == bias_before);
  // As in PyTorch, a wrong shape is an error even when not strict: it can never be loaded.
  CHECK(error_of([&] {
          a.load_state_dict(bad, false);
        }).find("wrongly shaped keys: seq.2.weight") != std::string::npos);

  // A full, strict load copies values, not handles.
  a.load_state_dict(good);
  CHECK(a.bn->running_var.to_vector<float>() == b.bn->running_var.to_vector<float>());
  CHECK_FALSE(a.fc1->weight.raw_data() == b.fc1->weight.raw_data());
}

TEST_CASE("to(device) moves every parameter, buffer and gradient, in place") {
  const Device d("cpu:5");
  nn::Linear lin(100, 50);
  lin(ones({2, 100})).sum().backward();
  REQUIRE(lin.weight.grad().defined());
  Tensor held = lin.weight;  // e.g. an optimizer's handle
  const int64_t before = memory_stats(d).allocated_bytes;
  lin.to(d);
  // weight + bias + their gradients
  CHECK(memory_stats(d).allocated_bytes - before == 2 * (100 * 50 + 50) * 4);
  CHECK(lin.weight.device() == d);
  CHECK(lin.bias.device() == d);
  CHECK(lin.weight.grad().device() == d);
  CHECK(held.device() == d);  // the same TensorImpl was rebound
  CHECK(lin.weight.requires_grad());
  CHECK(lin(ones({2, 100}, {.device = d})).device() == d);

  nn::BatchNorm2d bn(8);
  bn.to(d);
  for (const Tensor& b : bn.buffers()) CHECK(b.device() == d);
  lin.to("cpu:0");
  lin.weight.set_grad({});
  lin.bias.set_grad({});
  // Back on cpu:0 and without gradients, only bn's 4 float vectors [8] and its int64 stay on d.
  CHECK(memory_stats(d).allocated_bytes - before == 4 * 8 * 4 + 8);
}

TEST_CASE("clone_to makes an equal, independent copy without touching cpu:0 or the generator") {
  const Device d("cpu:2");
  manual_seed(3);
  auto src = models::make_model("resnet");
  src->eval();
  const int64_t on_cpu0 = memory_stats("cpu:0").allocated_bytes;
  reset_peak_memory_stats("cpu:0");
  const int64_t before_d = memory_stats(d).allocated_bytes;
  const float next_draw = [] {
    Generator copy = default_generator();
    return copy.uniform();
  }();

  auto copy = src->clone_to(d);

  CHECK(memory_stats("cpu:0").peak_bytes == on_cpu0);  // built directly on d
  int64_t bytes = 0;
  for (const auto& [k, t] : src->state_dict()) bytes += t.nbytes();
  CHECK(memory_stats(d).allocated_bytes - before_d == bytes);
  CHECK(default_generator().uniform() == next_draw);  // no random init for the replica

  StateDict a = src->state_dict(), b = copy->state_dict();
  REQUIRE(a.keys() == b.keys());
  for (const auto& k : a.keys()) {
    CHECK(b.at(k).device() == d);
    CHECK(b.at(k).raw_data() != a.at(k).raw_data());
    if (b.at(k).dtype() == DType::Float32)
      CHECK(b.at(k).to_vector<float>() == a.at(k).to_vector<float>());
  }
  CHECK_FALSE(copy->is_training());
  for (const auto& [n, m] : copy->named_modules()) CHECK_FALSE(m->is_training());
  CHECK(copy->parameters()[0].requires_grad());
  CHECK(copy->name() == "ResNet");

  // Changing the copy leaves the source alone.
  const float w0 = a.at("fc.weight").at({0, 0});
  {
    NoGradGuard g;
    Tensor w = copy->state_dict().at("fc.weight");  // shares the copy's storage
    w.fill_(42.0);
  }
  CHECK(a.at("fc.weight").at({0, 0}) == w0);
  CHECK(copy->state_dict().at("fc.weight").at({0, 0}) == 42.0f);
}

TEST_CASE("clone_to needs make_empty_copy, and the error says so") {
  struct Bare : nn::Module {
    Bare() { register_parameter("w", zeros({2})); }
  };
  Bare bare;
  CHECK(error_of([&] { bare.clone_to("cpu:1"); }).find("make_empty_copy() is not implemented") !=
        std::string::npos);
  CHECK(error_of([&] { bare.forward(zeros({1})); }).find("forward(x) is not implemented") !=
        std::string::npos);
}

TEST_CASE("train() and eval() recurse; zero_grad() clears every gradient") {
  auto net = models::make_model("resnet");
  net->eval();
  for (const auto& [n, m] : net->named_modules()) CHECK_FALSE(m->is_training());
  net->train();
  for (const auto& [n, m] : net->named_modules()) CHECK(m->is_training());

  Net small;
  small(randn({4, 4})).sum().backward();
  for (const Tensor& p : small.parameters()) CHECK(p.grad().defined());
  small.zero_grad();
  for (const Tensor& p : small.parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("describe() prints the tree like PyTorch's print(model)") {
  CHECK(nn::describe(models::MLP()) ==
        "MLP(\n"
        "  (0): Linear(in_features=784, out_features=256, bias=true)\n"
        "  (1): ReLU()\n"
        "  (2): Linear(in_features=256, out_features=128, bias=true)\n"
        "  (3): ReLU()\n"
        "  (4): Linear(in_features=128, out_features=10, bias=true)\n"
        ")");
  Net net;
  CHECK(nn::describe(net) ==
        "Net(\n"
        "  (fc1): Linear(in_features=4, out_features=3, bias=true)\n"
        "  (seq): Sequential(\n"
        "    (0): Linear(in_features=3, out_features=3, bias=true)\n"
        "    (1): ReLU()\n"
        "    (2): Linear(in_features=3, out_features=2, bias=true)\n"
        "  )\n"
        "  (bn): BatchNorm1d(2, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)\n"
        ")");
}

TEST_CASE("make_model builds every model and names the choices on a typo") {
  manual_seed(0);
  CHECK(models::make_model("mlp")->forward(randn({2, 1, 28, 28})).shape() == Shape{2, 10});
  CHECK(models::make_model("cnn")->forward(randn({2, 1, 28, 28})).shape() == Shape{2, 10});
  CHECK(models::make_model("resnet")->forward(randn({2, 1, 28, 28})).shape() == Shape{2, 10});
  CHECK(models::make_model("toy")->forward(randn({3, 10})).shape() == Shape{3, 5});
  // gpt: bytes in, a score per byte out; the size models.h promises (12.4 MiB of gradients)
  auto gpt = std::static_pointer_cast<models::GPT>(models::make_model("gpt"));
  CHECK(gpt->num_params() == 3257856);
  CHECK(gpt->forward(from_vector(std::vector<int64_t>{72, 105, 33, 10, 0, 255}, {2, 3})).shape() ==
        Shape{2, 3, 256});
  CHECK(error_of([] {
          models::make_model("vgg");
        }).find("\"vgg\"; expected one of: mlp, cnn, resnet, toy") != std::string::npos);
}

TEST_CASE("ToyMpModel runs net1 on dev0 and net2 on dev1, and backward crosses back") {
  models::ToyMpModel m("cpu:0", "cpu:1");
  CHECK(m.net1->weight.device() == Device("cpu:0"));
  CHECK(m.net2->weight.device() == Device("cpu:1"));
  Tensor y = m(randn({4, 10}));
  CHECK(y.device() == Device("cpu:1"));
  CHECK(y.shape() == Shape{4, 5});
  y.sum().backward();
  CHECK(m.net1->weight.grad().device() == Device("cpu:0"));
  CHECK(m.net2->weight.grad().device() == Device("cpu:1"));
}

TEST_CASE("to(cuda) and clone_to(cuda) keep the values" * doctest::skip(!has_gpu())) {
  manual_seed(5);
  auto m = models::make_model("resnet");
  auto ref = m->state_dict();
  auto copy = m->clone_to("cuda:0");
  Tensor x = randn({2, 1, 28, 28});
  m->eval();
  copy->eval();
  Tensor y_cpu = m->forward(x);
  Tensor y_gpu = copy->forward(x.to(Device("cuda:0")));
  CHECK(y_gpu.device() == Device("cuda:0"));
  auto a = y_cpu.to_vector<float>(), b = y_gpu.to(Device("cpu:0")).to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i)
    CHECK(std::abs(a[i] - b[i]) <= 1e-4f + 1e-4f * std::abs(a[i]));
  m->to("cuda:0");
  for (const auto& [k, t] : m->state_dict()) CHECK(t.device() == Device("cuda:0"));
}

TEST_CASE("every model learns a fixed batch: plain SGD on parameters() lowers the loss") {
  for (const char* name : {"mlp", "cnn", "resnet"}) {
    CAPTURE(name);
    manual_seed(4);
    auto m = models::make_model(name);
    Tensor x = randn({8, 1, 28, 28});
    Tensor y = from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, {8});
    float first = 0, last = 0;
    for (int step = 0; step < 8; ++step) {
      m->zero_grad();
      Tensor loss = cross_entropy(m->forward(x), y);
      loss.backward();
      NoGradGuard g;
      for (Tensor& p : m->parameters()) {
        REQUIRE(p.grad().defined());
        p.add_(p.grad(), -0.05f);
      }
      (step == 0 ? first : last) = loss.item();
    }
    CHECK(last < 0.8f * first);
  }
}
