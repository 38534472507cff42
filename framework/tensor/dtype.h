// dtype.h: element types. float32 for values, int64 for labels and indices.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace dplab {

enum class DType { Float32, Int64 };

inline constexpr std::size_t element_size(DType t) { return t == DType::Float32 ? 4 : 8; }
inline constexpr std::string_view dtype_name(DType t) {
  return t == DType::Float32 ? "float32" : "int64";
}

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::Int64; }

}  // namespace dplab
