// links.cpp: the presets of links.h and the calibration file's reader and writer.
// Read next: projection.h.
#include "benchmarks/project/links.h"

#include <fmt/core.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "framework/error.h"

namespace dplab::projection {

const std::vector<LinkPreset>& link_presets() {
  static const std::vector<LinkPreset> presets = {
      {"pcie", "intra", 126, 10, "PCIe 3.0 x16 between a GPU and its host (as the Pascal servers of Horovod's paper)",
       "PCI-SIG PCI Express Base Specification 3.0: 8 GT/s per lane, 128b/130b encoding, 16 lanes"},
      {"nvlink", "intra", 1200, 5, "NVLink 2 (V100 SXM2): 6 links of 25 GB/s per direction",
       "NVIDIA Tesla V100 GPU Architecture whitepaper (2017): 300 GB/s both directions together"},
      {"10gbe", "inter", 10, 50, "10 Gigabit Ethernet, TCP", "IEEE 802.3ae"},
      {"25gbe", "inter", 25, 50, "25 Gigabit Ethernet, TCP (Horovod's paper: 25 Gbit/s over TCP)", "IEEE 802.3by"},
      {"100gbe", "inter", 100, 50, "100 Gigabit Ethernet, TCP", "IEEE 802.3ba"},
      {"infiniband", "inter", 100, 5, "InfiniBand EDR 4x, RDMA", "InfiniBand Trade Association: EDR, 25 Gbit/s a lane"},
  };
  return presets;
}

const LinkPreset& link_preset(const std::string& name, const std::string& level) {
  std::string names;
  for (const LinkPreset& p : link_presets()) {
    if (p.level != level) continue;
    if (p.name == name) return p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  DPLAB_FAIL("expected an {}-node link preset ({}), got '{}'", level, names, name);
}

parallel::LevelLink level_link(double gbps, double alpha_us) {
  DPLAB_CHECK(gbps > 0 && std::isfinite(gbps), "expected a link speed > 0 Gbit/s, got {}", gbps);
  DPLAB_CHECK(alpha_us >= 0 && std::isfinite(alpha_us), "expected an alpha >= 0 us, got {}", alpha_us);
  return {.alpha = alpha_us * 1e-6, .beta = 8.0 / (gbps * 1e9)};
}

double gbps_of(const parallel::LevelLink& l) { return l.beta > 0 ? 8e-9 / l.beta : 0; }

namespace {

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  for (std::string cell; std::getline(ss, cell, ',');) {
    const auto b = cell.find_first_not_of(" \t\r"), e = cell.find_last_not_of(" \t\r");
    out.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
  }
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

double number(const std::string& cell, const std::string& path, int line, const char* column) {
  char* end = nullptr;
  const double v = std::strtod(cell.c_str(), &end);
  DPLAB_CHECK(!cell.empty() && end && *end == '\0' && std::isfinite(v), "{}:{}: expected a number for {}, got '{}'",
              path, line, column, cell);
  return v;
}

}  // namespace

std::vector<CalibrationRow> read_calibration(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  DPLAB_CHECK(file.good(), "calibration: cannot open '{}'", path);
  // A calibration is a few lines: read at most this much, so that /dev/zero or a disk image
  // given by mistake is refused at once instead of read to the end (or forever).
  constexpr size_t kMaxBytes = 64 << 10;
  std::string text(kMaxBytes + 1, '\0');
  file.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(file.gcount()));
  DPLAB_CHECK(text.size() <= kMaxBytes, "calibration: expected a CSV of a few lines (at most {} KiB), '{}' holds more",
              kMaxBytes >> 10, path);
  std::istringstream f(text);
  std::vector<CalibrationRow> rows;
  bool header = false;
  int lineno = 0;
  for (std::string line; std::getline(f, line);) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos || line[line.find_first_not_of(" \t")] == '#') continue;
    const std::vector<std::string> cells = split_csv(line);
    if (!header) {
      DPLAB_CHECK(cells.size() >= 3 && cells[0] == "level" && cells[1] == "alpha_us" && cells[2] == "gbps",
                  "{}:{}: expected the header 'level,alpha_us,gbps,source', got '{}'", path, lineno, line);
      header = true;
      continue;
    }
    DPLAB_CHECK(cells.size() == 3 || cells.size() == 4, "{}:{}: expected 3 or 4 cells (level,alpha_us,gbps,source), "
                "got {}", path, lineno, cells.size());
    CalibrationRow r{.level = cells[0], .alpha_us = number(cells[1], path, lineno, "alpha_us"),
                     .gbps = number(cells[2], path, lineno, "gbps"), .source = cells.size() == 4 ? cells[3] : ""};
    DPLAB_CHECK(r.level == "intra" || r.level == "inter", "{}:{}: expected level intra or inter, got '{}'", path,
                lineno, r.level);
    DPLAB_CHECK(r.alpha_us >= 0, "{}:{}: expected alpha_us >= 0, got {}", path, lineno, r.alpha_us);
    DPLAB_CHECK(r.gbps > 0, "{}:{}: expected gbps > 0, got {}", path, lineno, r.gbps);
    for (const CalibrationRow& o : rows)
      DPLAB_CHECK(o.level != r.level, "{}:{}: level {} appears twice", path, lineno, r.level);
    rows.push_back(r);
  }
  DPLAB_CHECK(header, "calibration: '{}' has no header line 'level,alpha_us,gbps,source'", path);
  DPLAB_CHECK(!rows.empty(), "calibration: '{}' has a header but no rows", path);
  return rows;
}

void write_calibration(const std::string& path, const std::vector<CalibrationRow>& rows) {
  std::ofstream f(path);
  f << "# dplab calibration: measured alpha (us per message) and bandwidth (Gbit/s, one direction) per level;\n"
       "# dplab-project --calibration reads it (benchmarks/project/links.h)\n"
       "level,alpha_us,gbps,source\n";
  for (const CalibrationRow& r : rows) {
    std::string source = r.source;
    for (char& ch : source)
      if (ch == ',' || ch == '\n') ch = ';';
    f << fmt::format("{},{:.4g},{:.6g},{}\n", r.level, r.alpha_us, r.gbps, source);
  }
  DPLAB_CHECK(f.good(), "could not write {}", path);
}

}  // namespace dplab::projection
