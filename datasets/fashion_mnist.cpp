// fashion_mnist.cpp: finding the files, reading them with idx_file.h, checking that images
// and labels agree, and turning bytes into normalised float tensors.
// Read next: synthetic.cpp.
#include "datasets/fashion_mnist.h"

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <set>

#include "datasets/idx_file.h"
#include "framework/io/log.h"
#include "framework/io/settings.h"
#include "framework/ops/ops.h"

namespace dplab::datasets {

namespace fs = std::filesystem;

struct FashionMNIST::Loaded {
  Tensor images, labels;
  std::string images_path, labels_path;
};

namespace {

// True the first time a value is seen in this process.
bool first_time_for(const std::string& value) {
  static std::mutex mu;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mu);
  return seen.insert(value).second;
}

}  // namespace

std::vector<std::string> fashion_mnist_search_path() {
  std::vector<std::string> dirs;
  if (const auto env = setting_value("DPLAB_DATA")) {
    try {
      parse_data_setting(*env);
    } catch (const Error&) {
      if (first_time_for(*env))  // not once per split
        log_warning("DPLAB_DATA={} is not a directory; looking for Fashion-MNIST in the usual "
                    "places instead",
                    *env);
    }
    dirs.push_back(*env);
    dirs.push_back((fs::path(*env) / "fashion-mnist").string());
  }
  dirs.push_back("./data/fashion-mnist");
  dirs.push_back("/usr/share/datasets/fashion-mnist");
  return dirs;
}

namespace {

// "<dir>/<name>.gz" if it is a file, else "<dir>/<name>" if it is, else "". A candidate
// that exists but is no regular file (a directory, a FIFO) is noted in `odd`.
std::string find_file(const std::string& dir, const std::string& name, std::string& odd) {
  for (const std::string& candidate : {name + ".gz", name}) {
    fs::path p = fs::path(dir) / candidate;
    std::error_code ec;
    const fs::file_status st = fs::status(p, ec);
    if (fs::is_regular_file(st)) return p.string();
    if (fs::exists(st)) {
      const char* kind = fs::is_directory(st) ? "a directory"
                         : fs::is_fifo(st)    ? "a FIFO"
                         : fs::is_socket(st)  ? "a socket"
                                              : "not a regular file";
      odd += fmt::format("{}{} is {}", odd.empty() ? "" : "; ", p.string(), kind);
    }
  }
  return "";
}

}  // namespace

FashionMNIST::Loaded FashionMNIST::load(const std::string& split, const FashionMNISTOptions& o) {
  DPLAB_CHECK(split == "train" || split == "test",
              "FashionMNIST: split must be \"train\" or \"test\", got \"{}\"", split);
  DPLAB_CHECK(o.limit >= 0, "FashionMNIST: limit must be >= 0, got {}", o.limit);
  const std::string prefix = split == "train" ? "train" : "t10k";
  const std::string images_name = prefix + "-images-idx3-ubyte";
  const std::string labels_name = prefix + "-labels-idx1-ubyte";

  std::vector<std::string> dirs =
      o.root.empty() ? fashion_mnist_search_path() : std::vector<std::string>{o.root};
  Loaded out;
  std::string looked, odd;
  const std::optional<std::string> env = setting_value("DPLAB_DATA");
  // the search path starts with DPLAB_DATA's two directories when it is set
  const size_t env_dirs = o.root.empty() && env ? 2 : 0;
  for (size_t i = 0; i < dirs.size(); ++i) {
    const std::string& dir = dirs[i];
    std::string images = find_file(dir, images_name, odd),
                labels = find_file(dir, labels_name, odd);
    if (!images.empty() && !labels.empty()) {
      out.images_path = images;
      out.labels_path = labels;
      // DPLAB_DATA names a directory, but this split came from elsewhere: say so, or a
      // user who thinks they train on their own copy never learns they do not.
      std::error_code ec;
      if (i >= env_dirs && env_dirs > 0 && fs::is_directory(*env, ec) &&
          first_time_for(*env + "/" + split))
        log_warning("DPLAB_DATA={} holds no usable {} split ({}[.gz] and {}[.gz]{}); took it from "
                    "{} instead",
                    *env, split, images_name, labels_name, odd.empty() ? "" : "; " + odd, dir);
      break;
    }
    looked += fmt::format("\n  {}/{}[.gz] and {}[.gz]", dir, images_name, labels_name);
  }
  if (out.images_path.empty() && !odd.empty()) looked += "\n  (" + odd + ")";
  DPLAB_CHECK(!out.images_path.empty(),
              "FashionMNIST: the {} split was not found; looked for:{}\ninstall Debian's "
              "dataset-fashion-mnist package (apt-get install dataset-fashion-mnist) or set "
              "DPLAB_DATA to a directory holding the four IDX files",
              split, looked);

  IdxData images = read_idx_u8(out.images_path, 3, o.limit);
  IdxData labels = read_idx_u8(out.labels_path, 1, o.limit);
  DPLAB_CHECK(images.dims[1] == 28 && images.dims[2] == 28,
              "{}: expected 28x28 images, the header says {}x{}", out.images_path, images.dims[1],
              images.dims[2]);
  DPLAB_CHECK(images.dims[0] == labels.dims[0],
              "FashionMNIST: image and label counts differ: {} has {} images, {} has {} labels",
              out.images_path, images.dims[0], out.labels_path, labels.dims[0]);

  const int64_t n = static_cast<int64_t>(labels.bytes.size());
  std::vector<int64_t> label_values(labels.bytes.begin(), labels.bytes.end());
  for (int64_t i = 0; i < n; ++i)
    DPLAB_CHECK(label_values[i] < 10, "{}: label {} of example {} is outside [0, 10)",
                out.labels_path, label_values[i], i);

  // pixel p in 0..255 -> p / 255, then optionally (x - mean) / std: one pass on the host.
  const float scale = o.normalize ? static_cast<float>(1.0 / (255.0 * kStd)) : 1.0f / 255.0f;
  const float shift = o.normalize ? static_cast<float>(-kMean / kStd) : 0.0f;
  std::vector<float> pixels(images.bytes.size());
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = images.bytes[i] * scale + shift;

  out.images = from_vector(pixels, {n, 1, 28, 28});
  out.labels = from_vector(label_values, {n}, {.dtype = DType::Int64});
  return out;
}

FashionMNIST::FashionMNIST(const std::string& split, FashionMNISTOptions options)
    : FashionMNIST(load(split, options)) {}

FashionMNIST::FashionMNIST(Loaded loaded)
    : data::TensorDataset(std::move(loaded.images), std::move(loaded.labels)),
      images_path_(std::move(loaded.images_path)), labels_path_(std::move(loaded.labels_path)) {}

}  // namespace dplab::datasets
