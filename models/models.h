// models.h: every model of dplab by name, for programs that take --model on the command line.
//   make_model("mlp")     MLP 784-256-128-10             (mlp.h)
//   make_model("cnn")     LeNet-style CNN                (lenet.h)
//   make_model("resnet")  small ResNet with BatchNorm    (resnet.h)
//   make_model("toy")     ToyModel 10-10-5               (toy.h)
//   make_model("wide_mlp") MLP 784-4096-4096-10: 20,037,642 parameters, 80 MB (Adam: +160 MB
//                         of state), where ZeRO's memory savings show (tutorials/18_zero.md)
//   make_model("gpt")     byte-level GPT (gpt.h) of byte_gpt_config(): 3,257,856 parameters,
//                         12.4 MiB of float32 gradients, where bandwidth decides (tutorial 16)
// All are built on cpu:0 from the default generator: manual_seed first for reproducibility.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "framework/nn/module.h"
#include "models/gpt.h"

namespace dplab::models {

std::vector<std::string> model_names();  // {"mlp", "cnn", "resnet", "toy", "wide_mlp", "gpt"}
// Throws Error listing model_names() for an unknown name.
std::shared_ptr<nn::Module> make_model(const std::string& name);

// "gpt": a character-level GPT over bytes (vocabulary 256, datasets/text_corpus.h), 4 layers
// of 4 heads and 256 channels, a context of 128 bytes, no dropout. Its 3,257,856 parameters
// (12 x 256^2 + 13 x 256 per layer, 256 x 256 tied embedding, 128 x 256 positions, ln_f)
// make a 12.4 MiB gradient: large enough that a 10 Gbit/s link's bandwidth, not its
// latency, decides a data-parallel step (dplab-compare --model gpt).
GPTConfig byte_gpt_config();

}  // namespace dplab::models
