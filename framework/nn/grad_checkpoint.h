// grad_checkpoint.h: gradient checkpointing for modules: checkpoint (autograd/checkpoint.h)
// and checkpoint_sequential, which checkpoints a Sequential in segments.
//   Tensor y = checkpoint([&](const Tensor& h) { return block->forward(h); }, x);
//   Tensor y = checkpoint_sequential(*mlp, 4, x);   // 4 segments, each recomputed in backward
// For L equal layers in S segments, the S segment inputs stay alive, plus one segment's L/S
// layers of activations while it is recomputed: least near S = sqrt(L) (Chen et al., 2016).
// Read next: autograd/checkpoint.h, tutorials/19_gradient_checkpointing.md.
#pragma once
#include "framework/autograd/checkpoint.h"
#include "framework/nn/layers.h"

namespace dplab {

// Splits seq's children into `segments` runs of ceil(size / segments) and checkpoints every
// run but the last (its activations are needed at once by backward anyway), like PyTorch's.
// segments = 0 runs seq plainly. Throws on segments < 0 or more segments than children.
Tensor checkpoint_sequential(nn::Sequential& seq, int segments, const Tensor& x);

}  // namespace dplab
