// models.cpp: make_model (see models.h).
#include "models/models.h"

#include "models/lenet.h"
#include "models/mlp.h"
#include "models/resnet.h"
#include "models/toy.h"

namespace dplab::models {

std::vector<std::string> model_names() { return {"mlp", "cnn", "resnet", "toy", "wide_mlp"}; }

std::shared_ptr<nn::Module> make_model(const std::string& name) {
  if (name == "mlp") return std::make_shared<MLP>();
  if (name == "cnn") return std::make_shared<LeNet>();
  if (name == "resnet") return std::make_shared<ResNet>();
  if (name == "toy") return std::make_shared<ToyModel>();
  if (name == "wide_mlp") return std::make_shared<MLP>(784, std::vector<int64_t>{4096, 4096}, 10);
  std::string known;
  for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  DPLAB_FAIL("make_model: unknown model \"{}\"; expected one of: {}", name, known);
}

}  // namespace dplab::models
