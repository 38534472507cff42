// test_gpu_rules.cpp: the GPU code's plain logic, which runs (and must pass) on every
// machine, GPU or not: what a cudaGetDeviceCount answer means (gpu_probe.h), what a GPU
// suite exits with (tests/gpu_suite.h), and the rules cuda_pure.h gives the kernels (fp16
// NaN bytes and Max / Min equal to the CPU's, when a device copy overlaps).
// Read next: framework/backend/cuda/gpu_probe.h, framework/backend/cuda/cuda_pure.h.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "framework/backend/cpu/cpu_half.h"
#include "framework/backend/cuda/cuda_pure.h"
#include "framework/backend/cuda/gpu_probe.h"
#include "framework/backend/reduce_rule.h"
#include "tests/gpu_suite.h"

using namespace dplab;
using dplab::gpu_testing::gpu_suite_exit_code;

namespace {

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

}  // namespace

TEST_CASE("gpu probe: no device and no driver are 0 GPUs; other errors are named") {
  CHECK(classify_gpu_probe(0, 2, "cudaSuccess", "no error", false).count == 2);
  CHECK(classify_gpu_probe(0, 2, "cudaSuccess", "no error", false).error.empty());
  // 100: a driver, no device
  GpuProbe none = classify_gpu_probe(100, 0, "cudaErrorNoDevice", "no CUDA-capable device", true);
  CHECK(none.count == 0);
  CHECK(none.error.empty());
  // 35 without libcuda.so.1: no driver at all (this machine)
  CHECK(classify_gpu_probe(35, 0, "cudaErrorInsufficientDriver", "x", false).error.empty());
  // 35 with a driver installed: too old, named with what to do
  GpuProbe old = classify_gpu_probe(35, 0, "cudaErrorInsufficientDriver",
                                    "CUDA driver version is insufficient", true);
  CHECK(old.count == 0);
  CHECK(old.error.find("cudaErrorInsufficientDriver") != std::string::npos);
  CHECK(old.error.find("error 35") != std::string::npos);
  CHECK(old.error.find("update the NVIDIA driver") != std::string::npos);
  GpuProbe busy = classify_gpu_probe(46, 0, "cudaErrorDevicesUnavailable", "busy", true);
  CHECK(busy.error.find("exclusive-process") != std::string::npos);
  CHECK(!classify_gpu_probe(999, 0, "cudaErrorUnknown", "unknown error", true).error.empty());
}

TEST_CASE("this process's probe agrees with the count the backend reports") {
  const GpuProbe& p = cuda_gpu_probe();
  CHECK(p.count == cuda_device_count());
  if (!p.error.empty()) CHECK(p.count == 0);
}

TEST_CASE("gpu suite exit: 77 without a GPU, 1 when a GPU is required or uncountable") {
  std::string why;
  const GpuProbe none{0, ""}, two{2, ""}, broken{0, "cudaGetDeviceCount failed: cudaErrorUnknown"};
  CHECK(gpu_suite_exit_code(0, none, nullptr, &why) == 77);
  CHECK(why.find("exit 77") != std::string::npos);
  CHECK(gpu_suite_exit_code(0, none, "0", &why) == 77);
  CHECK(gpu_suite_exit_code(0, none, "1", &why) == 1);
  CHECK(why.find("DPLAB_REQUIRE_GPU=1") != std::string::npos);
  CHECK(gpu_suite_exit_code(0, two, "1", &why) == 0);
  CHECK(why.empty());
  CHECK(gpu_suite_exit_code(0, two, nullptr, &why) == 0);
  CHECK(gpu_suite_exit_code(0, broken, nullptr, &why) == 1);
  CHECK(why.find("cudaErrorUnknown") != std::string::npos);
  CHECK(gpu_suite_exit_code(0, none, "yes", &why) == 1);  // a typo must not skip quietly
  CHECK(why.find("'yes'") != std::string::npos);
  // a failing case fails, GPU or not
  CHECK(gpu_suite_exit_code(1, none, nullptr, &why) == 1);
  CHECK(gpu_suite_exit_code(1, two, nullptr, &why) == 1);
}

TEST_CASE("fp16 NaN: the GPU's encoding is the CPU's, both ways, for every NaN") {
  // every float NaN class the CPU can see: each sign, quiet and signalling, with payloads
  for (uint32_t sign : {0u, 0x80000000u}) {
    for (uint32_t mant : {1u, 0x1fffu, 0x2000u, 0x200000u, 0x400000u, 0x7fffffu, 0x123456u}) {
      const uint32_t bits = sign | 0x7f800000u | mant;
      CHECK(cuda::float_bits_are_nan(bits));
      CHECK(cuda::half_nan_from_float_bits(bits) == float_to_half(from_bits(bits)));
    }
  }
  CHECK(!cuda::float_bits_are_nan(0x7f800000u));  // +inf
  CHECK(!cuda::float_bits_are_nan(0xff800000u));  // -inf
  CHECK(!cuda::float_bits_are_nan(to_bits(65520.0f)));
  // widening: every half NaN (2 x 1023 patterns) gives the CPU's float bits
  int nans = 0;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const auto hh = static_cast<uint16_t>(h);
    if (!cuda::half_is_nan(hh)) continue;
    ++nans;
    CHECK(cuda::float_bits_from_half_nan(hh) == to_bits(half_to_float(hh)));
  }
  CHECK(nans == 2 * 1023);
}

