// models.h: every model of dplab by name, for programs that take --model on the command line.
//   make_model("mlp")     MLP 784-256-128-10             (mlp.h)
//   make_model("cnn")     LeNet-style CNN                (lenet.h)
//   make_model("resnet")  small ResNet with BatchNorm    (resnet.h)
//   make_model("toy")     ToyModel 10-10-5               (toy.h)
//   make_model("wide_mlp") MLP 784-4096-4096-10: 20,037,642 parameters, 80 MB (Adam: +160 MB
//                         of state), where ZeRO's memory savings show (tutorials/18_zero.md)
// All are built on cpu:0 from the default generator: manual_seed first for reproducibility.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "framework/nn/module.h"

namespace dplab::models {

std::vector<std::string> model_names();  // {"mlp", "cnn", "resnet", "toy"}
// Throws Error listing model_names() for an unknown name.
std::shared_ptr<nn::Module> make_model(const std::string& name);

}  // namespace dplab::models
