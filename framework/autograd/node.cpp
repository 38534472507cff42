// node.cpp: graph nodes, the leaf sink (AccumulateGrad) and how a tensor finds its edge.
#include "framework/autograd/node.h"

#include <atomic>
#include <mutex>

#include "framework/autograd/grad_mode.h"
#include "framework/ops/ops.h"

namespace dplab {
namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
}

Node::Node(std::string name, std::vector<std::shared_ptr<Node>> next, BackwardFn fn)
    : name_(std::move(name)), next_(std::move(next)), fn_(std::move(fn)),
      sequence_nr_(g_next_sequence_nr.fetch_add(1)) {}

std::vector<Tensor> Node::apply(const Tensor& grad_output) {
  DPLAB_CHECK(!released_,
              "backward through {} a second time: its saved tensors were freed by the first "
              "backward; pass retain_graph=true to the first backward() to keep them",
              name_);
  return fn_(grad_output);
}

void Node::release() {
  fn_ = nullptr;  // drops the captured (saved) tensors now, not when the graph dies
  released_ = true;
}

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf)
    : Node("AccumulateGrad", {}, nullptr), leaf_(std::move(leaf)) {
  leaf_sink_ = true;
}

// The one place gradients land in .grad:
//   1. tensor hooks may replace the incoming gradient,
//   2. .grad = g the first time (g itself when nobody else holds it, else a copy),
//      .grad += g afterwards, in place, so views of .grad (DDP buckets) stay valid,
//   3. post-accumulate hooks fire: the gradient is final for this backward.
std::vector<Tensor> AccumulateGrad::apply(const Tensor& grad_output) {
  Tensor g = grad_output;
  for (auto& hook : leaf_->leaf_hooks) {
    Tensor replaced = hook(g);
    if (replaced.defined()) g = replaced;
  }
  Tensor param(leaf_);
  if (!leaf_->grad) {
    bool sole_owner = g.impl_ptr().use_count() <= 2 && g.impl().storage.use_count() == 1;
    leaf_->grad = sole_owner ? g.detach().impl_ptr() : g.detach().clone().impl_ptr();
  } else {
    Tensor(leaf_->grad).add_(g);
  }
  for (auto& hook : leaf_->post_accumulate_hooks) hook(param);
  return {};
}

std::shared_ptr<Node> gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return nullptr;
  if (t.grad_fn()) return t.grad_fn();
  static std::mutex m;  // replicas in threads may reach the same leaf
  std::lock_guard lock(m);
  TensorImpl& impl = t.impl();
  if (auto acc = impl.grad_accumulator.lock()) return acc;
  auto acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
  impl.grad_accumulator = acc;
  return acc;
}

}  // namespace dplab
