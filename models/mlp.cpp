// mlp.cpp: MLP (see mlp.h).
#include "models/mlp.h"

#include "framework/ops/ops.h"

namespace dplab::models {

MLP::MLP(int64_t in, std::vector<int64_t> hidden_, int64_t classes)
    : in_features(in), num_classes(classes), hidden(std::move(hidden_)) {
  int64_t width = in_features;
  for (int64_t h : hidden) {
    push_back(std::make_shared<nn::Linear>(width, h));
    push_back(std::make_shared<nn::ReLU>());
    width = h;
  }
  push_back(std::make_shared<nn::Linear>(width, num_classes));
}

Tensor MLP::forward(const Tensor& x) {
  DPLAB_CHECK(x.dim() >= 1 && x.numel() == x.size(0) * in_features,
              "MLP: expected input [N, ...] with {} values per sample, got {}", in_features,
              shape_str(x.shape()));
  return Sequential::forward(reshape(x, {x.size(0), in_features}));  // [N, ...] -> [N, in]
}

std::shared_ptr<nn::Module> MLP::make_empty_copy() const {
  return std::make_shared<MLP>(in_features, hidden, num_classes);
}

std::shared_ptr<nn::Sequential> linear_relu_stack(int depth, int64_t width) {
  auto seq = std::make_shared<nn::Sequential>();
  for (int i = 0; i < depth; ++i) {
    seq->push_back(std::make_shared<nn::Linear>(width, width));
    seq->push_back(std::make_shared<nn::ReLU>());
  }
  return seq;
}

}  // namespace dplab::models
