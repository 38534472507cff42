// checkpoint.cpp: splits a checkpoint into model and optimizer parts and back. The work of
// reading and writing bytes is safetensors.cpp's; this file only names things.
// Read next: safetensors.cpp.
#include "framework/io/checkpoint.h"

#include <string_view>

#include "framework/io/safetensors.h"

namespace dplab {

namespace {
bool has_optim_prefix(std::string_view key) { return key.starts_with(kOptimPrefix); }
}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer* optimizer,
                     Metadata extra) {
  StateDict all = model.state_dict();
  for (const auto& [name, t] : all)
    DPLAB_CHECK(!has_optim_prefix(name),
                "save_checkpoint: model key \"{}\" starts with \"{}\", which checkpoints reserve for the optimizer",
                name, kOptimPrefix);
  Metadata meta;
  meta["format"] = "pt";  // PyTorch's layout and names; Hugging Face loaders check this key
  if (optimizer != nullptr) {
    StateDict opt_tensors;
    Metadata opt_meta;
    optimizer->state_dict(opt_tensors, opt_meta);
    for (const auto& [name, t] : opt_tensors) all.insert(kOptimPrefix + name, t);
    for (auto& [k, v] : opt_meta) meta[k] = v;
  }
  for (auto& [k, v] : extra) {
    DPLAB_CHECK(!has_optim_prefix(k) || meta.count(k) == 0,
                "save_checkpoint: extra metadata key \"{}\" collides with the optimizer's", k);
    meta[k] = v;  // "format" may be overridden by the caller on purpose
  }
  save_safetensors(path, all, meta);
}

Metadata load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer* optimizer,
                         Device map_location) {
  Loaded file = load_safetensors(path, map_location);
  StateDict model_sd, optim_sd;
  for (const auto& [name, t] : file.tensors) {
    if (has_optim_prefix(name))
      optim_sd.insert(name.substr(std::string_view(kOptimPrefix).size()), t);
    else
      model_sd.insert(name, t);
  }
  model.load_state_dict(model_sd, /*strict=*/true);
  // Without an optimizer the optim.* tensors are simply not used: a model-only load
  // (evaluation, fine-tuning) is common.
  if (optimizer == nullptr) return file.metadata;
  DPLAB_CHECK(file.metadata.count("optim.type") != 0,
              "load_checkpoint(\"{}\"): an optimizer was passed but the file holds no optimizer state "
              "(no \"optim.type\" in its metadata; was it saved without one, or by Python?)", path);
  optimizer->load_state_dict(optim_sd, file.metadata);
  return file.metadata;
}

}  // namespace dplab
