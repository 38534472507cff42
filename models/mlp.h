// mlp.h: the multilayer perceptron for 28x28 images, 784-256-128-10 with ReLU between.
// It is a Sequential (children "0".."4": Linear, ReLU, Linear, ReLU, Linear), so its
// state_dict keys are PyTorch's for nn.Sequential: 0.weight, 0.bias, 2.weight, ...
// forward flattens [N, 1, 28, 28] (or any [N, ...]) to [N, 784] first.
// Parameters: 784*256+256 + 256*128+128 + 128*10+10 = 235,146.
// Read next: lenet.h, models.h (make_model).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "framework/nn/layers.h"

namespace dplab::models {

class MLP : public nn::Sequential {
 public:
  explicit MLP(int64_t in_features = 784, std::vector<int64_t> hidden = {256, 128},
               int64_t num_classes = 10);
  Tensor forward(const Tensor& x) override;  // x: [N, ...] with in_features values per row
  std::string name() const override { return "MLP"; }
  std::shared_ptr<nn::Module> make_empty_copy() const override;

  int64_t in_features, num_classes;
  std::vector<int64_t> hidden;
};

// `depth` blocks of Linear(width, width) + ReLU: the deep, uniform net whose activation
// memory gradient checkpointing is measured on (tutorial 19 and its test).
std::shared_ptr<nn::Sequential> linear_relu_stack(int depth, int64_t width);

}  // namespace dplab::models
