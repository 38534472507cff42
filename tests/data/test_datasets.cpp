// test_datasets.cpp: Fashion-MNIST from the real files when installed, and every error path
// on tiny IDX files this test writes into a temporary directory (gzip and plain); the
// synthetic datasets' shapes, determinism and learnability.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "datasets/fashion_mnist.h"
#include "datasets/idx_file.h"
#include "datasets/synthetic.h"
#include "framework/io/log.h"
#include "framework/ops/ops.h"

using namespace dplab;
using namespace dplab::datasets;
namespace fs = std::filesystem;

namespace {

const fs::path kSystemDir = "/usr/share/datasets/fashion-mnist";
bool no_real_files() { return !fs::exists(kSystemDir / "train-images-idx3-ubyte.gz"); }

// A fresh directory under /tmp, removed when the test ends.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "dplab_fmnist_XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() { fs::remove_all(path); }
};

// n images whose pixels are (i * 7 + k) % 256, labels i % 10.
void write_tiny(const fs::path& dir, const std::string& prefix, int64_t n_images, int64_t n_labels,
                bool gzip) {
  std::vector<uint8_t> pixels(static_cast<size_t>(n_images * 784)), labels;
  for (size_t k = 0; k < pixels.size(); ++k) pixels[k] = static_cast<uint8_t>((k * 7) % 256);
  for (int64_t i = 0; i < n_labels; ++i) labels.push_back(static_cast<uint8_t>(i % 10));
  const std::string ext = gzip ? ".gz" : "";
  write_idx_u8((dir / (prefix + "-images-idx3-ubyte" + ext)).string(), {n_images, 28, 28}, pixels,
               gzip);
  write_idx_u8((dir / (prefix + "-labels-idx1-ubyte" + ext)).string(), {n_labels}, labels, gzip);
}

void truncate_by(const fs::path& file, uintmax_t bytes) {
  fs::resize_file(file, fs::file_size(file) - bytes);
}

}  // namespace

TEST_CASE("Fashion-MNIST loads from the installed files" * doctest::skip(no_real_files())) {
  FashionMNIST train("train", {.root = kSystemDir.string()});
  FashionMNIST test("test");  // found through the search path
  CHECK(train.size() == 60000);
  CHECK(test.size() == 10000);
  CHECK(train.data().shape() == Shape{60000, 1, 28, 28});
  CHECK(train.targets().dtype() == DType::Int64);
  std::vector<int64_t> labels = test.targets().to_vector<int64_t>();
  std::vector<int64_t> per_class(10, 0);
  for (int64_t l : labels) {
    REQUIRE((l >= 0 && l < 10));
    ++per_class[l];
  }
  for (int64_t c : per_class) CHECK(c == 1000);  // the test split is balanced
  // Normalised with the training set's mean and std: a 2000-image sample has mean ~0, std ~1.
  Tensor sample = train.data().narrow(0, 2000);
  float m = mean(sample).item();
  float sd = std::sqrt(mean((sample - m) * (sample - m)).item());
  CHECK(std::abs(m) < 0.05f);
  CHECK(std::abs(sd - 1.0f) < 0.05f);
  FashionMNIST raw("test", {.normalize = false, .limit = 100});
  CHECK(raw.size() == 100);
  CHECK(max(raw.data()).item() <= 1.0f);
  CHECK(raw.targets().to_vector<int64_t>() ==
        std::vector<int64_t>(labels.begin(), labels.begin() + 100));
}

