// cpu_isa.h: which CPU GEMM kernel runs: its build, AVX-512 or the baseline (AVX2 + FMA), and
// whether the shapes it suits go to dplab's direct kernel or all to Eigen.
// Both are compiled into x86-64 builds (cpu_gemm_kernel.h says how); the default is AVX-512
// where the CPU and the OS support it, else the baseline. DPLAB_GEMM_ISA=baseline or avx512
// chooses, as do set_gemm_isa() (tests run both and compare) and the benchmarks' --gemm-isa.
// The setting is process-wide: change it only while no GEMM runs. In cpu_gemm.cpp.
#pragma once
#include <string>

namespace dplab {

enum class GemmIsa { Baseline, Avx512 };

// Built into this dplab and supported by this CPU.
bool gemm_isa_available(GemmIsa isa);
GemmIsa gemm_isa();
// Throws Error if `isa` is not available, saying why.
void set_gemm_isa(GemmIsa isa);
const char* gemm_isa_name(GemmIsa isa);  // "baseline" or "avx512"
// "baseline" or "avx512" -> the GemmIsa; throws Error naming both otherwise.
GemmIsa parse_gemm_isa(const std::string& name);

// Which kernel multiplies: Eigen (all of it; the reference the direct kernel is tested
// against), Direct (the GEMMs cpu_gemm.cpp's direct_plan accepts run on dplab's direct kernel,
// cpu_gemm_direct_kernel.h, which reads the operands in place; the rest on Eigen), or Auto (the
// default: Direct in the AVX-512 build, Eigen in the baseline build, where the direct kernel's
// 6 x 16 block lost to Eigen's packed one on the MLP's weight gradient: docs/performance.md).
// DPLAB_GEMM=eigen, direct or auto chooses at start-up, as does
// set_gemm_algorithm() (process-wide, like the ISA).
enum class GemmAlgorithm { Eigen, Direct, Auto };
GemmAlgorithm gemm_algorithm();
void set_gemm_algorithm(GemmAlgorithm a);
const char* gemm_algorithm_name(GemmAlgorithm a);  // "eigen", "direct" or "auto"
// "eigen", "direct" or "auto" -> the GemmAlgorithm; throws Error naming them otherwise.
GemmAlgorithm parse_gemm_algorithm(const std::string& name);
// What the settings come to: "direct" where the direct kernel takes the GEMMs it can, else
// "eigen" (for the benchmarks' tables).
const char* gemm_kernel_in_use();

}  // namespace dplab
