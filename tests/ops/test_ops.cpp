// Core ops: every differentiable op against finite differences, broadcasting, and the
// error messages for bad shapes and devices.
#include <doctest/doctest.h>

#include "framework/ops/ops.h"
#include "tests/gradcheck.h"

using namespace dplab;
using dplab::testing::gradcheck;
using dplab::testing::leaf;
using V = std::vector<Tensor>;

TEST_CASE("elementwise ops with broadcasting match finite differences") {
  gradcheck("add", [](const V& v) { return add(v[0], v[1]); }, {leaf({3, 4}, 1), leaf({4}, 2)});
  gradcheck("sub", [](const V& v) { return sub(v[0], v[1]); }, {leaf({3, 1}, 3), leaf({1, 4}, 4)});
  gradcheck("mul", [](const V& v) { return mul(v[0], v[1]); },
            {leaf({2, 3, 4}, 5), leaf({3, 1}, 6)});
  gradcheck("div", [](const V& v) { return div(v[0], v[1]); },
            {leaf({3, 4}, 7), leaf({3, 4}, 8, 0.3f, 2.0f)});
  gradcheck("pow", [](const V& v) { return pow(v[0], v[1]); },
            {leaf({5}, 9, 0.2f, 1.5f), leaf({5}, 10, 0.5f)});
  gradcheck("maximum", [](const V& v) { return maximum(v[0], v[1]); },
            {leaf({6}, 11), leaf({6}, 12)});
  gradcheck("pow scalar", [](const V& v) { return pow(v[0], 3.0f); }, {leaf({5}, 13)});
  gradcheck("neg", [](const V& v) { return neg(v[0]); }, {leaf({5}, 14)});
  gradcheck("exp", [](const V& v) { return exp(v[0]); }, {leaf({5}, 15)});
  gradcheck("log", [](const V& v) { return log(v[0]); }, {leaf({5}, 16, 0.3f, 2.0f)});
  gradcheck("sqrt", [](const V& v) { return sqrt(v[0]); }, {leaf({5}, 17, 0.3f, 2.0f)});
  gradcheck("abs", [](const V& v) { return abs(v[0]); }, {leaf({5}, 18, 1.0f, 0.05f)});
  gradcheck("relu", [](const V& v) { return relu(v[0]); }, {leaf({7}, 19)});
  gradcheck("sigmoid", [](const V& v) { return sigmoid(v[0]); }, {leaf({7}, 20)});
  gradcheck("tanh", [](const V& v) { return tanh(v[0]); }, {leaf({7}, 21)});
  gradcheck("scalars", [](const V& v) { return 2.0f - v[0] * 3.0f + 1.0f; }, {leaf({4}, 22)});
}

TEST_CASE("forward values of elementwise ops") {
  Tensor a = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = from_vector(std::vector<float>{10, 20, 30}, {3});
  CHECK(add(a, b).to_vector<float>() == std::vector<float>{11, 22, 33, 14, 25, 36});
  Tensor c = from_vector(std::vector<float>{100, 200}, {2, 1});
  CHECK(mul(a, c).to_vector<float>() == std::vector<float>{100, 200, 300, 800, 1000, 1200});
  CHECK(relu(from_vector(std::vector<float>{-1, 0, 2}, {3})).to_vector<float>() ==
        std::vector<float>{0, 0, 2});
  CHECK(broadcast_shapes({2, 1, 4}, {3, 1}) == Shape{2, 3, 4});
  CHECK_THROWS_WITH_AS(add(zeros({2, 3}), zeros({4})),
                       doctest::Contains("cannot broadcast shapes [2, 3] and [4]"), Error);
  CHECK_THROWS_WITH_AS(add(zeros({2}), zeros({2}, {.device = "cpu:1"})),
                       doctest::Contains("different devices"), Error);
  CHECK_THROWS_WITH_AS(add(zeros({2}), zeros({2}, {.dtype = DType::Int64})),
                       doctest::Contains("int64"), Error);
}

