// text_corpus.h: a byte-level text corpus for a character-level GPT. Every byte of a text
// file is a token (vocabulary 256: no tokenizer to train or ship, and any file works, UTF-8
// included); the first 90% trains and the last 10% validates, so the validation text is
// prose the model never saw, not a shuffle of lines it did.
// The default text is the Jargon File, 1.7 MB of English, about Tiny Shakespeare's size,
// shipped by Debian's jargon-text as one gzip file (kJargonFilePath).
//   datasets::TextCorpus corpus;                        // the Jargon File
//   datasets::TextCorpus mine({.path = "book.txt"});    // any file, plain or gzip
//   Generator rng(1337);
//   auto [x, y] = corpus.sample_batch(TextSplit::Train, rng, 16, 128);   // [16, 128] int64
//   double floor = datasets::unigram_entropy(corpus.val());   // nats per byte
// Read next: framework/data/sampler.h (the rank rule DistributedSampler follows too).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "framework/tensor/random.h"
#include "framework/tensor/tensor.h"

namespace dplab::datasets {

inline constexpr const char* kJargonFilePath = "/usr/share/doc/jargon-text/jargon.txt.gz";

struct TextCorpusOptions {
  std::string path = "";      // a text file, plain or gzip; empty: kJargonFilePath
  double val_fraction = 0.1;  // the last fraction of the bytes, in (0, 1)
};

enum class TextSplit { Train, Val };

// x: [B, T] int64, the bytes of B windows; y: [B, T], the same windows one byte later,
// the next-byte target of every position (y[b][t] = x[b][t + 1] for t < T - 1).
struct TokenBatch {
  Tensor x, y;
};

// Which share of a batch this process takes: DistributedSampler's (rank, num_replicas).
struct RankShare {
  int rank = 0;
  int world_size = 1;
};

// B random windows of T + 1 bytes from `tokens`, start i uniform in [0, n - T - 1]:
// x = tokens[i, i + T), y = tokens[i + 1, i + T + 1).
// Ranks: every rank draws the same world_size * B starts from its generator (seed it the
// same on every rank) and keeps rows rank, rank + world_size, ..., DistributedSampler's
// strided share of one permutation. So ranks never share a row of the global batch, and N
// ranks with B each see exactly the rows of one process with N * B: data parallel and
// single device train on the same data, which is what their comparison needs. The cost is
// N * B draws per rank, nothing next to a step. (A generator per rank, nanoGPT's seed +
// rank, also gives different batches but no such equality.)
// Throws when the split is too short for one window, naming its size.
TokenBatch sample_windows(std::span<const uint8_t> tokens, Generator& rng, int64_t batch,
                          int64_t block, RankShare share = {});

// H = -sum_b p(b) ln p(b) over the byte frequencies p of `bytes`, in nats: the loss per
// byte of the best model that ignores context. A language model's validation loss below it
// shows that it learned from context. Throws on no bytes.
double unigram_entropy(std::span<const uint8_t> bytes);

class TextCorpus {
 public:
  static constexpr int64_t kVocabSize = 256;

  // Throws when the file is missing (for the default, naming the Debian package to
  // install), unreadable, corrupt, or too short to split.
  explicit TextCorpus(TextCorpusOptions options = {});

  const std::string& path() const { return path_; }
  std::span<const uint8_t> bytes() const { return bytes_; }
  std::span<const uint8_t> train() const { return bytes().first(train_size_); }
  std::span<const uint8_t> val() const { return bytes().subspan(train_size_); }
  std::span<const uint8_t> split(TextSplit s) const {
    return s == TextSplit::Train ? train() : val();
  }

  TokenBatch sample_batch(TextSplit s, Generator& rng, int64_t batch, int64_t block,
                          RankShare share = {}) const {
    return sample_windows(split(s), rng, batch, block, share);
  }

 private:
  std::string path_;
  std::vector<uint8_t> bytes_;
  size_t train_size_ = 0;
};

}  // namespace dplab::datasets
