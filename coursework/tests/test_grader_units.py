#!/usr/bin/env python3
"""test_grader_units.py: the grader's parts, one by one, without compiling anything.

symbols.py's names and rules, build.py's dependency lists and staged headers' key (the same
under every PYTHONHASHSEED), sandbox.py's covered paths,
runner.py's test names, feedback.py's verdicts (a pass needs the verdict, status 0, no
forged record, one verdict; a worker's reports are words, never a verdict), runner.py's
time requests (a test's "time" record, with the run's token, extends its limit, never
shortens it, never past paced_timeout_s or the budget), results.py's results.json, and
every assignment's manifest: its headers exist, its points add up to 100, its speed tests
are tests, its time limits keep the worst grade (every test hanging) under Gradescope's 10
minutes, and a judge outside never links the student's files.
"""
import json
import os
import subprocess
import sys
import tempfile
import types
import unittest

COURSE = os.environ.get("DPLAB_COURSE_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(COURSE, "grader"))

import build  # noqa: E402
import feedback  # noqa: E402
import manifest  # noqa: E402
import results  # noqa: E402
import runner  # noqa: E402
import sandbox  # noqa: E402
import symbols  # noqa: E402


class Names(unittest.TestCase):
    def test_name_of(self):
        cases = {
            "dplab::Tensor::backward(dplab::Tensor const&, bool) const": "dplab::Tensor::backward",
            "operator new(unsigned long)": "operator new",
            "std::vector<float, std::allocator<float> > dplab::Tensor::to_vector<float>() const":
                "dplab::Tensor::to_vector<float>",
            "std::basic_ostream<char, std::char_traits<char> >& std::operator<< <std::char_traits<char> >"
            "(std::basic_ostream<char, std::char_traits<char> >&, char const*)": "std::operator<< <std::char_traits<char> >",
            "fmt::v9::vformat[abi:cxx11](fmt::v9::basic_string_view<char>)": "fmt::v9::vformat",
            "typeinfo for std::logic_error": "typeinfo for std::logic_error",
            "non-virtual thunk to hw4::X::~X()": "hw4::X::~X",
            "memmove": "memmove",
        }
        for demangled, name in cases.items():
            self.assertEqual(symbols.name_of(demangled), name)


class Rules(unittest.TestCase):
    def rules(self):
        a = types.SimpleNamespace(short="hw3", namespace="hw3", name="hw3_x", symbols={
            "allow": ["@runtime", "hw3::exchange", "dplab::parallel::ProcessGroup::all_reduce"],
            "deny": [{"match": "dplab::parallel::.*", "why": "write the ring yourself"}],
            "otherwise": "not given"})
        return symbols.Rules(a, symbols.load_groups(COURSE))

    def test_calls(self):
        r = self.rules()
        self.assertEqual(r.check_call("hw3::exchange"), "")
        self.assertEqual(r.check_call("operator new"), "")
        self.assertEqual(r.check_call("dplab::parallel::ProcessGroup::all_reduce"), "")  # allowed first
        self.assertEqual(r.check_call("dplab::parallel::ring_all_reduce"),
                         "hw3 may not call dplab::parallel::ring_all_reduce: write the ring yourself")
        self.assertEqual(r.check_call("fork"), "hw3 may not call fork: not given")

    def test_a_name_that_only_begins_with_an_allowed_one_is_not_allowed(self):
        # the allow-list matches whole names: "hw3::exchange" does not let "hw3::exchange_all"
        # through, nor "dplab::max" hw1's forbidden "dplab::max_pool2d"
        r = self.rules()
        self.assertEqual(r.check_call("hw3::exchange_all"), "hw3 may not call hw3::exchange_all: not given")
        self.assertEqual(r.check_call("dplab::parallel::ProcessGroup::all_reduce_coalesced"),
                         "hw3 may not call dplab::parallel::ProcessGroup::all_reduce_coalesced: "
                         "write the ring yourself")
        a = types.SimpleNamespace(short="hw1", namespace="hw1", name="hw1_x", symbols={
            "allow": ["dplab::max"], "otherwise": "not given"})
        hw1 = symbols.Rules(a, symbols.load_groups(COURSE))
        self.assertEqual(hw1.check_call("dplab::max"), "")
        self.assertEqual(hw1.check_call("dplab::max_pool2d"), "hw1 may not call dplab::max_pool2d: not given")

    def test_definitions(self):
        r = self.rules()
        self.assertEqual(r.check_definition("T", "hw3::ring_all_reduce"), "")
        self.assertEqual(r.check_definition("W", "std::vector<int, std::allocator<int> >::~vector"), "")
        self.assertIn("define write", r.check_definition("T", "write"))
        self.assertIn("define hw3::grading::explain", r.check_definition("W", "hw3::grading::explain"))
        self.assertIn("define dplab::Tensor::to_vector<float>",  # an explicit specialisation is strong
                      r.check_definition("T", "dplab::Tensor::to_vector<float>"))


class Replacements(unittest.TestCase):
    """A definition outside the namespace that would replace a library's function is refused
    (weak by attribute, or inline where the library defines it strongly); the copies the
    compiler makes from headers are not."""
    SOURCE = r"""#include <chrono>
#include <memory>
#include <string>
#include <vector>
__attribute__((weak)) std::string dplab_vformat(const char*, unsigned long, unsigned long long, const void*)
    __asm__("@VFORMAT@");
__attribute__((weak)) std::string dplab_vformat(const char*, unsigned long, unsigned long long, const void*) {
  return {};
}
namespace std::chrono { inline namespace _V2 {
inline steady_clock::time_point steady_clock::now() noexcept { return {}; }
} }
namespace hw3 { auto* volatile emitted = &std::chrono::steady_clock::now; }  // its inline copy, emitted
namespace dplab { __attribute__((weak)) int no_such_helper() { return 1; } }
namespace hw3 {
long honest(int n) {
  std::vector<std::string> words(n, std::string(40, 'x'));
  auto shared = std::make_shared<std::vector<float>>(n);
  return static_cast<long>(words.size() + shared->size()) + std::chrono::steady_clock::now().time_since_epoch().count()
         + dplab::no_such_helper();
}
}  // namespace hw3
"""

    def test_library_functions_are_refused_header_copies_are_not(self):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import cheats
        with tempfile.TemporaryDirectory() as d:
            src, obj = os.path.join(d, "x.cpp"), os.path.join(d, "x.o")
            with open(src, "w") as f:
                f.write(self.SOURCE.replace("@VFORMAT@", cheats.vformat_symbol()))
            subprocess.run([build.CXX, *build.STUDENT_FLAGS, "-c", src, "-o", obj], check=True)
            library = symbols.library_definitions(["-lfmt"], d, build.CXX)
            self.assertTrue(any(f.startswith("libdefs-") for f in os.listdir(d)))  # kept for the next grade
            problems = [p for p in symbols.check_objects(Rules().rules(), [obj], {obj: "x.cpp"}, library)
                        if "your files define" in p]
        said = "\n".join(problems)
        self.assertIn("define fmt::v", said)  # its version: v9
        self.assertIn("vformat, which libfmt", said)
        self.assertIn("define std::chrono::_V2::steady_clock::now, which libstdc++", said)
        self.assertIn("define dplab::no_such_helper as a weak symbol", said)  # weak, in no COMDAT group
        self.assertEqual(len(problems), 3, said)  # vector, string, shared_ptr and chrono copies pass

    def test_grades_that_share_a_cache_write_its_library_list_at_once(self):
        # a fresh cache, as in a fresh clone's CI: check_assignment's grades run side by side and
        # each writes the list; one temporary name for all made the later os.replace fail
        import threading
        with tempfile.TemporaryDirectory() as d:
            errors = []

            def one():
                try:
                    symbols.library_definitions(["-lfmt"], d, build.CXX)
                except Exception as e:  # noqa: BLE001 (any failure of a grade's build)
                    errors.append(repr(e))
            threads = [threading.Thread(target=one) for _ in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(errors, [])
            kept = [f for f in os.listdir(d) if f.startswith("libdefs-")]
            self.assertEqual(len(kept), 1, kept)  # no temporary file left behind
            # readable by others, as the cache's other files: the student-loop check links a
            # cache root wrote into a student's home (mkstemp's 0600 failed it there in CI)
            self.assertEqual(os.stat(os.path.join(d, kept[0])).st_mode & 0o777, 0o644)
            with open(os.path.join(d, kept[0])) as f:
                self.assertTrue(json.load(f))


class Files(unittest.TestCase):
    def test_parse_deps(self):
        with tempfile.NamedTemporaryFile("w", suffix=".d", delete=False) as f:
            f.write("x.o: /a/b.cpp /a/with\\ space.h \\\n /usr/include/stdio.h\n")
        self.assertEqual(build.parse_deps(f.name), ["/a/b.cpp", "/a/with space.h", "/usr/include/stdio.h"])
        os.unlink(f.name)

    def test_parse_deps_relative_to_the_compilers_folder(self):
        with tempfile.NamedTemporaryFile("w", suffix=".d", delete=False) as f:
            f.write("x.o: /etc/passwd x.s\n")
        self.assertEqual(build.parse_deps(f.name, cwd="/work/obj"), ["/etc/passwd", "/work/obj/x.s"])
        os.unlink(f.name)

    def test_own_assembler_messages(self):
        text = ("x.s: Assembler messages:\n/etc/passwd:1: Error: no such instruction: `root:x:0:0:root'\n"
                "x.s:7:   Info: macro invoked from here\nx.s:9: Error: junk at end of line\n"
                "/src/x.cpp:3: Error: no such instruction: `bogus'\n")
        words = build.own_assembler_messages(text, ["x.s", "/src/x.cpp"])
        self.assertNotIn("root:x", words)
        self.assertIn("x.s:9: Error: junk at end of line", words)
        self.assertIn("/src/x.cpp:3: Error: no such instruction: `bogus'", words)  # inline assembly, by line
        self.assertIn("1 line(s) about other files left out", words)

    def test_outermost(self):
        self.assertEqual(sandbox.outermost(["/a/b/c", "/a/b", "/ab", "/a/b"]), ["/ab", "/a/b"])

    def test_allowed_include(self):
        std = ["/usr/include/c++/12", "/usr/include"]
        self.assertTrue(build.allowed_include("/s/inc/ring.h", ["/s/inc"], set(), std))
        self.assertTrue(build.allowed_include("/usr/include/c++/12/vector", [], set(), std))
        self.assertTrue(build.allowed_include("/usr/include/stdio.h", [], set(), std))
        self.assertFalse(build.allowed_include("/usr/include/dplab/parallel/algorithms/collectives.h", [], set(), std))
        self.assertFalse(build.allowed_include("/etc/passwd", [], set(), std))

    def test_test_names(self):
        with tempfile.NamedTemporaryFile("w", suffix=".cpp", delete=False) as f:
            f.write('TEST_CASE("a (10 points)") {}\nTEST_CASE( "b: it\'s \\"q\\" (5 points)" ) {}\n')
        self.assertEqual(runner.test_names([f.name]), ["a (10 points)", 'b: it\'s "q" (5 points)'])
        with open(f.name, "w") as g:
            g.write('TEST_CASE("a, b (10 points)") {}\n')
        with self.assertRaises(SystemExit):
            runner.test_names([f.name])
        os.unlink(f.name)


class StagedHeadersKey(unittest.TestCase):
    """The staged (and precompiled) headers are found again by their key in every grade: a
    key that changed with PYTHONHASHSEED (a set's order, hash()) staged them afresh each time,
    and a cache grew by a precompiled header per grade."""

    KEY = """
import sys
sys.path.insert(0, sys.argv[1])
import build, manifest
a = manifest.resolve(sys.argv[2], "hw3")
cache = build.Cache(sys.argv[3], a.course_dir)
# include folders of one length (ordered by name only) and one twice, as pkg-config gives them
dirs = [f"/dplab/build/{w}" for w in ("alpha", "bravo", "delta", "gamma", "kappa", "omega", "sigma", "theta")]
print(build.stage_key(a, cache, dirs + dirs[:1], ["-DDPLAB_X=1"])[0])
"""

    def test_the_same_under_every_hash_seed(self):
        with tempfile.TemporaryDirectory() as cache_dir:
            keys = []
            for seed in ("1", "2"):
                env = dict(os.environ, PYTHONHASHSEED=seed)
                r = subprocess.run([sys.executable, "-c", self.KEY, os.path.join(COURSE, "grader"), COURSE, cache_dir],
                                   capture_output=True, text=True, env=env, timeout=60)
                self.assertEqual(r.returncode, 0, r.stderr)
                keys.append(r.stdout.strip())
            self.assertEqual(keys[0], keys[1], "the staged headers' key changes with PYTHONHASHSEED")


class Verdicts(unittest.TestCase):
    def run_with(self, records, returncode=0, forged=0, timed_out=False, limit_words="", worker_records=()):
        a = types.SimpleNamespace(limits=dict(manifest.LIMITS))
        run = types.SimpleNamespace(name="t (10 points)", records=records, forged=forged, timed_out=timed_out,
                                    proc=types.SimpleNamespace(returncode=returncode), stdout=b"", dropped=0,
                                    seconds=0.1, limit=30, cpu_s=65, limit_words=limit_words,
                                    worker_records=list(worker_records))
        return feedback.result_of(run, a, None)

    def test_a_worker_reports_words_never_a_verdict(self):
        """A judge outside (hw1): what the worker writes on its reports' pipe is read for its
        crash and stack reports only; a passing "end" there passes nothing."""
        forged = json.dumps(dict(self.end(), token="0" * 32)).encode()
        crash = json.dumps({"kind": "crash", "signal": "SIGSEGV", "addr": "0x0", "rank": -1}).encode()
        reports = runner.worker_reports(forged + b"\n" + crash + b"\n" + b'{"kind": "stack"')
        self.assertEqual([r["kind"] for r in reports], ["crash"])
        self.assertFalse(self.run_with([], worker_records=reports)["passed"])
        failed = self.run_with([self.end(passed=False)], worker_records=reports)
        self.assertIn("SIGSEGV (a bad memory access at address 0: a null pointer)", failed["output"])
        passed = self.run_with([self.end()], worker_records=reports)  # a crash after its last reply
        self.assertTrue(passed["passed"])
        self.assertNotIn("SIGSEGV", passed["output"])

    def end(self, passed=True, name="t (10 points)"):
        return {"kind": "end", "test": name, "passed": passed, "checks": 3, "messages": [] if passed else ["m"]}

    def test_pass_needs_everything(self):
        self.assertTrue(self.run_with([self.end()])["passed"])
        self.assertEqual(self.run_with([self.end()])["score"], 10)
        self.assertFalse(self.run_with([self.end()], returncode=1)["passed"])
        self.assertFalse(self.run_with([self.end()], forged=1)["passed"])
        self.assertFalse(self.run_with([self.end(), self.end()])["passed"])
        self.assertFalse(self.run_with([self.end(name="other (10 points)")])["passed"])
        self.assertFalse(self.run_with([self.end(passed=False)])["passed"])

    def test_words(self):
        r = self.run_with([], returncode=0)
        self.assertIn("the test ended before its checks ran: it exited with status 0", r["output"])
        r = self.run_with([self.end()], forged=2)
        self.assertIn("without the grader's token", r["output"])
        r = self.run_with([], returncode=-24)
        self.assertIn("more CPU time than its limit (65 s)", r["output"])
        r = self.run_with([self.end()], returncode=-9, timed_out=True,
                          limit_words=" (where the grade's time budget ended)")
        self.assertFalse(r["passed"])
        self.assertIn("ran out of time after 30 s (where the grade's time budget ended): ", r["output"])


class TimeRequests(unittest.TestCase):
    """A test that asks for time at the pace of a reference it measured (harness.h)."""

    def runner_and_run(self, timeout=30, paced=300, budget_left=420):
        limits = dict(manifest.LIMITS, test_timeout_s=timeout, paced_timeout_s=paced)
        a = types.SimpleNamespace(limits=limits)
        now = runner.time.monotonic()
        r = runner.Runner("tests", a, None, "/nonexistent", None, now + budget_left)
        run = runner.Run("t (10 points)", 0)
        run.started, run.ends, run.limit = now, now + timeout, timeout
        return r, run

    def ask(self, r, run, seconds, token=None):
        line = json.dumps({"token": token or run.token, "kind": "time", "seconds": seconds})
        run.channel += line.encode() + b"\n"
        r.take_time_requests(run)

    def test_extends_with_the_token_only(self):
        r, run = self.runner_and_run()
        self.ask(r, run, 100, token="0" * 32)
        self.assertEqual(run.limit, 30)
        self.ask(r, run, 100)
        self.assertAlmostEqual(run.limit, 100, delta=1)
        self.assertIn("the time it asked for", run.limit_words)
        self.ask(r, run, 10)  # never shorter
        self.assertAlmostEqual(run.limit, 100, delta=1)

    def test_capped(self):
        r, run = self.runner_and_run(paced=60)
        self.ask(r, run, 1000)
        self.assertAlmostEqual(run.limit, 60, delta=0.01)
        r, run = self.runner_and_run(budget_left=45)
        self.ask(r, run, 1000)
        self.assertAlmostEqual(run.limit, 45, delta=1)
        self.assertIn("budget", run.limit_words)

    def test_not_after_it_ran_out(self):
        r, run = self.runner_and_run()
        run.timed_out = True
        self.ask(r, run, 100)
        self.assertEqual(run.limit, 30)

    def test_a_partial_line_waits_for_its_end(self):
        r, run = self.runner_and_run()
        line = json.dumps({"token": run.token, "kind": "time", "seconds": 100}).encode()
        run.channel += line[:20]
        r.take_time_requests(run)
        self.assertEqual(run.limit, 30)
        run.channel += line[20:] + b"\n"
        r.take_time_requests(run)
        self.assertAlmostEqual(run.limit, 100, delta=1)


class ResultsJson(unittest.TestCase):
    def test_fields(self):
        a = types.SimpleNamespace(hidden_visibility="after_due_date")
        rs = [{"name": "v (20 points)", "score": 20, "max_score": 20, "output": "", "status": "passed", "visible": True},
              {"name": "h (80 points)", "score": 0, "max_score": 80, "output": "x" * 9000, "status": "failed",
               "visible": False}]
        data = results.gradescope(rs, a, 12.4)
        self.assertEqual((data["score"], data["execution_time"], data["stdout_visibility"]), (20.0, 12, "hidden"))
        self.assertEqual([t["visibility"] for t in data["tests"]], ["visible", "after_due_date"])
        self.assertLess(len(data["tests"][1]["output"]), 6100)
        self.assertEqual(results.closing_line(rs[:1], ["visible"]),
                         "visible tests: 20 of 20 points; the hidden tests run when graded (this is not your score)")


class Manifests(unittest.TestCase):
    def test_every_assignment(self):
        for a in manifest.list_assignments(COURSE):
            with self.subTest(a.name):
                names = runner.test_names(a.test_sources(["visible", "hidden"]) if a.hidden_tests_present()
                                          else a.test_sources(["visible"]))
                if a.hidden_tests_present():
                    self.assertEqual(sum(manifest.points_of(n) for n in names), 100)
                for s in a.speed_tests:
                    self.assertIn(s, names)
                for h in a.student_headers:
                    self.assertTrue(os.path.isfile(a.path(h)) or "/" in h, h)
                symbols.Rules(a, symbols.load_groups(COURSE))  # every group it names exists
                if a.judge == "outside":  # the judge never links the student's files; the worker does
                    judge = a.given_sources() + a.test_sources(["visible", "hidden"]) + a.remote_sources()
                    for f in a.student_files:
                        self.assertNotIn(a.path(f), judge)
                    for f in a.worker_sources() + a.remote_sources():
                        self.assertTrue(os.path.isfile(f), f)
                lim = a.limits
                # a compile may wait on the wall clock for what is left of the budget, and at
                # least compile_timeout_s (grade.compile_in_sandbox); tests end at the budget
                worst = lim["compile_timeout_s"] * len(a.student_files) + lim["budget_s"] + 30  # + link
                self.assertLess(worst, 600, "a grade could pass Gradescope's 10 minutes")
                self.assertLessEqual(lim["test_timeout_s"], lim["budget_s"])
                self.assertLessEqual(lim["test_timeout_s"], lim["paced_timeout_s"])
                self.assertLessEqual(lim["paced_timeout_s"], lim["budget_s"])


if __name__ == "__main__":
    unittest.main(verbosity=1)
