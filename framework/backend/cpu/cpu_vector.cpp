// cpu_vector.cpp: the 8 x 8 tile transpose (cpu_vector.h).
// Read next: fast/cpu_conv_direct.cpp, reference/cpu_conv_pool.cpp.
#include "framework/backend/cpu/cpu_vector.h"

namespace dplab {
namespace {

// The layout changes (channels first <-> channels last) are transposes: of each image row's
// [C, W] into [W, C], and of the output's [L, O] into [O, L]. Element by element, each float
// is a strided read or write; an 8 x 8 tile is 8 loads, 24 shuffles and 8 stores.
typedef int Ints8 __attribute__((vector_size(32)));
inline Floats8 pick(Floats8 a, Floats8 b, Ints8 lanes) { return __builtin_shuffle(a, b, lanes); }

// dst[c][r] = src[r][c] for an 8 x 8 tile: pairs of rows interleaved, then pairs of pairs,
// then the 128-bit halves swapped (the classic AVX unpack / shuffle / permute sequence).
void transpose8x8(const float* src, int64_t src_stride, float* dst, int64_t dst_stride) {
  Floats8 r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = load8(src + i * src_stride);
  for (int i = 0; i < 8; i += 2) {
    t[i] = pick(r[i], r[i + 1], Ints8{0, 8, 1, 9, 4, 12, 5, 13});
    t[i + 1] = pick(r[i], r[i + 1], Ints8{2, 10, 3, 11, 6, 14, 7, 15});
  }
  for (int i = 0; i < 8; i += 4)
    for (int k = 0; k < 2; ++k) {
      u[i + 2 * k] = pick(t[i + k], t[i + k + 2], Ints8{0, 1, 8, 9, 4, 5, 12, 13});
      u[i + 2 * k + 1] = pick(t[i + k], t[i + k + 2], Ints8{2, 3, 10, 11, 6, 7, 14, 15});
    }
  for (int k = 0; k < 4; ++k) {
    store8(dst + k * dst_stride, pick(u[k], u[k + 4], Ints8{0, 1, 2, 3, 8, 9, 10, 11}));
    store8(dst + (k + 4) * dst_stride, pick(u[k], u[k + 4], Ints8{4, 5, 6, 7, 12, 13, 14, 15}));
  }
}

}  // namespace

// dst[c * dst_stride + r] = src[r * src_stride + c] for r < rows, c < cols.
void transpose_floats(const float* src, int64_t src_stride, int64_t rows, int64_t cols, float* dst,
                      int64_t dst_stride) {
  int64_t r0 = 0;
  for (; r0 + 8 <= rows; r0 += 8) {
    int64_t c0 = 0;
    for (; c0 + 8 <= cols; c0 += 8)
      transpose8x8(src + r0 * src_stride + c0, src_stride, dst + c0 * dst_stride + r0, dst_stride);
    for (; c0 < cols; ++c0)
      for (int64_t r = r0; r < r0 + 8; ++r) dst[c0 * dst_stride + r] = src[r * src_stride + c0];
  }
  for (; r0 < rows; ++r0)
    for (int64_t c = 0; c < cols; ++c) dst[c * dst_stride + r0] = src[r0 * src_stride + c];
}

}  // namespace dplab
