// test_settings.cpp: the DPLAB_* table (framework/io/settings.h). Every row accepts its own
// example and refuses junk with a message that names the variable; the job token's row
// never echoes the token; an empty value is unset where the row says so; and a reader in
// the library refuses exactly what its row refuses (the same parser).
#include <doctest/doctest.h>
#include <stdlib.h>

#include <set>
#include <string>

#include "framework/backend/cpu/cpu_dispatch.h"
#include "framework/error.h"
#include "framework/io/settings.h"
#include "framework/tensor/memory_cap.h"

using namespace dplab;

namespace {

// Sets a variable for one scope, restoring what was there.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(const std::string& n, const char* value) : name(n) {
    if (const char* v = std::getenv(n.c_str())) old = v;
    if (value) ::setenv(n.c_str(), value, 1);
    else ::unsetenv(n.c_str());
  }
  ~ScopedEnv() {
    if (old) ::setenv(name.c_str(), old->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

std::string refusal(const Setting& s, const std::string& value) {
  try {
    s.check(value);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("settings: every row accepts its example and refuses junk, naming its variable") {
  std::set<std::string> names;
  for (const Setting& s : settings()) {
    CAPTURE(s.name);
    CHECK(std::string(s.name).rfind("DPLAB_", 0) == 0);
    CHECK(names.insert(s.name).second);  // one row per variable
    CHECK_FALSE(s.accepts.empty());
    CHECK_NOTHROW(s.check(s.example));
    for (const char* junk : {"junk", "-1", "1e999"}) {
      CAPTURE(junk);
      const std::string why = refusal(s, junk);
      CHECK_FALSE(why.empty());
      CHECK(why.find(s.name) != std::string::npos);
    }
  }
  // the values issue 47 found the doctor passing or blaming on shared memory
  for (const auto& [name, value] :
       std::vector<std::pair<const char*, const char*>>{{"DPLAB_TIMEOUT", "nan"},
                                                        {"DPLAB_SEGMENT_KB", "0"},
                                                        {"DPLAB_WAIT", "junk"},
                                                        {"DPLAB_JOB_TOKEN", "short"}}) {
    CAPTURE(name);
    CHECK(refusal(setting(name), value).find(name) != std::string::npos);
    CHECK(setting(name).when_refused == WhenRefused::Stop);
  }
  CHECK_THROWS_WITH_AS(setting("DPLAB_TIMOUT"),
                       doctest::Contains("DPLAB_TIMOUT is not a DPLAB_* setting"), Error);
}

TEST_CASE("settings: the job token's row says what is wrong without echoing the token") {
  const Setting& token = setting("DPLAB_JOB_TOKEN");
  CHECK(token.secret);
  for (const char* bad : {"hunter2-secret", "a-long-token with a space", "Zq"}) {
    CAPTURE(bad);
    const std::string why = refusal(token, bad);
    CHECK(why.find("DPLAB_JOB_TOKEN holds") != std::string::npos);
    CHECK(why.find(bad) == std::string::npos);
  }
}

TEST_CASE("settings: an empty value is unset where the row says so, a value elsewhere") {
  {
    ScopedEnv e("DPLAB_SEGMENT_KB", "");
    CHECK(setting("DPLAB_SEGMENT_KB").empty_is_unset);
    CHECK_FALSE(setting_value("DPLAB_SEGMENT_KB").has_value());
  }
  {
    ScopedEnv e("DPLAB_TIMEOUT", "");
    CHECK(setting_value("DPLAB_TIMEOUT") == std::optional<std::string>(""));
    CHECK_THROWS_WITH_AS(setting("DPLAB_TIMEOUT").check(""),
                         doctest::Contains("DPLAB_TIMEOUT='' is not a number of seconds"), Error);
  }
  ScopedEnv e("DPLAB_TIMEOUT", nullptr);
  CHECK_FALSE(setting_value("DPLAB_TIMEOUT").has_value());
}

TEST_CASE("settings: the parsers return what the readers use") {
  CHECK(parse_timeout_setting("DPLAB_TIMEOUT", "2.5") == 2.5);
  CHECK(parse_wait_setting("50,0").spin_us == 50);
  CHECK(parse_segment_kb_setting("64") == 64 * 1024);
  CHECK(parse_num_threads_setting("3") == 3);
  CHECK(parse_gemm_isa_setting("baseline") == GemmIsa::Baseline);
  CHECK(parse_gemm_setting("eigen") == GemmAlgorithm::Eigen);
  CHECK(parse_conv_setting("im2col") == ConvAlgorithm::Im2col);
  CHECK_FALSE(parse_fuse_setting("0"));
  CHECK(parse_device_memory_setting("2K") == 2048);
  CHECK(parse_progress_setting("off") == ProgressMode::Off);
  CHECK(parse_log_level_setting("Warning") == LogLevel::Warning);
  CHECK(parse_log_time_setting("1"));
  CHECK(parse_virtual_gpus_setting("4") == 4);
  // a value the CPU cannot run is refused by the parser, as the reader refuses it
  if (!gemm_isa_available(GemmIsa::Avx512))
    CHECK_THROWS_WITH_AS(parse_gemm_isa_setting("avx512"),
                         doctest::Contains("DPLAB_GEMM_ISA=avx512: "), Error);
}

TEST_CASE("settings: a reader refuses what its row refuses, with the row's message") {
  // threads_from_env reads DPLAB_NUM_THREADS on each call (cpu_threads.cpp keeps the first)
  ScopedEnv e("DPLAB_NUM_THREADS", "0");
  const std::string row = refusal(setting("DPLAB_NUM_THREADS"), "0");
  std::string reader;
  try {
    threads_from_env();
  } catch (const Error& err) {
    reader = err.what();
  }
  CHECK_FALSE(row.empty());
  CHECK(reader == row);
}