TEST_CASE("fp16 Sum / Max / Min: the CPU backend follows reduce_element, the kernels' rule") {
  const float nan = from_bits(0x7fc00000u);
  const std::vector<float> vals = {-65504.0f,
                                   -1.5f,
                                   -0.0f,
                                   0.0f,
                                   2.0f,
                                   65504.0f,
                                   nan,
                                   from_bits(0x7f800000u),
                                   from_bits(0xff800000u)};
  for (int op : {0, 1, 2}) {
    for (float a : vals) {
      for (float b : vals) {
        uint16_t dst = float_to_half(a);
        const uint16_t src = float_to_half(b);
        const ReduceKind rop = op == 0   ? ReduceKind::Sum
                               : op == 1 ? ReduceKind::Max
                                         : ReduceKind::Min;
        cpu_reduce_into_half(rop, DType::Float16, &dst, &src, 1);
        const uint16_t gpu_rule =
            float_to_half(reduce_element(op, half_to_float(float_to_half(a)), half_to_float(src)));
        CHECK_MESSAGE(gpu_rule == dst, "op " << op << " a " << a << " b " << b);
      }
    }
  }
  // the case fmaxf got wrong: a NaN already in dst survives Max and Min
  CHECK(std::isnan(reduce_element(1, nan, 1.0f)));
  CHECK(std::isnan(reduce_element(2, nan, 1.0f)));
  CHECK(reduce_element(1, 1.0f, nan) == 1.0f);  // std::max(1, NaN) = 1
}

TEST_CASE("reduce_element's Sum decides NaN itself: dst's, else src's, else +qNaN") {
  // What an H100 gave before this rule: inf + -inf is +NaN there and -NaN (x86's default)
  // on the CPU, so one fp16 sum wrote 0x7e00 on the GPU and 0xfe00 on the CPU.
  const float inf = from_bits(0x7f800000u), neg_inf = from_bits(0xff800000u);
  const float neg_nan = from_bits(0xffc00000u), payload_nan = from_bits(0x7fc12345u);
  CHECK(to_bits(reduce_element(0, inf, neg_inf)) == 0x7fc00000u);
  CHECK(to_bits(reduce_element(0, neg_inf, inf)) == 0x7fc00000u);
  CHECK(to_bits(reduce_element(0, neg_nan, 1.0f)) == 0xffc00000u);
  CHECK(to_bits(reduce_element(0, 1.0f, neg_nan)) == 0xffc00000u);
  CHECK(to_bits(reduce_element(0, payload_nan, neg_nan)) == 0x7fc12345u);
  CHECK(to_bits(reduce_element(0, neg_nan, payload_nan)) == 0xffc00000u);
  CHECK(reduce_element(0, 1.5f, 2.0f) == 3.5f);
  // and the CPU backend writes the half of that: +qNaN -> 0x7e00
  uint16_t dst = float_to_half(65520.0f), src = float_to_half(-65520.0f);  // inf, -inf
  cpu_reduce_into_half(ReduceKind::Sum, DType::Float16, &dst, &src, 1);
  CHECK(dst == 0x7e00u);
}

TEST_CASE("overlapping device copies are detected (memmove's contract)") {
  std::vector<char> buf(64);
  char* p = buf.data();
  CHECK(cuda::ranges_overlap(p, p + 8, 16));
  CHECK(cuda::ranges_overlap(p + 8, p, 16));
  CHECK(cuda::ranges_overlap(p, p, 1));         // a copy onto itself
  CHECK(!cuda::ranges_overlap(p, p + 16, 16));  // back to back
  CHECK(!cuda::ranges_overlap(p + 16, p, 16));
  CHECK(!cuda::ranges_overlap(p, p + 8, 0));  // nothing to copy
}

TEST_CASE("two-pass reduction plans cover r exactly, with no empty slice, within grid limits") {
  int two_pass = 0;
  for (int64_t outer : std::vector<int64_t>{1, 2, 3, 64, 512, 513, 4096}) {
    for (int64_t r : std::vector<int64_t>{1, 2, 17, 4095, 4096, 4097, 100003, int64_t{1} << 26,
                                          (int64_t{1} << 31) + 77}) {
      for (int64_t inner : std::vector<int64_t>{1, 2, 64, 1000, int64_t{1} << 20}) {
        CAPTURE(outer);
        CAPTURE(r);
        CAPTURE(inner);
        const cuda::ReducePlan p = cuda::reduce_plan(outer, r, inner, 256);
        if (p.slices < 2) {
          CHECK(p.slices == 1);
          CHECK(p.slice_len == r);
          continue;
        }
        ++two_pass;
        CHECK(p.slices <= 65535);
        CHECK(p.slices * p.slice_len >= r);       // every element in a slice
        CHECK((p.slices - 1) * p.slice_len < r);  // the last slice is not empty
        if (inner == 1) CHECK(outer <= 65535);    // the row kernel's grid y
        // pass 1 reads with about 2^18 threads, never fewer than 2^16 when r allows
        const int64_t threads = inner == 1 ? outer * p.slices * 256 : outer * p.slices * inner;
        CHECK(threads <= (int64_t{1} << 19));
      }
    }
  }
  CHECK(two_pass > 20);
  // the shape that ran on one warp: the whole tensor of 64M floats
  const cuda::ReducePlan all = cuda::reduce_plan(1, int64_t{64} << 20, 1, 256);
  CHECK(all.slices == 1024);
  CHECK(all.slice_len == 65536);
}
