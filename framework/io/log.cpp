// log.cpp: the logger's global state. DataParallel logs from one thread per device, so the
// level and rank are atomics (read on every call) and writing a line holds one mutex, which
// keeps lines whole. The environment is read once, on first use, by settings.h's parsers.
// Read next: progress.cpp.
#include "framework/io/log.h"

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <mutex>

#include "framework/error.h"
#include "framework/io/settings.h"

namespace dplab {

namespace {

struct LogState {
  std::atomic<int> level{static_cast<int>(LogLevel::Info)};
  std::atomic<int> rank{-1};
  std::atomic<bool> timestamps{false};
  std::mutex mu;  // guards prefix, out, before_write and the writes themselves
  std::string prefix;
  std::ostream* out = nullptr;  // nullptr: std::cerr
  std::function<void(std::ostream&)> before_write;
  std::string env_warning;  // a bad DPLAB_LOG_LEVEL or _TIME, reported with the first line printed
};

LogState& state() {
  // Built on first use (no static-initialisation order issue), env read once.
  static LogState* s = [] {
    auto* st = new LogState();  // never destroyed: logging from static destructors stays safe
    if (const auto env = setting_value("DPLAB_LOG_LEVEL")) {
      try {
        st->level = static_cast<int>(parse_log_level_setting(*env));
      } catch (const Error&) {
        st->env_warning = fmt::format(
            "DPLAB_LOG_LEVEL=\"{}\" is not one of debug, info, warning, error; using info", *env);
      }
    }
    if (const auto env = setting_value("DPLAB_LOG_TIME")) {
      try {
        st->timestamps = parse_log_time_setting(*env);
      } catch (const Error&) {
        st->env_warning += fmt::format("{}DPLAB_LOG_TIME=\"{}\" is not 1 or 0; no time stamps",
                                       st->env_warning.empty() ? "" : "; ", *env);
      }
    }
    return st;
  }();
  return *s;
}

std::string time_of_day() {
  auto now = std::chrono::system_clock::now();
  std::time_t secs = std::chrono::system_clock::to_time_t(now);
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  localtime_r(&secs, &tm);
  return fmt::format("{:02}:{:02}:{:02}.{:03} ", tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

}  // namespace

std::string_view log_level_name(LogLevel l) {
  switch (l) {
    case LogLevel::Debug: return "DEBUG";
    case LogLevel::Info: return "INFO";
    case LogLevel::Warning: return "WARNING";
    case LogLevel::Error: return "ERROR";
  }
  return "?";
}

LogLevel parse_log_level(std::string_view s) {
  std::string lower;
  for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "debug") return LogLevel::Debug;
  if (lower == "info") return LogLevel::Info;
  if (lower == "warning" || lower == "warn") return LogLevel::Warning;
  if (lower == "error") return LogLevel::Error;
  DPLAB_FAIL("log level: expected debug, info, warning or error, got \"{}\"", s);
}

void set_log_level(LogLevel l) { state().level = static_cast<int>(l); }
LogLevel log_level() { return static_cast<LogLevel>(state().level.load()); }

void set_log_prefix(std::string prefix) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().prefix = std::move(prefix);
}

std::string log_prefix() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().prefix;
}

void set_log_rank(int rank) { state().rank = rank; }
void set_log_timestamps(bool on) { state().timestamps = on; }

void set_log_stream(std::ostream* out) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().out = out;
}

void set_log_before_write(std::function<void(std::ostream&)> hook) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().before_write = std::move(hook);
}

bool log_enabled(LogLevel l) {
  LogState& s = state();
  if (static_cast<int>(l) < s.level.load(std::memory_order_relaxed)) return false;
  // Warnings and errors show on every rank; chatter only on rank 0.
  int rank = s.rank.load(std::memory_order_relaxed);
  return l >= LogLevel::Warning || rank <= 0;
}

namespace detail {

void log_write(LogLevel l, std::string_view msg) {
  LogState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  std::ostream& out = s.out != nullptr ? *s.out : std::cerr;
  if (s.before_write) s.before_write(out);
  std::string stamp = s.timestamps ? time_of_day() : std::string();
  if (!s.env_warning.empty()) {
    out << stamp << s.prefix << "WARNING: " << s.env_warning << '\n';
    s.env_warning.clear();
  }
  out << stamp << s.prefix << log_level_name(l) << ": " << msg << '\n';
  out.flush();
}

}  // namespace detail

}  // namespace dplab
