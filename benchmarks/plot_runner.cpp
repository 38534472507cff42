// plot_runner.cpp: find a python3 with matplotlib, run the script, say what happened.
#include "benchmarks/plot_runner.h"

#include <fmt/core.h>

#include <cstdlib>
#include <filesystem>

namespace dplab::bench {

PlotRun run_plot_script(const std::string& script, const std::vector<std::string>& args) {
  std::vector<std::string> candidates;
  if (const char* p = std::getenv("DPLAB_PYTHON")) candidates.emplace_back(p);
  candidates.insert(candidates.end(), {"python3", "/usr/bin/python3"});
  std::string python;
  for (const std::string& c : candidates)
    if (std::system(("'" + c + "' -c 'import matplotlib' >/dev/null 2>&1").c_str()) == 0) {
      python = c;
      break;
    }
  if (python.empty())
    return {.note =
                "plots skipped: no python3 with matplotlib found (tried $DPLAB_PYTHON, python3, "
                "/usr/bin/python3; on Debian: apt-get install python3-matplotlib)"};
  if (!std::filesystem::exists(script))
    return {.note = "plots skipped: plot script " + script + " not found"};
  std::string cmd = fmt::format("'{}' '{}'", python, script);
  for (const std::string& a : args) cmd += fmt::format(" '{}'", a);
  if (std::system(cmd.c_str()) != 0)
    return {.failed = true,
            .note = "plots FAILED: `" + cmd + "` exited non-zero (its message is above)"};
  return {.ok = true, .note = "plots written with " + python};
}

}  // namespace dplab::bench
