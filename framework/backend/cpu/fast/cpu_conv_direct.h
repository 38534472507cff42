// cpu_conv_direct.h: which convolution the CPU runs. Direct (cpu_conv_direct.cpp: no im2col
// columns, a register-blocked kernel over a channels-last copy of each image) is the default;
// im2col + GEMM (ops/nn_conv.cpp over cpu_conv_pool.cpp) is the readable reference the
// direct kernels are tested against, and what runs where the direct path declines (the input
// gradient of a strided convolution, padding wider than the kernel, empty tensors).
// DPLAB_CONV=im2col or direct chooses at start-up, as does set_conv_algorithm() (tests run
// both and compare). The instruction set follows the GEMM's (cpu_isa.h). Process-wide: change
// it only while no convolution runs. In cpu_conv_direct.cpp.
#pragma once
#include <string>

namespace dplab {

enum class ConvAlgorithm { Im2col, Direct };

ConvAlgorithm conv_algorithm();
void set_conv_algorithm(ConvAlgorithm a);
const char* conv_algorithm_name(ConvAlgorithm a);  // "im2col" or "direct"
// "im2col" or "direct" -> the ConvAlgorithm; throws Error naming both otherwise.
ConvAlgorithm parse_conv_algorithm(const std::string& name);

}  // namespace dplab
