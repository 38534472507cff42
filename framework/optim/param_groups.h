// param_groups.h: torch.optim's param_groups, the part GPT training needs: parameters in
// groups, each with its own weight decay. nanoGPT decays the matrices (Linear and embedding
// weights, >= 2-D) and not the vectors (biases, LayerNorm's gain and shift): shrinking a
// norm's gain towards 0 only fights the normalisation, and a bias has nothing to regularise.
//   auto groups = optim::decay_groups(*model, 0.1);   // {>= 2-D: 0.1}, {1-D: 0}
//   optim::AdamW opt(groups, {.lr = 6e-4, .betas = {0.9, 0.95}});
// Read next: adam.h (how a group's decay is used), clip_grad.h.
#pragma once
#include <optional>
#include <vector>

#include "framework/tensor/tensor.h"

namespace dplab::nn {
class Module;
}

namespace dplab::optim {

struct ParamGroup {
  std::vector<Tensor> params;
  // Unset: the optimizer's options' weight_decay (PyTorch's defaults for a group's
  // missing keys).
  std::optional<double> weight_decay = std::nullopt;
};

// Two groups, in this order: {parameters with dim() >= 2, weight_decay} and
// {parameters with dim() < 2, 0}. Parameters that do not require a gradient (frozen) are
// left out, as nanoGPT does; each parameter appears once (a tied weight is one tensor).
std::vector<ParamGroup> decay_groups(const std::vector<Tensor>& params, double weight_decay);
std::vector<ParamGroup> decay_groups(const nn::Module& module, double weight_decay);

}  // namespace dplab::optim
