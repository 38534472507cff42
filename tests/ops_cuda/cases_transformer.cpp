// cases_transformer.cpp: the parity tables of the transformer's ops (issue #49): gelu,
// layer_norm, embedding, causal_softmax, matmul on 4-d, broadcast and transposed operands, and
// causal attention composed from them. Rows are shorter and longer than a CUDA block of 256
// threads (the row kernels loop), queries fewer than keys, embedding ids repeat (the
// backward's atomic adds must accumulate) and hit the padding row.
// Read next: cases_special.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <utility>

#include "tests/ops_cuda/parity.h"

// clang-format off: the tables keep one case to a row
namespace dplab::parity {

std::vector<OpCase> transformer_cases() {
  std::vector<OpCase> t;
  // ---- gelu, both forms ----
  for (auto [approx, name] :
       {std::pair{GeluApproximation::None, "exact"}, std::pair{GeluApproximation::Tanh, "tanh"}}) {
    const GeluApproximation a = approx;
    t.push_back({std::string("gelu ") + name + " [7,33]", {"gelu"}, {x({7, 33})}, [a](const V& v) {
                   return V{gelu(mul_scalar(v[0], 3.0f), a)};
                 }});
  }
  // ---- layer_norm ----
  t.push_back({"layer_norm [5,37] with weight and bias",
               {"layer_norm"},
               {x({5, 37}), x({37}), x({37})},
               [](const V& v) { return V{layer_norm(v[0], v[1], v[2])}; },
               kSum});
  t.push_back({"layer_norm [2,3,300] (rows longer than a block)",
               {"layer_norm"},
               {x({2, 3, 300}), x({300}), x({300})},
               [](const V& v) { return V{layer_norm(add_scalar(v[0], 5.0f), v[1], v[2], 1e-3f)}; },
               kSum});
  t.push_back({"layer_norm without weight and bias",
               {"layer_norm"},
               {x({9, 16})},
               [](const V& v) { return V{layer_norm(v[0])}; },
               kSum});
  t.push_back({"layer_norm with a weight only",
               {"layer_norm"},
               {x({4, 19}), x({19})},
               [](const V& v) { return V{layer_norm(v[0], v[1])}; },
               kSum});
  // ---- embedding ----
  t.push_back({"embedding [4,7] ids into [11,9]",
               {"embedding"},
               {idx({4, 7}, 11), x({11, 9})},
               [](const V& v) { return V{embedding(v[0], v[1])}; },
               kSum});
  t.push_back({"embedding with padding_idx 3",
               {"embedding"},
               {idx({40}, 5), x({5, 300})},
               [](const V& v) { return V{embedding(v[0], v[1], 3)}; },
               kSum});
  // ---- causal_softmax ----
  t.push_back({"causal_softmax [2,3,9,9]",
               {"causal_softmax"},
               {x({2, 3, 9, 9})},
               [](const V& v) { return V{causal_softmax(mul_scalar(v[0], 3.0f))}; },
               kSum});
  t.push_back({"causal_softmax [4,5,300] (5 queries, 300 keys)",
               {"causal_softmax"},
               {x({4, 5, 300})},
               [](const V& v) { return V{causal_softmax(mul_scalar(v[0], 3.0f))}; },
               kSum});
  t.push_back({"causal_softmax [300,300]",
               {"causal_softmax"},
               {x({300, 300})},
               [](const V& v) { return V{causal_softmax(v[0])}; },
               kSum});
  // ---- matmul beyond 3-d ----
  t.push_back({"matmul [2,3,7,19]@[2,3,19,5]",
               {"matmul"},
               {x({2, 3, 7, 19}), x({2, 3, 19, 5})},
               [](const V& v) { return V{matmul(v[0], v[1])}; },
               kGemm});
  t.push_back({"matmul [2,1,7,19]@[3,19,5] (broadcast batch)",
               {"matmul"},
               {x({2, 1, 7, 19}), x({3, 19, 5})},
               [](const V& v) { return V{matmul(v[0], v[1])}; },
               kGemm});
  t.push_back({"matmul [7,19]@[2,3,19,5] (shared a)",
               {"matmul"},
               {x({7, 19}), x({2, 3, 19, 5})},
               [](const V& v) { return V{matmul(v[0], v[1])}; },
               kGemm});
  t.push_back({"matmul [2,3,7,19]@[2,3,5,19]^T (q k^T)",
               {"matmul"},
               {x({2, 3, 7, 19}), x({2, 3, 5, 19})},
               [](const V& v) { return V{matmul(v[0], v[1], {.transpose_b = true})}; },
               kGemm});
  t.push_back({"matmul [3,19,7]^T@[19,5] (shared b)",
               {"matmul"},
               {x({3, 19, 7}), x({19, 5})},
               [](const V& v) { return V{matmul(v[0], v[1], {.transpose_a = true})}; },
               kGemm});
  t.push_back(
      {"matmul [3,19,7]^T@[3,5,19]^T",
       {"matmul"},
       {x({3, 19, 7}), x({3, 5, 19})},
       [](const V& v) { return V{matmul(v[0], v[1], {.transpose_a = true, .transpose_b = true})}; },
       kGemm});
  // ---- causal attention, composed as ops/nn_transformer.cpp's header shows ----
  t.push_back({"causal attention B=2 T=13 H=3 D=8",
               {"linear", "reshape", "permute", "chunk", "matmul", "mul_scalar", "causal_softmax"},
               {x({2, 13, 24}), x({72, 24})},
               [](const V& v) {
    const int64_t B = 2, T = 13, H = 3, D = 8;
    Tensor qkv =
        permute(reshape(linear(v[0], mul_scalar(v[1], 0.3f)), {B, T, 3, H, D}), {2, 0, 3, 1, 4});
    std::vector<Tensor> p = chunk(qkv, 3);
    Tensor q = reshape(p[0], {B, H, T, D}), k = reshape(p[1], {B, H, T, D}),
           w = reshape(p[2], {B, H, T, D});
    Tensor s = mul_scalar(matmul(q, k, {.transpose_b = true}), 1.0f / std::sqrt(8.0f));
    return V{reshape(permute(matmul(causal_softmax(s), w), {0, 2, 1, 3}), {B, T, H * D})};
               },
               kGemm});
  // ---- 16-bit: computed in float32, rounded once on every backend ----
  for (DType t16 : {DType::Float16, DType::BFloat16}) {
    const std::string n16(dtype_name(t16));
    const Tol tol{5e-3, t16 == DType::Float16 ? 2e-3 : 1.6e-2};
    t.push_back({"layer_norm in " + n16,
                 {"cast", "layer_norm"},
                 {x({6, 40}), x({40}), x({40})},
                 [t16](const V& v) {
      return V{cast(layer_norm(cast(v[0], t16), cast(v[1], t16), cast(v[2], t16)), DType::Float32)};
                 },
                 tol});
    t.push_back({"gelu tanh and causal_softmax in " + n16,
                 {"cast", "gelu", "causal_softmax"},
                 {x({3, 6, 10})},
                 [t16](const V& v) {
      return V{
          cast(causal_softmax(gelu(cast(v[0], t16), GeluApproximation::Tanh)), DType::Float32)};
                 },
                 tol});
    t.push_back(
        {"embedding of a " + n16 + " table",
         {"cast", "embedding"},
         {idx({3, 5}, 7), x({7, 6})},
         [t16](const V& v) { return V{cast(embedding(v[0], cast(v[1], t16), 0), DType::Float32)}; },
         tol});
  }
  return t;
}

void check_transformer_errors(Device d) {
  const TensorOptions o{.device = d};
  Tensor w = zeros({5, 3}, o);
  Tensor bad = from_vector(std::vector<int64_t>{1, 4, 7}, {3}, o);
  CHECK_THROWS_WITH_AS(embedding(bad, w), doctest::Contains("expected every id in [0, 5)"), Error);
  CHECK_THROWS_WITH_AS(embedding(bad, w), doctest::Contains("7"), Error);
  CHECK_THROWS_WITH_AS(causal_softmax(zeros({3, 2}, o)), doctest::Contains("q <= k"), Error);
  CHECK_THROWS_WITH_AS(layer_norm(zeros({2, 4}, o), zeros({3}, o)),
                       doctest::Contains("weight must be [4]"), Error);
  // the lookup still works on d after the error was raised and cleared
  Tensor ok = from_vector(std::vector<int64_t>{4, 0}, {2}, o);
  CHECK(embedding(ok, ones({5, 3}, o)).to(Device("cpu")).to_vector<float>() ==
        std::vector<float>(6, 1.0f));
}

}  // namespace dplab::parity
// clang-format on