TEST_CASE("tiny IDX files load the same from gzip and plain, with the right values") {
  for (bool gzip : {true, false}) {
    CAPTURE(gzip);
    TempDir dir;
    write_tiny(dir.path, "train", 3, 3, gzip);
    FashionMNIST ds("train", {.root = dir.path.string(), .normalize = false});
    CHECK(ds.size() == 3);
    CHECK(ds.images_path().ends_with(gzip ? ".gz" : "ubyte"));
    CHECK(ds.targets().to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2});
    // pixel k = (7k) % 256; element k = 40 of image 0 is 280 % 256 = 24 -> 24/255
    CHECK(ds.data().to_vector<float>()[40] == doctest::Approx(24.0 / 255.0));
    FashionMNIST norm("train", {.root = dir.path.string()});
    // (24/255 - 0.2860) / 0.3530
    CHECK(norm.data().to_vector<float>()[40] ==
          doctest::Approx((24.0 / 255.0 - 0.2860) / 0.3530).epsilon(1e-5));
    FashionMNIST limited("train", {.root = dir.path.string(), .limit = 2});
    CHECK(limited.size() == 2);
  }
}

TEST_CASE("DPLAB_DATA is searched first") {
  TempDir dir;
  write_tiny(dir.path, "t10k", 4, 4, true);
  setenv("DPLAB_DATA", dir.path.c_str(), 1);
  FashionMNIST ds("test");
  unsetenv("DPLAB_DATA");
  CHECK(ds.size() == 4);
  CHECK(fs::path(ds.images_path()).parent_path() == dir.path);
}

TEST_CASE("a DPLAB_DATA that is not a directory warns once, then the usual places are searched") {
  TempDir dir;
  const std::string missing = (dir.path / "no-such-dir").string();
  std::ostringstream log;
  set_log_stream(&log);
  setenv("DPLAB_DATA", missing.c_str(), 1);
  auto first = fashion_mnist_search_path();
  auto second = fashion_mnist_search_path();
  unsetenv("DPLAB_DATA");
  set_log_stream(nullptr);
  CHECK(first.back() == kSystemDir.string());
  CHECK(second == first);
  const std::string text = log.str();
  CAPTURE(text);
  CHECK(text.find("DPLAB_DATA=" + missing + " is not a directory") != std::string::npos);
  CHECK(text.find("is not a directory") == text.rfind("is not a directory"));  // once
}

TEST_CASE(
    "a DPLAB_DATA directory without a split, or with a FIFO or a directory in its place, warns" *
    doctest::skip(no_real_files())) {
  TempDir dir;
  write_tiny(dir.path, "t10k", 4, 4, true);  // the test split only
  std::ostringstream log;
  set_log_stream(&log);
  setenv("DPLAB_DATA", dir.path.c_str(), 1);
  FashionMNIST train("train", {.limit = 1});  // from the system copy
  CHECK(fs::path(train.images_path()).parent_path() == kSystemDir);
  FashionMNIST test("test");
  CHECK(fs::path(test.images_path()).parent_path() == dir.path);  // the user's own
  std::string text = log.str();
  CAPTURE(text);
  CHECK(text.find("DPLAB_DATA=" + dir.path.string() +
                  " holds no usable train split "
                  "(train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz]); took it from " +
                  kSystemDir.string() + " instead") != std::string::npos);
  CHECK(text.find("test split") == std::string::npos);
  // a FIFO and a directory where the files should be: named in the warning
  TempDir odd;
  REQUIRE(mkfifo((odd.path / "train-images-idx3-ubyte.gz").c_str(), 0600) == 0);
  fs::create_directory(odd.path / "train-labels-idx1-ubyte");
  log.str("");
  setenv("DPLAB_DATA", odd.path.c_str(), 1);
  FashionMNIST again("train", {.limit = 1});
  unsetenv("DPLAB_DATA");
  set_log_stream(nullptr);
  text = log.str();
  CHECK(text.find((odd.path / "train-images-idx3-ubyte.gz").string() + " is a FIFO") !=
        std::string::npos);
  CHECK(text.find((odd.path / "train-labels-idx1-ubyte").string() + " is a directory") !=
        std::string::npos);
}

