// test_safetensors_errors.cpp: every way a file can be bad, and the message that says so.
// Each case writes a small hand-made file and checks load_safetensors throws dplab::Error
// naming the broken rule (never a crash, a hang or a huge allocation).
#include <doctest/doctest.h>

#include <filesystem>

#include "framework/io/json.h"
#include "framework/io/safetensors.h"
#include "framework/ops/ops.h"
#include "tests/io/io_test_util.h"

using namespace dplab;
using dplab::test::TempDir;

namespace {

// Writes bytes to a file in dir and returns what loading it throws ("" if it loads).
std::string load_error(const TempDir& dir, const std::string& bytes) {
  const std::string path = dir.file("bad.safetensors");
  test::write_bytes(path, bytes);
  try {
    load_safetensors(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// One F32 tensor "a" with the given entry JSON and data bytes.
std::string file_with(const std::string& entry, size_t data_bytes) {
  return test::safetensors_bytes(R"({"a":)" + entry + "}", std::string(data_bytes, '\0'));
}

void check_has(const std::string& msg, const std::string& part) {
  INFO("message: " << msg);
  CHECK(msg.find(part) != std::string::npos);
}

}  // namespace

TEST_CASE("bad safetensors: too short, bad lengths, not safetensors at all") {
  TempDir dir;
  check_has(load_error(dir, "abcde"), "the file has 5 bytes, too short for a safetensors file");
  check_has(load_error(dir, ""), "the file has 0 bytes");
  // Length field says 1000, but only 10 bytes follow.
  check_has(load_error(dir, test::u64_le(1000) + "{\"a\":1}   "),
            "header length 1000 but only 10 bytes follow the length field (truncated?)");
  check_has(load_error(dir, test::u64_le(200'000'000) + "{}"),
            "header length 200000000 exceeds the 100 MB limit");
  // A text file: its first 8 bytes read as a huge length.
  check_has(load_error(dir, "not a safetensors file at all, just some text\n"),
            "not a safetensors file?");
  // A plausible length, but the header is not a JSON object.
  check_has(load_error(dir, test::safetensors_bytes("[1,2,3]", "")), "does not start with '{'");
  check_has(load_error(dir, test::u64_le(0)), "does not start with '{'");
  CHECK_THROWS_WITH(load_safetensors(dir.file("missing.safetensors")),
                    doctest::Contains("cannot open"));
  CHECK_THROWS_WITH(load_safetensors(dir.path), doctest::Contains("is not a regular file"));
}

TEST_CASE("bad safetensors: header is not valid JSON") {
  TempDir dir;
  check_has(load_error(dir, test::safetensors_bytes(R"({"a":{"dtype":"F32",)", "")),
            "invalid JSON header");
  check_has(load_error(dir, test::safetensors_bytes(R"({"a" 1})", "")),
            "expected ':' after a key at byte 5");
  check_has(load_error(dir, test::safetensors_bytes(R"({"a":{}} x)", "", false)),
            "only whitespace may follow");
  check_has(load_error(dir, test::safetensors_bytes(R"({"a":{"dtype":"F32","dtype":"F32"}})", "")),
            "duplicate key \"dtype\"");
  check_has(load_error(dir, test::safetensors_bytes(R"({"a":{"shape":[2.0]}})", "")),
            "non-integer number");
  check_has(load_error(dir, test::safetensors_bytes(R"({"a":true})", "")), "true/false/null");
  check_has(load_error(dir, test::safetensors_bytes(R"({"a":"\q"})", "")), "expected one of");
  check_has(load_error(dir, test::safetensors_bytes(R"({"a":99999999999999999999})", "")),
            "does not fit in 64 bits");
  check_has(
      load_error(dir, test::safetensors_bytes(std::string(200, '[') + std::string(200, ']'), "")),
      "does not start with '{'");
  check_has(
      load_error(dir, test::safetensors_bytes(
                          "{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}", "")),
      "nested deeper than 64 levels");
  check_has(load_error(dir, test::safetensors_bytes("{\"a\xff\":{}}", "")),
            "not valid UTF-8 at byte 3");
  check_has(load_error(dir, test::safetensors_bytes("{\"\xc0\xaf\":{}}", "")),
            "not valid UTF-8 at byte 2");  // overlong '/'
  // The message names the file and does not repeat the inner source location.
  std::string msg = load_error(dir, test::safetensors_bytes(R"({"a")", ""));
  check_has(msg, "bad.safetensors");
  CHECK(msg.find("json.cpp") == std::string::npos);
}

TEST_CASE("bad safetensors: tensor entries with missing or wrong fields") {
  TempDir dir;
  check_has(load_error(dir, file_with("5", 0)),
            "tensor \"a\": expected an object with dtype, shape and data_offsets");
  check_has(load_error(dir, file_with(R"({"shape":[2],"data_offsets":[0,8]})", 8)),
            "tensor \"a\": missing \"dtype\"");
  check_has(load_error(dir, file_with(R"({"dtype":"F32","data_offsets":[0,8]})", 8)),
            "tensor \"a\": missing \"shape\"");
  check_has(load_error(dir, file_with(R"({"dtype":"F32","shape":[2]})", 8)),
            "tensor \"a\": missing \"data_offsets\"");
  check_has(load_error(dir, file_with(R"({"dtype":4,"shape":[2],"data_offsets":[0,8]})", 8)),
            "\"dtype\" must be a string, got a integer");
  check_has(load_error(dir, file_with(R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})", 8)),
            "\"shape\" must be an array");
  check_has(load_error(dir, file_with(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})", 8)),
            "shape entries must be non-negative integers");
  check_has(
      load_error(
          dir, file_with(R"({"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]})", 4)),
      "shape has 9 dims; dplab tensors have at most 8");
  check_has(load_error(dir, file_with(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})", 8)),
            "\"data_offsets\" must be an array [begin, end]");
  check_has(load_error(dir, file_with(R"({"dtype":"F32","shape":[2],"data_offsets":[-8,0]})", 8)),
            "data_offsets must be non-negative integers");
  check_has(load_error(dir, test::safetensors_bytes(R"({"__metadata__":{"epoch":3}})", "")),
            "__metadata__ value of \"epoch\" must be a string, got a integer");
  check_has(load_error(dir, test::safetensors_bytes(R"({"__metadata__":[]})", "")),
            "__metadata__ must be an object");
}

TEST_CASE("bad safetensors: dtypes other than F32 and I64") {
  TempDir dir;
  check_has(load_error(dir, file_with(R"({"dtype":"I16","shape":[2],"data_offsets":[0,4]})", 4)),
            "tensor \"a\": I16 is not supported; dplab reads F32, F16, BF16 and I64");
  check_has(load_error(dir, file_with(R"({"dtype":"F64","shape":[1],"data_offsets":[0,8]})", 8)),
            "F64 is not supported");
  check_has(
      load_error(dir, file_with(R"({"dtype":"float32","shape":[2],"data_offsets":[0,8]})", 8)),
      "unknown dtype \"float32\" (not a safetensors dtype; dplab reads F32, F16, BF16 and I64)");
  CHECK(parse_safetensors_dtype("BF16") == DType::BFloat16);
  CHECK_THROWS_WITH(parse_safetensors_dtype("Q7"), doctest::Contains("unknown dtype \"Q7\""));
  CHECK(parse_safetensors_dtype("I64") == DType::Int64);
}

TEST_CASE("bad safetensors: sizes and offsets") {
  TempDir dir;
  check_has(load_error(dir, file_with(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})", 8)),
            "shape [3] of F32 needs 12 bytes, but data_offsets [0, 8] span 8");
  check_has(load_error(dir, file_with(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})", 8)),
            "data_offsets [0, 16] run past the data section (8 bytes)");
  check_has(load_error(dir, file_with(R"({"dtype":"F32","shape":[0],"data_offsets":[8,4]})", 8)),
            "end before they begin");
  check_has(
      load_error(
          dir,
          file_with(R"({"dtype":"I64","shape":[4294967296,4294967296],"data_offsets":[0,8]})", 8)),
      "overflows 64 bits");
  // Two tensors sharing bytes 4..8.
  std::string two = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  check_has(load_error(dir, test::safetensors_bytes(two, std::string(12, '\0'))),
            "tensor \"b\" [4, 12] overlaps tensor \"a\" [0, 8]");
  // A hole between them.
  std::string gap = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})";
  check_has(load_error(dir, test::safetensors_bytes(gap, std::string(20, '\0'))),
            "bytes [8, 12) of the data section belong to no tensor");
  // Trailing bytes no tensor claims: the data must be fully covered (the reference rule).
  check_has(load_error(dir, file_with(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 12)),
            "the tensors cover 8 bytes but the data section has 12");
  // A truncated data section (a copy that stopped early).
  check_has(load_error(dir, file_with(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})", 10)),
            "run past the data section (10 bytes)");
}

