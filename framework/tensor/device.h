// device.h: where a tensor lives. "cpu", "cpu:3", "cuda", "cuda:1".
// CPU devices are logical: cpu:0..cpu:N-1 all use host memory but keep separate memory
// accounting, so a laptop shows the same load imbalance a multi-GPU box does.
// Read next: allocator.h (per-device memory stats).
#pragma once
#include <fmt/format.h>
#include <string>
#include <string_view>

namespace dplab {

enum class DeviceKind { CPU, CUDA };

inline constexpr int kMaxDevicesPerKind = 64;

struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;

  Device() = default;
  Device(DeviceKind k, int i = 0);
  Device(const char* spec) : Device(parse(spec)) {}         // NOLINT: "cpu:1" reads naturally
  Device(const std::string& spec) : Device(parse(spec)) {}  // NOLINT

  static Device parse(std::string_view spec);  // throws Error on "gpu:1", "cpu:-1", "cuda:x"
  bool is_cpu() const { return kind == DeviceKind::CPU; }
  bool is_cuda() const { return kind == DeviceKind::CUDA; }
  std::string str() const;
  bool operator==(const Device&) const = default;
};

}  // namespace dplab

template <>
struct fmt::formatter<dplab::Device> : fmt::formatter<std::string_view> {
  auto format(const dplab::Device& d, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(d.str(), ctx);
  }
};
