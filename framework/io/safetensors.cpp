// safetensors.cpp: the writer (header build, atomic temp-file-then-rename: temp_file.h) and the
// validating reader. POSIX file calls rather than iostreams: we need O_EXCL for the
// temporary, fsync before rename, and pread to read each tensor straight into its storage.
// Read next: checkpoint.cpp.
#include "framework/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "framework/backend/backend.h"  // kMaxDims
#include "framework/io/json.h"
#include "framework/io/temp_file.h"
#include "framework/tensor/tensor.h"

namespace dplab {

// The data section is raw little-endian; on a big-endian host every element would need a
// byte swap. Every platform dplab targets is little-endian, so say so rather than swap.
static_assert(std::endian::native == std::endian::little,
              "safetensors I/O assumes a little-endian host");

std::string safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "F32";
    case DType::Int64: return "I64";
    case DType::Float16: return "F16";    // IEEE half bits, as safetensors stores them
    case DType::BFloat16: return "BF16";  // float32's top 16 bits, as torch.bfloat16
  }
  DPLAB_FAIL("safetensors: no safetensors name for dtype {}", dtype_name(t));
}

namespace {
// Why a name is not readable: a real safetensors dtype dplab lacks, or not a dtype at all.
std::string dtype_error(const std::string& name) {
  static const char* const kOtherDtypes[] = {
      "BOOL", "U8",  "I8",  "F8_E5M2", "F8_E4M3", "F8_E8M0", "I16",     "U16",
      "I32",  "U32", "F64", "U64",     "F4",      "F6_E2M3", "F6_E3M2", "C64"};
  for (const char* other : kOtherDtypes)
    if (name == other)
      return fmt::format("{} is not supported; dplab reads F32, F16, BF16 and I64", name);
  return fmt::format(
      "unknown dtype \"{}\" (not a safetensors dtype; dplab reads F32, F16, BF16 and I64)", name);
}

// Error messages end in " (file.cpp:line)"; drop it when a message is wrapped in another.
std::string without_location(const std::string& msg) {
  auto p = msg.rfind(" (");
  return (p != std::string::npos && !msg.empty() && msg.back() == ')') ? msg.substr(0, p) : msg;
}
}  // namespace

DType parse_safetensors_dtype(const std::string& name) {
  if (name == "F32") return DType::Float32;
  if (name == "I64") return DType::Int64;
  if (name == "F16") return DType::Float16;
  if (name == "BF16") return DType::BFloat16;
  DPLAB_FAIL("{}", dtype_error(name));
}

namespace {

std::string errno_str() { return std::strerror(errno); }

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    DPLAB_CHECK(w > 0, "save_safetensors: writing {} failed: {}", path,
                w < 0 ? errno_str() : "wrote 0 bytes");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Reads exactly n bytes at offset; a short read means the file changed under us.
void pread_all(int fd, void* data, size_t n, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    DPLAB_CHECK(r > 0, "load_safetensors(\"{}\"): read at byte {} failed: {}", path, offset,
                r < 0 ? errno_str() : "file ended early (changed while reading?)");
    p += r;
    offset += static_cast<uint64_t>(r);
    n -= static_cast<size_t>(r);
  }
}

struct Entry {
  std::string name;
  Tensor tensor;
  DType dtype = DType::Float32;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

// {"__metadata__":{...},"name":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},...}
// compact, as serde_json writes it, then spaces up to a multiple of 8.
std::string build_header(const std::vector<Entry>& entries, const Metadata& metadata) {
  // JSON is UTF-8: a Latin-1 name would make a file no other reader accepts.
  auto check_utf8 = [](std::string_view what, const std::string& s) {
    DPLAB_CHECK(utf8_error_at(s) == std::string_view::npos,
                "save_safetensors: {} \"{}\" is not valid UTF-8 (byte {}); safetensors headers are "
                "UTF-8 JSON",
                what, s, utf8_error_at(s));
  };
  for (const auto& [k, v] : metadata) {
    check_utf8("metadata key", k);
    check_utf8("metadata value for key " + k, v);
  }
  for (const Entry& e : entries) check_utf8("tensor name", e.name);
  std::string h = "{";
  bool first = true;
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    for (const auto& [k, v] : metadata) {
      if (!first) h += ',';
      first = false;
      append_json_string(h, k);
      h += ':';
      append_json_string(h, v);
    }
    h += '}';
    first = false;
  }
  for (const Entry& e : entries) {
    if (!first) h += ',';
    first = false;
    append_json_string(h, e.name);
    h += fmt::format(":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                     safetensors_dtype_name(e.dtype), fmt::join(e.shape, ","), e.begin, e.end);
  }
  h += '}';
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

}  // namespace

void save_safetensors(const std::string& path, const StateDict& tensors, const Metadata& metadata) {
  std::vector<Entry> entries;
  for (const auto& [name, t] : tensors) {
    DPLAB_CHECK(name != "__metadata__",
                "save_safetensors: \"__metadata__\" is reserved and cannot name a tensor");
    DPLAB_CHECK(t.defined(), "save_safetensors: tensor \"{}\" is undefined", name);
    entries.push_back({.name = name, .tensor = t, .dtype = t.dtype(), .shape = t.shape()});
  }
  // Python's order: wider elements first, so every tensor's offset is a multiple of its
  // element size, then by name (bytewise), so a model-only file is byte-identical to
  // what safetensors.torch.save_file writes for the same tensors.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (element_size(a.dtype) != element_size(b.dtype))
      return element_size(a.dtype) > element_size(b.dtype);
    return a.name < b.name;
  });
  uint64_t offset = 0;
  for (Entry& e : entries) {
    e.begin = offset;
    offset += static_cast<uint64_t>(e.tensor.nbytes());
    e.end = offset;
  }
  std::string header = build_header(entries, metadata);
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i)
    len_bytes[i] = static_cast<unsigned char>(static_cast<uint64_t>(header.size()) >> (8 * i));

  TempFile tmp(path);
  write_all(tmp.fd(), len_bytes, 8, tmp.path());
  write_all(tmp.fd(), header.data(), header.size(), tmp.path());
  for (const Entry& e : entries) {
    if (e.tensor.numel() == 0) continue;
    // Host copy for tensors on other devices; CPU tensors are written from their storage.
    Tensor host =
        e.tensor.device().is_cpu() ? e.tensor : e.tensor.contiguous_copy_on(Device("cpu"));
    write_all(tmp.fd(), host.raw_data(), static_cast<size_t>(host.nbytes()), tmp.path());
  }
  tmp.commit();
}

