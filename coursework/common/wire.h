// wire.h: the judge and the worker of an assignment judged outside the student's process
// ("judge": "outside" in assignment.json; hw1). The worker (the student's code, the given
// code, a worker main of staff code) never holds the grader's token or channel: it reads
// requests and writes replies on two pipes the grader opened (DPLAB_COURSE_WORKER_IN_FD,
// DPLAB_COURSE_WORKER_OUT_FD on its side; DPLAB_COURSE_JUDGE_TO_WORKER_FD and
// DPLAB_COURSE_JUDGE_FROM_WORKER_FD on the judge's). The judge trusts nothing it reads:
//   frame   = u32 length (little-endian, at most kMaxFrame) + payload of that length
//   request = u8 function id, then its arguments in order
//   reply   = u8 0, u8 count (at most kMaxTensors), count tensors   (the function returned)
//           | u8 1, string                                         (it threw: the message)
//   tensor  = u8 dtype (0 undefined, 1 float32, 2 int64), u8 ndim (at most kMaxDims),
//             ndim i64 dims (each 0 .. kMaxDim), then numel * element size raw bytes
//   int64 = 8 bytes, float = 4 bytes, string = u32 length (at most kMaxString) + bytes
// Every length and count is checked against these caps and against the bytes left before
// anything is allocated; a frame that breaks a rule is an Error, never a crash.
// Read next: ../hw1_autograd/remote.cpp (the judge's side), ../hw1_autograd/worker.cpp.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "framework/tensor/tensor.h"

namespace course::wire {

constexpr std::uint32_t kMaxFrame = 64u << 20;  // hw1's tensors are a few KiB
constexpr int kMaxDims = 8, kMaxTensors = 8;
constexpr std::int64_t kMaxDim = std::int64_t{1} << 31;
constexpr std::uint32_t kMaxString = 4096;

// What the judge says when a worker's bytes break the protocol.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Writer {
 public:
  void u8(std::uint8_t v) { bytes_.push_back(static_cast<char>(v)); }
  void i64(std::int64_t v) { raw(&v, sizeof v); }
  void f32(float v) { raw(&v, sizeof v); }
  void str(const std::string& s);
  void tensor(const dplab::Tensor& t);
  void blob(const void* p, std::size_t n) {  // u64 length + the bytes (hw3's buffers)
    const std::uint64_t len = n;
    raw(&len, sizeof len);
    raw(p, n);
  }
  const std::string& bytes() const { return bytes_; }

 private:
  void raw(const void* p, std::size_t n) { bytes_.append(static_cast<const char*>(p), n); }
  std::string bytes_;
};

// Reads a payload; every read checks what is left and throws Error on a short or
// malformed one.
class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}
  std::uint8_t u8();
  std::int64_t i64();
  float f32();
  std::string str();
  dplab::Tensor tensor();
  // A blob's bytes, where they lie in the payload; its length must be `expect` exactly.
  const char* blob(std::size_t expect);
  void end() const;  // throws unless every byte was read

 private:
  void raw(void* p, std::size_t n);
  const std::string& bytes_;
  std::size_t at_ = 0;
};

// The reply of a call that threw: u8 1 and its message (Writer::str cuts it to kMaxString).
std::string error_reply(const std::string& message);

enum class Read { kFrame, kClosed, kTooLong, kTruncated };
// Writes one frame; false when the other side is gone (EPIPE: SIGPIPE must be ignored).
bool write_frame(int fd, const std::string& payload, std::uint32_t max = kMaxFrame);
// One frame of several parts (a large buffer written from where it lies, not copied).
bool write_frame_parts(int fd, std::initializer_list<std::string_view> parts, std::uint32_t max = UINT32_MAX);
// Reads one frame into payload; a length over `max` is refused before any allocation.
Read read_frame(int fd, std::string& payload, std::uint32_t max = kMaxFrame);
// The pipe the grader named in environment variable `name` (a descriptor number below
// 1024), or -1 when it is unset or not such a number.
int fd_from_env(const char* name);
// The same for a list, "3,4,5,6;7,8,9,10": groups of `per_group` descriptors (hw3's ranks:
// one group each). Empty when it is unset or anything in it is not such a number.
std::vector<std::vector<int>> fd_groups_from_env(const char* name, std::size_t per_group);

}  // namespace course::wire
