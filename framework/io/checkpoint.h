// checkpoint.h: a training checkpoint = model + optimizer + epoch, in one safetensors file.
//   save_checkpoint("ckpt.safetensors", *model, &opt, {{"epoch", "3"}});
//   Metadata meta = load_checkpoint("ckpt.safetensors", *model, &opt, Device("cpu:1"));
// Layout inside the file (see safetensors.h for the bytes):
//   model tensors under their state_dict names     "fc1.weight", "0.bias", "bn.running_mean"
//   optimizer tensors under "optim." + their name  "optim.state.0.momentum_buffer"
//   __metadata__: "format":"pt" (PyTorch layout, what HF tools expect), the optimizer's
//   "optim.*" keys, and the caller's extra keys ("epoch", "step", ...).
// So a model-only file written by Python's safetensors.torch.save_file(model.state_dict())
// loads here (no optim keys needed), and our files load in Python with load_file().
// Read next: safetensors.h.
#pragma once
#include <string>

#include "framework/nn/module.h"
#include "framework/optim/optimizer.h"

namespace dplab {

namespace amp {
class GradScaler;
}

inline constexpr const char* kOptimPrefix = "optim.";

// Atomic (temp file + fsync + rename). Throws, writing nothing, if a model key starts with
// "optim." or an extra metadata key collides with the optimizer's.
void save_checkpoint(const std::string& path, const nn::Module& model,
                     const optim::Optimizer* optimizer = nullptr, Metadata extra = {});

// Reads the file with tensors placed on map_location and loads the model strictly (missing,
// unexpected or mis-shaped keys: one error listing them), the optimizer if one is given
// (the file must then hold optimizer state: "optim.type" in its metadata) and the scaler's
// "scaler.*" keys if a scaler is given (saved with scaler.state_dict(extra)). State that
// could only train into NaN is refused, naming it: optimizer state that is not finite (a NaN
// momentum), a scale outside float32's normal range (1e-45). All or nothing: everything is
// checked before anything is changed, so a refused file leaves the model, the optimizer and
// the scaler as they were. The model's and optimizer's tensors
// keep their own devices: values are copied into them.
// Returns all metadata (epoch, step, optim.*, format) for the caller to resume from.
Metadata load_checkpoint(const std::string& path, nn::Module& model,
                         optim::Optimizer* optimizer = nullptr, Device map_location = Device("cpu"),
                         amp::GradScaler* scaler = nullptr);

}  // namespace dplab
