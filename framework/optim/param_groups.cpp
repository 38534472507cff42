// param_groups.cpp: splitting parameters into decayed and not decayed by their rank.
// Read next: adam.cpp.
#include "framework/optim/param_groups.h"

#include "framework/nn/module.h"

namespace dplab::optim {

std::vector<ParamGroup> decay_groups(const std::vector<Tensor>& params, double weight_decay) {
  ParamGroup decay{.params = {}, .weight_decay = weight_decay};
  ParamGroup no_decay{.params = {}, .weight_decay = 0.0};
  for (const Tensor& p : params) {
    if (!p.requires_grad()) continue;
    bool repeated = false;
    for (const ParamGroup* g : {&decay, &no_decay})
      for (const Tensor& q : g->params) repeated = repeated || q.is_same(p);
    if (repeated) continue;
    (p.dim() >= 2 ? decay : no_decay).params.push_back(p);
  }
  return {std::move(decay), std::move(no_decay)};
}

std::vector<ParamGroup> decay_groups(const nn::Module& module, double weight_decay) {
  return decay_groups(module.parameters(), weight_decay);
}

}  // namespace dplab::optim
