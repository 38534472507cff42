// text_corpus.cpp: reading the file (zlib's gzread reads gzip and passes plain files
// through unchanged, so one path serves both), the split, the windows, the entropy.
// Read next: tests/data/test_text_corpus.cpp.
#include "datasets/text_corpus.h"

#include <zlib.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>

#include "framework/error.h"
#include "framework/ops/ops.h"

namespace dplab::datasets {

namespace fs = std::filesystem;

namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};

// Why the file cannot be read, in words a user can act on; "" when it can.
std::string why_unreadable(const std::string& path, bool is_default) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::is_regular_file(st)) return "";
  if (fs::exists(st)) return fmt::format("TextCorpus: {} is not a regular file", path);
  if (!is_default) return fmt::format("TextCorpus: {} was not found", path);
  std::string msg = fmt::format(
      "TextCorpus: the default corpus {} was not found: install the Debian package jargon-text: "
      "apt-get install jargon-text (or pass TextCorpusOptions::path to a text file of your "
      "own)",
      path);
  // Some minimal images tell dpkg to skip /usr/share/doc, where this package puts its text.
  if (fs::is_directory(fs::path(path).parent_path(), ec))
    msg += "; jargon-text looks installed, so dpkg may be set to leave out /usr/share/doc "
           "(see /etc/dpkg/dpkg.cfg.d)";
  return msg;
}

std::vector<uint8_t> read_all(const std::string& path) {
  std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser> f(gzopen(path.c_str(), "rb"));
  DPLAB_CHECK(f != nullptr, "TextCorpus: cannot open {}: {}", path, std::strerror(errno));
  std::vector<uint8_t> out;
  std::array<uint8_t, 1 << 16> slice;
  for (;;) {
    const int got = gzread(f.get(), slice.data(), static_cast<unsigned>(slice.size()));
    if (got < 0) {
      int code = 0;
      const char* msg = gzerror(f.get(), &code);
      DPLAB_FAIL("TextCorpus: {} is corrupt or unreadable after {} bytes: {}", path, out.size(),
                 msg ? msg : "?");
    }
    if (got == 0) break;
    out.insert(out.end(), slice.begin(), slice.begin() + got);
  }
  return out;
}

}  // namespace

TextCorpus::TextCorpus(TextCorpusOptions options) {
  DPLAB_CHECK(options.val_fraction > 0.0 && options.val_fraction < 1.0,
              "TextCorpus: val_fraction must lie in (0, 1), got {}", options.val_fraction);
  const bool is_default = options.path.empty();
  path_ = is_default ? kJargonFilePath : options.path;
  if (std::string why = why_unreadable(path_, is_default); !why.empty()) DPLAB_FAIL("{}", why);
  bytes_ = read_all(path_);
  const auto val_size = static_cast<size_t>(std::floor(options.val_fraction * bytes_.size()));
  train_size_ = bytes_.size() - val_size;
  DPLAB_CHECK(val_size >= 2 && train_size_ >= 2,
              "TextCorpus: {} has {} bytes: too few for a train and a validation split of at "
              "least 2 bytes each with val_fraction {}",
              path_, bytes_.size(), options.val_fraction);
}

TokenBatch sample_windows(std::span<const uint8_t> tokens, Generator& rng, int64_t batch,
                          int64_t block, RankShare share) {
  DPLAB_CHECK(batch > 0 && block > 0, "sample_windows: batch and block must be > 0, got {} and {}",
              batch, block);
  DPLAB_CHECK(share.world_size >= 1 && share.rank >= 0 && share.rank < share.world_size,
              "sample_windows: rank must lie in [0, world_size), got rank {} of {}", share.rank,
              share.world_size);
  const auto n = static_cast<int64_t>(tokens.size());
  DPLAB_CHECK(n >= block + 1,
              "sample_windows: a window of block {} needs {} bytes (x and the byte after it), "
              "the split has {}",
              block, block + 1, n);
  std::vector<int64_t> x, y;
  x.reserve(static_cast<size_t>(batch * block));
  y.reserve(x.capacity());
  const int64_t rows = batch * share.world_size;  // the global batch every rank draws
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t start = rng.randint(0, n - block);  // last start n - block - 1
    if (row % share.world_size != share.rank) continue;
    for (int64_t t = 0; t < block; ++t) {
      x.push_back(tokens[static_cast<size_t>(start + t)]);
      y.push_back(tokens[static_cast<size_t>(start + t + 1)]);
    }
  }
  return {from_vector(x, {batch, block}, {.dtype = DType::Int64}),
          from_vector(y, {batch, block}, {.dtype = DType::Int64})};
}

double unigram_entropy(std::span<const uint8_t> bytes) {
  DPLAB_CHECK(!bytes.empty(), "unigram_entropy: expected at least one byte, got none");
  std::array<int64_t, 256> count{};
  for (uint8_t b : bytes) ++count[b];
  const auto n = static_cast<double>(bytes.size());
  double h = 0.0;
  for (int64_t c : count)
    if (c > 0) h -= (c / n) * std::log(c / n);  // 0 ln 0 = 0: absent bytes add nothing
  return h;
}

}  // namespace dplab::datasets
