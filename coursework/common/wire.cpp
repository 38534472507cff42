// wire.cpp: frames, tensors and their checks (wire.h).
#include "wire.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "framework/ops/ops.h"

namespace course::wire {

void Writer::str(const std::string& s) {
  const std::string cut = s.substr(0, kMaxString);
  const auto n = static_cast<std::uint32_t>(cut.size());
  raw(&n, sizeof n);
  bytes_ += cut;
}

void Writer::tensor(const dplab::Tensor& t) {
  if (!t.defined()) return u8(0);
  const bool ints = t.dtype() == dplab::DType::Int64;
  u8(ints ? 2 : 1);
  u8(static_cast<std::uint8_t>(t.dim()));
  for (std::int64_t d : t.shape()) i64(d);
  if (ints) {
    const std::vector<std::int64_t> v = t.to_vector<std::int64_t>();
    raw(v.data(), v.size() * sizeof(std::int64_t));
  } else {
    const std::vector<float> v = t.to_vector<float>();
    raw(v.data(), v.size() * sizeof(float));
  }
}

void Reader::raw(void* p, std::size_t n) {
  if (n > bytes_.size() - at_)
    throw Error("a reply ended " + std::to_string(n - (bytes_.size() - at_)) + " bytes early");
  std::memcpy(p, bytes_.data() + at_, n);
  at_ += n;
}

std::uint8_t Reader::u8() {
  std::uint8_t v;
  raw(&v, 1);
  return v;
}
std::int64_t Reader::i64() {
  std::int64_t v;
  raw(&v, sizeof v);
  return v;
}
float Reader::f32() {
  float v;
  raw(&v, sizeof v);
  return v;
}

std::string Reader::str() {
  std::uint32_t n;
  raw(&n, sizeof n);
  if (n > kMaxString || n > bytes_.size() - at_) throw Error("a string of " + std::to_string(n) + " bytes");
  std::string s = bytes_.substr(at_, n);
  at_ += n;
  return s;
}

const char* Reader::blob(std::size_t expect) {
  std::uint64_t n;
  raw(&n, sizeof n);
  if (n != expect) throw Error("a buffer of " + std::to_string(n) + " bytes where " + std::to_string(expect) + " belong");
  if (n > bytes_.size() - at_) throw Error("a reply ended " + std::to_string(n - (bytes_.size() - at_)) + " bytes early");
  const char* p = bytes_.data() + at_;
  at_ += n;
  return p;
}

dplab::Tensor Reader::tensor() {
  const std::uint8_t code = u8();
  if (code == 0) return {};
  if (code != 1 && code != 2) throw Error("a tensor of unknown dtype code " + std::to_string(code));
  const int ndim = u8();
  if (ndim > kMaxDims) throw Error("a tensor of " + std::to_string(ndim) + " dimensions");
  dplab::Shape shape;
  std::size_t numel = 1;
  const std::size_t size = code == 1 ? sizeof(float) : sizeof(std::int64_t);
  for (int i = 0; i < ndim; ++i) {
    const std::int64_t d = i64();
    if (d < 0 || d > kMaxDim) throw Error("a tensor dimension of " + std::to_string(d));
    shape.push_back(d);
    // checked before multiplying: numel * size stays within the frame, which is < 2^32
    if (d != 0 && numel > (bytes_.size() - at_) / size / static_cast<std::size_t>(d) + 1)
      throw Error("a tensor larger than its reply");
    numel *= static_cast<std::size_t>(d);
  }
  if (numel * size > bytes_.size() - at_) throw Error("a tensor larger than its reply");
  if (code == 1) {
    std::vector<float> v(numel);
    raw(v.data(), numel * size);
    return dplab::from_vector(v, shape);
  }
  std::vector<std::int64_t> v(numel);
  raw(v.data(), numel * size);
  return dplab::from_vector(v, shape);
}

void Reader::end() const {
  if (at_ != bytes_.size()) throw Error(std::to_string(bytes_.size() - at_) + " bytes past the end of a reply");
}

namespace {

bool write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

// n bytes, or fewer at end of file
std::size_t read_all(int fd, char* p, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<std::size_t>(r);
  }
  return got;
}

}  // namespace

std::string error_reply(const std::string& message) {
  Writer w;
  w.u8(1);
  w.str(message);
  return w.bytes();
}

bool write_frame(int fd, const std::string& payload, std::uint32_t max) {
  if (payload.size() > max) return false;
  const auto n = static_cast<std::uint32_t>(payload.size());
  return write_all(fd, reinterpret_cast<const char*>(&n), sizeof n) && write_all(fd, payload.data(), n);
}

bool write_frame_parts(int fd, std::initializer_list<std::string_view> parts, std::uint32_t max) {
  std::uint64_t total = 0;
  for (std::string_view p : parts) total += p.size();
  if (total > max) return false;
  const auto n = static_cast<std::uint32_t>(total);
  if (!write_all(fd, reinterpret_cast<const char*>(&n), sizeof n)) return false;
  for (std::string_view p : parts)
    if (!write_all(fd, p.data(), p.size())) return false;
  return true;
}

Read read_frame(int fd, std::string& payload, std::uint32_t max) {
  std::uint32_t n = 0;
  const std::size_t got = read_all(fd, reinterpret_cast<char*>(&n), sizeof n);
  if (got == 0) return Read::kClosed;
  if (got < sizeof n) return Read::kTruncated;
  if (n > max) return Read::kTooLong;
  payload.assign(n, '\0');
  return read_all(fd, payload.data(), n) == n ? Read::kFrame : Read::kTruncated;
}

int fd_from_env(const char* name) {
  const char* text = std::getenv(name);
  if (!text) return -1;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  return (end && *end == '\0' && v >= 0 && v < 1024) ? static_cast<int>(v) : -1;
}

std::vector<std::vector<int>> fd_groups_from_env(const char* name, std::size_t per_group) {
  const char* text = std::getenv(name);
  std::vector<std::vector<int>> groups;
  if (!text || !*text) return groups;
  std::string all(text);
  for (std::size_t at = 0; at <= all.size();) {
    const std::size_t end = std::min(all.find(';', at), all.size());
    std::vector<int> group;
    for (std::size_t p = at; p < end;) {
      const std::size_t comma = std::min(all.find(',', p), end);
      const std::string item = all.substr(p, comma - p);
      char* stop = nullptr;
      const long v = std::strtol(item.c_str(), &stop, 10);
      if (item.empty() || *stop != '\0' || v < 0 || v >= 1024) return {};
      group.push_back(static_cast<int>(v));
      p = comma + 1;
    }
    if (group.size() != per_group) return {};
    groups.push_back(group);
    at = end + 1;
  }
  return groups;
}

}  // namespace course::wire
