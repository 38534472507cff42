// grader_main.cpp: the main() of every assignment's test program. It runs doctest; when the
// grader started it (channel.h), a reporter of ours replaces doctest's console output and
// sends, for each test case, a "start" record and an "end" record with the verdict (passed
// only when doctest counted at least one check and no failure) and the messages of the
// failed checks, each with the run's token. A test that ends any other way (exit, _Exit,
// a crash, a hang) sends no verdict, and the grader fails it: a pass is never an exit status.
// Without the grader it is doctest's own main: `meson test`, gdb and an editor work as usual.
// Read next: channel.h, crash.cpp, ../grader/runner.py (the grader's side).
#define DOCTEST_CONFIG_IMPLEMENT
#define DOCTEST_CONFIG_NO_POSIX_SIGNALS  // crash.cpp reports crashes, with the stack
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "channel.h"

namespace course::harness {

void install_crash_handlers();  // crash.cpp

namespace {

constexpr std::size_t kMaxMessages = 12, kMaxMessageChars = 1500;

// What a failed check says: the CHECK_MESSAGE / INFO text in force, else the expression.
std::string describe(const doctest::AssertData& a) {
  std::ostringstream out;
  const int n = doctest::IReporter::get_num_active_contexts();
  const doctest::IContextScope* const* contexts = doctest::IReporter::get_active_contexts();
  for (int i = 0; i < n; ++i) {
    if (i) out << "\n";
    contexts[i]->stringify(&out);
  }
  std::string text = out.str();
  if (!text.empty()) return text;
  if (a.m_threw) return std::string("threw: ") + a.m_exception.c_str();
  return std::string(a.m_expr) + " is not true (" + a.m_decomp.c_str() + ")";
}

struct GraderReporter : public doctest::IReporter {
  explicit GraderReporter(const doctest::ContextOptions&) {}

  void add(std::string text) {
    if (messages_.size() >= kMaxMessages) {
      ++dropped_;
      return;
    }
    if (text.size() > kMaxMessageChars) text = text.substr(0, kMaxMessageChars) + " ...";
    messages_.push_back(std::move(text));
  }

  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData& tc) override {
    name_ = tc.m_name;
    messages_.clear();
    dropped_ = 0;
    send_record("start", "\"test\": " + json_string(name_));
  }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats& st) override {
    const bool passed = st.testCaseSuccess && st.failure_flags == 0 && st.numAssertsFailedCurrentTest == 0 &&
                        st.numAssertsCurrentTest > 0;
    std::string list;
    for (const std::string& m : messages_) list += (list.empty() ? "" : ", ") + json_string(m);
    send_record("end", "\"test\": " + json_string(name_) + ", \"passed\": " + (passed ? "true" : "false") +
                           ", \"checks\": " + std::to_string(st.numAssertsCurrentTest) + ", \"failed\": " +
                           std::to_string(st.numAssertsFailedCurrentTest) + ", \"more\": " +
                           std::to_string(dropped_) + ", \"messages\": [" + list + "]");
  }
  void test_case_exception(const doctest::TestCaseException& e) override {
    add(std::string("the test threw: ") + e.error_string.c_str());
  }
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData& a) override {
    if (a.m_failed) add(describe(a));
  }
  void log_message(const doctest::MessageData& m) override {
    if (m.m_severity & doctest::assertType::is_warn) return;
    add(m.m_string.c_str());
  }
  void test_case_skipped(const doctest::TestCaseData&) override {}

  std::string name_;
  std::vector<std::string> messages_;
  std::size_t dropped_ = 0;
};

}  // namespace
}  // namespace course::harness

DOCTEST_REGISTER_REPORTER("grader", 1, course::harness::GraderReporter);

int main(int argc, char** argv) {
  std::string why;
  if (!course::harness::open_channel(why)) {
    std::fprintf(stderr, "test harness: %s\n", why.c_str());
    return 3;
  }
  course::harness::install_crash_handlers();
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  // The grader names the test in the environment, which only the test's own user may read,
  // not on the command line, which /proc shows to every process (hw1's worker beside its
  // judge, other grades' tests).
  if (const char* test = std::getenv("DPLAB_COURSE_TEST_CASE")) {
    const std::string name = test;
    ::unsetenv("DPLAB_COURSE_TEST_CASE");
    context.setOption("test-case", name.c_str());
  }
  if (course::harness::channel_open()) {
    context.setOption("reporters", "grader");
    context.setOption("no-version", true);
  }
  return context.run();
}