namespace {

// A validated header entry, before any tensor is allocated.
Entry parse_entry(const std::string& path, const std::string& name, const JsonValue& v,
                  uint64_t data_len) {
  using K = JsonValue::Kind;
  auto where = [&] { return fmt::format("load_safetensors(\"{}\"): tensor \"{}\"", path, name); };
  DPLAB_CHECK(v.kind == K::Object,
              "{}: expected an object with dtype, shape and data_offsets, got a {}", where(),
              json_kind_name(v.kind));
  const JsonValue* dtype = v.find("dtype");
  const JsonValue* shape = v.find("shape");
  const JsonValue* offsets = v.find("data_offsets");
  DPLAB_CHECK(dtype != nullptr, "{}: missing \"dtype\"", where());
  DPLAB_CHECK(shape != nullptr, "{}: missing \"shape\"", where());
  DPLAB_CHECK(offsets != nullptr, "{}: missing \"data_offsets\"", where());
  DPLAB_CHECK(dtype->kind == K::String, "{}: \"dtype\" must be a string, got a {}", where(),
              json_kind_name(dtype->kind));
  DPLAB_CHECK(shape->kind == K::Array, "{}: \"shape\" must be an array, got a {}", where(),
              json_kind_name(shape->kind));
  DPLAB_CHECK(offsets->kind == K::Array && offsets->items.size() == 2,
              "{}: \"data_offsets\" must be an array [begin, end]", where());

  Entry e;
  e.name = name;
  DPLAB_CHECK(
      dtype->str == "F32" || dtype->str == "I64" || dtype->str == "F16" || dtype->str == "BF16",
      "{}: {}", where(), dtype_error(dtype->str));
  e.dtype = parse_safetensors_dtype(dtype->str);
  DPLAB_CHECK(shape->items.size() <= static_cast<size_t>(kMaxDims),
              "{}: shape has {} dims; dplab tensors have at most {}", where(), shape->items.size(),
              kMaxDims);
  int64_t numel = 1;
  for (const JsonValue& d : shape->items) {
    DPLAB_CHECK(d.kind == K::Integer && d.integer >= 0,
                "{}: shape entries must be non-negative integers", where());
    e.shape.push_back(d.integer);
    DPLAB_CHECK(!__builtin_mul_overflow(numel, d.integer, &numel), "{}: shape {} overflows 64 bits",
                where(), shape_str(e.shape));
  }
  for (const JsonValue& o : offsets->items)
    DPLAB_CHECK(o.kind == K::Integer && o.integer >= 0,
                "{}: data_offsets must be non-negative integers", where());
  e.begin = static_cast<uint64_t>(offsets->items[0].integer);
  e.end = static_cast<uint64_t>(offsets->items[1].integer);
  DPLAB_CHECK(e.begin <= e.end, "{}: data_offsets [{}, {}] end before they begin", where(), e.begin,
              e.end);
  DPLAB_CHECK(e.end <= data_len, "{}: data_offsets [{}, {}] run past the data section ({} bytes)",
              where(), e.begin, e.end, data_len);
  int64_t nbytes = 0;
  DPLAB_CHECK(!__builtin_mul_overflow(numel, static_cast<int64_t>(element_size(e.dtype)), &nbytes),
              "{}: shape {} overflows 64 bits", where(), shape_str(e.shape));
  DPLAB_CHECK(static_cast<uint64_t>(nbytes) == e.end - e.begin,
              "{}: shape {} of {} needs {} bytes, but data_offsets [{}, {}] span {}", where(),
              shape_str(e.shape), dtype->str, nbytes, e.begin, e.end, e.end - e.begin);
  return e;
}

// Closes a file descriptor on every exit path of load_safetensors.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Loaded load_safetensors(const std::string& path, Device map_location) {
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer forever; the S_ISREG
  // check below then refuses it. It changes nothing for a regular file.
  FdGuard f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  DPLAB_CHECK(f.fd >= 0, "load_safetensors: cannot open \"{}\": {}", path, errno_str());
  struct stat st {};
  DPLAB_CHECK(::fstat(f.fd, &st) == 0, "load_safetensors: cannot stat \"{}\": {}", path,
              errno_str());
  DPLAB_CHECK(S_ISREG(st.st_mode), "load_safetensors: \"{}\" is not a regular file", path);
  const auto file_size = static_cast<uint64_t>(st.st_size);
  DPLAB_CHECK(file_size >= 8,
              "load_safetensors(\"{}\"): the file has {} bytes, too short for a safetensors file "
              "(at least 8: the header length)",
              path, file_size);

