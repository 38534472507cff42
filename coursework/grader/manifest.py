"""manifest.py: an assignment as the grader sees it, read from its folder's assignment.json.

assignment.json is the one data file per assignment: which files the student writes, the
headers their files may include (everything those include comes along), the given code,
the tests, the speed tests, the limits, and which functions the student's objects may call
(the allow-list, symbols.py). A path that moves in the library is a one-line edit there.
Staff-only material (the reference solution, the hidden tests, ci_checks.json) stays in the
course's source folder: `meson install` does not ship it.
Read next: build.py (how the files are compiled), runner.py (how the tests run).
"""
import json
import os
import re

# Defaults for "limits"; an assignment overrides what it needs. Seconds and MiB.
LIMITS = {
    "compile_timeout_s": 60,   # one of the student's files, in CPU seconds (load does not change them)
    "test_timeout_s": 30,      # one test case, wall clock: a guard against hangs
    "hang_timeout_s": 10,      # a test case after another one already ran out of time
    "paced_timeout_s": 300,    # the most a test may ask for at the pace of a reference it timed
    "budget_s": 420,           # the whole grade: build and every test (Gradescope stops at 600)
    "memory_mib": 4096,        # address space of a test process (RLIMIT_AS)
    "file_mib": 16,            # the largest file a test may write (RLIMIT_FSIZE)
    "processes": 256,          # processes and threads of the submission (RLIMIT_NPROC)
    "output_kib": 64,          # what a test may print before the rest is dropped
    "parallel": 2,             # test cases run at once (speed tests always run alone)
}

COMMON_SOURCES = ["grader_main.cpp", "channel.cpp", "crash.cpp"]  # in common/: the test main
# in common/: an assignment judged outside the student's process ("judge": "outside"): the
# protocol both sides speak, and what the worker keeps of the test main (crash reports)
# (and, for ranks that are processes, hw3's, the broker between them and a rank's side of it),
# each side's end of the pipes (judge_side.cpp, worker_side.cpp)
WIRE_SOURCES = ["wire.cpp", "judge_side.cpp", "broker.cpp", "broker_transport.cpp"]
WORKER_COMMON_SOURCES = ["channel.cpp", "crash.cpp", "wire.cpp", "worker_side.cpp", "broker_transport.cpp"]
POINTS = re.compile(r"\((\d+) points?\)\s*$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")


class ManifestError(Exception):
    pass


