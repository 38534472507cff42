// storage.h: a block of device memory that one or more tensors view.
// Allocated and freed through device_allocate / device_free, so memory_stats counts it.
#pragma once
#include <cstddef>

#include "framework/tensor/allocator.h"
#include "framework/tensor/device.h"

namespace dplab {

class Storage {
 public:
  Storage(Device d, std::size_t nbytes)
      : device_(d), nbytes_(nbytes), data_(device_allocate(d, nbytes)) {}
  ~Storage() { device_free(device_, data_, nbytes_); }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  Device device_;
  std::size_t nbytes_;
  void* data_;
};

}  // namespace dplab
