// cases_linalg_shape.cpp: the parity tables of ops/matmul.cpp, ops/shape.cpp and
// ops/index.cpp. GEMM sizes are odd and unequal (M != N != K, none a multiple of 32), so a
// swapped transpose flag or leading dimension in the row-major -> column-major cuBLAS
// mapping shows up as wrong numbers, not as a lucky square. Index tensors repeat rows, so
// the backward's atomic adds must accumulate.
// Read next: cases_nn.cpp.
#include "tests/ops_cuda/parity.h"

namespace dplab::parity {

std::vector<OpCase> linalg_shape_cases() {
  std::vector<OpCase> t;
  // ---- matmul: [M,K]@[K,N], [B,M,K]@[K,N], [B,M,K]@[B,K,N] ----
  // clang-format off
  //           name                                   covers                   inputs                                   f, tol
  t.push_back({"matmul [33,17]@[17,45]",              {"matmul"},              {x({33, 17}), x({17, 45})},              [](const V& v) { return V{matmul(v[0], v[1])}; }, kGemm});
  t.push_back({"matmul [130,257]@[257,70]",           {"matmul"},              {x({130, 257}), x({257, 70})},           [](const V& v) { return V{matmul(v[0], v[1])}; }, kGemm});
  t.push_back({"matmul [1,9]@[9,1]",                  {"matmul"},              {x({1, 9}), x({9, 1})},                  [](const V& v) { return V{matmul(v[0], v[1])}; }, kGemm});
  t.push_back({"matmul [3,33,17]@[17,45] (shared b)", {"matmul"},              {x({3, 33, 17}), x({17, 45})},           [](const V& v) { return V{matmul(v[0], v[1])}; }, kGemm});
  t.push_back({"matmul [5,7,19]@[5,19,3] (batched)",  {"matmul"},              {x({5, 7, 19}), x({5, 19, 3})},          [](const V& v) { return V{matmul(v[0], v[1])}; }, kGemm});
  t.push_back({"matmul with a transposed operand",    {"matmul", "transpose"}, {x({17, 33}), x({17, 45})},              [](const V& v) { return V{matmul(transpose(v[0], 0, 1), v[1])}; }, kGemm});
  // ---- linear: y = x W^T + b ----
  t.push_back({"linear [37,19] W [23,19] b [23]",     {"linear"},              {x({37, 19}), x({23, 19}), x({23})},     [](const V& v) { return V{linear(v[0], v[1], v[2])}; }, kGemm});
  t.push_back({"linear without bias",                 {"linear"},              {x({37, 19}), x({23, 19})},              [](const V& v) { return V{linear(v[0], v[1])}; }, kGemm});
  t.push_back({"linear on [2,5,17]",                  {"linear"},              {x({2, 5, 17}), x({9, 17}), x({9})},     [](const V& v) { return V{linear(v[0], v[1], v[2])}; }, kGemm});
  t.push_back({"linear [64,784] W [129,784]",         {"linear"},              {x({64, 784}), x({129, 784}), x({129})}, [](const V& v) { return V{linear(v[0], v[1], v[2])}; }, kGemm});
  // clang-format on

  // ---- shapes: views and strided copies ----
  const Shape s{3, 5, 7};
  // clang-format off
  //           name                           covers         inputs             f, tol
  t.push_back({"reshape to [15,7] and [-1]",  {"reshape"},   {x(s)},            [](const V& v) { return V{reshape(v[0], {15, 7}), reshape(v[0], {-1})}; }});
  t.push_back({"flatten and view",            {"reshape"},   {x(s)},            [](const V& v) { return V{v[0].flatten(1), v[0].view({7, 15})}; }});
  t.push_back({"transpose 0,2 and -1,-2",     {"transpose"}, {x(s)},            [](const V& v) { return V{transpose(v[0], 0, 2), transpose(v[0], -1, -2)}; }});
  t.push_back({"permute {2,0,1}",             {"permute"},   {x(s)},            [](const V& v) { return V{permute(v[0], {2, 0, 1})}; }});
  t.push_back({"permute 4-d {3,1,0,2}",       {"permute"},   {x({2, 3, 4, 5})}, [](const V& v) { return V{permute(v[0], {3, 1, 0, 2})}; }});
  t.push_back({"expand [3,1,7] -> [2,3,5,7]", {"expand"},    {x({3, 1, 7})},    [](const V& v) { return V{expand(v[0], {2, 3, 5, 7})}; }, kSum});
  t.push_back({"expand [] -> [4,9]",          {"expand"},    {x({})},           [](const V& v) { return V{expand(v[0], {4, 9})}; }, kSum});
  // clang-format on
  for (int64_t d : {0, 1, 2}) {
    // clang-format off
    //           name                               covers      inputs                                      f
    t.push_back({"cat dim " + std::to_string(d),    {"cat"},    {x({3, 5, 7}), x({3, 5, 7}), x({3, 5, 7})}, [d](const V& v) { return V{cat({v[0], v[1], v[2]}, d)}; }});
    t.push_back({"stack dim " + std::to_string(d),  {"stack"},  {x({5, 7}), x({5, 7})},                     [d](const V& v) { return V{stack({v[0], v[1]}, d)}; }});
    t.push_back({"narrow dim " + std::to_string(d), {"narrow"}, {x(s)},                                     [d](const V& v) { return V{narrow(v[0], d, 1, 2)}; }});
    // clang-format on
  }
  // clang-format off
  //           name                      covers           inputs                             f
  t.push_back({"cat of unequal rows",    {"cat"},         {x({2, 6}), x({5, 6}), x({1, 6})}, [](const V& v) { return V{cat({v[0], v[1], v[2]}, 0)}; }});
  t.push_back({"chunk 30 rows into 8",   {"chunk"},       {x({30, 3})},                      [](const V& v) { return chunk(v[0], 8); }});
  t.push_back({"chunk along dim 1",      {"chunk"},       {x({4, 11})},                      [](const V& v) { return chunk(v[0], 3, 1); }});
  t.push_back({"split by 4 along dim 1", {"split"},       {x({3, 10})},                      [](const V& v) { return split(v[0], 4, 1); }});
  t.push_back({"split_sizes {1, 4, 2}",  {"split_sizes"}, {x({7, 3})},                       [](const V& v) { return split_sizes(v[0], {1, 4, 2}); }});
  t.push_back({"clone",                  {"clone"},       {x(s)},                            [](const V& v) { return V{clone(v[0])}; }});
  // clang-format on
  // 16-bit dtypes (amp/): casts round to nearest even on every backend (bit for bit), and a
  // 16-bit GEMM sums in float32 and rounds once (cublasGemmEx on CUDA), so the backends
  // differ by at most one 16-bit rounding of a float32 sum taken in another order.
  for (DType t16 : {DType::Float16, DType::BFloat16}) {
    const std::string n16(dtype_name(t16));
    t.push_back({"cast to " + n16 + " and back", {"cast"}, {x(s)}, [t16](const V& v) {
                   return V{cast(mul_scalar(cast(v[0], t16), 3.0f), DType::Float32)};
                 }});
    const Tol t16_gemm{5e-3, t16 == DType::Float16 ? 2e-3 : 1.6e-2};
    t.push_back({"matmul in " + n16,
                 {"cast", "matmul"},
                 {x({9, 33}), x({33, 7})},
                 [t16](const V& v) {
      return V{cast(matmul(cast(v[0], t16), cast(v[1], t16)), DType::Float32)};
                 },
                 t16_gemm});
    t.push_back({"linear in " + n16,
                 {"cast", "linear"},
                 {x({5, 17}), x({6, 17}), x({6})},
                 [t16](const V& v) {
      return V{cast(linear(cast(v[0], t16), cast(v[1], t16), cast(v[2], t16)), DType::Float32)};
                 },
                 t16_gemm});
  }
  t.push_back({"to_device there and back", {"to_device"}, {x(s)}, [](const V& v) {
                 Tensor host = to_device(v[0], Device("cpu:2"));
                 return V{to_device(mul_scalar(host, 2.0f), v[0].device())};
               }});

  // ---- indexing along dim 0 (repeated rows accumulate in the backward) ----
  // clang-format off
  //           name                          covers            inputs                             f
  t.push_back({"index_select [10,7] rows",   {"index_select"}, {x({10, 7}), idx({23}, 10)},       [](const V& v) { return V{index_select(v[0], v[1])}; }});
  t.push_back({"index_select 3-d",           {"index_select"}, {x({6, 4, 5}), idx({9}, 6)},       [](const V& v) { return V{index_select(v[0], v[1])}; }});
  t.push_back({"index_select of int64 rows", {"index_select"}, {idx({8, 3}, 100), idx({11}, 8)},  [](const V& v) { return V{index_select(v[0], v[1])}; }});
  t.push_back({"gather [10,7] by [15,7]",    {"gather"},       {x({10, 7}), idx({15, 7}, 10)},    [](const V& v) { return V{gather(v[0], v[1])}; }});
  t.push_back({"gather 3-d",                 {"gather"},       {x({4, 3, 5}), idx({6, 3, 5}, 4)}, [](const V& v) { return V{gather(v[0], v[1])}; }});
  // clang-format on
  return t;
}

}  // namespace dplab::parity
