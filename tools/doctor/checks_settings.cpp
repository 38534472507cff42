// checks_settings.cpp: every DPLAB_* variable that is set, checked by the parser the library
// itself reads it with (framework/io/settings.h's table), so the verdict here is what a
// program does with the value: "fail" where every program stops at it, "warn" where programs
// warn and use the default. A refused value is then unset in this process, so that the
// checks after it (and the ranks the self-tests start) say what works once it is fixed,
// instead of each failing on the same value and blaming something else.
// Read next: checks_build.cpp.
#include <fmt/core.h>

#include <cstdlib>

#include "framework/error.h"
#include "framework/io/settings.h"
#include "tools/doctor/doctor.h"

namespace dplab::doctor {

void settings_checks(Report& r) {
  std::string set;
  std::vector<const Setting*> to_unset;
  for (const Setting& s : settings()) {
    const std::optional<std::string> value = setting_value(s.name);
    if (const char* raw = std::getenv(s.name); raw != nullptr)
      set += fmt::format("{}{}={}", set.empty() ? "" : " ", s.name,
                         s.secret ? "(set, not shown)" : raw);
    if (!value) continue;
    const std::string shown = s.secret ? fmt::format("{} characters, not shown", value->size())
                                       : fmt::format("\"{}\"", *value);
    Check c{.section = "settings", .name = s.name};
    try {
      s.check(*value);
      c.detail = fmt::format("{}: accepted", shown);
    } catch (const Error& e) {
      const bool stops = s.when_refused == WhenRefused::Stop;
      c.verdict = stops ? Verdict::Fail : Verdict::Warn;
      c.detail = e.what();
      const std::string example =
          s.secret ? std::string() : fmt::format(" (e.g. {}={})", s.name, s.example);
      c.fix = fmt::format(
          "{} accepts {}{}; {}", s.name, s.accepts, example,
          stops ? fmt::format("every dplab program stops at this value: set it right or `unset "
                              "{}`. The checks below ran without it",
                              s.name)
                : "programs warn and go on as if it were unset");
      if (stops) to_unset.push_back(&s);
    }
    r.add(c);
  }
  r.fact("DPLAB_* settings", set.empty() ? "none" : set);
  for (const Setting* s : to_unset) ::unsetenv(s->name);
}

}  // namespace dplab::doctor
