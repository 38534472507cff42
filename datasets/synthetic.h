// synthetic.h: small generated datasets for tests, tutorials and benchmarks; no files,
// same values on every machine for a given seed (dplab's Generator, random.h).
//   RandomDataset(size, length): the DDP tutorials' dataset, `length` rows of randn(size).
//   make_regression(n, in, out, seed): y = x W + b + noise, learnable by one Linear layer.
//   make_classification(n, features, classes, seed): Gaussian blobs, one per class.
// Read next: fashion_mnist.h, framework/data/dataloader.h.
#pragma once
#include <cstdint>
#include <memory>

#include "framework/data/dataset.h"

namespace dplab::datasets {

// data [length, size] ~ N(0, 1) drawn with Generator(seed); target [length] int64 = the row
// index, so a test can see which rows a loader (or a distributed sampler) delivered.
class RandomDataset : public data::TensorDataset {
 public:
  RandomDataset(int64_t size, int64_t length, uint64_t seed = 0);
};

// x [n, in] ~ N(0, 1); y [n, out] = x W + b + 0.01 * N(0, 1) with W [in, out] ~ N(0, 1/in)
// and b [out] ~ N(0, 1). The noise floor makes the best reachable MSE about 1e-4.
std::shared_ptr<data::TensorDataset> make_regression(int64_t n, int64_t in, int64_t out,
                                                     uint64_t seed = 0);

// `classes` centres [classes, features] ~ N(0, 3^2), label i % classes (balanced), and
// x = centre[label] + N(0, 1). Centres ~4 standard deviations apart on average: a small MLP
// reaches high accuracy. x [n, features] float32, y [n] int64.
std::shared_ptr<data::TensorDataset> make_classification(int64_t n, int64_t features,
                                                         int64_t classes, uint64_t seed = 0);

}  // namespace dplab::datasets
