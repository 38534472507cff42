// allreduce_table.h: what bench_allreduce's table is made of besides its timings: sizes in
// words, the algorithms' short column titles, and the alpha-beta fit of the rows at N = 2.
// Read next: allreduce.cpp (the runs and the table).
#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dplab::bench {

inline std::string human(int64_t bytes) {
  if (bytes >= (1 << 20)) return fmt::format("{} MiB", bytes >> 20);
  if (bytes < 1024) return fmt::format("{} B", bytes);
  return fmt::format("{} KiB", bytes >> 10);
}
// As human, with the fraction: counted bytes are rarely whole KiB.
inline std::string human_exact(int64_t bytes) {
  if (bytes >= (1 << 20)) return fmt::format("{:.2f}MiB", bytes / double(1 << 20));
  if (bytes >= (1 << 10)) return fmt::format("{:.1f}KiB", bytes / double(1 << 10));
  return fmt::format("{}B", bytes);
}

// Short column titles for the table.
inline std::string short_name(const std::string& algo) {
  if (algo == "recursive_doubling") return "rd";
  if (algo == "halving_doubling") return "hd";
  if (algo == "one_shot") return "1shot";
  if (algo == "hierarchical") return "hier";
  return algo;
}

// Weighted least squares of t = alpha + beta * S (weights 1/t^2: relative error), as
// dplab-compare fits its ping-pong.
inline std::pair<double, double> fit_alpha_beta(const std::vector<std::pair<double, double>>& pts) {
  double sw = 0, swm = 0, swmm = 0, swt = 0, swmt = 0;
  for (auto [m, t] : pts) {
    const double w = 1.0 / (t * t);
    sw += w, swm += w * m, swmm += w * m * m, swt += w * t, swmt += w * m * t;
  }
  const double det = sw * swmm - swm * swm;
  if (pts.size() < 2 || det <= 0) return {0, 0};
  const double alpha = (swmm * swt - swm * swmt) / det;
  if (alpha < 0) return {0, swmt / swmm};  // noise pushed it below 0: a line through the origin
  return {alpha, (sw * swmt - swm * swt) / det};
}

}  // namespace dplab::bench
