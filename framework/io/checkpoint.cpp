// checkpoint.cpp: splits a checkpoint into model and optimizer parts and back. The work of
// reading and writing bytes is safetensors.cpp's; this file only names things.
// Read next: safetensors.cpp.
#include "framework/io/checkpoint.h"

#include <string_view>

#include "framework/amp/grad_scaler.h"
#include "framework/io/safetensors.h"

namespace dplab {

namespace {
bool has_optim_prefix(std::string_view key) { return key.starts_with(kOptimPrefix); }

// The file's model tensors are exactly the model's: same names, shapes and dtypes (what
// Module::load_state_dict(strict) requires; it names the differences when they are not).
bool model_matches(const nn::Module& model, const StateDict& from_file) {
  const StateDict own = model.state_dict();
  if (own.size() != from_file.size()) return false;
  for (const auto& [name, t] : own) {
    if (!from_file.contains(name)) return false;
    const Tensor& f = from_file.at(name);
    if (f.shape() != t.shape() || f.dtype() != t.dtype()) return false;
  }
  return true;
}
}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& model,
                     const optim::Optimizer* optimizer, Metadata extra) {
  StateDict all = model.state_dict();
  for (const auto& [name, t] : all)
    DPLAB_CHECK(!has_optim_prefix(name),
                "save_checkpoint: model key \"{}\" starts with \"{}\", which checkpoints reserve "
                "for the optimizer",
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
                         Device map_location, amp::GradScaler* scaler) {
  Loaded file = load_safetensors(path, map_location);
  StateDict model_sd, optim_sd;
  for (const auto& [name, t] : file.tensors) {
    if (has_optim_prefix(name))
      optim_sd.insert(name.substr(std::string_view(kOptimPrefix).size()), t);
    else model_sd.insert(name, t);
  }
  // All or nothing: every part is checked before any part changes. The scaler and the model
  // are checked without loading; the optimizer's load checks everything before it commits,
  // so it runs after the checks that could still fail and before the model's copy (which,
  // checked, cannot). A refused file leaves model, optimizer and scaler as they were.
  auto in_file = [&](const std::string& msg) {
    return fmt::format("load_checkpoint(\"{}\"): {}", path, msg);
  };
  try {
    if (scaler != nullptr) amp::GradScaler::parse_state_dict(file.metadata);
    if (!model_matches(model, model_sd))
      model.load_state_dict(model_sd, /*strict=*/true);  // throws, copying nothing
    // Without an optimizer the optim.* tensors are simply not used: a model-only load
    // (evaluation, fine-tuning) is common.
    if (optimizer != nullptr) {
      DPLAB_CHECK(file.metadata.count("optim.type") != 0,
                  "an optimizer was passed but the file holds no optimizer state (no "
                  "\"optim.type\" in its metadata; was it saved without one, or by Python?)");
      optimizer->load_state_dict(optim_sd, file.metadata);
    }
  } catch (const Error& e) {
    throw Error(in_file(e.what()) + "; nothing was loaded");
  }
  model.load_state_dict(model_sd, /*strict=*/true);
  if (scaler != nullptr) scaler->load_state_dict(file.metadata);
  return file.metadata;
}

}  // namespace dplab
