// cpu_isa.h: which build of the CPU GEMM kernel runs, AVX-512 or the baseline (AVX2 + FMA).
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

}  // namespace dplab
