// progress.h: the training loop's progress bar.
//   ProgressBar bar({.total = n_samples, .desc = "epoch 1/5", .unit = "samples"});
//   for (...) bar.update(batch_size, {{"loss", loss.item()}});   // adds to the count
//   bar.close();
// On a terminal: one line redrawn in place with \r, at most ~10 times a second:
//   epoch 1/5 [########............] 600/1000 40% loss=0.4100 1234.5 samples/s ETA 0:03
// Not a terminal (a log file, CI, a pipe) or env DPLAB_PROGRESS=plain: a plain line each
// ~10% and one at the end, so logs stay readable:
//   epoch 1/5: 600/1000 (60%) loss=0.4100 1234.5 samples/s ETA 0:03
// DPLAB_PROGRESS=bar forces the redrawn line, DPLAB_PROGRESS=off prints nothing.
// Read next: log.h (log lines erase the bar first, so the two never interleave).
#pragma once
#include <cstdint>
#include <functional>
#include <mutex>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace dplab {

enum class ProgressMode { Auto, Bar, Plain, Off };

struct ProgressOptions {
  int64_t total = 0;      // 0: unknown (no bar, no ETA; plain lines every plain_interval_s)
  std::string desc = "";  // "epoch 1/5"
  std::string unit = "it";
  std::ostream* out = nullptr;  // nullptr: stdout. Auto picks Bar only for a stdout that isatty.
  ProgressMode mode = ProgressMode::Auto;   // Auto: DPLAB_PROGRESS, else isatty(stdout)
  double min_interval_s = 0.1;              // Bar mode: at most one redraw per interval (10/s)
  int plain_every_percent = 10;             // Plain mode: one line each time this many % pass
  double plain_interval_s = 10.0;           // Plain mode, unknown total: one line per interval
  std::function<double()> clock = nullptr;  // seconds; default steady_clock. Tests inject a fake.
};

using ProgressStats = std::vector<std::pair<std::string, double>>;

class ProgressBar {
 public:
  explicit ProgressBar(ProgressOptions opts);
  ~ProgressBar();  // closes if still open
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Adds n to the count (tqdm's update) and replaces the shown stats when any are given.
  void update(int64_t n = 1, const ProgressStats& stats = {});
  // Draws the final state and ends the line. Idempotent.
  void close();

  int64_t count() const { return count_; }
  ProgressMode mode() const { return mode_; }  // the resolved mode: Bar, Plain or Off
  // Seconds since the bar was made, and count per second over that time.
  double elapsed() const;
  double rate() const;

 private:
  std::string render_bar_line() const;
  std::string render_plain_line(bool final) const;
  void draw_bar();
  void clear_bar_line(std::ostream& log_stream);  // log hook, called under the log lock
  std::ostream& out() const;
  double now() const;

  ProgressOptions opts_;
  ProgressMode mode_ = ProgressMode::Plain;
  double start_ = 0;
  double last_draw_ = -1e300;
  int64_t count_ = 0;
  int64_t last_plain_bucket_ = 0;  // plain mode: last printed multiple of plain_every_percent
  int64_t last_plain_count_ = -1;
  size_t last_len_ = 0;  // bar mode: width of the line on screen, to blank it
  bool closed_ = false;
  bool hooked_ = false;
  ProgressStats stats_;
  mutable std::mutex mu_;  // the log hook may run on another thread
};

// "0:07", "12:34", "1:02:03"
std::string format_duration(double seconds);

}  // namespace dplab
