// doctor.h: dplab-doctor's vocabulary. A check is one line of the report: its section
// (settings, build, machine, gpu, self-test), what it looked at, a verdict, what it found,
// and for anything short of "ok" the likely cause and the fix, in words a student can act on.
// Facts (name = value) are what the machine is; checks are what works on it.
// Read next: main.cpp (the order things run in), then each checks_*.cpp.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace dplab::doctor {

enum class Verdict { Ok, Warn, Fail, Skip };
const char* verdict_name(Verdict v);  // "ok", "warn", "fail", "skip"

struct Check {
  std::string section{};  // "settings", "build", "machine", "gpu", "self-test"
  std::string name{};     // what was checked: "shm all_reduce, 2 ranks"
  Verdict verdict = Verdict::Ok;
  std::string detail{};  // what was found, with the numbers
  std::string fix{};     // cause and fix, for warn and fail
};

struct Report {
  std::vector<std::pair<std::string, std::string>> facts;  // in the order found
  std::vector<Check> checks;

  void fact(const std::string& name, const std::string& value) { facts.emplace_back(name, value); }
  void add(Check c) { checks.push_back(std::move(c)); }
  int count(Verdict v) const;
};

// Each adds its facts and checks. settings_checks runs first: it unsets the DPLAB_* values
// every program would stop at, so that the checks after it do not all fail on the same one.
// machine_checks forks (the memfd probe): run it before anything initialises CUDA, which does
// not survive fork.
void settings_checks(Report& r);
void build_checks(Report& r);
void machine_checks(Report& r);
// The soft limit on open files (ulimit -n), and how many the busiest process of a job of
// `ranks` ranks on one machine holds at once (checks_machine.cpp counts them).
long descriptor_limit();
int descriptors_needed(int ranks);
void gpu_checks(Report& r);
// The quick self-tests; the multi-rank ones start ranks with spawn(), which re-runs this
// program: in a spawned rank, call self_tests and nothing else (it then runs only its rank).
void self_tests(Report& r, bool with_gpu);

// One screen of text, and the JSON that --json writes (tools/doctor/check_doctor_json.py
// reads it in CI).
std::string render_text(const Report& r);
std::string render_json(const Report& r);

}  // namespace dplab::doctor
