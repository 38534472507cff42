// allocator.cpp: the one place that counts device memory. Backends hand out raw bytes;
// here every allocation and free updates that device's current and peak bytes.
#include "framework/tensor/allocator.h"

#include <atomic>

#include "framework/backend/backend.h"

namespace dplab {
namespace {

struct Counters {
  std::atomic<int64_t> allocated{0}, peak{0}, count{0}, reserved{-1};  // reserved -1: = allocated
};

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
  void* p = backend_for(d).allocate(d, nbytes);
  Counters& c = counters(d);
  int64_t now = c.allocated.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
  c.count.fetch_add(1);
  raise_peak(c, now);
  return p;
}

void device_free(Device d, void* ptr, std::size_t nbytes) {
  if (ptr == nullptr) return;
  backend_for(d).deallocate(d, ptr, nbytes);
  counters(d).allocated.fetch_sub(static_cast<int64_t>(nbytes));
}

void set_reserved_bytes(Device d, int64_t reserved) { counters(d).reserved.store(reserved); }

}  // namespace dplab
