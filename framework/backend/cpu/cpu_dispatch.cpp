// cpu_dispatch.cpp: the CPU's features, detected once, and the kernel settings (cpu_dispatch.h),
// each read from its DPLAB_* variable at its first use with settings.h's parser, so that a
// malformed value fails where that kernel first runs, naming the variable and what it accepts.
// Read next: cpu_gemm.cpp.
#include "framework/backend/cpu/cpu_dispatch.h"

#include <fmt/format.h>

#include <cstdlib>
#include <optional>

#include "framework/backend/cpu/cpu_threads.h"
#include "framework/backend/cpu/fast/cpu_gemm_direct_kernel.h"  // its column block
#include "framework/error.h"
#include "framework/io/settings.h"

namespace dplab {
namespace {

// ---- what the CPU (and this build) can run, asked once ----
struct Features {
  bool avx512 = false;   // x86-64-v4's set (F, BW, DQ, VL), and this build has its kernels
  bool avx512f = false;  // enough for the float16 conversions
  bool f16c = false;     // F16C (with AVX): 8 float16 conversions at a time
};

Features detect() {
  Features f;
#if defined(__x86_64__)
  // libgcc also checks that the OS saves the AVX-512 registers (XCR0).
  __builtin_cpu_init();
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.f16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
#if defined(DPLAB_HAVE_AVX512_GEMM)
  f.avx512 = f.avx512f && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#endif
#endif
  return f;
}

const Features& features() {
  static const Features f = detect();
  return f;
}

// ---- the settings: each read once (settings.h parses it), then changed only by its setter ----

GemmIsa& isa_setting() {
  static GemmIsa isa = [] {
    const auto v = setting_value("DPLAB_GEMM_ISA");
    if (!v) return features().avx512 ? GemmIsa::Avx512 : GemmIsa::Baseline;
    return parse_gemm_isa_setting(*v);
  }();
  return isa;
}

GemmAlgorithm& gemm_setting() {
  static GemmAlgorithm a = [] {
    const auto v = setting_value("DPLAB_GEMM");
    return v ? parse_gemm_setting(*v) : GemmAlgorithm::Auto;
  }();
  return a;
}

ConvAlgorithm& conv_setting() {
  static ConvAlgorithm a = [] {
    const auto v = setting_value("DPLAB_CONV");
    return v ? parse_conv_setting(*v) : ConvAlgorithm::Direct;
  }();
  return a;
}

bool& fuse_setting() {
  static bool on = [] {
    const auto v = setting_value("DPLAB_FUSE");
    return v ? parse_fuse_setting(*v) : true;
  }();
  return on;
}

// Set only by set_half_path; otherwise the path follows the GEMM's instruction set.
std::optional<HalfPath>& half_override() {
  static std::optional<HalfPath> p;
  return p;
}

}  // namespace

const char* why_no_avx512() {
#if defined(DPLAB_HAVE_AVX512_GEMM)
  return "this CPU has no AVX-512 (or the OS does not enable it); use baseline";
#else
  return "this dplab was built without the AVX-512 kernels (not an x86-64 build); use baseline";
#endif
}

// ---- GEMM instruction set ----

bool gemm_isa_available(GemmIsa isa) { return isa == GemmIsa::Baseline || features().avx512; }
GemmIsa gemm_isa() { return isa_setting(); }
void set_gemm_isa(GemmIsa isa) {
  DPLAB_CHECK(gemm_isa_available(isa), "set_gemm_isa({}): {}", gemm_isa_name(isa), why_no_avx512());
  isa_setting() = isa;
}
const char* gemm_isa_name(GemmIsa isa) { return isa == GemmIsa::Avx512 ? "avx512" : "baseline"; }
GemmIsa parse_gemm_isa(const std::string& name) {
  if (name == "baseline") return GemmIsa::Baseline;
  if (name == "avx512") return GemmIsa::Avx512;
  DPLAB_FAIL("GEMM instruction set: expected 'baseline' or 'avx512', got '{}'", name);
}

// ---- GEMM kernel ----

GemmAlgorithm gemm_algorithm() { return gemm_setting(); }
void set_gemm_algorithm(GemmAlgorithm a) { gemm_setting() = a; }
const char* gemm_algorithm_name(GemmAlgorithm a) {
  return a == GemmAlgorithm::Direct ? "direct" : a == GemmAlgorithm::Auto ? "auto" : "eigen";
}
GemmAlgorithm parse_gemm_algorithm(const std::string& name) {
  if (name == "direct") return GemmAlgorithm::Direct;
  if (name == "eigen") return GemmAlgorithm::Eigen;
  if (name == "auto") return GemmAlgorithm::Auto;
  DPLAB_FAIL("GEMM algorithm: expected 'eigen', 'direct' or 'auto', got '{}'", name);
}
bool gemm_direct_chosen() {
  const GemmAlgorithm a = gemm_algorithm();
  return a == GemmAlgorithm::Direct || (a == GemmAlgorithm::Auto && gemm_isa() == GemmIsa::Avx512);
}
const char* gemm_kernel_in_use() { return gemm_direct_chosen() ? "direct" : "eigen"; }

// ---- convolution ----

ConvAlgorithm conv_algorithm() { return conv_setting(); }
void set_conv_algorithm(ConvAlgorithm a) { conv_setting() = a; }
const char* conv_algorithm_name(ConvAlgorithm a) {
  return a == ConvAlgorithm::Direct ? "direct" : "im2col";
}
ConvAlgorithm parse_conv_algorithm(const std::string& name) {
  if (name == "direct") return ConvAlgorithm::Direct;
  if (name == "im2col") return ConvAlgorithm::Im2col;
  DPLAB_FAIL("convolution algorithm (DPLAB_CONV): expected 'direct' or 'im2col', got '{}'", name);
}

bool fused_conv() { return fuse_setting(); }
void set_fused_conv(bool on) { fuse_setting() = on; }

// ---- the decisions, per call ----

bool gemm_direct_runs(const GemmArgs& g) {
  using gemm_direct::kColumnBlock;
  if (!gemm_direct_chosen() || g.alpha != 1.0f || (g.beta != 0.0f && g.beta != 1.0f) ||
      g.K == 0 || g.K > kMaxDirectK)
    return false;
  return (g.trans_b ? g.M : g.N) % kColumnBlock == 0;
}

bool conv_direct_runs(const Window2d& w, int64_t O, bool input_grad) {
  const bool empty = w.N == 0 || w.C == 0 || O == 0 || w.out_h == 0 || w.out_w == 0;
  if (conv_algorithm() != ConvAlgorithm::Direct || empty) return false;
  return !input_grad || (w.stride == 1 && w.pad <= w.kh - 1 && w.pad <= w.kw - 1);
}

bool conv_relu_pool_fused_runs(const Window2d& w, int64_t O) {
  return fused_conv() && conv_direct_runs(w, O, /*input_grad=*/true) && w.out_h >= 2 &&
         w.out_w >= 2;
}

// ---- float16 conversions ----

HalfPath half_path() {
  if (half_override()) return *half_override();
  if (gemm_isa() == GemmIsa::Avx512 && features().avx512f) return HalfPath::Avx512;
  return features().f16c ? HalfPath::F16c : HalfPath::Scalar;
}
bool half_path_available(HalfPath p) {
  switch (p) {
    case HalfPath::Scalar: return true;
    case HalfPath::F16c: return features().f16c || features().avx512f;
    case HalfPath::Avx512: return features().avx512f;
  }
  return false;
}
void set_half_path(HalfPath p) {
  DPLAB_CHECK(half_path_available(p), "set_half_path: {} is not supported by this CPU (best: {})",
              half_path_name(p),
              half_path_name(features().avx512f ? HalfPath::Avx512
                             : features().f16c  ? HalfPath::F16c
                                                : HalfPath::Scalar));
  half_override() = p;
}
const char* half_path_name(HalfPath p) {
  return p == HalfPath::Avx512 ? "avx512" : p == HalfPath::F16c ? "f16c" : "scalar";
}

// ---- threads ----

int threads_from_env() {
  const auto v = setting_value("DPLAB_NUM_THREADS");
  return v ? parse_num_threads_setting(*v) : 1;
}

// ---- the one line ----

std::string kernels_summary() {
  const bool direct_conv = conv_algorithm() == ConvAlgorithm::Direct;
  std::string s = fmt::format(
      "GEMM {} on {}, convolution {}{}, float16 {}, {} thread{}",
      gemm_direct_chosen() ? "fast direct" : "reference eigen", gemm_isa_name(gemm_isa()),
      direct_conv ? "fast direct" : "reference im2col",
      direct_conv && fused_conv() ? " + fused ReLU/max-pool" : "", half_path_name(half_path()),
      get_num_threads(), get_num_threads() == 1 ? "" : "s");
  std::string chosen;
  for (const char* name : {"DPLAB_GEMM_ISA", "DPLAB_GEMM", "DPLAB_CONV", "DPLAB_FUSE"})
    if (const auto v = setting_value(name))
      chosen += fmt::format("{}{}={}", chosen.empty() ? "" : " ", name, *v);
  if (!chosen.empty()) s += fmt::format(" (set by {})", chosen);
  return s;
}

}  // namespace dplab
