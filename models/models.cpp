// models.cpp: make_model (see models.h).
#include "models/models.h"

#include "models/lenet.h"
#include "models/mlp.h"
#include "models/resnet.h"
#include "models/toy.h"

namespace dplab::models {

GPTConfig byte_gpt_config() {
  return {.vocab_size = 256,
          .block_size = 128,
          .n_layer = 4,
          .n_head = 4,
          .n_embd = 256,
          .dropout = 0.0,
          .bias = true};
}

std::vector<std::string> model_names() {
  return {"mlp", "cnn", "resnet", "toy", "wide_mlp", "gpt"};
}

std::shared_ptr<nn::Module> make_model(const std::string& name) {
  if (name == "mlp") return std::make_shared<MLP>();
  if (name == "cnn") return std::make_shared<LeNet>();
  if (name == "resnet") return std::make_shared<ResNet>();
  if (name == "toy") return std::make_shared<ToyModel>();
  if (name == "wide_mlp") return std::make_shared<MLP>(784, std::vector<int64_t>{4096, 4096}, 10);
  if (name == "gpt") return std::make_shared<GPT>(byte_gpt_config());
  std::string known;
  for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  DPLAB_FAIL("make_model: unknown model \"{}\"; expected one of: {}", name, known);
}

}  // namespace dplab::models