class Assignment:
    def __init__(self, course_dir, name):
        self.course_dir = os.path.abspath(course_dir)
        self.name = name
        self.dir = os.path.join(self.course_dir, name)
        with open(os.path.join(self.dir, "assignment.json")) as f:
            m = json.load(f)
        self.title = m["title"]
        self.short = m.get("short", name.split("_")[0])
        self.student_files = m["student_files"]
        self.student_headers = m.get("student_headers", [])
        self.given_files = m.get("given_files", [])
        self.visible_tests = m["visible_tests"]
        self.hidden_tests = m.get("hidden_tests", [])
        self.speed_tests = m.get("speed_tests", [])
        self.hidden_visibility = m.get("hidden_visibility", "after_due_date")
        if self.hidden_visibility not in VISIBILITIES:
            raise ManifestError(f"{name}: hidden_visibility must be one of {VISIBILITIES}, "
                                f"not '{self.hidden_visibility}'")
        self.limits = dict(LIMITS)
        # DPLAB_COURSE_LIMITS='{"test_timeout_s": 5}' overrides every assignment's (staff, tests)
        overrides = json.loads(os.environ.get("DPLAB_COURSE_LIMITS") or "{}")
        for key, value in list(m.get("limits", {}).items()) + list(overrides.items()):
            if key not in LIMITS:
                raise ManifestError(f"{name}: unknown limit '{key}' (known: {', '.join(LIMITS)})")
            self.limits[key] = value
        self.symbols = m.get("symbols", {})
        self.namespace = m.get("namespace", self.short)  # what the student's files may define
        # "outside": the tests (the judge) link remote_files instead of the student's code,
        # which runs in a worker (worker_files: its main) that the grader starts beside it
        self.judge = m.get("judge", "inside")
        if self.judge not in ("inside", "outside"):
            raise ManifestError(f"{name}: judge must be 'inside' or 'outside', not '{self.judge}'")
        self.worker_files = m.get("worker_files", [])
        self.remote_files = m.get("remote_files", [])
        if self.judge == "outside" and not (self.worker_files and self.remote_files):
            raise ManifestError(f"{name}: a judge outside needs worker_files and remote_files")
        # "ranks": N: the worker is N processes, each as its own user, linked only through a
        # broker in the judge (hw3); none: one worker, the judge's calls only (hw1)
        self.ranks = m.get("ranks", 0)
        if not isinstance(self.ranks, int) or not 0 <= self.ranks <= 16 or (self.ranks and self.judge != "outside"):
            raise ManifestError(f"{name}: ranks must be 0 to 16, and only for a judge outside, not {self.ranks!r}")

    # Paths. The student's files and headers live in the assignment's folder (the reference
    # and the header next to it); a header may also name a library header ("framework/...").
    def path(self, name):
        return os.path.join(self.dir, name)

    def common(self, name):
        return os.path.join(self.course_dir, "common", name)

    def test_sources(self, suites):
        files = list(self.visible_tests)
        if "hidden" in suites:
            files += self.hidden_tests
        return [self.path(f) for f in files]

    def given_sources(self):
        return [self.path(f) for f in self.given_files] + [self.common(f) for f in COMMON_SOURCES]

    def worker_sources(self):
        """The worker of a judge outside: its main, the given code and crash reports (the
        student's objects are linked after them)."""
        return [self.path(f) for f in self.worker_files + self.given_files] + \
            [self.common(f) for f in WORKER_COMMON_SOURCES]

    def remote_sources(self):
        """What the judge links in the student's place: the calls to the worker."""
        return [self.path(f) for f in self.remote_files] + [self.common(f) for f in WIRE_SOURCES]

    def test_include_dirs(self):
        return [self.dir, os.path.join(self.course_dir, "common")]

    def hidden_tests_present(self):
        return all(os.path.isfile(self.path(f)) for f in self.hidden_tests)

    def has_reference(self):
        return all(os.path.isfile(self.path(f)) for f in self.student_files)


def course_includes(files, dirs):
    """files and the course's files they include, directly or not, by `#include "..."`
    found next to the including file or in dirs (library headers, found in neither, are left
    out): real paths, each once, in the order found. What `start` copies, and what
    `meson install` must ship (CI's course_install)."""
    seen, todo = [], [os.path.realpath(f) for f in files]
    while todo:
        path = todo.pop(0)
        if path in seen:
            continue
        seen.append(path)
        with open(path) as f:
            for name in INCLUDE.findall(f.read()):
                for d in [os.path.dirname(path)] + dirs:
                    candidate = os.path.join(d, name)
                    if os.path.isfile(candidate):
                        todo.append(os.path.realpath(candidate))
                        break
    return seen


def list_assignments(course_dir):
    found = []
    for name in sorted(os.listdir(course_dir)):
        if os.path.isfile(os.path.join(course_dir, name, "assignment.json")):
            found.append(Assignment(course_dir, name))
    return found


def resolve(course_dir, hw):
    """The assignment called hw: its folder name (hw3_ring_allreduce) or its short name (hw3)."""
    every = list_assignments(course_dir)
    for a in every:
        if hw in (a.name, a.short):
            return a
    names = ", ".join(f"{a.short} ({a.name})" for a in every)
    raise ManifestError(f"no assignment '{hw}'; there are: {names}")


def points_of(test_name):
    m = POINTS.search(test_name)
    return int(m.group(1)) if m else 0
