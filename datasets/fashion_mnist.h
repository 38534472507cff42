// fashion_mnist.h: Zalando's Fashion-MNIST, 70,000 28x28 grey images of clothes in 10
// classes, read from its four IDX files (gzip or plain). The files are looked up in
//   options.root (when given, the only place), else $DPLAB_DATA (and $DPLAB_DATA/fashion-mnist),
//   ./data/fashion-mnist, /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist).
//   auto train = std::make_shared<datasets::FashionMNIST>("train");   // 60000 examples
//   auto test = std::make_shared<datasets::FashionMNIST>("test", {.limit = 1000});
// Read next: synthetic.h, then framework/data/dataloader.h.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "framework/data/dataset.h"

namespace dplab::datasets {

struct FashionMNISTOptions {
  std::string root = "";  // a directory holding the files; empty: the search path above
  bool normalize = true;  // pixels/255, then (x - kMean) / kStd; false: pixels/255 in [0, 1]
  int64_t limit = 0;      // > 0: only the first `limit` examples (quick tests, tutorials)
};

// images [N, 1, 28, 28] float32 on cpu, labels [N] int64 in [0, 10).
class FashionMNIST : public data::TensorDataset {
 public:
  static constexpr double kMean = 0.2860;  // of the training pixels in [0, 1]
  static constexpr double kStd = 0.3530;
  static constexpr std::array<std::string_view, 10> kClassNames = {
      "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
      "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

  // split: "train" or "test". Throws when the files are missing (naming every place
  // looked and how to install them) or malformed (naming the file and what was expected).
  explicit FashionMNIST(const std::string& split = "train", FashionMNISTOptions options = {});

  const std::string& images_path() const { return images_path_; }
  const std::string& labels_path() const { return labels_path_; }

 private:
  struct Loaded;
  FashionMNIST(Loaded loaded);
  static Loaded load(const std::string& split, const FashionMNISTOptions& options);

  std::string images_path_, labels_path_;
};

// The directories searched when options.root is empty, in order.
std::vector<std::string> fashion_mnist_search_path();

}  // namespace dplab::datasets
