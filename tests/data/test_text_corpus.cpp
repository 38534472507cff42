// test_text_corpus.cpp: the byte-level corpus on text files this test writes (plain and
// gzip), so it needs no package: split sizes, windows that are contiguous and shifted by
// one, determinism, the ranks' shares, the unigram entropy by hand, and the errors. The
// Jargon File itself is checked where jargon-text is installed.
#include <doctest/doctest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "datasets/text_corpus.h"

using namespace dplab;
using namespace dplab::datasets;
namespace fs = std::filesystem;

namespace {

bool no_jargon_file() { return !fs::exists(kJargonFilePath); }

// A file under a fresh /tmp directory, removed when the test ends.
struct TempFile {
  fs::path dir, path;
  explicit TempFile(const std::string& name) {
    std::string tmpl = (fs::temp_directory_path() / "dplab_text_XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    dir = tmpl;
    path = dir / name;
  }
  ~TempFile() { fs::remove_all(dir); }
  void write(const std::string& text) const { std::ofstream(path, std::ios::binary) << text; }
  void write_gzip(const std::string& text) const {
    gzFile f = gzopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    REQUIRE(gzwrite(f, text.data(), static_cast<unsigned>(text.size())) ==
            static_cast<int>(text.size()));
    gzclose(f);
  }
};

// 1000 bytes in which every 8-byte window is unique: a window's position can be found again.
std::string distinct_text() {
  std::string s;
  Generator g(7);
  for (int i = 0; i < 1000; ++i) s.push_back(static_cast<char>('a' + g.randint(0, 26)));
  return s;
}

std::vector<std::vector<int64_t>> rows(const Tensor& t) {
  const std::vector<int64_t> v = t.to_vector<int64_t>();
  const int64_t width = t.shape()[1];
  std::vector<std::vector<int64_t>> out;
  for (size_t i = 0; i < v.size(); i += width)
    out.emplace_back(v.begin() + i, v.begin() + i + width);
  return out;
}

}  // namespace

TEST_CASE("TextCorpus splits a file: the last val_fraction validates, the rest trains") {
  TempFile f("book.txt");
  const std::string text = distinct_text();
  f.write(text);
  TextCorpus c({.path = f.path.string()});
  CHECK(c.path() == f.path.string());
  CHECK(c.bytes().size() == 1000);
  CHECK(c.train().size() == 900);
  CHECK(c.val().size() == 100);
  CHECK(std::equal(c.val().begin(), c.val().end(), text.begin() + 900));
  TextCorpus quarter({.path = f.path.string(), .val_fraction = 0.25});
  CHECK(quarter.val().size() == 250);

  TempFile gz("book.txt.gz");
  gz.write_gzip(text);
  TextCorpus from_gzip({.path = gz.path.string()});
  CHECK(std::equal(from_gzip.bytes().begin(), from_gzip.bytes().end(), text.begin(), text.end()));
}

TEST_CASE("sample_batch: contiguous windows of the split, y is x shifted by one") {
  TempFile f("book.txt");
  const std::string text = distinct_text();
  f.write(text);
  TextCorpus c({.path = f.path.string()});
  Generator rng(1);
  const int64_t B = 6, T = 8;
  for (TextSplit split : {TextSplit::Train, TextSplit::Val}) {
    const auto tokens = c.split(split);
    const TokenBatch batch = c.sample_batch(split, rng, B, T);
    CHECK(batch.x.shape() == Shape{B, T});
    CHECK(batch.y.shape() == Shape{B, T});
    CHECK(batch.x.dtype() == DType::Int64);
    const auto xs = rows(batch.x), ys = rows(batch.y);
    for (int64_t b = 0; b < B; ++b) {
      // find x's window in the split; y must be the T bytes one further on
      auto at = std::search(tokens.begin(), tokens.end(), xs[b].begin(), xs[b].end());
      REQUIRE(at != tokens.end());
      const auto i = at - tokens.begin();
      REQUIRE(i + T + 1 <= static_cast<int64_t>(tokens.size()));
      CHECK(std::equal(ys[b].begin(), ys[b].end(), tokens.begin() + i + 1));
    }
  }
}

TEST_CASE("sample_batch is deterministic for a seed; ranks take disjoint shares of one batch") {
  TempFile f("book.txt");
  f.write(distinct_text());
  TextCorpus c({.path = f.path.string()});
  Generator a(42), b(42), other(43);
  const TokenBatch first = c.sample_batch(TextSplit::Train, a, 4, 8);
  CHECK(first.x.to_vector<int64_t>() ==
        c.sample_batch(TextSplit::Train, b, 4, 8).x.to_vector<int64_t>());
  CHECK(first.x.to_vector<int64_t>() !=
        c.sample_batch(TextSplit::Train, other, 4, 8).x.to_vector<int64_t>());

  // 3 ranks of 2 rows each = one process's 6 rows, rank r holding rows r and r + 3.
  Generator whole_rng(5);
  const auto whole = rows(c.sample_batch(TextSplit::Train, whole_rng, 6, 8).x);
  for (int r = 0; r < 3; ++r) {
    Generator rank_rng(5);  // the same seed on every rank
    const auto mine =
        rows(c.sample_batch(TextSplit::Train, rank_rng, 2, 8, {.rank = r, .world_size = 3}).x);
    CAPTURE(r);
    CHECK(mine[0] == whole[r]);
    CHECK(mine[1] == whole[r + 3]);
    for (int q = 0; q < 3; ++q)
      if (q != r) CHECK(mine[0] != whole[q]);  // no rank repeats another's row
  }
  Generator rng(0);
  CHECK_THROWS_WITH_AS(c.sample_batch(TextSplit::Train, rng, 2, 8, {.rank = 3, .world_size = 3}),
                       doctest::Contains("rank must lie in [0, world_size), got rank 3 of 3"),
                       Error);
  CHECK_THROWS_WITH_AS(c.sample_batch(TextSplit::Val, rng, 2, 100),
                       doctest::Contains("a window of block 100 needs 101 bytes (x and the byte "
                                         "after it), the split has 100"),
                       Error);
  CHECK(c.sample_batch(TextSplit::Val, rng, 2, 99).x.shape() == Shape{2, 99});  // just fits
}

TEST_CASE("unigram_entropy is -sum p ln p over byte frequencies, in nats") {
  const auto of = [](const std::string& s) {
    return unigram_entropy(std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
  };
  CHECK(of("aaaa") == 0.0);
  CHECK(of("abcd") == doctest::Approx(std::log(4.0)));  // uniform over 4: ln 4 = 1.3862944
  // p(a) = 3/4, p(b) = 1/4: -(0.75 ln 0.75 + 0.25 ln 0.25) = 0.2157616 + 0.3465736
  CHECK(of("aaab") == doctest::Approx(0.5623351).epsilon(1e-6));
  // "abracadabra": a 5, b 2, r 2, c 1, d 1 of 11
  //   -(5/11 ln 5/11 + 2 * 2/11 ln 2/11 + 2 * 1/11 ln 1/11) = 0.3583897 + 0.6199084 + 0.4359810
  CHECK(of("abracadabra") == doctest::Approx(1.4142791).epsilon(1e-6));

  TempFile f("book.txt");
  std::string text(90, 'x');
  text += "aaaaabbbbb";  // validation: 5 a, 5 b
  f.write(text);
  TextCorpus c({.path = f.path.string()});
  CHECK(unigram_entropy(c.val()) == doctest::Approx(std::log(2.0)));
  CHECK(unigram_entropy(c.train()) == 0.0);
  CHECK_THROWS_WITH_AS(unigram_entropy({}), doctest::Contains("expected at least one byte"), Error);
}

TEST_CASE("TextCorpus errors say what is wrong and what to do") {
  TempFile f("missing.txt");
  CHECK_THROWS_WITH_AS(TextCorpus({.path = f.path.string()}),
                       doctest::Contains((f.path.string() + " was not found").c_str()), Error);
  CHECK_THROWS_WITH_AS(TextCorpus({.path = f.dir.string()}),
                       doctest::Contains("is not a regular file"), Error);
  f.write("abc");
  CHECK_THROWS_WITH_AS(TextCorpus({.path = f.path.string()}),
                       doctest::Contains("has 3 bytes: too few"), Error);
  CHECK_THROWS_WITH_AS(TextCorpus({.path = f.path.string(), .val_fraction = 1.0}),
                       doctest::Contains("val_fraction must lie in (0, 1), got 1"), Error);
  TempFile bad("broken.txt.gz");
  std::string gz;
  {
    TempFile tmp("x.gz");
    tmp.write_gzip(std::string(5000, 'z'));
    std::ifstream in(tmp.path, std::ios::binary);
    gz.assign(std::istreambuf_iterator<char>(in), {});
  }
  gz[gz.size() / 2] ^= 0x55;  // a flipped byte inside the deflate stream
  bad.write(gz.substr(0, gz.size() - 4));
  CHECK_THROWS_WITH_AS(TextCorpus({.path = bad.path.string()}), doctest::Contains("is corrupt"),
                       Error);
}

TEST_CASE("the default corpus missing names the Debian package" *
          doctest::skip(!no_jargon_file())) {
  CHECK_THROWS_WITH_AS(TextCorpus(),
                       doctest::Contains("install the Debian package jargon-text: "
                                         "apt-get install jargon-text"),
                       Error);
}

TEST_CASE("the Jargon File loads where jargon-text is installed" *
          doctest::skip(no_jargon_file())) {
  TextCorpus c;
  CHECK(c.path() == kJargonFilePath);
  CHECK(c.bytes().size() > 1000000);  // 1.7 MB of text
  CHECK(c.val().size() == c.bytes().size() / 10);
  const double h = unigram_entropy(c.val());
  MESSAGE("Jargon File: " << c.bytes().size() << " bytes, validation unigram entropy " << h
                          << " nats");
  CHECK(h > 2.5);  // English letters and spaces: between 2.5 and ln 256
  CHECK(h < std::log(256.0));
}
