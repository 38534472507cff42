// node.h: one step of the backward graph.
// Every differentiable op result holds a Node (its grad_fn). A Node has exactly one output
// (ops with several outputs, like chunk, make one Node per output), the edges to the nodes of
// its inputs, and a closure that maps the gradient of its output to one gradient per input
// (micrograd's idea; the closure captures what forward saved). Leaves get an AccumulateGrad
// node that adds into .grad. The engine (engine.h) walks these nodes in reverse topological
// order.
// Read next: engine.h, ops/make_result.h.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/tensor/tensor.h"

namespace dplab {

// Returns one gradient per input edge, in order; an undefined Tensor means "no gradient".
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

class Node {
 public:
  Node(std::string name, std::vector<std::shared_ptr<Node>> next, BackwardFn fn);
  virtual ~Node() = default;

  const std::string& name() const { return name_; }
  // Edges to the nodes of the inputs; nullptr where an input needs no gradient.
  const std::vector<std::shared_ptr<Node>>& next() const { return next_; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  bool is_leaf_sink() const { return leaf_sink_; }  // an AccumulateGrad

  // Runs the closure. Throws if the graph was freed by an earlier backward.
  virtual std::vector<Tensor> apply(const Tensor& grad_output);
  // Frees what forward saved (called after apply unless retain_graph).
  virtual void release();
  bool released() const { return released_; }

  // Tensor hooks of the non-leaf output (Tensor::register_hook), run before apply.
  std::vector<TensorHook> pre_hooks;
  // Non-leaf output whose .grad should be kept (Tensor::retain_grad).
  std::weak_ptr<TensorImpl> retained_output;

 protected:
  std::string name_;
  std::vector<std::shared_ptr<Node>> next_;
  BackwardFn fn_;
  uint64_t sequence_nr_;
  bool released_ = false;
  bool leaf_sink_ = false;
};

// The sink of a leaf: runs its hooks, adds into .grad, then fires its
// post-accumulate ("gradient is final") hooks. One per leaf, shared by all uses.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  std::vector<Tensor> apply(const Tensor& grad_output) override;
  void release() override {}  // a leaf's sink stays usable across backward calls

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// The node a leaf's gradient flows into (made once, then shared), or the grad_fn of a
// non-leaf. nullptr for tensors that do not require grad.
std::shared_ptr<Node> gradient_edge(const Tensor& t);

}  // namespace dplab
