// progress.cpp: rendering and pacing of the progress bar. Two costs matter in a training
// loop: formatting (done only when a line will actually be drawn) and terminal writes
// (capped at ~10 per second, so a fast loop does not spend its time redrawing).
// Read next: log.cpp.
#include "framework/io/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string_view>

#include "framework/error.h"
#include "framework/io/log.h"
#include "framework/io/settings.h"

namespace dplab {

namespace {

constexpr int kBarWidth = 20;

ProgressMode resolve_mode(const ProgressOptions& o) {
  if (o.mode != ProgressMode::Auto) return o.mode;
  if (const auto v = setting_value("DPLAB_PROGRESS")) {
    try {
      return parse_progress_setting(*v);
    } catch (const Error&) {
      log_warning("DPLAB_PROGRESS=\"{}\" is not one of plain, bar, off; ignored", *v);
    }
  }
  // A redrawn line only makes sense on a terminal; files and pipes get plain lines.
  return (o.out == nullptr && ::isatty(STDOUT_FILENO)) ? ProgressMode::Bar : ProgressMode::Plain;
}

// Four decimals read well for losses and accuracies; very large or small values go to
// scientific notation so the line keeps its width.
std::string format_stat(double v) {
  double a = std::fabs(v);
  if (std::isfinite(v) && (a == 0 || (a >= 1e-3 && a < 1e5))) return fmt::format("{:.4f}", v);
  return fmt::format("{:.3e}", v);
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

ProgressBar::ProgressBar(ProgressOptions opts) : opts_(std::move(opts)) {
  DPLAB_CHECK(opts_.total >= 0, "ProgressBar: total must be >= 0 (0 = unknown), got {}",
              opts_.total);
  DPLAB_CHECK(opts_.plain_every_percent >= 1 && opts_.plain_every_percent <= 100,
              "ProgressBar: plain_every_percent must be in [1, 100], got {}",
              opts_.plain_every_percent);
  mode_ = resolve_mode(opts_);
  start_ = now();
  last_draw_ = opts_.total == 0 ? start_ : -1e300;
  if (mode_ == ProgressMode::Bar) {
    set_log_before_write([this](std::ostream& s) { clear_bar_line(s); });
    hooked_ = true;
  }
}

ProgressBar::~ProgressBar() {
  try {
    close();
  } catch (...) {
    // A destructor must not throw; a failed final draw loses nothing but a line.
  }
}

double ProgressBar::now() const {
  if (opts_.clock) return opts_.clock();
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::ostream& ProgressBar::out() const { return opts_.out != nullptr ? *opts_.out : std::cout; }

double ProgressBar::elapsed() const { return now() - start_; }

double ProgressBar::rate() const {
  double e = elapsed();
  return e > 0 ? static_cast<double>(count_) / e : 0.0;
}

void ProgressBar::update(int64_t n, const ProgressStats& stats) {
  DPLAB_CHECK(n >= 0, "ProgressBar::update: n must be >= 0, got {}", n);
  std::lock_guard<std::mutex> lock(mu_);
  DPLAB_CHECK(!closed_, "ProgressBar::update after close() (\"{}\")", opts_.desc);
  count_ += n;
  if (!stats.empty()) stats_ = stats;
  if (mode_ == ProgressMode::Off) return;
  double t = now();
  if (mode_ == ProgressMode::Bar) {
    bool done = opts_.total > 0 && count_ >= opts_.total;
    if (done || t - last_draw_ >= opts_.min_interval_s) {
      draw_bar();
      last_draw_ = t;
    }
    return;
  }
  // Plain: one line per plain_every_percent crossed (the 100% line included), or per
  // plain_interval_s when the total is unknown.
  bool print = false;
  if (opts_.total > 0) {
    int64_t pct = std::min<int64_t>(count_, opts_.total) * 100 / opts_.total;
    int64_t bucket = pct / opts_.plain_every_percent;
    if (bucket > last_plain_bucket_ || (count_ >= opts_.total && last_plain_count_ < opts_.total)) {
      last_plain_bucket_ = bucket;
      print = true;
    }
  } else if (t - last_draw_ >= opts_.plain_interval_s) {
    print = true;
    last_draw_ = t;
  }
  if (print) {
    out() << render_plain_line(false) << '\n';
    out().flush();
    last_plain_count_ = count_;
  }
}

void ProgressBar::close() {
  // Unhook before taking mu_: the logger calls the hook holding its lock and then takes
  // mu_, so taking them in the other order here could deadlock.
  if (hooked_) {
    set_log_before_write(nullptr);
    hooked_ = false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  closed_ = true;
  if (mode_ == ProgressMode::Bar) {
    draw_bar();
    out() << '\n';
    out().flush();
  } else if (mode_ == ProgressMode::Plain && count_ != last_plain_count_) {
    out() << render_plain_line(true) << '\n';
    out().flush();
    last_plain_count_ = count_;
  }
}

// desc [########............] 600/1000 60% loss=0.4100 1234.5 samples/s ETA 0:03
std::string ProgressBar::render_bar_line() const {
  std::string s = opts_.desc.empty() ? std::string() : opts_.desc + " ";
  double r = rate();
  if (opts_.total > 0) {
    int64_t shown = std::min(count_, opts_.total);
    auto filled = static_cast<int>(shown * kBarWidth / opts_.total);
    s += '[';
    s.append(static_cast<size_t>(filled), '#');
    s.append(static_cast<size_t>(kBarWidth - filled), '.');
    s += "] ";
    s += fmt::format("{}/{} {}%", count_, opts_.total, shown * 100 / opts_.total);
  } else {
    s += fmt::format("{}", count_);
  }
  for (const auto& [k, v] : stats_) s += fmt::format(" {}={}", k, format_stat(v));
  s += fmt::format(" {:.1f} {}/s", r, opts_.unit);
  if (opts_.total > 0) {
    if (count_ >= opts_.total) s += " in " + format_duration(elapsed());
    else
      s += " ETA " + (r > 0 ? format_duration(static_cast<double>(opts_.total - count_) / r)
                            : std::string("?"));
  }
  return s;
}

// desc: 600/1000 (60%) loss=0.4100 1234.5 samples/s ETA 0:03      (ETA -> "in 0:08" when done)
std::string ProgressBar::render_plain_line(bool final) const {
  std::string s = opts_.desc.empty() ? std::string() : opts_.desc + ": ";
  double r = rate();
  if (opts_.total > 0)
    s += fmt::format("{}/{} ({}%)", count_, opts_.total,
                     std::min(count_, opts_.total) * 100 / opts_.total);
  else s += fmt::format("{} {}", count_, opts_.unit);
  for (const auto& [k, v] : stats_) s += fmt::format(" {}={}", k, format_stat(v));
  s += fmt::format(" {:.1f} {}/s", r, opts_.unit);
  if (final || (opts_.total > 0 && count_ >= opts_.total)) s += " in " + format_duration(elapsed());
  else if (opts_.total > 0)
    s += " ETA " + (r > 0 ? format_duration(static_cast<double>(opts_.total - count_) / r)
                          : std::string("?"));
  return s;
}

// \r returns to the line start; spaces blank what a longer previous line left behind.
void ProgressBar::draw_bar() {
  std::string line = render_bar_line();
  size_t len = line.size();
  if (len < last_len_) line.append(last_len_ - len, ' ');
  out() << '\r' << line;
  out().flush();
  last_len_ = len;
}

void ProgressBar::clear_bar_line(std::ostream& /*log_stream*/) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_ || last_len_ == 0) return;
  out() << '\r' << std::string(last_len_, ' ') << '\r';
  out().flush();
  last_len_ = 0;
  last_draw_ = -1e300;  // redraw on the next update, below the log line
}

}  // namespace dplab
