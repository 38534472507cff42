// checkpoint.cpp: the checkpoint node. Forward: fn under NoGradGuard, one node whose
// edges are the inputs'. Backward (this node's apply): restore the random state, run fn
// again with recording on over detached copies of the inputs, back-propagate the incoming
// gradient through that graph (a backward inside the backward, which the engine allows),
// and hand the inputs' gradients on. Parameters inside fn get theirs from the inner pass.
// Read next: nn/grad_checkpoint.cpp (checkpoint_sequential).
#include "framework/autograd/checkpoint.h"

#include <mutex>

#include "framework/autograd/engine.h"
#include "framework/autograd/grad_mode.h"
#include "framework/autograd/node.h"
#include "framework/error.h"
#include "framework/tensor/random.h"

namespace dplab {
namespace {

Generator rng_now() {
  std::lock_guard lock(default_generator_mutex());
  return default_generator();
}
void set_rng(const Generator& g) {
  std::lock_guard lock(default_generator_mutex());
  default_generator() = g;
}

struct GradEnabledGuard {
  GradEnabledGuard() : prev(grad_enabled()) { set_grad_enabled(true); }
  ~GradEnabledGuard() { set_grad_enabled(prev); }
  bool prev;
};

}  // namespace

Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                  bool preserve_rng_state) {
  for (size_t i = 0; i < inputs.size(); ++i)
    DPLAB_CHECK(inputs[i].defined(), "checkpoint: input {} is undefined", i);
  if (!grad_enabled()) return fn(inputs);  // evaluation: nothing would be kept anyway
  const Generator rng = rng_now();
  Tensor out;
  {
    NoGradGuard no_grad;  // the point: nothing inside fn saves anything for backward
    out = fn(inputs);
  }
  DPLAB_CHECK(out.defined(), "checkpoint: fn returned an undefined tensor");
  std::vector<std::shared_ptr<Node>> next;
  for (const Tensor& t : inputs) next.push_back(gradient_edge(t));
  // The node keeps the inputs (the only activations a checkpoint saves) and fn.
  auto backward = [fn, inputs, rng, preserve_rng_state](const Tensor& grad_out) {
    std::vector<Tensor> detached;
    for (const Tensor& t : inputs) {
      Tensor d = t.detach();
      if (t.requires_grad()) d.requires_grad_();
      detached.push_back(d);
    }
    Tensor again;
    {
      const Generator after = rng_now();
      if (preserve_rng_state) set_rng(rng);  // dropout draws the masks of the forward
      GradEnabledGuard record;
      again = fn(detached);
      set_rng(after);  // and the generator goes on from where the training left it
    }
    if (again.requires_grad()) run_backward(again, grad_out, false);
    std::vector<Tensor> grads;
    for (const Tensor& d : detached) grads.push_back(d.requires_grad() ? d.grad() : Tensor());
    return grads;
  };
  out.impl().grad_fn =
      std::make_shared<Node>("CheckpointBackward", std::move(next), std::move(backward));
  out.impl().requires_grad = true;
  return out;
}

}  // namespace dplab
