#include "framework/tensor/device.h"

#include <charconv>

#include "framework/error.h"

namespace dplab {

Device::Device(DeviceKind k, int i) : kind(k), index(i) {
  DPLAB_CHECK(i >= 0 && i < kMaxDevicesPerKind, "device index must be in [0, {}), got {}",
              kMaxDevicesPerKind, i);
}

Device Device::parse(std::string_view spec) {
  auto colon = spec.find(':');
  std::string_view kind = spec.substr(0, colon);
  DeviceKind k;
  if (kind == "cpu") k = DeviceKind::CPU;
  else if (kind == "cuda") k = DeviceKind::CUDA;
  else DPLAB_FAIL("device: expected \"cpu\", \"cpu:N\", \"cuda\" or \"cuda:N\", got \"{}\"", spec);
  if (colon == std::string_view::npos) return Device(k, 0);
  std::string_view num = spec.substr(colon + 1);
  int index = -1;
  auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), index);
  DPLAB_CHECK(ec == std::errc() && end == num.data() + num.size() && index >= 0 &&
                  index < kMaxDevicesPerKind,
              "device: expected an index in [0, {}) after ':', got \"{}\"", kMaxDevicesPerKind,
              spec);
  return Device(k, index);
}

std::string Device::str() const {
  return fmt::format("{}:{}", kind == DeviceKind::CPU ? "cpu" : "cuda", index);
}

}  // namespace dplab