TEST_CASE("a flipped byte in a .gz file's checksum is reported as a failed gzip check") {
  for (int64_t n : {3, 3000}) {  // the check fails at the first read, or after all the data
    CAPTURE(n);
    TempDir dir;
    write_tiny(dir.path, "train", n, n, true);
    const fs::path images = dir.path / "train-images-idx3-ubyte.gz";
    std::string bytes;
    {
      std::ifstream in(images, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      bytes = ss.str();
    }
    bytes[bytes.size() - 8] ^= 0x5a;  // the CRC-32 in the gzip trailer: the data inflates fine
    std::ofstream(images, std::ios::binary | std::ios::trunc) << bytes;
    CHECK_THROWS_WITH_AS(read_idx_u8(images.string(), 3),
                         doctest::Contains("the file is corrupt: its gzip data or check failed "
                                           "(incorrect data check"),
                         Error);
    CHECK_THROWS_WITH_AS(read_idx_u8(images.string(), 3),
                         doctest::Contains(images.string().c_str()), Error);
  }
}

TEST_CASE(
    "an IDX header that claims terabytes fails as a truncated file, without allocating them") {
  TempDir dir;
  const fs::path images = dir.path / "huge-images-idx3-ubyte";
  // a valid 3-dim header saying 60000 x 65536 x 65536 (each dimension within its cap: the
  // product, 258 TB, is what must not be allocated), then 1000 bytes of data
  std::string bytes = {0, 0, 8, 3};
  for (uint32_t d : {60000u, 65536u, 65536u})
    for (int shift : {24, 16, 8, 0}) bytes += static_cast<char>((d >> shift) & 0xff);
  bytes += std::string(1000, '\x01');
  std::ofstream(images, std::ios::binary) << bytes;
  CHECK_THROWS_WITH_AS(read_idx_u8(images.string(), 3), doctest::Contains("file is truncated"),
                       Error);
  CHECK_THROWS_WITH_AS(read_idx_u8(images.string(), 3), doctest::Contains("the file holds 1000"),
                       Error);
}

TEST_CASE("a missing dataset names every place looked and the package to install") {
  TempDir dir;
  const std::string missing = (dir.path / "nothing-here").string();
  CHECK_THROWS_WITH_AS(FashionMNIST("train", {.root = missing}),
                       doctest::Contains("apt-get install dataset-fashion-mnist"), Error);
  CHECK_THROWS_WITH_AS(FashionMNIST("train", {.root = missing}), doctest::Contains(missing.c_str()),
                       Error);
  setenv("DPLAB_DATA", missing.c_str(), 1);
  try {
    FashionMNIST("nonsense");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("\"train\" or \"test\"") != std::string::npos);
  }
  // With no root, the message lists the search path (DPLAB_DATA first) when nothing is found.
  if (no_real_files()) {
    CHECK_THROWS_WITH_AS(FashionMNIST("train"), doctest::Contains(missing.c_str()), Error);
  }
  unsetenv("DPLAB_DATA");
  CHECK(fashion_mnist_search_path().back() == kSystemDir.string());
}

