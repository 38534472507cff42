// fuzz_input.h: hands the fuzzer's bytes to a parser that reads a path. The bytes go into an
// anonymous in-memory file (memfd), named by its /proc/self/fd path: no disk, no clean-up.
// Read next: fuzz_safetensors.cpp, fuzz_idx.cpp.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace dplab::fuzz {

class InputFile {
 public:
  InputFile(const uint8_t* data, size_t size) : fd_(memfd_create("fuzz-input", MFD_CLOEXEC)) {
    for (size_t done = 0; fd_ >= 0 && done < size;) {
      ssize_t n = write(fd_, data + done, size - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
  }
  ~InputFile() {
    if (fd_ >= 0) close(fd_);
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

}  // namespace dplab::fuzz
