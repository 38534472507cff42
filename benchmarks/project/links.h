// links.h: where a projection's link speeds come from: a named preset (the table below and
// tutorials/23_will_it_scale.md, with the source of each number), a number the user gives,
// or a calibration file of measured alpha and bandwidth per level.
//   preset      level  Gbit/s (one direction)  source of the bandwidth
//   pcie        intra  126    PCIe 3.0 x16: 16 lanes x 8 GT/s x 128/130 (PCI-SIG, PCIe 3.0 spec)
//   nvlink      intra  1200   NVLink 2 on a V100 SXM2: 6 links x 25 GB/s per direction
//                             (NVIDIA Tesla V100 GPU Architecture whitepaper, 2017)
//   10gbe       inter  10     IEEE 802.3ae    25gbe  inter  25   IEEE 802.3by
//   100gbe      inter  100    IEEE 802.3ba    infiniband  inter  100  EDR 4x: 4 x 25 Gbit/s (IBTA)
// The alphas of the presets are assumptions (orders of magnitude: a TCP message through the
// kernel, an RDMA or a GPU-to-GPU hand-off), not measurements: a calibration replaces them.
// Read next: links.cpp.
#pragma once
#include <string>
#include <vector>

#include "parallel/algorithms/cost_topology.h"

namespace dplab::projection {

struct LinkPreset {
  std::string name, level;  // level: "intra" or "inter"
  double gbps = 0;          // one direction
  double alpha_us = 0;
  std::string meaning, source;
};
const std::vector<LinkPreset>& link_presets();
// The preset of that name at that level; throws Error listing the names of the level.
const LinkPreset& link_preset(const std::string& name, const std::string& level);

// A link level as given: Gbit/s one direction and alpha in microseconds.
parallel::LevelLink level_link(double gbps, double alpha_us);
double gbps_of(const parallel::LevelLink& l);  // 8e-9 / beta

// A calibration file (CSV, '#' lines are comments):
//   level,alpha_us,gbps,source
//   inter,48.2,9.41,dplab-compare ping-pong over a 10 Gbit/s emulated link
// level: intra or inter (each at most once); alpha_us >= 0; gbps > 0 (one direction);
// source: free text without commas (what measured it). Measured terms replace given ones.
// A file over 64 KiB is refused unread (a calibration is a few lines; /dev/zero never ends).
struct CalibrationRow {
  std::string level;
  double alpha_us = 0, gbps = 0;
  std::string source;
};
std::vector<CalibrationRow> read_calibration(const std::string& path);
void write_calibration(const std::string& path, const std::vector<CalibrationRow>& rows);

}  // namespace dplab::projection