  unsigned char len_bytes[8];
  pread_all(f.fd, len_bytes, 8, 0, path);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  DPLAB_CHECK(header_len <= kMaxSafetensorsHeaderBytes,
              "load_safetensors(\"{}\"): header length {} exceeds the 100 MB limit (not a "
              "safetensors file?)",
              path, header_len);
  DPLAB_CHECK(header_len <= file_size - 8,
              "load_safetensors(\"{}\"): header length {} but only {} bytes follow the length "
              "field (truncated?)",
              path, header_len, file_size - 8);
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_len = file_size - data_start;

  std::string header(header_len, '\0');
  pread_all(f.fd, header.data(), header.size(), 8, path);
  DPLAB_CHECK(
      !header.empty() && header[0] == '{',
      "load_safetensors(\"{}\"): the header does not start with '{{' (not a safetensors file?)",
      path);
  JsonValue root;
  try {
    root = parse_json(header);
  } catch (const Error& err) {
    DPLAB_FAIL("load_safetensors(\"{}\"): {}", path, without_location(err.what()));
  }
  DPLAB_CHECK(root.kind == JsonValue::Kind::Object,
              "load_safetensors(\"{}\"): the header is a JSON {}, not an object", path,
              json_kind_name(root.kind));

  Loaded out;
  std::vector<Entry> entries;
  for (size_t i = 0; i < root.keys.size(); ++i) {
    const std::string& key = root.keys[i];
    const JsonValue& v = root.items[i];
    if (key == "__metadata__") {
      DPLAB_CHECK(v.kind == JsonValue::Kind::Object,
                  "load_safetensors(\"{}\"): __metadata__ must be an object", path);
      for (size_t j = 0; j < v.keys.size(); ++j) {
        DPLAB_CHECK(
            v.items[j].kind == JsonValue::Kind::String,
            "load_safetensors(\"{}\"): __metadata__ value of \"{}\" must be a string, got a {}",
            path, v.keys[j], json_kind_name(v.items[j].kind));
        out.metadata[v.keys[j]] = v.items[j].str;
      }
      continue;
    }
    entries.push_back(parse_entry(path, key, v, data_len));
  }

  // Coverage: sorted by offset, tensors tile [0, data_len) with no overlap and no gap.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    DPLAB_CHECK(e.begin >= covered,
                "load_safetensors(\"{}\"): tensor \"{}\" [{}, {}] overlaps tensor \"{}\" [{}, {}]",
                path, e.name, e.begin, e.end, prev ? prev->name : "", prev ? prev->begin : 0,
                prev ? prev->end : 0);
    DPLAB_CHECK(e.begin == covered,
                "load_safetensors(\"{}\"): bytes [{}, {}) of the data section belong to no tensor "
                "(tensor \"{}\" starts at {})",
                path, covered, e.begin, e.name, e.begin);
    covered = e.end;
    prev = &e;
  }
  DPLAB_CHECK(covered == data_len,
              "load_safetensors(\"{}\"): the tensors cover {} bytes but the data section has {} "
              "(the data must be fully covered)",
              path, covered, data_len);

  // All checks passed: allocate on map_location and read. CPU devices read straight into
  // the tensor's storage; other devices stage through one host tensor at a time.
  for (const Entry& e : entries) {
    Device read_dev = map_location.is_cpu() ? map_location : Device("cpu");
    Tensor t = Tensor::empty(e.shape, {.dtype = e.dtype, .device = read_dev});
    if (e.end > e.begin) pread_all(f.fd, t.raw_data(), e.end - e.begin, data_start + e.begin, path);
    if (!map_location.is_cpu()) t = t.contiguous_copy_on(map_location);
    out.tensors.insert(e.name, t);
  }
  return out;
}

}  // namespace dplab
