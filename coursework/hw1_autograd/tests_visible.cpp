// tests_visible.cpp: the hw1 tests you can run yourself (dplab-course test hw1_autograd DIR).
// The grader also runs a hidden set: other shapes (batch 1, non-square, stride and padding),
// finite differences, and convolution and pooling. A test's points are in its name.
#include "grading.h"

using namespace hw1;
using namespace hw1::grading;

TEST_SUITE("visible") {

TEST_CASE("matmul_backward on a 3x4 by 4x2 product (10 points)") {
  seed_inputs(1);
  const Tensor a = randn({3, 4}), b = randn({4, 2});
  check("y = a @ b with a [3, 4] and b [4, 2]", [](const auto& in) { return matmul(in[0], in[1]); },
        {a, b}, {"ga", "gb"}, {"a", "b"}, [&](const Tensor& gy) {
          MatmulGrads g = matmul_backward(a, b, gy);
          return std::vector<Tensor>{g.ga, g.gb};
        });
}

TEST_CASE("cross_entropy_backward on a batch of 4 with 5 classes (10 points)") {
  seed_inputs(2);
  const Tensor logits = randn({4, 5});
  const Tensor target = from_vector(std::vector<int64_t>{0, 3, 4, 1}, {4});
  check("cross entropy of logits [4, 5]", [&](const auto& in) { return cross_entropy(in[0], target); },
        {logits}, {"dlogits"}, {"logits"}, [&](const Tensor& gy) {
          return std::vector<Tensor>{cross_entropy_backward(logits, target, gy.item())};
        });
}

}  // TEST_SUITE
