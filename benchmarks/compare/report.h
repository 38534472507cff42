// report.h: what dplab-compare prints and writes once every run is done: the table,
// results.csv (one row per mode and N), per_device.csv (one row per device / rank),
// report.md, the agreement checks (parameters and accuracy against the single device) and
// the call to plot_results.py for the PNGs.
// Read next: report.cpp (what each column means), plot_results.py.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "benchmarks/compare/alpha_beta.h"
#include "benchmarks/compare/compare.h"

namespace dplab::compare {

// Every column of results.csv, in order (the test checks them all).
const std::vector<std::string>& csv_columns();

// Fills predicted_step_s of the star and ring rows: the run's own compute time per step
// (compute_s: its step less its wait) plus what the alpha-beta model says the all-reduces
// add to it (step_seconds with overlap; N ranks share `cores` cores here).
void add_predictions(std::vector<RunResult>& runs, const AlphaBeta& ab, const Config& cfg,
                     int cores);

struct Agreement {
  std::vector<std::string> lines;  // one per run: max |param diff| and accuracy difference
  bool ok = true;                  // false when a run's accuracy differs by > 0.5 points
};
// Compares every run with the single-device run (reading each run's parameter file).
Agreement check_agreement(const Config& cfg, const std::vector<RunResult>& runs);

std::string format_table(const std::vector<RunResult>& runs);
// Memory per device: parameters, gradients, optimizer state, activations, the other bytes
// of the peak (backward's and communication's buffers) and the peak, in MiB: DP's master,
// DDP's equal replicas, ZeRO's 1/N state.
std::string format_memory_table(const std::vector<RunResult>& runs);
// Mode ps (ps_report.cpp): one sentence per ps run on where it matches the ring (bytes per
// rank) and where it loses (the busiest link's bytes, their balance, the step time).
std::vector<std::string> ps_findings(const std::vector<RunResult>& runs);
// One sentence on the emulated links in effect (or their absence), for the table and report.
std::string link_note(const Config& cfg);
void write_results_csv(const std::string& path, const std::vector<RunResult>& runs);
void write_per_device_csv(const std::string& path, const std::vector<RunResult>& runs);
void write_report_md(const std::string& path, const Config& cfg, const std::vector<RunResult>& runs,
                     const Agreement& agreement, const std::optional<AlphaBeta>& ab,
                     const std::vector<std::string>& plots, const std::string& plot_note);

// Finds a python3 with matplotlib ($DPLAB_PYTHON, python3, /usr/bin/python3) and runs
// plot_results.py on the out dir. Returns the PNGs written; `note` says why none were.
std::vector<std::string> make_plots(const Config& cfg, const std::string& script,
                                    std::string& note);

}  // namespace dplab::compare
