// channel.cpp: the test side of the grader's channel (channel.h), and the thread's place,
// note() and ask_for_time() of harness.h, which travel over it.
#include "channel.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "harness.h"

namespace course::harness {
namespace {

int g_channel = -1;
char g_token[33] = {0};
std::mutex g_send;

bool fd_from_env(const char* name, int& fd) {
  const char* text = std::getenv(name);
  if (!text) return false;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  fd = (end && *end == '\0' && v >= 0 && v < 1024) ? static_cast<int>(v) : -1;
  return true;
}

void write_all(int fd, const char* p, std::size_t len) {
  while (len > 0) {
    const ssize_t n = ::write(fd, p, len);
    if (n <= 0) return;  // the grader is gone: nothing to report to
    p += n;
    len -= static_cast<std::size_t>(n);
  }
}

}  // namespace

bool open_channel(std::string& why) {
  int channel = -1, token_fd = -1;
  const bool has_channel = fd_from_env("DPLAB_COURSE_CHANNEL_FD", channel);
  const bool has_token = fd_from_env("DPLAB_COURSE_TOKEN_FD", token_fd);
  if (!has_channel && !has_token) return true;  // a student's own run: no grader
  if (channel < 0 || token_fd < 0) {
    why = "the grader's channel variables are malformed";
    return false;
  }
  char buf[40] = {0};
  std::size_t got = 0;
  while (got < 33) {  // 32 hex digits and a newline, then the grader closes its end
    const ssize_t n = ::read(token_fd, buf + got, 33 - got);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(token_fd);
  if (got != 33 || buf[32] != '\n' || std::strspn(buf, "0123456789abcdef") != 32) {
    why = "the token pipe did not hold the grader's token";
    return false;
  }
  std::memcpy(g_token, buf, 32);
  g_channel = channel;
  ::fcntl(g_channel, F_SETFD, FD_CLOEXEC);  // a program the test might exec gets no channel
  ::unsetenv("DPLAB_COURSE_CHANNEL_FD");
  ::unsetenv("DPLAB_COURSE_TOKEN_FD");
  return true;
}

bool channel_open() { return g_channel >= 0; }
const char* token() { return g_token; }

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

void send_record(const char* kind, const std::string& fields_json) {
  if (g_channel < 0) return;
  std::string line = std::string("{\"token\": \"") + g_token + "\", \"kind\": \"" + kind + "\"";
  if (!fields_json.empty()) line += ", " + fields_json;
  line += "}\n";
  std::lock_guard<std::mutex> lock(g_send);
  write_all(g_channel, line.data(), line.size());
}

void send_raw_record(const char* text, std::size_t len) {
  if (g_channel >= 0) write_all(g_channel, text, len);
}

Place& place() {
  thread_local Place p;
  return p;
}

void note(const std::string& text) {
  if (g_channel >= 0) {
    send_record("note", "\"text\": " + json_string(text));
  } else {
    std::printf("%s\n", text.c_str());
    std::fflush(stdout);
  }
}

void ask_for_time(double seconds) {
  if (g_channel < 0 || !(seconds > 0)) return;
  char fields[64];
  std::snprintf(fields, sizeof fields, "\"seconds\": %.3f", seconds);
  send_record("time", fields);
}

// A signal stack for each rank thread, so that a stack overflow in the student's code is
// reported like any other crash (crash.cpp runs its handler there).
namespace {
constexpr std::size_t kSignalStack = 64 * 1024;
thread_local void* t_signal_stack = nullptr;
}  // namespace

void thread_begin(int rank, int size) {
  place() = Place{.rank = rank, .size = size};
  void* mem = ::mmap(nullptr, kSignalStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return;
  stack_t ss{};
  ss.ss_sp = mem;
  ss.ss_size = kSignalStack;
  if (::sigaltstack(&ss, nullptr) == 0) t_signal_stack = mem;
  else ::munmap(mem, kSignalStack);
}

void thread_end() {
  if (t_signal_stack) {
    stack_t ss{};
    ss.ss_flags = SS_DISABLE;
    ::sigaltstack(&ss, nullptr);
    ::munmap(t_signal_stack, kSignalStack);
    t_signal_stack = nullptr;
  }
  place() = Place{};
}

}  // namespace course::harness
