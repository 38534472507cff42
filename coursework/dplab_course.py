#!/usr/bin/env python3
"""dplab-course: the assignments of a distributed-training course, for students and staff.

  dplab-course list                           the assignments (hw1 .. hw5)
  dplab-course start HW DIR                   the starter, its headers, the visible tests and a
                                              meson.build into DIR: build, test and debug there
  dplab-course test HW DIR [-k NAME] [--keep] the visible tests (or those whose name holds NAME);
                                              --keep leaves the test program in DIR
  dplab-course grade HW DIR [--json F]        the visible and hidden tests: a score out of 100,
                                              and Gradescope's results.json with --json (staff)
  dplab-course grade HW --reference           grade the reference solution (it must score 100)
  dplab-course package HW OUT.zip             a Gradescope autograder for HW (staff)

HW is an assignment's short name (hw3) or its folder (hw3_ring_allreduce). The student's
files are compiled against the assignment's headers only and run in a sandbox (as an
unprivileged user when the grader is root); a test passes only when its checks report a
pass to the grader. coursework/STAFF.md explains what the grader defends against.
"""
import argparse
import os
import sys
import time

# Filled in by Meson (configure_file); environment variables override them.
COURSE_DIR = os.environ.get("DPLAB_COURSE_DIR", "@COURSE_DIR@")
STARTER_DIR = os.environ.get("DPLAB_COURSE_STARTERS", "@STARTER_DIR@")
PKG_CONFIG_PATH = os.environ.get("DPLAB_COURSE_PKG_CONFIG_PATH", "@PKG_CONFIG_PATH@")
if PKG_CONFIG_PATH.startswith("@"):  # a copy Meson did not configure (the Gradescope package)
    PKG_CONFIG_PATH = ""
sys.path.insert(0, os.path.join(COURSE_DIR, "grader"))

import grade as grading  # noqa: E402
import manifest  # noqa: E402
import results as results_json  # noqa: E402
from sandbox import SandboxError  # noqa: E402


def fail(message):
    print(f"dplab-course: error: {message}", file=sys.stderr)
    sys.exit(2)


def user_cache():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dplab-course")


def run_grade(args, suites):
    try:
        a = manifest.resolve(COURSE_DIR, args.hw)
    except manifest.ManifestError as e:
        fail(str(e))
    if "hidden" in suites and not a.hidden_tests_present():
        fail(f"{a.name}'s hidden tests are not here ({a.dir}): they stay with the course staff. Grade from "
             f"the course's source folder, or use `dplab-course test {a.short} DIR` for the visible tests")
    if getattr(args, "reference", False):
        if not a.has_reference():
            fail(f"{a.name}'s reference solution is not here: it stays in the course's source folder")
        student_dir = a.dir
    elif not args.dir:
        fail("give DIR, the folder with your files" + (" (or --reference)" if "hidden" in suites else ""))
    else:
        student_dir = args.dir
    if suites == ["visible"]:
        cache = None if args.no_cache else (os.environ.get("DPLAB_COURSE_CACHE") or user_cache())
    else:
        cache = args.cache or os.environ.get("DPLAB_COURSE_CACHE") or None
    keep = os.path.join(student_dir, "visible_tests") if getattr(args, "keep", False) else None
    opts = grading.Options(pkg_config_path=PKG_CONFIG_PATH, cache_dir=cache, keep=keep,
                           only=getattr(args, "k", None),
                           static_checks=not getattr(args, "skip_static_checks", False),
                           log=lambda s: print(s, flush=True))
    print(f"== {a.name}: building {os.path.abspath(student_dir)}", flush=True)
    t0 = time.monotonic()
    try:
        results = grading.grade(a, student_dir, suites, opts)
    except SandboxError as e:
        fail(str(e))
    seconds = time.monotonic() - t0
    print(results_json.closing_line(results, suites))
    if keep and os.path.exists(keep):
        print(f"the test program is {keep}: run one test with `{keep} -tc=\"NAME\"` (gdb --args works too)")
    if getattr(args, "json", None):
        results_json.write_json(args.json, results_json.gradescope(results, a, seconds))
    got, most, _ = results_json.total(results)
    return 0 if got == most else 1


def main():
    parser = argparse.ArgumentParser(prog="dplab-course", description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.split("\n")[2:]))
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the assignments")
    p = sub.add_parser("start", help="everything to work on HW into DIR")
    p.add_argument("hw")
    p.add_argument("dir")
    p = sub.add_parser("test", help="build DIR's files and run the visible tests")
    p.add_argument("hw")
    p.add_argument("dir")
    p.add_argument("-k", metavar="NAME", help="only the tests whose names hold NAME")
    p.add_argument("--keep", action="store_true", help="keep the test program as DIR/visible_tests")
    p.add_argument("--no-cache", action="store_true", help="compile the tests afresh (no ~/.cache/dplab-course)")
    p.add_argument("--skip-static-checks", action="store_true", help=argparse.SUPPRESS)  # the grader's own tests
    p = sub.add_parser("grade", help="the visible and the hidden tests (staff)")
    p.add_argument("hw")
    p.add_argument("dir", nargs="?")
    p.add_argument("--reference", action="store_true", help="grade the reference solution")
    p.add_argument("--json", help="write Gradescope's results.json here")
    p.add_argument("--cache", help="keep compiled tests here between grades (also DPLAB_COURSE_CACHE)")
    p.add_argument("-k", metavar="NAME", help="only the tests whose names hold NAME")
    p.add_argument("--skip-static-checks", action="store_true", help=argparse.SUPPRESS)  # the grader's own tests
    p = sub.add_parser("warm", help="compile HW's tests into a cache ahead of grading (staff, the build)")
    p.add_argument("hw")
    p.add_argument("--cache", required=True)
    p.add_argument("--stamp", help="a file to write when done (for the build)")
    p = sub.add_parser("package", help="a Gradescope autograder zip for HW (staff)")
    p.add_argument("hw")
    p.add_argument("out")
    args = parser.parse_args()

    if args.command == "list":
        for a in manifest.list_assignments(COURSE_DIR):
            print(f"{a.short:5s} {a.name:24s} {a.title}")
        return 0
    if args.command == "start":
        import student
        try:
            student.start(manifest.resolve(COURSE_DIR, args.hw), STARTER_DIR, args.dir, PKG_CONFIG_PATH)
        except (manifest.ManifestError, student.StartError) as e:
            fail(str(e))
        return 0
    if args.command == "warm":
        a = manifest.resolve(COURSE_DIR, args.hw)
        suites = ["visible", "hidden"] if a.hidden_tests_present() else ["visible"]
        grading.warm(a, suites, grading.Options(pkg_config_path=PKG_CONFIG_PATH, cache_dir=args.cache))
        if args.stamp:
            open(args.stamp, "w").close()
        return 0
    if args.command == "package":
        import package
        try:
            package.write(manifest.resolve(COURSE_DIR, args.hw), args.out)
        except (manifest.ManifestError, package.PackageError) as e:
            fail(str(e))
        return 0
    return run_grade(args, ["visible"] if args.command == "test" else ["visible", "hidden"])


if __name__ == "__main__":
    sys.exit(main())
