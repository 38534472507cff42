// plot_runner.h: runs a benchmark's matplotlib script, the one way every benchmark and tutorial
// draws its PNGs (dplab-compare's plot_results.py, bench_allreduce's plot_allreduce.py,
// tutorials 21 and 24). Plots are a
// convenience: without a python3 that has matplotlib the figures are still printed and in
// the CSVs, and the note says what to install.
// Read next: compare/plot_results.py, plot_allreduce.py.
#pragma once
#include <string>
#include <vector>

namespace dplab::bench {

struct PlotRun {
  bool ok = false;      // the script ran and exited 0
  bool failed = false;  // it ran and failed (a missing matplotlib or script is not a failure)
  std::string note;     // "plots written with <python>", or why there are none
};

// Runs `python script args...` with the first of $DPLAB_PYTHON, python3, /usr/bin/python3
// that imports matplotlib.
PlotRun run_plot_script(const std::string& script, const std::vector<std::string>& args);

}  // namespace dplab::bench
