// report.cpp: the doctor's two outputs. Text: facts first, then one line per check with its
// verdict, and under every warn / fail the cause and fix, indented. JSON: the same, for
// course staff who collect a room's machines (schema: {"dplab_doctor": 1, "facts": {...},
// "checks": [{"section", "name", "verdict", "detail", "fix"}], "summary": {...}}).
// Read next: checks_build.cpp.
#include <fmt/core.h>

#include "framework/io/json.h"
#include "tools/doctor/doctor.h"

namespace dplab::doctor {

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::Ok: return "ok";
    case Verdict::Warn: return "warn";
    case Verdict::Fail: return "fail";
    case Verdict::Skip: return "skip";
  }
  return "?";
}

int Report::count(Verdict v) const {
  int n = 0;
  for (const Check& c : checks) n += c.verdict == v;
  return n;
}

std::string render_text(const Report& r) {
  std::string out = "dplab-doctor: what works on this machine\n";
  for (const auto& [name, value] : r.facts) out += fmt::format("  {:<22} {}\n", name, value);
  std::string section;
  for (const Check& c : r.checks) {
    if (c.section != section) {
      section = c.section;
      out += fmt::format("{}:\n", section);
    }
    out += fmt::format("  [{:<4}] {}{}{}\n", verdict_name(c.verdict), c.name,
                       c.detail.empty() ? "" : ": ", c.detail);
    if ((c.verdict == Verdict::Warn || c.verdict == Verdict::Fail) && !c.fix.empty())
      out += fmt::format("         -> {}\n", c.fix);
  }
  out += fmt::format("{} ok, {} warn, {} fail, {} skip\n", r.count(Verdict::Ok),
                     r.count(Verdict::Warn), r.count(Verdict::Fail), r.count(Verdict::Skip));
  return out;
}

std::string render_json(const Report& r) {
  auto str = [](const std::string& s) {
    std::string out;
    append_json_string(out, s);
    return out;
  };
  std::string out = "{\n  \"dplab_doctor\": 1,\n  \"facts\": {";
  for (size_t i = 0; i < r.facts.size(); ++i)
    out +=
        fmt::format("{}\n    {}: {}", i ? "," : "", str(r.facts[i].first), str(r.facts[i].second));
  out += "\n  },\n  \"checks\": [";
  for (size_t i = 0; i < r.checks.size(); ++i) {
    const Check& c = r.checks[i];
    out +=
        fmt::format("{}\n    {{\"section\": {}, \"name\": {}, \"verdict\": \"{}\", \"detail\": {}, "
                    "\"fix\": {}}}",
                    i ? "," : "", str(c.section), str(c.name), verdict_name(c.verdict),
                    str(c.detail), str(c.fix));
  }
  out += fmt::format(
      "\n  ],\n  \"summary\": {{\"ok\": {}, \"warn\": {}, \"fail\": {}, \"skip\": {}}}\n}}\n",
      r.count(Verdict::Ok), r.count(Verdict::Warn), r.count(Verdict::Fail), r.count(Verdict::Skip));
  return out;
}

}  // namespace dplab::doctor
