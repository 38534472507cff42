// engine.h: backward(). Reverse-mode automatic differentiation over the Node graph.
//
// The walk: find every node reachable from the root and count, for each, how many edges
// point at it (its dependencies). Start from the root with the given gradient; a node runs
// when all its dependencies have delivered, their gradients summed. Among ready nodes, the
// most recently created runs first (highest sequence number), leaf sinks before everything
// else, so gradients become final in reverse order of use: what DDP's bucketing expects.
// An explicit stack and queue, never recursion: deep graphs would overflow the C++ stack.
// Read next: ops/make_result.h.
#pragma once
#include <functional>
#include <unordered_set>

#include "framework/tensor/tensor.h"

namespace dplab {

// grad: gradient of root (undefined means ones for a one-element root).
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

// Schedules fn to run once the current backward pass has finished (DDP waits for its
// buckets there). Throws when called outside a backward pass.
void queue_backward_callback(std::function<void()> fn);
bool in_backward();

class Node;
// Every node a backward from `root` would reach (root's grad_fn, the nodes below it, the
// leaves' AccumulateGrad sinks), found without running anything. DDP's
// find_unused_parameters walks from the forward's output with it: a parameter whose sink
// is not reached will get no gradient, so its bucket need not wait for it.
std::unordered_set<const Node*> reachable_nodes(const Tensor& root);

}  // namespace dplab
