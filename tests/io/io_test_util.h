// io_test_util.h: helpers shared by the io tests: a temporary directory removed at the
// end of each test, whole-file reads and writes, and a safetensors file built by hand
// from a header string and data bytes (the way Python's writer lays them out).
#pragma once
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "framework/error.h"

namespace dplab::test {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/dplab_io_XXXXXX";
    DPLAB_CHECK(::mkdtemp(tmpl) != nullptr, "mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return path + "/" + name; }
  // Names of every entry in the directory (sorted), to check no temporary is left behind.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  DPLAB_CHECK(f.good(), "cannot write {}", path);
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  DPLAB_CHECK(f.good(), "cannot read {}", path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// 8-byte little-endian length, as the format's first field.
inline std::string u64_le(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// Raw little-endian bytes of values (the host is little-endian; safetensors.cpp asserts it).
template <typename T>
std::string le_bytes(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

// A file from header text and data; pad_to_8 adds spaces as Python's writer does.
inline std::string safetensors_bytes(std::string header, const std::string& data,
                                     bool pad_to_8 = true) {
  if (pad_to_8) header.append((8 - header.size() % 8) % 8, ' ');
  return u64_le(header.size()) + header + data;
}

}  // namespace dplab::test
