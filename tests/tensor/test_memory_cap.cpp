// The per-device memory cap: an allocation past it throws OutOfMemoryError naming the device,
// the request, what is allocated and the cap, and leaves the counters as they were; other
// devices are not capped; sizes parse as DPLAB_DEVICE_MEMORY writes them.
#include <doctest/doctest.h>

#include "framework/ops/ops.h"
#include "framework/tensor/allocator.h"
#include "framework/tensor/memory_cap.h"

using namespace dplab;

TEST_CASE("a device's memory cap stops the allocation that would pass it, with a clear error") {
  const Device d("cpu:7"), other("cpu:6");
  set_memory_cap(d, 1 << 20);  // 1 MiB
  {
    Tensor a = zeros({128 * 1024}, {.device = d});  // 512 KiB: fits
    const int64_t before = memory_stats(d).allocated_bytes;
    CHECK(before == 512 * 1024);
    CHECK_THROWS_WITH_AS(
        zeros({160 * 1024}, {.device = d}),
        "cpu:7: out of memory: requested 640.0 KiB with 512.0 KiB already allocated, "
        "cap 1.0 MiB (DPLAB_DEVICE_MEMORY or set_memory_cap)",
        OutOfMemoryError);
    CHECK(memory_stats(d).allocated_bytes == before);  // nothing half-counted
    Tensor b = zeros({128 * 1024}, {.device = d});     // exactly up to the cap: fits
    CHECK(memory_stats(d).allocated_bytes == 1 << 20);
    Tensor c = zeros({1 << 20}, {.device = other});  // another device: no cap
  }
  CHECK(memory_cap(d) == 1 << 20);
  set_memory_cap(d, 0);
  Tensor big = zeros({1 << 20}, {.device = d});  // cap removed
  CHECK_THROWS_WITH_AS(set_memory_cap(d, -1), doctest::Contains("the cap must be >= 0 bytes"),
                       Error);
}

TEST_CASE("memory sizes parse like DPLAB_DEVICE_MEMORY's") {
  CHECK(parse_memory_size("256M") == 256 << 20);
  CHECK(parse_memory_size("1.5G") == (int64_t{3} << 29));
  CHECK(parse_memory_size("512K") == 512 << 10);
  CHECK(parse_memory_size("64MiB") == 64 << 20);
  CHECK(parse_memory_size("1048576") == 1048576);
  CHECK_THROWS_WITH_AS(parse_memory_size("lots"), doctest::Contains("got \"lots\""), Error);
  CHECK_THROWS_WITH_AS(parse_memory_size("12X"), doctest::Contains("optional K, M or G"), Error);
  CHECK_THROWS_WITH_AS(parse_memory_size("-5M"), doctest::Contains("got \"-5M\""), Error);
  CHECK(format_bytes(268435456) == "256.0 MiB");
}

TEST_CASE(
    "memory sizes: less than a byte, infinite or absurd sizes are refused, not taken as no cap") {
  CHECK(parse_memory_size("0") == 0);  // "0" is no cap, on purpose
  CHECK_THROWS_WITH_AS(parse_memory_size("0.5"),
                       doctest::Contains("\"0.5\" is less than one byte; "
                                         "expected a size of at least 1 byte (\"0\" means no cap)"),
                       Error);
  CHECK(parse_memory_size("0.5K") == 512);
  for (const char* bad : {"inf", "nan", "1e300", "99999999999G"})
    CHECK_THROWS_AS(parse_memory_size(bad), Error);
  CHECK_THROWS_WITH_AS(parse_memory_size("1e300"), doctest::Contains("more than any machine holds"),
                       Error);
}

TEST_CASE("a cap's count rolls back when the backend refuses an allocation") {
  const Device d("cpu:5");
  set_memory_cap(d, 0);
  Tensor small = zeros({6}, {.device = d});  // 24 bytes
  const int64_t before = memory_stats(d).allocated_bytes;
  CHECK(before == 24);
  // 2^58 floats: no cap stops it, the backend itself refuses (no such memory)
  CHECK_THROWS(zeros({int64_t{1} << 58}, {.device = d}));
  CHECK(memory_stats(d).allocated_bytes == before);  // not 1.15e18
  set_memory_cap(d, 1 << 20);
  Tensor fits = zeros({1024}, {.device = d});  // a later capped allocation still fits
  CHECK(memory_stats(d).allocated_bytes == before + 4096);
  set_memory_cap(d, 0);
}
