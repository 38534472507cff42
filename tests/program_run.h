// program_run.h: running one of dplab's programs from a test (its stdout and stderr kept,
// its exit status), and reading the CSV it wrote into rows of column -> cell, or the raw
// floats of a parameter file. Shared by the
// tests of dplab-compare (tests/compare) and bench_allreduce (tests/benchmarks).
// Read next: tests/compare/test_compare.cpp.
#pragma once
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace dplab::testing {

struct ProgramRun {
  int rc = -1;         // exit status, -1 when killed by a signal
  std::string output;  // stdout and stderr together
};

// Runs `command` through the shell with stderr joined to stdout.
inline ProgramRun run_program(const std::string& command) {
  ProgramRun r;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  while (size_t n = std::fread(buf.data(), 1, buf.size(), p)) r.output.append(buf.data(), n);
  const int status = ::pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A CSV with a header line and no quoted commas, as dplab's programs write them.
inline std::vector<std::map<std::string, std::string>> read_csv(
    const std::filesystem::path& path, std::vector<std::string>* header = nullptr) {
  std::ifstream f(path);
  REQUIRE_MESSAGE(f.good(), "missing " << path);
  auto split = [](const std::string& line) {
    std::vector<std::string> out;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) out.push_back(cell);
    return out;
  };
  std::string line;
  std::getline(f, line);
  const std::vector<std::string> cols = split(line);
  if (header) *header = cols;
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(f, line)) {
    const auto cells = split(line);
    REQUIRE(cells.size() == cols.size());
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < cols.size(); ++i) row[cols[i]] = cells[i];
    rows.push_back(row);
  }
  return rows;
}

// main() of a test whose first argument is the path of the program under test: it goes into
// `exe`, doctest gets the rest; `scratch` (the test's files) is removed afterwards.
// The float32 values of a raw file the program wrote (dplab-compare's runs/<mode>_n<N>.params).
inline std::vector<float> read_floats(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  REQUIRE_MESSAGE(f.good(), "missing " << path);
  std::vector<float> v(static_cast<size_t>(f.tellg()) / sizeof(float));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
  return v;
}

// The largest |a[i] - b[i]| (the two runs' parameters: same length, REQUIREd by the caller).
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double most = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    most = std::max(most, static_cast<double>(std::fabs(a[i] - b[i])));
  return most;
}

inline int program_test_main(int argc, char** argv, std::string& exe,
                             const std::filesystem::path& scratch) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATH/TO/PROGRAM [doctest options]\n", argv[0]);
    return 2;
  }
  exe = argv[1];
  doctest::Context ctx(argc - 1, argv + 1);
  const int rc = ctx.run();
  std::error_code ec;
  std::filesystem::remove_all(scratch, ec);
  return rc;
}

}  // namespace dplab::testing
