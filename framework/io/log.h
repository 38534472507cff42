// log.h: a small logging layer with levels, a prefix and a rank filter.
//   log_info("epoch {} loss {:.4f}", epoch, loss);   ->  "[rank 1] INFO: epoch 3 loss 0.4100"
// The level starts from env DPLAB_LOG_LEVEL (debug, info, warning, error; default info).
// Distributed code calls set_log_prefix("[rank 1] ") and set_log_rank(rank): then debug and
// info lines print on rank 0 only, while warnings and errors print on every rank, so N
// processes do not print N copies of the same progress but every failure is seen.
// Lines go to stderr (like Python's logging) unless set_log_stream() says otherwise.
// Read next: progress.h.
#pragma once
#include <fmt/format.h>

#include <functional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

namespace dplab {

enum class LogLevel { Debug = 0, Info = 1, Warning = 2, Error = 3 };

std::string_view log_level_name(LogLevel l);  // "DEBUG", "INFO", "WARNING", "ERROR"
// "debug" | "info" | "warning" | "warn" | "error", any case; throws Error otherwise.
LogLevel parse_log_level(std::string_view s);

void set_log_level(LogLevel l);
LogLevel log_level();  // first call reads DPLAB_LOG_LEVEL (a bad value warns and keeps info)
void set_log_prefix(std::string prefix);
std::string log_prefix();
// rank >= 0: debug/info only when rank == 0. rank < 0 (the default): no filter.
void set_log_rank(int rank);
// nullptr restores stderr. The stream must outlive its use; tests pass a std::ostringstream.
void set_log_stream(std::ostream* out);
// Prepend "HH:MM:SS.mmm " to each line (env DPLAB_LOG_TIME=1 turns it on at start).
void set_log_timestamps(bool on);

// Whether a line at this level would be printed now (level and rank filter).
bool log_enabled(LogLevel l);

// Called before each line is written, with the stream lock held. The progress bar uses it
// to erase its half-drawn terminal line so that log lines and the bar do not interleave.
void set_log_before_write(std::function<void(std::ostream&)> hook);

namespace detail {
void log_write(LogLevel l, std::string_view msg);  // formats the line, locks, writes, flushes
}

template <typename... Args>
void log_at(LogLevel l, fmt::format_string<Args...> f, Args&&... args) {
  // Format only lines that will print: a disabled debug line costs one comparison.
  if (log_enabled(l)) detail::log_write(l, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_debug(fmt::format_string<Args...> f, Args&&... args) {
  log_at(LogLevel::Debug, f, std::forward<Args>(args)...);
}
template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  log_at(LogLevel::Info, f, std::forward<Args>(args)...);
}
template <typename... Args>
void log_warning(fmt::format_string<Args...> f, Args&&... args) {
  log_at(LogLevel::Warning, f, std::forward<Args>(args)...);
}
template <typename... Args>
void log_error(fmt::format_string<Args...> f, Args&&... args) {
  log_at(LogLevel::Error, f, std::forward<Args>(args)...);
}

}  // namespace dplab
