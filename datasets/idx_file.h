// idx_file.h: reading the IDX format of (Fashion-)MNIST, gzip-compressed or plain.
// An IDX file is a big-endian header, magic = 0x00 0x00 <type> <ndims> (type 0x08 = uint8),
// then one uint32 size per dim, then the bytes row-major. zlib's gzread reads a gzip file
// and a plain one alike, so one reader serves both.
// Every check names the file and what was expected: bad magic, implausible sizes, a short
// read (truncated file) or trailing bytes all throw rather than yield garbage tensors.
// Read next: fashion_mnist.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dplab::datasets {

struct IdxData {
  std::vector<int64_t> dims;   // e.g. {60000, 28, 28} for images, {60000} for labels
  std::vector<uint8_t> bytes;  // the first `limit` items (all when limit is 0), row-major
};

// Reads a uint8 IDX file with `expected_ndims` dims. limit > 0 reads only that many items
// along dim 0 (the header still states the full count, which dims[0] reports).
IdxData read_idx_u8(const std::string& path, int expected_ndims, int64_t limit = 0);

// Writes a uint8 IDX file (gzip when gzip is true). For tests and tools.
void write_idx_u8(const std::string& path, const std::vector<int64_t>& dims,
                  const std::vector<uint8_t>& bytes, bool gzip);

}  // namespace dplab::datasets
