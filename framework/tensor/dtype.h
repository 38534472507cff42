// dtype.h: element types. float32 for values, int64 for labels and indices, and two 16-bit
// floating formats for mixed precision (framework/amp/): float16 (IEEE 754 binary16: 5
// exponent bits, 10 mantissa bits, largest 65504) and bfloat16 (the top half of a float32:
// 8 exponent bits, 7 mantissa bits, float32's range with ~3 significant digits). A 16-bit
// element is stored as its bit pattern in a uint16_t; ops compute on it in float32 and round
// the result back (tensor/half.h has the scalar conversions, backend/cpu/cpu_half.cpp the
// vectorised ones). float16 is also the wire format of the DDP compression hook.
// Read next: tensor/half.h, ops/autocast.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace dplab {

enum class DType { Float32, Int64, Float16, BFloat16 };

inline constexpr std::size_t element_size(DType t) {
  return t == DType::Float32 ? 4 : t == DType::Int64 ? 8 : 2;
}
inline constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Int64: return "int64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
  }
  return "?";
}
// float16 or bfloat16: stored in 16 bits, computed in float32.
inline constexpr bool is_low_precision(DType t) {
  return t == DType::Float16 || t == DType::BFloat16;
}
inline constexpr bool is_floating(DType t) { return t != DType::Int64; }
// The dtype of a binary op's result (PyTorch's promotion for the types dplab has): equal
// types stay; float16 with bfloat16, or either with float32, gives float32.
inline constexpr DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::Int64) return b;
  if (b == DType::Int64) return a;
  return DType::Float32;
}

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::Float32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::Int64;
}
template <>
constexpr DType dtype_of<uint16_t>() {
  return DType::Float16;
}  // half bits

}  // namespace dplab
