#!/usr/bin/env python3
"""check_limits.py DPLAB_COURSE: the limits hold, each on a submission that tries it (hw3).

  - memory: a 20 GiB allocation fails (RLIMIT_AS), the test says bad_alloc;
  - printed output: a flood of lines reaches the feedback capped and labelled as printed;
  - file size: a 64 MiB file ends its test (SIGXFSZ), and the feedback says so;
  - processes: a fork bomb is held to the process limit, runs out of time, and leaves no
    process behind;
  - compile time: a file that takes forever to compile fails at the compile limit, which
    counts the compiler's CPU time;
  - hangs: when every test hangs, exactly the first two tests run out of time (after 3 s)
    and the rest are not run ("two tests already ran out of time at ring_allreduce.cpp:...");
    when the grade's budget is spent, the tests that ran were cut where it ended and the
    rest are not run.
The limits are made short here through DPLAB_COURSE_LIMITS (the same for any limit). What
is checked is which tests met which limit, in the grader's words, never how many seconds a
grade took: on a busy machine a compile or a start-up can take any time.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cheats  # noqa: E402
import report  # noqa: E402

ONE = "does not divide"  # a visible test of hw3 that runs in a fraction of a second
COURSE = os.environ["DPLAB_COURSE_DIR"]
sys.path.insert(0, os.path.join(COURSE, "grader"))
import manifest  # noqa: E402
import runner  # noqa: E402

HW3 = manifest.resolve(COURSE, "hw3")
NAMES = runner.test_names(HW3.test_sources(["visible", "hidden"]))
CORRECTNESS = [n for n in NAMES if n not in HW3.speed_tests]
SPEED_NOT_RUN = "not run: speed points need every correctness test to pass first"


def every_test_hangs(tests):
    """The first two tests (they start together) ran out of time at 3 s; after them, no
    test starts: two hung at the same place. Not a word about seconds taken."""
    problems = []
    for name in CORRECTNESS[:2]:
        if not re.match(r"ran out of time after 3 s: ", tests[name]):
            problems.append(f"{name!r} did not run out of time after 3 s: {tests[name][:300]}")
    for name in CORRECTNESS[2:]:
        if not re.match(r"not run: two tests already ran out of time at ring_allreduce\.cpp:\d+", tests[name]):
            problems.append(f"{name!r} was not 'not run' for the two hangs: {tests[name][:300]}")
    return problems + speed_not_run(tests)


def budget_spent(tests):
    """Every test either ran out of time where the budget ended (after at most its 5 s) or
    was not run for the budget; at least one was not run."""
    problems, not_run = [], 0
    for name in CORRECTNESS:
        cut = re.match(r"ran out of time after (\d+) s \(where the grade's time budget ended\)", tests[name])
        if tests[name].startswith("not run: the grade's time budget (5 s) was spent"):
            not_run += 1
        elif not cut or int(cut.group(1)) > 5:
            problems.append(f"{name!r} was neither cut by the budget nor not run for it: {tests[name][:300]}")
    if not not_run:
        problems.append("no test was 'not run' for the spent budget")
    return problems + speed_not_run(tests)


def speed_not_run(tests):
    return [f"{name!r} ran: {tests[name][:300]}" for name in HW3.speed_tests
            if not tests[name].startswith(SPEED_NOT_RUN)]


CASES = [
    {"name": "memory", "top": "namespace { char* volatile g_keep; }\n",
     "body": "g_keep = new char[std::size_t{20} << 30]; g_keep[0] = 1;",
     "k": ONE, "expect": r"bad_alloc"},
    {"name": "printed output", "top": "#include <cstdio>\n",
     "body": r'for (int i = 0; i < 200000; ++i) std::printf("line %d of a flood of output\n", i);',
     "k": ONE, "expect": r"Your program printed \(the start of it\)", "max_output": 6200},
    {"name": "file size", "top": cheats.RAW, "static": False,
     "body": r"""{ static char mib[1 << 20]; long fd = dplab_open("big", 01 | 0100, 0644);
                  for (int i = 0; i < 64; ++i) dplab_raw(1, fd, reinterpret_cast<long>(mib), sizeof mib); }""",
     "k": ONE, "expect": r"wrote a file larger than the limit \(16 MiB\)"},
    {"name": "fork bomb", "top": cheats.RAW, "static": False,
     "body": "dplab_name(); for (;;) dplab_raw(57);", "k": ONE,
     "limits": {"test_timeout_s": 3}, "expect": r"ran out of time after 3 s"},
    {"name": "compile time",
     "top": "constexpr long forever() { long x = 0; for (long i = 0; i < 200000; ++i)\n"
            "  for (long j = 0; j < 200000; ++j) x += (i ^ j) % 7; return x; }\n"
            "static_assert(forever() != 1);\n",
     "body": "", "limits": {"compile_timeout_s": 3}, "expect": r"compiling used more than 3 s of CPU time"},
    {"name": "every test hangs", "body": "{ volatile unsigned long spin = 0; for (;;) spin = spin + 1; }",
     "limits": {"test_timeout_s": 3, "hang_timeout_s": 2},
     "expect": r"not run: two tests already ran out of time at ring_allreduce\.cpp:\d+", "check": every_test_hangs},
    {"name": "the budget", "body": "{ volatile unsigned long spin = 0; for (;;) spin = spin + 1; }",
     "limits": {"budget_s": 5, "test_timeout_s": 30}, "expect": r"not run: the grade's time budget \(5 s\)",
     "check": budget_spent},
]


def main():
    tool = os.path.abspath(sys.argv[1])
    starters = os.environ["DPLAB_COURSE_STARTERS"]
    with open(os.path.join(starters, "hw3_ring_allreduce", "ring_allreduce.cpp")) as f:
        starter = f.read()
    problems = []
    work = tempfile.mkdtemp(prefix="dplab-limits-")
    for i, case in enumerate(CASES):
        tag = f"dclim{os.getpid() % 1000:03d}{i}"
        folder = os.path.join(work, str(i))
        os.makedirs(folder)
        with open(os.path.join(folder, "ring_allreduce.cpp"), "w") as f:
            f.write(cheats.make(starter, case, {}).replace("dplabcheat", tag))
        env = dict(os.environ, DPLAB_COURSE_LIMITS=json.dumps(case.get("limits", {})))
        args = [sys.executable, tool, "grade", "hw3", folder, "--json", folder + ".json"]
        args += ["-k", case["k"]] if "k" in case else []
        args += [] if case.get("static", True) else ["--skip-static-checks"]
        t0 = time.monotonic()
        run = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
        seconds = time.monotonic() - t0
        survivors = [int(p) for p in filter(str.isdigit, os.listdir("/proc"))
                     if open_or_empty(f"/proc/{p}/comm") == tag]
        for pid in survivors:
            os.kill(pid, 9)
        with open(folder + ".json") as f:
            result = json.load(f)
        outputs = [t["output"] for t in result["tests"]]
        print(f"{case['name']}: score {result['score']} in {seconds:.1f} s", flush=True)  # seconds: the log's
        if result["score"] != 0:
            problems.append(f"{case['name']}: scored {result['score']}")
        if not any(re.search(case["expect"], o) for o in outputs):
            problems.append(f"{case['name']}: no feedback matches {case['expect']!r}:\n" + "\n".join(outputs)[:2500])
        if "max_output" in case and max(len(o) for o in outputs) > case["max_output"]:
            problems.append(f"{case['name']}: a test's feedback holds {max(len(o) for o in outputs)} characters")
        if "check" in case:
            outputs_by_name = {t["name"]: t["output"] for t in result["tests"]}
            problems += [f"{case['name']}: {p}" for p in case["check"](outputs_by_name)]
        if survivors:
            problems.append(f"{case['name']}: {len(survivors)} process(es) outlived the grade")
    shutil.rmtree(work, ignore_errors=True)
    return report.finish("limits", problems)


def open_or_empty(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


if __name__ == "__main__":
    sys.exit(main())
