// idx_file.cpp: the IDX reader and writer over zlib's gz* functions.
// Read next: fashion_mnist.cpp.
#include "datasets/idx_file.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "framework/error.h"

namespace dplab::datasets {
namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

// A gzread that failed: zlib's Z_DATA_ERROR is a corrupt stream or a failed CRC-32 / length
// check (zlib checks them when it reaches the stream's end, which for a small file is at the
// first read), not a short file.
[[noreturn]] void gz_failed(gzFile f, const std::string& path, const std::string& where) {
  int code = 0;
  const char* raw = gzerror(f, &code);
  std::string msg = raw ? raw : "?";
  if (msg.starts_with(path + ": ")) msg.erase(0, path.size() + 2);  // zlib names the file too
  if (code == Z_DATA_ERROR)
    DPLAB_FAIL("{}: the file is corrupt: its gzip data or check failed ({}; {}); the bytes do not "
               "match what was compressed",
               path, msg, where);
  DPLAB_FAIL("{}: file is truncated or corrupt: {}: {}", path, where, msg);
}

// Reads exactly n bytes or throws naming the file and how far it got.
void read_exact(gzFile f, const std::string& path, void* dst, size_t n, const char* what) {
  auto* out = static_cast<unsigned char*>(dst);
  size_t done = 0;
  while (done < n) {
    // gzread takes an unsigned count: read in slices of at most 1 GiB.
    unsigned want = static_cast<unsigned>(std::min<size_t>(n - done, size_t{1} << 30));
    int got = gzread(f, out + done, want);
    if (got < 0)
      gz_failed(f, path, fmt::format("reading {} failed after {} of {} bytes", what, done, n));
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  DPLAB_CHECK(done == n, "{}: file is truncated: expected {} bytes of {}, got {}", path, n, what,
              done);
}

// Reads n bytes of data, growing `out` a slice at a time as they arrive: a corrupt header
// that claims terabytes then fails as a truncated file instead of allocating them first.
void read_growing(gzFile f, const std::string& path, std::vector<uint8_t>& out, size_t n) {
  size_t slice = size_t{1} << 20;  // doubles up to 64 MiB: a short file costs little
  out.clear();
  while (out.size() < n) {
    const size_t done = out.size(), want = std::min(n - done, slice);
    slice = std::min(slice * 2, size_t{64} << 20);
    out.resize(done + want);
    int got = gzread(f, out.data() + done, static_cast<unsigned>(want));
    if (got < 0)
      gz_failed(f, path, fmt::format("reading data failed after {} of {} bytes", done, n));
    out.resize(done + static_cast<size_t>(got));
    DPLAB_CHECK(got > 0,
                "{}: file is truncated: the header promises {} bytes of data, the file "
                "holds {}",
                path, n, out.size());
  }
}

uint32_t big_endian_u32(const unsigned char* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

}  // namespace

IdxData read_idx_u8(const std::string& path, int expected_ndims, int64_t limit) {
  DPLAB_CHECK(limit >= 0, "read_idx_u8: limit must be >= 0, got {}", limit);
  GzHandle f(gzopen(path.c_str(), "rb"));
  DPLAB_CHECK(f != nullptr, "{}: cannot open: {}", path, std::strerror(errno));

  unsigned char magic[4];
  read_exact(f.get(), path, magic, 4, "the IDX magic number");
  const uint32_t expected_magic = 0x0800u | static_cast<uint32_t>(expected_ndims);
  DPLAB_CHECK(big_endian_u32(magic) == expected_magic,
              "{}: bad magic number: expected 0x{:08x} (uint8 data, {} dims), got 0x{:08x}; "
              "not an IDX file of this kind",
              path, expected_magic, expected_ndims, big_endian_u32(magic));

  IdxData out;
  int64_t item_bytes = 1;
  for (int d = 0; d < expected_ndims; ++d) {
    unsigned char b[4];
    read_exact(f.get(), path, b, 4, "the IDX header sizes");
    const int64_t size = big_endian_u32(b);
    // No real dataset comes near these; a corrupt header must not make us allocate terabytes.
    const int64_t max_size = d == 0 ? (int64_t{1} << 28) : 65536;
    DPLAB_CHECK(size <= max_size, "{}: implausible size {} for dim {} in the header (max {})", path,
                size, d, max_size);
    out.dims.push_back(size);
    if (d > 0) item_bytes *= size;
  }
  const int64_t items = limit > 0 ? std::min(limit, out.dims[0]) : out.dims[0];
  read_growing(f.get(), path, out.bytes, static_cast<size_t>(items * item_bytes));
  if (items == out.dims[0]) {
    unsigned char extra;
    int got = gzread(f.get(), &extra, 1);
    if (got < 0) gz_failed(f.get(), path, "at the end of the data");
    DPLAB_CHECK(got == 0,
                "{}: {} bytes of data expected after the header, but the file has more; "
                "the header's counts do not match the file",
                path, out.bytes.size());
  }
  return out;
}

void write_idx_u8(const std::string& path, const std::vector<int64_t>& dims,
                  const std::vector<uint8_t>& bytes, bool gzip) {
  DPLAB_CHECK(!dims.empty() && dims.size() < 256, "write_idx_u8: expected 1..255 dims, got {}",
              dims.size());
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  DPLAB_CHECK(n == static_cast<int64_t>(bytes.size()), "write_idx_u8: dims hold {} bytes, got {}",
              n, bytes.size());
  // "wb" writes gzip; "wT" writes plain bytes through the same interface.
  GzHandle f(gzopen(path.c_str(), gzip ? "wb" : "wT"));
  DPLAB_CHECK(f != nullptr, "{}: cannot create: {}", path, std::strerror(errno));
  std::vector<unsigned char> header = {0, 0, 0x08, static_cast<unsigned char>(dims.size())};
  for (int64_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8)
      header.push_back(static_cast<unsigned char>((static_cast<uint64_t>(d) >> shift) & 0xff));
  bool ok = gzwrite(f.get(), header.data(), static_cast<unsigned>(header.size())) ==
            static_cast<int>(header.size());
  if (!bytes.empty())
    ok = ok && gzwrite(f.get(), bytes.data(), static_cast<unsigned>(bytes.size())) ==
                   static_cast<int>(bytes.size());
  DPLAB_CHECK(ok, "{}: write failed", path);
  DPLAB_CHECK(gzclose(f.release()) == Z_OK, "{}: closing after write failed", path);
}

}  // namespace dplab::datasets
