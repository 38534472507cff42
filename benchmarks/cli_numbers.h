// cli_numbers.h: the one check of the benchmark programs' numeric options (dplab-compare,
// dplab-project). CLI11's own range checks print "Value 0 not in range 0.000000 to 1.79e308";
// these say what was expected and what came. For a list (--ns 1,2,4) each element is checked.
// They run on the text, before CLI11 converts it: a count too large for an int gets this
// message, not CLI11's "could not convert".
// Read next: compare/cli.cpp, project/cli.cpp.
#pragma once
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

namespace dplab::bench {

// A whole, finite number in [min, max]: "expected {what}, got '{text}'".
inline CLI::Validator number_in(double min, double max, const std::string& what) {
  return CLI::Validator(
      [min, max, what](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (end != s.c_str() && *end == '\0' && std::isfinite(v) && v >= min && v <= max) return "";
        return fmt::format("expected {}, got '{}'", what, s);
      },
      what);
}

inline CLI::Validator at_least(double min, const std::string& what) {
  return number_in(min, std::numeric_limits<double>::max(), what);
}

}  // namespace dplab::bench
