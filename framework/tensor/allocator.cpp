// allocator.cpp: the one place that counts device memory. Backends hand out raw bytes;
// here every allocation and free updates that device's current and peak bytes.
// It also enforces the optional cap of memory_cap.h (DPLAB_DEVICE_MEMORY).
#include "framework/tensor/allocator.h"

#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "framework/backend/backend.h"
#include "framework/io/settings.h"
#include "framework/tensor/memory_cap.h"

namespace dplab {
namespace {

struct Counters {
  std::atomic<int64_t> allocated{0}, peak{0}, count{0}, reserved{-1};  // reserved -1: = allocated
  std::atomic<int64_t> cap{-1};  // -1: not set yet (DPLAB_DEVICE_MEMORY decides), 0: none
};

// DPLAB_DEVICE_MEMORY, parsed once (settings.h); 0 when unset.
int64_t env_cap() {
  static const int64_t cap = [] {
    const auto v = setting_value("DPLAB_DEVICE_MEMORY");
    return v ? parse_device_memory_setting(*v) : int64_t{0};
  }();
  return cap;
}

int64_t cap_of(Counters& c) {
  int64_t cap = c.cap.load(std::memory_order_relaxed);
  return cap >= 0 ? cap : env_cap();
}

Counters& counters(Device d) {
  static Counters table[2][kMaxDevicesPerKind];
  return table[d.is_cpu() ? 0 : 1][d.index];
}

void raise_peak(Counters& c, int64_t now) {
  int64_t peak = c.peak.load(std::memory_order_relaxed);
  while (now > peak && !c.peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {}
}

}  // namespace

MemoryStats memory_stats(Device d) {
  Counters& c = counters(d);
  MemoryStats s;
  s.allocated_bytes = c.allocated.load();
  s.peak_bytes = c.peak.load();
  s.alloc_count = c.count.load();
  int64_t reserved = c.reserved.load();
  s.reserved_bytes = reserved < 0 ? s.allocated_bytes : reserved;
  return s;
}

void reset_peak_memory_stats(Device d) {
  Counters& c = counters(d);
  c.peak.store(c.allocated.load());
}

void* device_allocate(Device d, std::size_t nbytes) {
  if (nbytes == 0) return nullptr;
  Counters& c = counters(d);
  const int64_t n = static_cast<int64_t>(nbytes);
  // reserve the bytes first, so two threads cannot both squeeze under the cap
  int64_t now = c.allocated.fetch_add(n) + n;
  if (int64_t cap = cap_of(c); cap > 0 && now > cap) {
    c.allocated.fetch_sub(n);
    throw OutOfMemoryError(fmt::format(
        "{}: out of memory: requested {} with {} already allocated, cap {} (DPLAB_DEVICE_MEMORY or "
        "set_memory_cap)",
        d, format_bytes(n), format_bytes(now - n), format_bytes(cap)));
  }
  void* p = nullptr;
  try {
    p = backend_for(d).allocate(d, nbytes);
  } catch (...) {
    c.allocated.fetch_sub(n);
    throw;
  }
  c.count.fetch_add(1);
  raise_peak(c, now);
  return p;
}

void device_free(Device d, void* ptr, std::size_t nbytes) {
  if (ptr == nullptr) return;
  backend_for(d).deallocate(d, ptr, nbytes);
  counters(d).allocated.fetch_sub(static_cast<int64_t>(nbytes));
}

void set_memory_cap(Device d, int64_t bytes) {
  DPLAB_CHECK(bytes >= 0, "set_memory_cap({}): the cap must be >= 0 bytes (0: none), got {}", d,
              bytes);
  counters(d).cap.store(bytes);
}

int64_t memory_cap(Device d) { return cap_of(counters(d)); }

int64_t parse_memory_size(const std::string& text) {
  std::size_t used = 0;
  double value = -1;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  double scale = 0;
  for (const auto& [name, s] : {std::pair<const char*, double>{"", 1},
                                {"B", 1},
                                {"K", 1024},
                                {"KB", 1024},
                                {"KiB", 1024},
                                {"M", 1 << 20},
                                {"MB", 1 << 20},
                                {"MiB", 1 << 20},
                                {"G", 1 << 30},
                                {"GB", 1 << 30},
                                {"GiB", 1 << 30}})
    if (unit == name) scale = s;
  DPLAB_CHECK(
      used > 0 && std::isfinite(value) && value >= 0 && scale > 0 &&
          !std::isspace(static_cast<unsigned char>(text.front())),
      "memory size: expected a number of bytes with an optional K, M or G (\"256M\", \"1.5G\"), "
      "got \"{}\"",
      text);
  const double bytes = value * scale;
  DPLAB_CHECK(bytes < 0x1p62, "memory size: \"{}\" is {:.3g} bytes, more than any machine holds",
              text, bytes);
  // "0" means no cap; "0.5" (half a byte) would silently mean no cap too
  DPLAB_CHECK(
      bytes == 0 ? value == 0 : bytes >= 1,
      "memory size: \"{}\" is less than one byte; expected a size of at least 1 byte (\"0\" "
      "means no cap)",
      text);
  return static_cast<int64_t>(bytes);
}

std::string format_bytes(int64_t bytes) {
  double b = static_cast<double>(bytes);
  if (bytes >= (int64_t{1} << 30)) return fmt::format("{:.2f} GiB", b / (1 << 30));
  if (bytes >= (int64_t{1} << 20)) return fmt::format("{:.1f} MiB", b / (1 << 20));
  if (bytes >= (int64_t{1} << 10)) return fmt::format("{:.1f} KiB", b / (1 << 10));
  return fmt::format("{} bytes", bytes);
}

void set_reserved_bytes(Device d, int64_t reserved) { counters(d).reserved.store(reserved); }

}  // namespace dplab
