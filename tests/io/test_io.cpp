// test_io.cpp: safetensors round trips, the exact bytes we write, map_location, files as
// Python writes them, and atomic saves (a failed save leaves the old file and no temporary).
// Bad files are in test_safetensors_errors.cpp, checkpoints in test_checkpoint.cpp.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/resource.h>
#include <fstream>
#include <iterator>

#include "framework/backend/backend.h"
#include "framework/io/safetensors.h"
#include "framework/ops/ops.h"
#include "framework/tensor/allocator.h"
#include "tests/io/io_test_util.h"

using namespace dplab;
using dplab::test::TempDir;

TEST_CASE("safetensors: float32 and int64 tensors and metadata round trip") {
  TempDir dir;
  StateDict sd;
  sd.insert("w", from_vector(std::vector<float>{1.5f, -2.25f, 3e-8f, 4e30f, 0.f, -0.f}, {2, 3}));
  sd.insert("labels", from_vector(std::vector<int64_t>{0, -7, int64_t{1} << 40, 9}, {4}));
  sd.insert("scalar", from_vector(std::vector<float>{42.f}, {}));
  sd.insert("empty", Tensor::empty({0, 3}));
  Tensor rows = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2});
  sd.insert("row1", rows.narrow(1, 1));  // a view: offset into a shared storage
  Metadata meta{{"epoch", "3"},
                {"note", "quote \" backslash \\ newline \n tab \t bell \x07 unicode \xc3\xa9"}};
  save_safetensors(dir.file("a.safetensors"), sd, meta);

  Loaded back = load_safetensors(dir.file("a.safetensors"));
  CHECK(back.metadata == meta);
  REQUIRE(back.tensors.size() == 5);
  CHECK(back.tensors.at("row1").to_vector<float>() == std::vector<float>{3, 4});
  const Tensor& w = back.tensors.at("w");
  CHECK(w.shape() == Shape{2, 3});
  CHECK(w.dtype() == DType::Float32);
  CHECK(w.to_vector<float>() == sd.at("w").to_vector<float>());
  const Tensor& labels = back.tensors.at("labels");
  CHECK(labels.dtype() == DType::Int64);
  CHECK(labels.to_vector<int64_t>() == std::vector<int64_t>{0, -7, int64_t{1} << 40, 9});
  CHECK(back.tensors.at("scalar").shape().empty());
  CHECK(back.tensors.at("scalar").item() == 42.f);
  CHECK(back.tensors.at("empty").shape() == Shape{0, 3});
  // File order, as Python writes it: 8-byte elements first (aligned), then by name.
  CHECK(back.tensors.keys() == std::vector<std::string>{"labels", "empty", "row1", "scalar", "w"});
}

