// dplab-doctor: does dplab work on this machine, and if not, what to do about it. One screen
// of facts (the build, the CPU kernels, the machine, each GPU) and checks (quick self-tests
// of every backend and transport there is), each failure with its likely cause and fix.
//   dplab-doctor [--json FILE|-] [--no-self-tests]
// Exit status 0 when nothing failed (warnings and skips allowed), 1 otherwise.
// CLI11 lives in this file only (it is slow to compile).
// Read next: doctor.h.
#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>

#include "framework/backend/backend.h"
#include "framework/error.h"
#include "parallel/launch/spawn.h"
#include "tools/doctor/doctor.h"

using namespace dplab;
using namespace dplab::doctor;

int main(int argc, char** argv) {
  CLI::App app{"dplab-doctor: what works on this machine, and what to do about what does not"};
  std::string json;
  bool self_test = true;
  app.add_option("--json", json, "also write the report as JSON to this file ('-': stdout only)");
  app.add_flag("!--no-self-tests", self_test, "facts and configuration checks only");
  CLI11_PARSE(app, argc, argv);

  // A rank started by one of the self-tests' spawn() calls: run that rank, nothing else.
  if (parallel::is_spawned_child()) {
    Report ignored;
    self_tests(ignored, cuda_device_count() > 0);
    return 0;
  }
  Report r;
  try {
    settings_checks(r);  // first: the others read the settings it unsets
    build_checks(r);
    machine_checks(r);  // forks: before anything initialises CUDA
    gpu_checks(r);
    if (self_test) self_tests(r, cuda_device_count() > 0);
  } catch (const std::exception& e) {  // a check that could not even run
    r.add({.section = "doctor",
           .name = "the doctor itself",
           .verdict = Verdict::Fail,
           .detail = e.what(),
           .fix = "report it as a bug with this output"});
  }
  if (json == "-") {
    std::fputs(render_json(r).c_str(), stdout);
  } else {
    std::fputs(render_text(r).c_str(), stdout);
    if (!json.empty()) {
      std::ofstream f(json);
      f << render_json(r);
      if (!f.good()) {
        fmt::print(stderr, "dplab-doctor: cannot write {}\n", json);
        return 2;
      }
      fmt::print("wrote {}\n", json);
    }
  }
  return r.count(Verdict::Fail) == 0 ? 0 : 1;
}
