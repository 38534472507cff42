// settings.cpp: the DPLAB_* table and its parsers (settings.h). A parser here is the only
// place its variable's rules are written: the reader in the library calls it, and the table
// row hands the same function to dplab-doctor.
// Read next: tools/doctor/checks_settings.cpp (the table run over a machine's environment).
#include "framework/io/settings.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "framework/backend/backend.h"
#include "framework/error.h"
#include "framework/tensor/device.h"
#include "framework/tensor/memory_cap.h"

namespace dplab {
namespace {

// s is a decimal integer and nothing else (" 4", "+4", "5junk" and "4.5" are not).
bool whole_int(std::string_view s, int& out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

// Runs a parser written for values from anywhere (a command line, a config) on a variable's
// value, and makes its message name the variable when it does not already.
template <class Parse>
auto named(const char* name, const std::string& value, Parse parse) {
  try {
    return parse(value);
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find(name) != std::string::npos) throw;
    throw Error(fmt::format("{}: {}", name, what));
  }
}

std::vector<Setting> make_table() {
  // A build without CUDA never reads DPLAB_VIRTUAL_GPUS: a bad value there stops nothing.
  const WhenRefused gpus = cuda_compiled() ? WhenRefused::Stop : WhenRefused::Warn;
  using W = WhenRefused;
  const std::string seconds = fmt::format("seconds in (0, {:.0f}]", kMaxTimeoutSeconds);
  return {
      {"DPLAB_NUM_THREADS", "an integer in [1, 1024]", "1", W::Stop, true, false,
       [](const std::string& v) { parse_num_threads_setting(v); }},
      {"DPLAB_GEMM_ISA", "baseline or avx512 (one this CPU and build have)", "baseline", W::Stop,
       true, false, [](const std::string& v) { parse_gemm_isa_setting(v); }},
      {"DPLAB_GEMM", "auto, direct or eigen", "auto", W::Stop, true, false,
       [](const std::string& v) { parse_gemm_setting(v); }},
      {"DPLAB_CONV", "direct or im2col", "direct", W::Stop, true, false,
       [](const std::string& v) { parse_conv_setting(v); }},
      {"DPLAB_FUSE", "1 or 0", "1", W::Stop, true, false,
       [](const std::string& v) { parse_fuse_setting(v); }},
      {"DPLAB_VIRTUAL_GPUS", fmt::format("an integer in [1, {}]", kMaxDevicesPerKind), "2", gpus,
       true, false, [](const std::string& v) { parse_virtual_gpus_setting(v); }},
      {"DPLAB_DEVICE_MEMORY", "a size such as 256M or 2G", "256M", W::Stop, true, false,
       [](const std::string& v) { parse_device_memory_setting(v); }},
      {"DPLAB_TIMEOUT", seconds, "30", W::Stop, false, false,
       [](const std::string& v) { parse_timeout_setting("DPLAB_TIMEOUT", v); }},
      {"DPLAB_RENDEZVOUS_TIMEOUT", seconds, "120", W::Stop, false, false,
       [](const std::string& v) { parse_timeout_setting("DPLAB_RENDEZVOUS_TIMEOUT", v); }},
      {"DPLAB_WAIT", "spin_us,yield_us: two integers in 0..1000000", "50,0", W::Stop, true, false,
       [](const std::string& v) { parse_wait_setting(v); }},
      {"DPLAB_SEGMENT_KB", "KiB in 1 .. 65536", "256", W::Stop, true, false,
       [](const std::string& v) { parse_segment_kb_setting(v); }},
      {"DPLAB_PROGRESS", "plain, bar or off", "plain", W::Warn, true, false,
       [](const std::string& v) { parse_progress_setting(v); }},
      {"DPLAB_LOG_LEVEL", "debug, info, warning or error", "info", W::Warn, true, false,
       [](const std::string& v) { parse_log_level_setting(v); }},
      {"DPLAB_LOG_TIME", "1 or 0", "1", W::Warn, true, false,
       [](const std::string& v) { parse_log_time_setting(v); }},
      {"DPLAB_DATA", "a directory", ".", W::Warn, true, false,
       [](const std::string& v) { parse_data_setting(v); }},
      {"DPLAB_JOB_TOKEN",
       fmt::format("{} to {} printable characters without spaces", kMinTokenChars, kMaxTokenChars),
       "0123456789abcdef0123456789abcdef", W::Stop, false, true,
       [](const std::string& v) { check_job_token_text(v, "DPLAB_JOB_TOKEN"); }},
  };
}

}  // namespace

const std::vector<Setting>& settings() {
  static const std::vector<Setting> table = make_table();
  return table;
}

const Setting& setting(std::string_view name) {
  for (const Setting& s : settings())
    if (name == s.name) return s;
  DPLAB_FAIL("settings: {} is not a DPLAB_* setting (settings.cpp's table)", name);
}

std::optional<std::string> setting_value(std::string_view name) {
  const Setting& s = setting(name);
  const char* v = std::getenv(s.name);
  if (v == nullptr || (*v == '\0' && s.empty_is_unset)) return std::nullopt;
  return std::string(v);
}

double parse_timeout_setting(const char* name, const std::string& value) {
  char* end = nullptr;
  const double secs = std::strtod(value.c_str(), &end);
  DPLAB_CHECK(end != value.c_str() && *end == '\0' && std::isfinite(secs) && secs > 0 &&
                  secs <= kMaxTimeoutSeconds,
              "{}='{}' is not a number of seconds in (0, {:.0f}] (e.g. {}=30)", name, value,
              kMaxTimeoutSeconds, name);
  return secs;
}

WaitSetting parse_wait_setting(const std::string& value) {
  // the whole value, nothing before, between or after the two numbers
  const size_t comma = value.find(',');
  int spin_us = -1, yield_us = -1;
  DPLAB_CHECK(comma != std::string::npos &&
                  whole_int(std::string_view(value).substr(0, comma), spin_us) &&
                  whole_int(std::string_view(value).substr(comma + 1), yield_us) && spin_us >= 0 &&
                  yield_us >= 0 && spin_us <= 1000000 && yield_us <= 1000000,
              "DPLAB_WAIT: expected \"spin_us,yield_us\" (two integers in 0..1000000, e.g. 50,0), "
              "got \"{}\"",
              value);
  return {spin_us, yield_us};
}

std::size_t parse_segment_kb_setting(const std::string& value) {
  int kib = 0;
  DPLAB_CHECK(whole_int(value, kib) && kib >= 1 && kib <= 64 * 1024,
              "DPLAB_SEGMENT_KB: expected the slot size in KiB, 1 .. 65536, got \"{}\"", value);
  return static_cast<std::size_t>(kib) * 1024;
}

int parse_num_threads_setting(const std::string& value) {
  int n = 0;
  DPLAB_CHECK(whole_int(value, n) && n >= 1 && n <= 1024,
              "DPLAB_NUM_THREADS: expected an integer in [1, 1024], got '{}'", value);
  return n;
}

GemmIsa parse_gemm_isa_setting(const std::string& value) {
  const GemmIsa isa = named("DPLAB_GEMM_ISA", value, parse_gemm_isa);
  DPLAB_CHECK(gemm_isa_available(isa), "DPLAB_GEMM_ISA={}: {}", value, why_no_avx512());
  return isa;
}

GemmAlgorithm parse_gemm_setting(const std::string& value) {
  return named("DPLAB_GEMM", value, parse_gemm_algorithm);
}

ConvAlgorithm parse_conv_setting(const std::string& value) {
  return named("DPLAB_CONV", value, parse_conv_algorithm);
}

bool parse_fuse_setting(const std::string& value) {
  DPLAB_CHECK(value == "0" || value == "1",
              "DPLAB_FUSE: expected 0 (unfused ops) or 1 (fused), got '{}'", value);
  return value == "1";
}

int parse_virtual_gpus_setting(const std::string& value) {
  int n = 0;
  DPLAB_CHECK(whole_int(value, n) && n >= 1 && n <= kMaxDevicesPerKind,
              "DPLAB_VIRTUAL_GPUS: expected an integer in [1, {}], got \"{}\"", kMaxDevicesPerKind,
              value);
  return n;
}

int64_t parse_device_memory_setting(const std::string& value) {
  try {
    return parse_memory_size(value);
  } catch (const Error& e) {
    throw Error(fmt::format("DPLAB_DEVICE_MEMORY={}: {}", value, e.what()));
  }
}

ProgressMode parse_progress_setting(const std::string& value) {
  if (value == "plain") return ProgressMode::Plain;
  if (value == "bar") return ProgressMode::Bar;
  if (value == "off") return ProgressMode::Off;
  DPLAB_FAIL("DPLAB_PROGRESS: expected plain, bar or off, got \"{}\"", value);
}

LogLevel parse_log_level_setting(const std::string& value) {
  return named("DPLAB_LOG_LEVEL", value, [](const std::string& v) { return parse_log_level(v); });
}

bool parse_log_time_setting(const std::string& value) {
  DPLAB_CHECK(value == "0" || value == "1",
              "DPLAB_LOG_TIME: expected 1 (a time stamp on each line) or 0, got \"{}\"", value);
  return value == "1";
}

std::string parse_data_setting(const std::string& value) {
  std::error_code ec;
  DPLAB_CHECK(std::filesystem::is_directory(value, ec), "DPLAB_DATA={} is not a directory", value);
  return value;
}

void check_job_token_text(const std::string& token, const std::string& where) {
  DPLAB_CHECK(token.size() >= kMinTokenChars && token.size() <= kMaxTokenChars,
              "{} holds {} characters; a job token needs {} to {} (a random one: "
              "`export DPLAB_JOB_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \\n')`)",
              where, token.size(), kMinTokenChars, kMaxTokenChars);
  for (unsigned char c : token) {
    DPLAB_CHECK(c > 0x20 && c < 0x7f,
                "{} holds a space or a non-printable character (byte "
                "{:#04x}); a job token is printable ASCII without spaces",
                where, c);
  }
}

}  // namespace dplab