TEST_CASE("json: strings escape and parse back the way serde_json writes them") {
  std::string out;
  append_json_string(out, std::string("a\"b\\c\n\x01\xc3\xa9"));
  CHECK(out == "\"a\\\"b\\\\c\\n\\u0001\xc3\xa9\"");
  JsonValue v =
      parse_json("[\"" + out.substr(1, out.size() - 2) + "\", \"\\ud83d\\ude00\", -5, {}]");
  REQUIRE(v.items.size() == 4);
  CHECK(v.items[0].str == std::string("a\"b\\c\n\x01\xc3\xa9"));
  CHECK(v.items[1].str == "\xf0\x9f\x98\x80");  // U+1F600 from a surrogate pair
  CHECK(v.items[2].integer == -5);
  CHECK(v.items[3].kind == JsonValue::Kind::Object);
  CHECK_THROWS_WITH(parse_json("\"\\ude00\""), doctest::Contains("no lone low surrogate"));
  CHECK_THROWS_WITH(parse_json("012"), doctest::Contains("leading zero"));
  CHECK(utf8_error_at("plain \xc3\xa9 \xf0\x9f\x98\x80") == std::string_view::npos);
  CHECK(utf8_error_at("ab\xed\xa0\x80") == 2);  // an encoded surrogate
  CHECK(utf8_error_at("abc\xe2\x82") == 3);     // cut short
  // The writer refuses names Python's reader would refuse, before creating any file.
  TempDir dir;
  StateDict sd;
  sd.insert("latin1 \xe9", from_vector(std::vector<float>{1.f}, {1}));
  CHECK_THROWS_WITH(save_safetensors(dir.file("x.safetensors"), sd),
                    doctest::Contains("is not valid UTF-8 (byte 7)"));
  CHECK(dir.entries().empty());
}

