// lenet.cpp: LeNet (see lenet.h). relu and pool hold no state, so one instance of each
// serves both stages.
#include "models/lenet.h"

#include "framework/ops/ops.h"

namespace dplab::models {

LeNet::LeNet(int64_t classes) : num_classes(classes) {
  conv1 = register_module("conv1",
                          std::make_shared<nn::Conv2d>(1, 16, 5, nn::Conv2dOptions{.padding = 2}));
  conv2 = register_module("conv2",
                          std::make_shared<nn::Conv2d>(16, 32, 5, nn::Conv2dOptions{.padding = 2}));
  relu = register_module("relu", std::make_shared<nn::ReLU>());
  pool = register_module("pool", std::make_shared<nn::MaxPool2d>(2));
  flatten = register_module("flatten", std::make_shared<nn::Flatten>());
  fc = register_module("fc", std::make_shared<nn::Linear>(32 * 7 * 7, num_classes));
}

Tensor LeNet::forward(const Tensor& x) {
  DPLAB_CHECK(x.dim() == 4 && x.size(1) == 1 && x.size(2) == 28 && x.size(3) == 28,
              "LeNet: expected input [N, 1, 28, 28], got {}", shape_str(x.shape()));
  // pool(relu(conv(h))) for each stage, as one op (ops.h: conv2d_relu_max_pool2d), which
  // computes the same numbers without writing the full-size convolution output on the CPU.
  // Tutorial 03 runs the stages unfused, module by module.
  auto stage = [&](const nn::Conv2d& conv, const Tensor& h) {
    return conv2d_relu_max_pool2d(h, conv.weight, conv.bias, conv.options.stride,
                                  conv.options.padding);
  };
  Tensor h = stage(*conv1, x);              // [N, 16, 14, 14]
  h = stage(*conv2, h);                     // [N, 32, 7, 7]
  return fc->forward(flatten->forward(h));  // [N, 1568] -> [N, 10]
}

std::shared_ptr<nn::Module> LeNet::make_empty_copy() const {
  return std::make_shared<LeNet>(num_classes);
}

}  // namespace dplab::models
