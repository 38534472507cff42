// dtype.h: element types. float32 for values, int64 for labels and indices, float16 for
// compressed communication (gradients cast to half for the all-reduce and back; no op
// computes in half). A float16 element is stored as its IEEE 754 binary16 bit pattern in a
// uint16_t; backend cast / reduce_into convert it (backend/cpu/cpu_half.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace dplab {

enum class DType { Float32, Int64, Float16 };

inline constexpr std::size_t element_size(DType t) {
  return t == DType::Float32 ? 4 : t == DType::Int64 ? 8 : 2;
}
inline constexpr std::string_view dtype_name(DType t) {
  return t == DType::Float32 ? "float32" : t == DType::Int64 ? "int64" : "float16";
}

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::Int64; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::Float16; }  // half bits

}  // namespace dplab