TEST_CASE("bad safetensors: random corruption and truncation never crash, only throw Error") {
  // Flip bytes of a valid file (header and data) and cut it at random lengths; each load
  // must either succeed or throw dplab::Error. Offsets are checked against the file size
  // before anything is allocated, so no corruption can ask for more memory than the file.
  TempDir dir;
  StateDict sd;
  sd.insert("w", from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}));
  sd.insert("n", from_vector(std::vector<int64_t>{7, 8}, {2}));
  save_safetensors(dir.file("good.safetensors"), sd, {{"epoch", "1"}});
  const std::string good = test::read_bytes(dir.file("good.safetensors"));
  uint64_t state = 12345;
  auto next = [&state] {  // xorshift64: deterministic, no dependency on <random>'s details
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  int loaded = 0, rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bytes = good;
    int flips = 1 + static_cast<int>(next() % 3);
    for (int f = 0; f < flips; ++f) bytes[next() % bytes.size()] = static_cast<char>(next() & 0xff);
    if (i % 4 == 0) bytes.resize(next() % (bytes.size() + 1));
    // A new file each time, not the old one truncated: ext4 flushes a file rewritten after a
    // truncation when it is closed (auto_da_alloc), milliseconds each on a virtual disk.
    std::filesystem::remove(dir.file("fuzz.safetensors"));
    test::write_bytes(dir.file("fuzz.safetensors"), bytes);
    try {
      load_safetensors(dir.file("fuzz.safetensors"));
      ++loaded;
    } catch (const Error&) {
      ++rejected;
    }
  }
  CHECK(loaded + rejected == 3000);
  CHECK(rejected > 1000);  // most corruptions are caught...
  CHECK(loaded > 100);     // ...while flips inside tensor data or metadata values still load
}
