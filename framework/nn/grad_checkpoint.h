// grad_checkpoint.h: gradient checkpointing (torch.utils.checkpoint), trading compute for memory.
//
// Backward needs what forward saved: every Linear keeps its input, every ReLU its output, so a
// deep network holds all its activations until backward reaches them. checkpoint(fn, x) runs
// fn with recording off, so nothing inside is kept but the inputs; its backward runs fn again
// (with the random state restored, so dropout draws the same masks), this time recording, and
// back-propagates through that fresh graph. Gradients are exactly those without it.
//   Tensor y = checkpoint([&](const Tensor& h) { return block->forward(h); }, x);
//   Tensor y = checkpoint_sequential(*mlp, 4, x);   // 4 segments, each recomputed in backward
// Cost: one more forward of every checkpointed segment per step. Memory: for L equal layers in
// S segments, the S segment inputs stay alive, plus one segment's L/S layers of activations
// while it is recomputed: least near S = sqrt(L) (Chen et al., 2016).
// Parameters used inside fn receive their gradients during the recomputation's backward, so
// the output needs a gradient whenever grad mode is on, even if x does not require one.
// Read next: tutorials/19_gradient_checkpointing.md.
#pragma once
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include "framework/nn/layers.h"

namespace dplab {

using CheckpointFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

// Runs fn(inputs) keeping no activations inside; backward recomputes them. preserve_rng_state:
// restore the default generator to its state at the forward before recomputing (dropout).
Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs, bool preserve_rng_state = true);

namespace detail {
template <typename Fn, size_t... I>
Tensor call_with(const Fn& fn, const std::vector<Tensor>& in, std::index_sequence<I...>) {
  return fn(in[I]...);
}
}  // namespace detail

// checkpoint(fn, a, b, ...) with fn(const Tensor& a, const Tensor& b, ...).
template <typename Fn, typename... Ts>
  requires(sizeof...(Ts) > 0 && (std::is_same_v<Ts, Tensor> && ...))
Tensor checkpoint(Fn fn, const Ts&... inputs) {
  CheckpointFn packed = [fn](const std::vector<Tensor>& in) {
    return detail::call_with(fn, in, std::index_sequence_for<Ts...>{});
  };
  return checkpoint(packed, std::vector<Tensor>{inputs...}, true);
}

// Splits seq's children into `segments` runs of ceil(size / segments) and checkpoints every
// run but the last (its activations are needed at once by backward anyway), like PyTorch's.
// segments = 0 runs seq plainly. Throws on segments < 0 or more segments than children.
Tensor checkpoint_sequential(nn::Sequential& seq, int segments, const Tensor& x);

}  // namespace dplab
