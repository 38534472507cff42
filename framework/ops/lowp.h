// lowp.h: how ops handle 16-bit floats (float16, bfloat16). The rule throughout dplab:
// store in 16 bits, compute in float32. Three ways, from cheapest to most general:
//  - elementwise ops and GEMMs convert their operands to float32 inside the op (a scratch
//    copy, freed at once), compute, and round the result to 16 bits; what backward saves
//    stays 16-bit (elementwise.cpp, matmul.cpp via Backend::gemm_lowp);
//  - ops whose backward saves nothing large (reductions, pooling, losses, softmax, norms)
//    run their float32 version between two differentiable casts (needs_float32 below);
//  - conv2d, which would otherwise save a float32 copy of its input, runs its float32
//    version under a checkpoint (autograd/checkpoint.h): it saves its 16-bit inputs and
//    recomputes the float32 forward in backward (one more forward per conv; conv2d_lowp).
// Read next: autocast.h.
#pragma once
#include <optional>
#include <vector>

#include "framework/tensor/tensor.h"

namespace dplab {

// nullopt when no input is 16-bit; else the dtype the op's result has (the promotion of
// its floating inputs: float16 alone stays float16, float16 with float32 gives float32).
std::optional<DType> lowp_result_dtype(const std::vector<Tensor>& inputs);

// The second way, for the ops of autocast's float32 list (softmax, the losses, the norms):
// needs_float32 says whether the op must cast its inputs up first (one of them is 16-bit, or
// autocast is on), and float32_op_result what its result is cast back to: the inputs' dtype
// outside autocast, float32 inside it (autocast.h).
bool needs_float32(const std::vector<Tensor>& inputs);
DType float32_op_result(const std::vector<Tensor>& inputs);

// A copy of t in dtype `to`, outside autograd (the scratch copies of the first way).
Tensor raw_cast(const Tensor& t, DType to);

// Conv2d on 16-bit tensors (the third way); out in `out_dtype`.
Tensor conv2d_lowp(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
                   int64_t padding, DType out_dtype);

}  // namespace dplab
