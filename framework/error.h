// error.h: the exceptions dplab throws, and DPLAB_CHECK, the one way code reports bad input.
// Every message states what was expected and what came, plus file:line.
// Read next: tensor/tensor.h.
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace dplab {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A CUDA or cuBLAS call failed: the message names the call, the error string and the device.
struct CudaError : Error {
  using Error::Error;
};
// A peer rank failed, or a collective timed out: names the rank, the peer and the collective.
struct CommError : Error {
  using Error::Error;
};

namespace detail {
[[noreturn]] void throw_error(const char* file, int line, const std::string& msg);
}

}  // namespace dplab

// DPLAB_CHECK(cond, "matmul: inner dims differ: a is {}, b is {}", a, b)
#define DPLAB_CHECK(cond, ...)                                                                 \
  do {                                                                                         \
    if (!(cond)) ::dplab::detail::throw_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)

#define DPLAB_FAIL(...) ::dplab::detail::throw_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))
