// toy.cpp: ToyModel and ToyMpModel (see toy.h).
#include "models/toy.h"

#include "framework/ops/ops.h"

namespace dplab::models {

ToyModel::ToyModel() {
  net1 = register_module("net1", std::make_shared<nn::Linear>(10, 10));
  relu = register_module("relu", std::make_shared<nn::ReLU>());
  net2 = register_module("net2", std::make_shared<nn::Linear>(10, 5));
}

Tensor ToyModel::forward(const Tensor& x) { return net2->forward(relu->forward(net1->forward(x))); }

std::shared_ptr<nn::Module> ToyModel::make_empty_copy() const {
  return std::make_shared<ToyModel>();
}

ToyMpModel::ToyMpModel(Device d0, Device d1) : dev0(d0), dev1(d1) {
  net1 = register_module("net1", std::make_shared<nn::Linear>(10, 10));
  relu = register_module("relu", std::make_shared<nn::ReLU>());
  net2 = register_module("net2", std::make_shared<nn::Linear>(10, 5));
  net1->to(dev0);
  net2->to(dev1);
}

Tensor ToyMpModel::forward(const Tensor& x) {
  // [N, 10] on dev0 -> relu(net1) [N, 10] -> copied to dev1 -> net2 -> [N, 5] on dev1.
  // Tensor::to is the to_device op: backward copies d(loss)/d(activation) from dev1 back to dev0.
  Tensor h = relu->forward(net1->forward(x.to(dev0)));
  return net2->forward(h.to(dev1));
}

std::shared_ptr<nn::Module> ToyMpModel::make_empty_copy() const {
  return std::make_shared<ToyMpModel>(dev0, dev1);
}

}  // namespace dplab::models
