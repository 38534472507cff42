// toy.h: the two small models of PyTorch's distributed tutorials.
// ToyModel: net1 = Linear(10, 10), ReLU, net2 = Linear(10, 5); x: [N, 10] -> [N, 5].
// ToyMpModel: the same layers split over two devices (model parallelism): net1 lives on
// dev0, net2 on dev1, and forward moves the activation [N, 10] from dev0 to dev1 with the
// differentiable to_device op, so the backward pass moves its gradient back.
// Read next: parallel/dp/data_parallel.h, which replicates ToyModel per device.
#pragma once
#include <memory>

#include "framework/nn/layers.h"

namespace dplab::models {

class ToyModel : public nn::Module {
 public:
  ToyModel();
  Tensor forward(const Tensor& x) override;  // [N, 10] -> [N, 5]
  std::string name() const override { return "ToyModel"; }
  std::shared_ptr<nn::Module> make_empty_copy() const override;

  std::shared_ptr<nn::Linear> net1;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::Linear> net2;
};

class ToyMpModel : public nn::Module {
 public:
  ToyMpModel(Device dev0, Device dev1);
  // x on any device -> [N, 5] on dev1
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ToyMpModel"; }
  std::shared_ptr<nn::Module> make_empty_copy() const override;

  Device dev0, dev1;
  std::shared_ptr<nn::Linear> net1;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::Linear> net2;
};

}  // namespace dplab::models
