// Conversions float32 <-> float16 / bfloat16: the scalar reference against known values,
// and every vectorised path (F16C, AVX-512) against the scalar one, bit for bit, on all
// 65536 16-bit patterns and on a million float32 values (specials included).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "framework/backend/cpu/cpu_half.h"
#include "framework/dplab.h"

using namespace dplab;

namespace {

uint32_t bits_of(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  return x;
}
float float_of(uint32_t x) {
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}

// Restores the conversion path a test changed.
struct PathScope {
  HalfPath saved = half_path();
  ~PathScope() { set_half_path(saved); }
};

std::vector<float> probe_floats() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65520.0f,
                          65519.99f,
                          1e-8f,
                          5.96e-8f,
                          2.98e-8f,
                          2.99e-8f,
                          6.1e-5f,
                          1e30f,
                          -1e30f,
                          3.0e38f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::denorm_min(),
                          float_of(0x3f808000u),
                          float_of(0x3f818000u),
                          float_of(0x3f808001u)};
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int i = 0; i < 500000; ++i) v.push_back(float_of(any_bits(gen)));  // every exponent
  for (int i = 0; i < 500000; ++i)
    v.push_back(normal(gen) * std::pow(2.0f, static_cast<float>(i % 40 - 30)));
  return v;
}

bool same(float a, float b) { return (std::isnan(a) && std::isnan(b)) || bits_of(a) == bits_of(b); }
bool same16(uint16_t a, uint16_t b, DType t) {
  const float fa = t == DType::Float16 ? half_to_float(a) : bfloat16_to_float(a);
  const float fb = t == DType::Float16 ? half_to_float(b) : bfloat16_to_float(b);
  return (std::isnan(fa) && std::isnan(fb)) || a == b;  // NaN payloads may differ, NaN-ness may not
}

}  // namespace

TEST_CASE("float16 scalar conversion: known values") {
  CHECK(float_to_half(1.0f) == 0x3c00);
  CHECK(float_to_half(65504.0f) == 0x7bff);               // the largest float16
  CHECK(float_to_half(65520.0f) == 0x7c00);               // halfway to 2^16 rounds to inf
  CHECK(float_to_half(std::ldexp(1.0f, -24)) == 0x0001);  // the smallest subnormal
  CHECK(float_to_half(std::ldexp(1.0f, -26)) == 0x0000);  // below half of it: zero (underflow)
  CHECK(half_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);      // tie: to even (down)
  CHECK(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // tie: to even (up)
}

TEST_CASE("bfloat16 scalar conversion: known values") {
  CHECK(float_to_bfloat16(1.0f) == 0x3f80);
  CHECK(float_to_bfloat16(float_of(0x3f808000u)) == 0x3f80);  // tie, kept part even: down
  CHECK(float_to_bfloat16(float_of(0x3f818000u)) == 0x3f82);  // tie, kept part odd: up
  CHECK(float_to_bfloat16(float_of(0x3f808001u)) == 0x3f81);  // above the tie: up
  CHECK(float_to_bfloat16(3.0e38f) == 0x7f62);                // float32's range: no overflow
  CHECK(float_to_bfloat16(float_of(0x7f7fffffu)) == 0x7f80);  // FLT_MAX rounds up to inf
  CHECK(std::isnan(bfloat16_to_float(float_to_bfloat16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(bfloat16_to_float(
      float_to_bfloat16(float_of(0x7f800001u)))));  // a NaN that truncation would make inf
  CHECK(bfloat16_to_float(0x4049) == 3.140625f);
}

TEST_CASE("every conversion path agrees with the scalar reference, bit for bit") {
  PathScope restore;
  std::vector<uint16_t> all16(65536);
  for (uint32_t i = 0; i < 65536; ++i) all16[i] = static_cast<uint16_t>(i);
  const std::vector<float> floats = probe_floats();
  for (HalfPath path : {HalfPath::Scalar, HalfPath::F16c, HalfPath::Avx512}) {
    if (!half_path_available(path)) {
      MESSAGE("conversion path " << half_path_name(path)
                                 << " not supported by this CPU: not tested");
      continue;
    }
    set_half_path(path);
    for (DType t : {DType::Float16, DType::BFloat16}) {
      CAPTURE(half_path_name(path));
      CAPTURE(dtype_name(t));
      std::vector<float> wide(65536);
      to_float(t, all16.data(), wide.data(), 65536);
      int bad = 0;
      for (uint32_t i = 0; i < 65536; ++i) {
        const float ref =
            t == DType::Float16 ? half_to_float(all16[i]) : bfloat16_to_float(all16[i]);
        bad += !same(wide[i], ref);
      }
      CHECK(bad == 0);
      std::vector<uint16_t> narrow(floats.size());
      from_float(t, floats.data(), narrow.data(), static_cast<int64_t>(floats.size()));
      bad = 0;
      for (size_t i = 0; i < floats.size(); ++i) {
        const uint16_t ref =
            t == DType::Float16 ? float_to_half(floats[i]) : float_to_bfloat16(floats[i]);
        bad += !same16(narrow[i], ref, t);
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("Tensor::to between every pair of dtypes") {
  Tensor x = from_vector(std::vector<float>{1.5f, -2.25f, 100.0f, 0.0f, 7.0f}, {5});
  for (DType t : {DType::Float16, DType::BFloat16}) {
    Tensor h = x.to(t);
    CHECK(h.dtype() == t);
    CHECK(h.nbytes() == 10);
    CHECK(h.to(DType::Float32).to_vector<float>() == x.to_vector<float>());  // exact in both
    CHECK(h.to(DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{1, -2, 100, 0, 7});
    Tensor other = h.to(t == DType::Float16 ? DType::BFloat16 : DType::Float16);
    CHECK(other.to(DType::Float32).to_vector<float>() == x.to_vector<float>());
    CHECK(h.at({2}) == 100.0f);
    CHECK(to_string(h).find("100.0000") != std::string::npos);
    CHECK(to_string(h).find(std::string("dtype=") + std::string(dtype_name(t))) !=
          std::string::npos);
    CHECK(full({3}, 0.1, {.dtype = t}).to(DType::Float32).to_vector<float>()[0] ==
          (t == DType::Float16 ? half_to_float(float_to_half(0.1f))
                               : bfloat16_to_float(float_to_bfloat16(0.1f))));
  }
  Tensor labels = from_vector(std::vector<int64_t>{3, -4}, {2});
  CHECK(labels.to(DType::BFloat16).to(DType::Float32).to_vector<float>() ==
        std::vector<float>{3.0f, -4.0f});
}

TEST_CASE("16-bit collectives' reduction (reduce_into) adds in float32 and rounds once") {
  for (DType t : {DType::Float16, DType::BFloat16}) {
    Tensor a = from_vector(std::vector<float>{1.0f, 2.0f, -3.0f, 1000.0f}, {4}).to(t);
    Tensor b = from_vector(std::vector<float>{0.5f, 2.0f, 5.0f, 24.0f}, {4}).to(t);
    backend_for(Device("cpu")).reduce_into(ReduceKind::Sum, t, a.raw_data(), b.raw_data(), 4);
    CHECK(a.to(DType::Float32).to_vector<float>() == std::vector<float>{1.5f, 4.0f, 2.0f, 1024.0f});
  }
}
