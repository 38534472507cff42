// cpu_dispatch.h: which CPU kernel runs, decided in one place (cpu_dispatch.cpp). The CPU's
// features are detected there once, and every DPLAB_* kernel setting is read there, each
// once, at its first use:
//   DPLAB_GEMM_ISA  baseline | avx512: the build the GEMMs and the direct convolution run
//                   (both are compiled into x86-64 builds: reference/cpu_gemm_eigen.h says
//                   how); default: AVX-512 where the CPU, the OS and the build have it. The
//                   float16 conversions follow it: F16C on baseline, AVX-512 on avx512.
//   DPLAB_GEMM      eigen | direct | auto: reference/'s Eigen for every GEMM, or fast/'s
//                   direct kernel for the shapes it suits (cpu_gemm.cpp's direct_plan), Eigen
//                   for the rest; auto (the default): direct on avx512, Eigen on baseline,
//                   where the direct kernel's narrower register block loses to Eigen's.
//   DPLAB_CONV      im2col | direct: the reference convolution (ops/conv2d_im2col.cpp over
//                   reference/cpu_conv_pool.cpp) or fast/'s direct one (the default).
//   DPLAB_FUSE      0 | 1: conv + ReLU + 2x2 max-pool as one fast kernel (default 1), where
//                   the direct convolution runs; else the three ops.
//   DPLAB_NUM_THREADS  how many threads the kernels may use (cpu_threads.h).
// Each has a setter, for the tests and benchmarks that compare paths; the settings are
// process-wide, so change one only while no kernel runs. kernels_summary() says in one line
// what runs, for programs to print beside their device.
// The decisions per call are here too (gemm_direct_runs, conv_direct_runs,
// conv_relu_pool_fused_runs): the settings and the shapes each fast kernel handles, so that
// cpu_gemm.cpp and fast/ only run what was decided. (ops/nn_conv.cpp asks a backend for its
// direct convolution and falls back to the device-agnostic reference, ops/conv2d_im2col.cpp,
// where the backend says no; for the CPU, this file says.)
// Read next: cpu_gemm.cpp (the GEMM's dispatch), fast/cpu_conv_direct.cpp.
#pragma once
#include <cstdint>
#include <string>

#include "framework/backend/backend.h"  // GemmArgs, Window2d

namespace dplab {

// ---- the GEMMs' (and the direct convolution's) instruction set: DPLAB_GEMM_ISA ----
enum class GemmIsa { Baseline, Avx512 };
// Built into this dplab and supported by this CPU (and its OS).
bool gemm_isa_available(GemmIsa isa);
// Why avx512 is not available here, in the words errors use (the CPU, or the build).
const char* why_no_avx512();
GemmIsa gemm_isa();
// Throws Error if `isa` is not available, saying why.
void set_gemm_isa(GemmIsa isa);
const char* gemm_isa_name(GemmIsa isa);  // "baseline" or "avx512"
// "baseline" or "avx512" -> the GemmIsa; throws Error naming both otherwise.
GemmIsa parse_gemm_isa(const std::string& name);

// ---- which GEMM kernel multiplies: DPLAB_GEMM ----
enum class GemmAlgorithm { Eigen, Direct, Auto };
GemmAlgorithm gemm_algorithm();
void set_gemm_algorithm(GemmAlgorithm a);
const char* gemm_algorithm_name(GemmAlgorithm a);  // "eigen", "direct" or "auto"
// "eigen", "direct" or "auto" -> the GemmAlgorithm; throws Error naming them otherwise.
GemmAlgorithm parse_gemm_algorithm(const std::string& name);
// What the settings come to: true where the direct kernel takes the GEMMs it can.
bool gemm_direct_chosen();
const char* gemm_kernel_in_use();  // "direct" or "eigen" (for the benchmarks' tables)

// ---- which convolution: DPLAB_CONV ----
enum class ConvAlgorithm { Im2col, Direct };
ConvAlgorithm conv_algorithm();
void set_conv_algorithm(ConvAlgorithm a);
const char* conv_algorithm_name(ConvAlgorithm a);  // "im2col" or "direct"
// "im2col" or "direct" -> the ConvAlgorithm; throws Error naming both otherwise.
ConvAlgorithm parse_conv_algorithm(const std::string& name);

// ---- conv + ReLU + max-pool fused: DPLAB_FUSE ----
bool fused_conv();
void set_fused_conv(bool on);

// ---- the decisions, per call ----
// The direct GEMM kernel (fast/cpu_gemm_direct_kernel.h) runs g when the settings chose it
// (gemm_direct_chosen) and it handles g: alpha 1, beta 0 or 1, 0 < K <= kMaxDirectK, and the
// rows it runs down a multiple of its column block (N when op(B) = B; M when op(B) = B^T,
// where it computes C^T). Else reference/'s Eigen multiplies.
bool gemm_direct_runs(const GemmArgs& g);
// The direct K of at most this: the kernel keeps a K x 64 slice of its B in cache while it
// runs down A (256 KB at K = 1024); past that, Eigen's packing into cache-sized panels pays.
inline constexpr int64_t kMaxDirectK = 1024;
// The direct convolution (fast/cpu_conv_direct.cpp) runs this window, forward and, when
// input_grad, the input gradient too: DPLAB_CONV is direct and nothing is empty; the input
// gradient needs stride 1 and padding at most k-1 (it is a forward convolution of the
// padded gy). Else the reference, im2col + GEMM.
bool conv_direct_runs(const Window2d& w, int64_t O, bool input_grad);
// conv + ReLU + 2x2 max-pool as one kernel (fast/cpu_conv_fused.cpp): DPLAB_FUSE on, the
// direct forward and input gradient (its backward has no other way to the input gradient),
// and a window to pool (out_h and out_w at least 2).
bool conv_relu_pool_fused_runs(const Window2d& w, int64_t O);

// ---- the float16 conversions (cpu_half.cpp) ----
// Which conversion instructions run: the one DPLAB_GEMM_ISA's setting allows (AVX-512 on
// avx512, else F16C where the CPU has it), unless set (tests and benchmarks compare them).
// bfloat16 always runs the vectorised integer loop.
enum class HalfPath { Scalar, F16c, Avx512 };
HalfPath half_path();
bool half_path_available(HalfPath p);
void set_half_path(HalfPath p);          // throws Error when the CPU lacks it
const char* half_path_name(HalfPath p);  // "scalar", "f16c", "avx512"

// ---- threads: DPLAB_NUM_THREADS ----
// The environment's thread count, or 1 when unset; throws Error on anything but an integer
// in [1, 1024]. cpu_threads.cpp reads it once.
int threads_from_env();

// One line: what runs and, where a DPLAB_* variable chose it, which. For example
// "GEMM fast direct on avx512, convolution fast direct + fused ReLU/max-pool, float16 avx512,
// 1 thread". Programs print it as "kernels: ..." beside their device.
std::string kernels_summary();

}  // namespace dplab
