// checkpoint.h: gradient checkpointing (torch.utils.checkpoint), trading compute for memory.
// An autograd node like any other, so ops use it too (ops/lowp.cpp's 16-bit conv2d);
// checkpoint_sequential, for a whole nn::Sequential, is in nn/grad_checkpoint.h.
//
// Backward needs what forward saved: every Linear keeps its input, every ReLU its output, so a
// deep network holds all its activations until backward reaches them. checkpoint(fn, x) runs
// fn with recording off, so nothing inside is kept but the inputs; its backward runs fn again
// (with the random state restored, so dropout draws the same masks), this time recording, and
// back-propagates through that fresh graph. Gradients are exactly those without it.
//   Tensor y = checkpoint([&](const Tensor& h) { return block->forward(h); }, x);
// Cost: one more forward of every checkpointed segment per step; memory: its inputs only.
// Parameters used inside fn receive their gradients during the recomputation's backward, so
// the output needs a gradient whenever grad mode is on, even if x does not require one.
// Read next: checkpoint.cpp, nn/grad_checkpoint.h, tutorials/19_gradient_checkpointing.md.
#pragma once
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include "framework/tensor/tensor.h"

namespace dplab {

using CheckpointFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

// Runs fn(inputs) keeping no activations inside; backward recomputes them. preserve_rng_state:
// restore the default generator to its state at the forward before recomputing (dropout).
Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                  bool preserve_rng_state = true);

namespace detail {
template <typename Fn, size_t... I>
Tensor call_with(const Fn& fn, const std::vector<Tensor>& in, std::index_sequence<I...>) {
  return fn(in[I]...);
}
}  // namespace detail

// checkpoint(fn, a, b, ...) with fn(const Tensor& a, const Tensor& b, ...).
template <typename Fn, typename... Ts>
requires(sizeof...(Ts) > 0 && (std::is_same_v<Ts, Tensor> && ...)) Tensor
    checkpoint(Fn fn, const Ts&... inputs) {
  CheckpointFn packed = [fn](const std::vector<Tensor>& in) {
    return detail::call_with(fn, in, std::index_sequence_for<Ts...>{});
  };
  return checkpoint(packed, std::vector<Tensor>{inputs...}, true);
}

}  // namespace dplab