TEST_CASE("safetensors: float16 tensors are written as F16 and read back bit for bit") {
  TempDir dir;
  StateDict sd;
  Tensor half = from_vector(std::vector<float>{1.0f, -2.5f, 65504.0f, 0.099975586f}, {2, 2})
                    .to(DType::Float16);
  sd.insert("h", half);
  save_safetensors(dir.file("h.safetensors"), sd);
  std::ifstream in(dir.file("h.safetensors"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(bytes.find(R"("dtype":"F16")") != std::string::npos);
  CHECK(bytes.size() % 8 == 0);  // 8-byte header length + padded header + 4 x 2 data bytes
  Loaded back = load_safetensors(dir.file("h.safetensors"));
  const Tensor& h = back.tensors.at("h");
  CHECK(h.dtype() == DType::Float16);
  CHECK(h.to_vector<uint16_t>() == half.to_vector<uint16_t>());
  CHECK(h.to(DType::Float32).to_vector<float>() ==
        std::vector<float>{1.0f, -2.5f, 65504.0f, 0.099975586f});
}

TEST_CASE("safetensors: BF16 tensors (torch.bfloat16's layout: float32's top 16 bits) round-trip") {
  TempDir dir;
  StateDict sd;
  Tensor bf = from_vector(std::vector<float>{1.0f, -2.5f, 3.0e38f, 0.1f}, {4}).to(DType::BFloat16);
  sd.insert("b", bf);
  sd.insert("f", ones({2}));
  save_safetensors(dir.file("b.safetensors"), sd);
  std::ifstream in(dir.file("b.safetensors"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(bytes.find(R"("dtype":"BF16")") != std::string::npos);
  // 1.0 is 0x3f80 in bfloat16: stored little-endian as 80 3f, right after the header
  CHECK(bytes.find(std::string("\x80\x3f", 2)) != std::string::npos);
  Loaded back = load_safetensors(dir.file("b.safetensors"));
  const Tensor& b = back.tensors.at("b");
  CHECK(b.dtype() == DType::BFloat16);
  CHECK(b.to_vector<uint16_t>() == bf.to_vector<uint16_t>());
  CHECK(b.to(DType::Float32).to_vector<float>()[0] == 1.0f);
  CHECK(back.tensors.at("f").dtype() == DType::Float32);
}

TEST_CASE("safetensors: the exact bytes of a small file") {
  // Layout: u64 LE header length (56) | header padded with 2 spaces to 56 | 8 data bytes.
  TempDir dir;
  StateDict sd;
  sd.insert("a", from_vector(std::vector<float>{1.0f, 2.0f}, {2}));
  save_safetensors(dir.file("a.safetensors"), sd);
  std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  REQUIRE(header.size() == 54);
  std::string expected = std::string("\x38\0\0\0\0\0\0\0", 8) + header + "  " +
                         std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);
  CHECK(test::read_bytes(dir.file("a.safetensors")) == expected);

  // With metadata, "__metadata__" comes first, keys sorted (std::map), I64 before F32.
  sd.insert("i", from_vector(std::vector<int64_t>{5}, {1}));
  save_safetensors(dir.file("b.safetensors"), sd, {{"step", "7"}, {"epoch", "1"}});
  std::string h2 = R"({"__metadata__":{"epoch":"1","step":"7"},)"
                   R"("i":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
                   R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  h2.append((8 - h2.size() % 8) % 8, ' ');
  std::string expected2 = test::u64_le(h2.size()) + h2 + test::le_bytes(std::vector<int64_t>{5}) +
                          test::le_bytes(std::vector<float>{1.0f, 2.0f});
  CHECK(test::read_bytes(dir.file("b.safetensors")) == expected2);
}

TEST_CASE("safetensors: the same bytes as the reference writer's own test vectors") {
  // The reference (Rust) implementation's serializer tests pin these outputs; Python's
  // save_file goes through the same code.
  TempDir dir;
  save_safetensors(dir.file("empty.safetensors"), StateDict{});
  CHECK(test::read_bytes(dir.file("empty.safetensors")) == test::u64_le(8) + "{}      ");

  save_safetensors(dir.file("meta.safetensors"), StateDict{}, {{"framework", "pt"}});
  CHECK(test::read_bytes(dir.file("meta.safetensors")) ==
        test::u64_le(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");

  // "attn0" F32 [1,1,2,3] = 0..5: a 65-byte header padded with 7 spaces to 72.
  StateDict sd;
  sd.insert("attn0", from_vector(std::vector<float>{0, 1, 2, 3, 4, 5}, {1, 1, 2, 3}));
  save_safetensors(dir.file("attn.safetensors"), sd);
  CHECK(test::read_bytes(dir.file("attn.safetensors")) ==
        test::u64_le(72) + R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" +
            "       " + test::le_bytes(std::vector<float>{0, 1, 2, 3, 4, 5}));

  // Tensors given out of order are written I64 first, then by name, like Python.
  StateDict mixed;
  mixed.insert("z", from_vector(std::vector<float>{1}, {1}));
  mixed.insert("b", from_vector(std::vector<int64_t>{2}, {1}));
  mixed.insert("a", from_vector(std::vector<float>{3}, {1}));
  save_safetensors(dir.file("mixed.safetensors"), mixed);
  std::string h = R"({"b":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
                  R"("a":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
                  R"("z":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})";
  CHECK(test::read_bytes(dir.file("mixed.safetensors")) ==
        test::safetensors_bytes(
            h, test::le_bytes(std::vector<int64_t>{2}) + test::le_bytes(std::vector<float>{3, 1})));
}

TEST_CASE("safetensors: map_location places tensors on cpu:3 and counts them there") {
  TempDir dir;
  StateDict sd;
  sd.insert("x", from_vector(std::vector<float>(1000, 0.5f), {10, 100}));
  sd.insert("y", from_vector(std::vector<int64_t>(10, 3), {10}));
  save_safetensors(dir.file("m.safetensors"), sd);

  const Device d3("cpu:3");
  int64_t before = memory_stats(d3).allocated_bytes;
  {
    Loaded back = load_safetensors(dir.file("m.safetensors"), d3);
    CHECK(back.tensors.at("x").device() == d3);
    CHECK(back.tensors.at("y").device() == d3);
    CHECK(memory_stats(d3).allocated_bytes - before == 1000 * 4 + 10 * 8);
    CHECK(back.tensors.at("x").to_vector<float>() == std::vector<float>(1000, 0.5f));
  }
  CHECK(memory_stats(d3).allocated_bytes == before);
}

TEST_CASE("safetensors: GPU tensors are written from the host and loaded onto cuda:0" *
          doctest::skip(cuda_device_count() == 0)) {
  TempDir dir;
  StateDict sd;
  sd.insert("g", from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2}).to(Device("cuda:0")));
  sd.insert("n", from_vector(std::vector<int64_t>{9, 8}, {2}).to(Device("cuda:0")));
  save_safetensors(dir.file("g.safetensors"), sd);
  Loaded back = load_safetensors(dir.file("g.safetensors"), Device("cuda:0"));
  CHECK(back.tensors.at("g").device() == Device("cuda:0"));
  CHECK(back.tensors.at("g").to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  CHECK(back.tensors.at("n").to_vector<int64_t>() == std::vector<int64_t>{9, 8});
  Loaded host = load_safetensors(dir.file("g.safetensors"));
  CHECK(host.tensors.at("g").device().is_cpu());
}

TEST_CASE("safetensors: a file as Python writes it loads (metadata, sorted keys, padding)") {
  // What safetensors.torch.save_file({"weight": ..., "bias": ..., "steps": ...},
  // metadata={"format": "pt"}) produces: compact JSON, __metadata__ first, tensors sorted
  // by (alignment, name): I64 first, then "bias" before "weight"; spaces to 8 bytes.
  TempDir dir;
  std::string header = R"({"__metadata__":{"format":"pt"},)"
                       R"("steps":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
                       R"("bias":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                       R"("weight":{"dtype":"F32","shape":[2,3],"data_offsets":[16,40]}})";
  std::string data = test::le_bytes(std::vector<int64_t>{1234}) +
                     test::le_bytes(std::vector<float>{0.5f, -0.5f}) +
                     test::le_bytes(std::vector<float>{1, 2, 3, 4, 5, 6});
  std::string bytes = test::safetensors_bytes(header, data);
  REQUIRE((bytes.size() - data.size()) % 8 == 0);
  test::write_bytes(dir.file("py.safetensors"), bytes);
  Loaded back = load_safetensors(dir.file("py.safetensors"));
  CHECK(back.metadata == Metadata{{"format", "pt"}});
  CHECK(back.tensors.at("steps").item_int() == 1234);
  CHECK(back.tensors.at("bias").to_vector<float>() == std::vector<float>{0.5f, -0.5f});
  CHECK(back.tensors.at("weight").shape() == Shape{2, 3});
  CHECK(back.tensors.at("weight").to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
}

TEST_CASE(
    "safetensors: header keys in any order, whitespace, escapes and no padding are accepted") {
  TempDir dir;
  // "b" is listed first but stored second; the header is pretty-printed, not padded.
  std::string header =
      "{\n  \"b\" : {\"shape\": [1], \"data_offsets\": [4, 8], \"dtype\": \"F32\"},\n"
      "  \"a\\u00e9\\\"q\" : {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}\n}";
  std::string data = test::le_bytes(std::vector<float>{1.f, 2.f});
  test::write_bytes(dir.file("k.safetensors"),
                    test::safetensors_bytes(header, data, /*pad_to_8=*/false));
  Loaded back = load_safetensors(dir.file("k.safetensors"));
  CHECK(back.tensors.keys() ==
        std::vector<std::string>{"a\xc3\xa9\"q", "b"});  // file (offset) order
  CHECK(back.tensors.at("a\xc3\xa9\"q").item() == 1.f);
  CHECK(back.tensors.at("b").item() == 2.f);
  CHECK(back.metadata.empty());
}

namespace {
StateDict small_dict(float v) {
  StateDict sd;
  sd.insert("a", from_vector(std::vector<float>{v, v}, {2}));
  return sd;
}
}  // namespace

TEST_CASE("safetensors: a failed save leaves the previous file intact and no temporary behind") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  save_safetensors(path, small_dict(1.f));
  const std::string good = test::read_bytes(path);

  SUBCASE("the disk fills up half-way (RLIMIT_FSIZE makes write() fail with EFBIG)") {
    StateDict big;
    big.insert("big", from_vector(std::vector<float>(1 << 16, 1.f), {1 << 16}));  // 256 KiB
    rlimit old{};
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
    rlimit small = old;
    small.rlim_cur = 64 * 1024;
    auto old_handler = signal(SIGXFSZ, SIG_IGN);  // else the kernel kills us instead of EFBIG
    REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
    std::string msg;
    try {
      save_safetensors(path, big);
    } catch (const Error& e) {
      msg = e.what();
    }
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_handler);
    CHECK(msg.find("writing") != std::string::npos);
    CHECK(msg.find("File too large") != std::string::npos);
  }
  SUBCASE("the rename fails (the target is a directory)") {
    std::filesystem::create_directory(dir.file("taken"));
    test::write_bytes(dir.file("taken/inside"), "x");
    CHECK_THROWS_WITH(save_safetensors(dir.file("taken"), small_dict(2.f)),
                      doctest::Contains("renaming"));
    CHECK(test::read_bytes(dir.file("taken/inside")) == "x");
  }
  SUBCASE("a tensor cannot be written (undefined)") {
    StateDict bad = small_dict(3.f);
    bad.insert("hole", Tensor());
    CHECK_THROWS_WITH(save_safetensors(path, bad),
                      doctest::Contains("tensor \"hole\" is undefined"));
  }
  SUBCASE("the directory does not exist") {
    CHECK_THROWS_WITH(save_safetensors(dir.file("no/such/dir/x.safetensors"), small_dict(4.f)),
                      doctest::Contains("cannot create the temporary file"));
  }
  CHECK(test::read_bytes(path) == good);
  for (const std::string& name : dir.entries()) CHECK(name.find(".tmp-") == std::string::npos);
  CHECK(load_safetensors(path).tensors.at("a").to_vector<float>() == std::vector<float>{1.f, 1.f});
}

TEST_CASE("safetensors: saving over an existing file replaces it whole") {
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  save_safetensors(path, small_dict(1.f));
  save_safetensors(path, small_dict(5.f), {{"epoch", "2"}});
  Loaded back = load_safetensors(path);
  CHECK(back.tensors.at("a").to_vector<float>() == std::vector<float>{5.f, 5.f});
  CHECK(back.metadata.at("epoch") == "2");
  CHECK(dir.entries() == std::vector<std::string>{"x.safetensors"});
  CHECK_THROWS_WITH(save_safetensors(
                        path,
                        [] {
    StateDict sd;
    sd.insert("__metadata__", Tensor::empty({1}));
    return sd;
                        }()),
                    doctest::Contains("reserved"));
}
