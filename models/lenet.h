// lenet.h: a LeNet-style CNN for [N, 1, 28, 28] images (Fashion-MNIST).
//   conv1 5x5 1->16 pad 2 -> ReLU -> maxpool 2   [N, 16, 14, 14]
//   conv2 5x5 16->32 pad 2 -> ReLU -> maxpool 2  [N, 32, 7, 7]
//   flatten -> fc 1568 -> 10                     [N, 10]
// Parameters: conv1 16*1*25+16 = 416, conv2 32*16*25+32 = 12,832, fc 1568*10+10 = 15,690;
// 28,938 in all, 8x fewer than the MLP, and usually more accurate.
// forward() runs each conv -> ReLU -> maxpool as one op (ops.h: conv2d_relu_max_pool2d),
// the same numbers without the full-size convolution output; the modules stay, for
// tutorial 03's step-by-step run and for printing the model.
// Read next: resnet.h.
#pragma once
#include <memory>

#include "framework/nn/layers.h"

namespace dplab::models {

class LeNet : public nn::Module {
 public:
  explicit LeNet(int64_t num_classes = 10);
  Tensor forward(const Tensor& x) override;  // [N, 1, 28, 28] -> [N, num_classes]
  std::string name() const override { return "LeNet"; }
  std::shared_ptr<nn::Module> make_empty_copy() const override;

  int64_t num_classes;
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::MaxPool2d> pool;
  std::shared_ptr<nn::Flatten> flatten;
  std::shared_ptr<nn::Linear> fc;
};

}  // namespace dplab::models