TEST_CASE("reductions") {
  Tensor a = from_vector(std::vector<float>{1, 5, 3, 4, 2, 6}, {2, 3});
  CHECK(sum(a).item() == 21.0f);
  CHECK(sum(a, {0}).to_vector<float>() == std::vector<float>{5, 7, 9});
  CHECK(sum(a, {1}, true).shape() == Shape{2, 1});
  CHECK(mean(a, {-1}).to_vector<float>() == std::vector<float>{3, 4});
  CHECK(var(a, {1}, true).to_vector<float>() == std::vector<float>{4, 4});
  CHECK(max(a).item() == 6.0f);
  auto m = max(a, 1);
  CHECK(m.values.to_vector<float>() == std::vector<float>{5, 6});
  CHECK(m.indices.to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  CHECK(argmax(a, 0).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
  CHECK(argmax(from_vector(std::vector<float>{2, 7, 7}, {3}), 0).item_int() ==
        1);  // first max wins
  gradcheck("sum all", [](const V& v) { return sum(v[0]); }, {leaf({3, 4}, 30)});
  gradcheck("sum dims", [](const V& v) { return sum(v[0], {0, 2}); }, {leaf({2, 3, 4}, 31)});
  gradcheck("sum keepdim", [](const V& v) { return sum(v[0], {1}, true); }, {leaf({2, 3, 4}, 32)});
  gradcheck("mean", [](const V& v) { return mean(v[0], {1}); }, {leaf({3, 5}, 33)});
  gradcheck("var", [](const V& v) { return var(v[0], {0}, true); }, {leaf({4, 3}, 34)});
  gradcheck("max all", [](const V& v) { return max(v[0]); }, {leaf({6}, 35)});
  gradcheck("max dim", [](const V& v) { return max(v[0], 1).values; }, {leaf({3, 4}, 36)});
  gradcheck("max dim0", [](const V& v) { return max(v[0], 0, true).values; }, {leaf({3, 4}, 37)});
}

TEST_CASE("matmul and linear") {
  Tensor a = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = from_vector(std::vector<float>{1, 0, 0, 1, 1, 1}, {3, 2});
  CHECK(matmul(a, b).to_vector<float>() == std::vector<float>{4, 5, 10, 11});
  Tensor w = from_vector(std::vector<float>{1, 0, 0, 0, 1, 0}, {2, 3});  // picks x0, x1
  Tensor bias = from_vector(std::vector<float>{10, 20}, {2});
  CHECK(linear(a, w, bias).to_vector<float>() == std::vector<float>{11, 22, 14, 25});
  gradcheck("matmul 2d", [](const V& v) { return matmul(v[0], v[1]); },
            {leaf({3, 5}, 40), leaf({5, 4}, 41)});
  gradcheck("matmul batched", [](const V& v) { return matmul(v[0], v[1]); },
            {leaf({2, 3, 4}, 42), leaf({2, 4, 5}, 43)});
  gradcheck("matmul shared b", [](const V& v) { return matmul(v[0], v[1]); },
            {leaf({2, 3, 4}, 44), leaf({4, 5}, 45)});
  gradcheck("linear", [](const V& v) { return linear(v[0], v[1], v[2]); },
            {leaf({4, 3}, 46), leaf({5, 3}, 47), leaf({5}, 48)});
  gradcheck("linear no bias", [](const V& v) { return linear(v[0], v[1]); },
            {leaf({4, 3}, 49), leaf({2, 3}, 50)});
  CHECK_THROWS_WITH_AS(matmul(zeros({2, 3}), zeros({4, 5})),
                       doctest::Contains("inner dims differ: a is [2, 3], b is [4, 5]"), Error);
  CHECK_THROWS_WITH_AS(linear(zeros({2, 3}), zeros({4, 5})), doctest::Contains("[4, 5]"), Error);
}

TEST_CASE("shape ops move values and route gradients back") {
  Tensor a = arange(6).reshape({2, 3});
  CHECK(transpose(a, 0, 1).to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  Tensor p = permute(arange(24).reshape({2, 3, 4}), {2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.at({1, 1, 2}) == 21.0f);  // [1][2][1] of the original
  CHECK(cat({a, a}, 1).to_vector<float>() ==
        std::vector<float>{0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5});
  CHECK(stack({a, a}, 0).shape() == Shape{2, 2, 3});
  CHECK(narrow(a, 1, 1, 2).to_vector<float>() == std::vector<float>{1, 2, 4, 5});
  CHECK(expand(from_vector(std::vector<float>{1, 2}, {2, 1}), {2, 3}).to_vector<float>() ==
        std::vector<float>{1, 1, 1, 2, 2, 2});
  gradcheck("reshape", [](const V& v) { return reshape(v[0], {6, 2}); }, {leaf({3, 4}, 60)});
  gradcheck("transpose", [](const V& v) { return transpose(v[0], 0, 2); }, {leaf({2, 3, 4}, 61)});
  gradcheck("permute", [](const V& v) { return permute(v[0], {1, 2, 0}); }, {leaf({2, 3, 4}, 62)});
  gradcheck("expand", [](const V& v) { return expand(v[0], {3, 2, 4}); }, {leaf({2, 1}, 63)});
  gradcheck(
      "cat dim0",
      [](const V& v) {
    return cat({v[0], v[1]}, 0);
      },
      {leaf({2, 3}, 64), leaf({1, 3}, 65)});
  gradcheck(
      "cat dim1",
      [](const V& v) {
    return cat({v[0], v[1]}, 1);
      },
      {leaf({2, 3}, 66), leaf({2, 2}, 67)});
  gradcheck(
      "stack",
      [](const V& v) {
    return stack({v[0], v[1]}, 1);
      },
      {leaf({2, 3}, 68), leaf({2, 3}, 69)});
  gradcheck("narrow dim1", [](const V& v) { return narrow(v[0], 1, 1, 2); }, {leaf({3, 4}, 70)});
  gradcheck(
      "chunk",
      [](const V& v) {
    auto c = chunk(v[0], 3, 0);
    return mul(c[0], c[2]);
      },
      {leaf({6, 2}, 71)});
  gradcheck(
      "split dim1",
      [](const V& v) {
    auto c = split(v[0], 2, 1);
    return add(c[0], c[1]);
      },
      {leaf({3, 4}, 72)});
  gradcheck("clone", [](const V& v) { return clone(v[0]); }, {leaf({3}, 73)});
  gradcheck("to device",
            [](const V& v) { return to_device(v[0] * 2.0f, Device("cpu:1")).to(Device("cpu:0")); },
            {leaf({3}, 74)});
  CHECK_THROWS_WITH_AS(cat({zeros({2, 3}), zeros({2, 4})}, 0), doctest::Contains("[2, 4]"), Error);
  CHECK_THROWS_WITH_AS(narrow(a, 0, 1, 5), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(permute(a, {0, 0}), doctest::Contains("repeated"), Error);
}

TEST_CASE("index_select and gather along dim 0") {
  Tensor a = arange(12).reshape({4, 3});
  Tensor idx = from_vector(std::vector<int64_t>{3, 0, 3}, {3});
  CHECK(index_select(a, idx).to_vector<float>() ==
        std::vector<float>{9, 10, 11, 0, 1, 2, 9, 10, 11});
  Tensor gi = from_vector(std::vector<int64_t>{1, 0, 3, 2, 2, 0}, {2, 3});
  CHECK(gather(a, gi).to_vector<float>() == std::vector<float>{3, 1, 11, 6, 7, 2});
  gradcheck("index_select (repeated rows accumulate)",
            [idx](const V& v) { return index_select(v[0], idx); }, {leaf({4, 3}, 80)});
  gradcheck("gather", [gi](const V& v) { return gather(v[0], gi); }, {leaf({4, 3}, 81)});
  CHECK_THROWS_WITH_AS(index_select(a, from_vector(std::vector<int64_t>{4}, {1})),
                       doctest::Contains("4"), Error);
  CHECK_THROWS_WITH_AS(index_select(a, zeros({2})), doctest::Contains("expected an int64"), Error);
}