TEST_CASE("corrupt files give errors naming the file and what was expected") {
  TempDir dir;
  const std::string root = dir.path.string();
  const fs::path images = dir.path / "train-images-idx3-ubyte";
  const fs::path labels = dir.path / "train-labels-idx1-ubyte";

  SUBCASE("bad magic: a labels file where images are expected") {
    write_tiny(dir.path, "train", 2, 2, false);
    fs::copy_file(labels, images, fs::copy_options::overwrite_existing);
    CHECK_THROWS_WITH_AS(FashionMNIST("train", {.root = root}),
                         doctest::Contains("bad magic number"), Error);
    CHECK_THROWS_WITH_AS(FashionMNIST("train", {.root = root}),
                         doctest::Contains(images.string().c_str()), Error);
  }
  SUBCASE("truncated plain file") {
    write_tiny(dir.path, "train", 2, 2, false);
    truncate_by(images, 100);
    CHECK_THROWS_WITH_AS(FashionMNIST("train", {.root = root}), doctest::Contains("truncated"),
                         Error);
  }
  SUBCASE("truncated gzip file") {
    write_tiny(dir.path, "train", 2, 2, true);
    truncate_by(fs::path(images.string() + ".gz"), 20);
    CHECK_THROWS_WITH_AS(FashionMNIST("train", {.root = root}), doctest::Contains("truncated"),
                         Error);
  }
  SUBCASE("a header cut short") {
    std::ofstream(labels, std::ios::binary).write("\0\0\x08\x01\0", 5);
    write_idx_u8(images.string(), {1, 28, 28}, std::vector<uint8_t>(784), false);
    CHECK_THROWS_WITH_AS(FashionMNIST("train", {.root = root}), doctest::Contains("header sizes"),
                         Error);
  }
  SUBCASE("images and labels counts differ") {
    write_tiny(dir.path, "train", 3, 2, false);
    CHECK_THROWS_WITH_AS(
        FashionMNIST("train", {.root = root}),
        doctest::Contains(("has 3 images, " + labels.string() + " has 2 labels").c_str()), Error);
  }
  SUBCASE("more bytes than the header counts") {
    write_idx_u8(images.string(), {1, 28, 28}, std::vector<uint8_t>(784), false);
    write_idx_u8(labels.string(), {1}, {3}, false);
    std::ofstream(labels, std::ios::binary | std::ios::app).put('\x01');
    CHECK_THROWS_WITH_AS(FashionMNIST("train", {.root = root}),
                         doctest::Contains("the file has more"), Error);
  }
  SUBCASE("wrong image size and out-of-range labels") {
    write_idx_u8(images.string(), {1, 14, 56}, std::vector<uint8_t>(784), false);
    write_idx_u8(labels.string(), {1}, {3}, false);
    CHECK_THROWS_WITH_AS(FashionMNIST("train", {.root = root}), doctest::Contains("expected 28x28"),
                         Error);
    write_idx_u8(images.string(), {1, 28, 28}, std::vector<uint8_t>(784), false);
    write_idx_u8(labels.string(), {1}, {12}, false);
    CHECK_THROWS_WITH_AS(FashionMNIST("train", {.root = root}), doctest::Contains("label 12"),
                         Error);
  }
}

TEST_CASE("RandomDataset: seeded randn rows, targets are row indices") {
  RandomDataset a(5, 20, 1), b(5, 20, 1), c(5, 20, 2);
  CHECK(a.size() == 20);
  CHECK(a.data().shape() == Shape{20, 5});
  CHECK(a.data().to_vector<float>() == b.data().to_vector<float>());
  CHECK(a.data().to_vector<float>() != c.data().to_vector<float>());
  CHECK(a.get(13).target.item_int() == 13);
}

TEST_CASE("make_regression and make_classification: shapes, seeds, learnable") {
  auto reg = make_regression(64, 3, 2, 5);
  CHECK(reg->data().shape() == Shape{64, 3});
  CHECK(reg->targets().shape() == Shape{64, 2});
  CHECK(reg->targets().to_vector<float>() ==
        make_regression(64, 3, 2, 5)->targets().to_vector<float>());

  // Blobs: the nearest class mean (estimated from the data itself) labels >= 95% correctly.
  const int64_t n = 600, f = 4, k = 3;
  auto cls = make_classification(n, f, k, 9);
  std::vector<float> x = cls->data().to_vector<float>();
  std::vector<int64_t> y = cls->targets().to_vector<int64_t>();
  std::vector<double> centre(k * f, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < f; ++j) centre[y[i] * f + j] += x[i * f + j] / (n / k);
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t best = 0;
    double best_d = 1e30;
    for (int64_t c = 0; c < k; ++c) {
      double d = 0;
      for (int64_t j = 0; j < f; ++j) d += std::pow(x[i * f + j] - centre[c * f + j], 2);
      if (d < best_d) best_d = d, best = c;
    }
    correct += best == y[i];
  }
  CHECK(correct >= n * 95 / 100);
  CHECK_THROWS_WITH_AS(make_classification(10, 2, 1), doctest::Contains("classes >= 2"), Error);
}
