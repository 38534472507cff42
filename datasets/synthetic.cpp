// synthetic.cpp: the generated datasets, drawn on the host with a private Generator so the
// global one (model initialisation) is untouched, then wrapped as TensorDatasets.
// Read next: framework/data/dataloader.cpp.
#include "datasets/synthetic.h"

#include <cmath>
#include <vector>

#include "framework/ops/ops.h"
#include "framework/tensor/random.h"

namespace dplab::datasets {
namespace {

std::vector<float> normals(Generator& gen, int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = gen.normal() * scale;
  return v;
}

Tensor random_rows(int64_t size, int64_t length, uint64_t seed) {
  DPLAB_CHECK(size > 0 && length >= 0,
              "RandomDataset: expected size > 0 and length >= 0, got {} and {}", size, length);
  Generator gen(seed);
  return from_vector(normals(gen, size * length, 1.0f), {length, size});
}

}  // namespace

RandomDataset::RandomDataset(int64_t size, int64_t length, uint64_t seed)
    : data::TensorDataset(random_rows(size, length, seed),
                          arange(length, {.dtype = DType::Int64})) {}

std::shared_ptr<data::TensorDataset> make_regression(int64_t n, int64_t in, int64_t out,
                                                     uint64_t seed) {
  DPLAB_CHECK(n > 0 && in > 0 && out > 0,
              "make_regression: expected n, in, out > 0, got {}, {}, {}", n, in, out);
  Generator gen(seed);
  std::vector<float> x = normals(gen, n * in, 1.0f);
  // W ~ N(0, 1/in) keeps y ~ N(0, ~2) whatever the width.
  std::vector<float> w = normals(gen, in * out, 1.0f / std::sqrt(static_cast<float>(in)));
  std::vector<float> b = normals(gen, out, 1.0f);
  std::vector<float> noise = normals(gen, n * out, 0.01f);
  std::vector<float> y(static_cast<size_t>(n * out));
  // y[i, o] = sum_k x[i, k] W[k, o] + b[o] + noise[i, o]: O(n * in * out), small sets only.
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b[o] + noise[i * out + o];
      for (int64_t k = 0; k < in; ++k) acc += double{x[i * in + k]} * w[k * out + o];
      y[i * out + o] = static_cast<float>(acc);
    }
  return std::make_shared<data::TensorDataset>(from_vector(x, {n, in}), from_vector(y, {n, out}));
}

std::shared_ptr<data::TensorDataset> make_classification(int64_t n, int64_t features,
                                                         int64_t classes, uint64_t seed) {
  DPLAB_CHECK(n > 0 && features > 0 && classes >= 2,
              "make_classification: expected n > 0, features > 0, classes >= 2, got {}, {}, {}", n,
              features, classes);
  Generator gen(seed);
  std::vector<float> centres = normals(gen, classes * features, 3.0f);
  std::vector<float> x = normals(gen, n * features, 1.0f);
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    y[i] = i % classes;
    for (int64_t f = 0; f < features; ++f) x[i * features + f] += centres[y[i] * features + f];
  }
  return std::make_shared<data::TensorDataset>(from_vector(x, {n, features}),
                                               from_vector(y, {n}, {.dtype = DType::Int64}));
}

}  // namespace dplab::datasets
