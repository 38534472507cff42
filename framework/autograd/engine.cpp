// engine.cpp: the backward pass (see engine.h for the walk).
#include "framework/autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "framework/autograd/grad_mode.h"
#include "framework/autograd/node.h"
#include "framework/ops/ops.h"

namespace dplab {
namespace {

// Callbacks queued during the current backward; a stack because a backward may run
// inside another one (DataParallel's replicas).
thread_local std::vector<std::vector<std::function<void()>>> t_callbacks;

struct CallbackScope {
  CallbackScope() { t_callbacks.emplace_back(); }
  ~CallbackScope() { t_callbacks.pop_back(); }
};

// Counts, for every node reachable from root, how many edges point at it.
std::unordered_map<Node*, int> count_dependencies(Node* root) {
  std::unordered_map<Node*, int> deps;
  std::unordered_set<Node*> seen{root};
  std::vector<Node*> stack{root};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const auto& next : n->next()) {
      if (!next) continue;
      ++deps[next.get()];
      if (seen.insert(next.get()).second) stack.push_back(next.get());
    }
  }
  return deps;
}

// Leaf sinks first (their gradients become final early, which DDP overlaps with), then
// the most recently created node.
struct ReadyOrder {
  bool operator()(const Node* a, const Node* b) const {
    if (a->is_leaf_sink() != b->is_leaf_sink()) return b->is_leaf_sink();
    return a->sequence_nr() < b->sequence_nr();
  }
};

void accumulate(std::unordered_map<Node*, Tensor>& grads, Node* n, const Tensor& g) {
  auto it = grads.find(n);
  if (it == grads.end()) grads.emplace(n, g);
  else it->second = add(it->second, g);
}

}  // namespace

void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph) {
  DPLAB_CHECK(root.requires_grad(),
              "backward(): the tensor does not require grad and has no grad_fn (did an input "
              "call requires_grad_()? was it computed under NoGradGuard?)");
  Tensor root_grad = grad;
  if (!root_grad.defined()) {
    DPLAB_CHECK(root.numel() == 1,
                "backward(): a gradient can be created implicitly only for one-element outputs; "
                "this one has shape {}: pass the gradient explicitly",
                shape_str(root.shape()));
    root_grad = ones(root.shape(), root.options());
  }
  DPLAB_CHECK(root_grad.shape() == root.shape() && root_grad.device() == root.device(),
              "backward(): gradient must match the output: expected {} on {}, got {} on {}",
              shape_str(root.shape()), root.device(), shape_str(root_grad.shape()),
              root_grad.device());

  NoGradGuard no_grad;  // backward formulas are not themselves recorded
  CallbackScope callbacks;
  std::shared_ptr<Node> root_node = gradient_edge(root);
  auto deps = count_dependencies(root_node.get());
  std::unordered_map<Node*, Tensor> grads{{root_node.get(), root_grad}};
  std::priority_queue<Node*, std::vector<Node*>, ReadyOrder> ready;
  ready.push(root_node.get());

  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    Tensor g;
    if (auto it = grads.find(node); it != grads.end()) {
      g = std::move(it->second);
      grads.erase(it);  // this gradient buffer is free once the node has consumed it
    }
    std::vector<Tensor> outs;
    if (g.defined()) {
      for (auto& hook : node->pre_hooks) {
        Tensor replaced = hook(g);
        if (replaced.defined()) g = replaced;
      }
      if (auto kept = node->retained_output.lock()) kept->grad = g.clone().impl_ptr();
      outs = node->apply(g);
      if (!retain_graph) node->release();
    }
    // A node that received no gradient still releases its inputs' dependency counts,
    // or nodes below it, reachable by another path, would never become ready.
    const auto& next = node->next();
    DPLAB_CHECK(outs.empty() || outs.size() == next.size(),
                "internal: {} returned {} gradients for {} inputs", node->name(), outs.size(),
                next.size());
    for (size_t i = 0; i < next.size(); ++i) {
      Node* n = next[i].get();
      if (!n) continue;
      if (!outs.empty() && outs[i].defined()) accumulate(grads, n, outs[i]);
      if (--deps[n] == 0) ready.push(n);
    }
  }

  // DDP: wait for buckets, copy averaged grads. By index: a callback may queue another.
  for (size_t i = 0; i < t_callbacks.back().size(); ++i) {
    auto fn = t_callbacks.back()[i];
    fn();
  }
}

void queue_backward_callback(std::function<void()> fn) {
  DPLAB_CHECK(!t_callbacks.empty(), "queue_backward_callback(): not inside a backward pass");
  t_callbacks.back().push_back(std::move(fn));
}

bool in_backward() { return !t_callbacks.empty(); }

std::unordered_set<const Node*> reachable_nodes(const Tensor& root) {
  std::unordered_set<const Node*> seen;
  std::shared_ptr<Node> start = gradient_edge(root);
  if (!start) return seen;  // nothing requires grad: no parameter is used
  std::vector<const Node*> stack{start.get()};
  seen.insert(start.get());
  while (!stack.empty()) {  // depth-first, an explicit stack as in count_dependencies
    const Node* n = stack.back();
    stack.pop_back();
    for (const auto& next : n->next())
      if (next && seen.insert(next.get()).second) stack.push_back(next.get());
  }
  return seen;
}

}  // namespace dplab
