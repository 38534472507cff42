#!/usr/bin/env python3
"""dplab-course: the assignments of a distributed-training course, for students and staff.

  dplab-course list                      the assignments
  dplab-course start HW DIR              copy HW's starter files and handout into DIR
  dplab-course test HW DIR               build DIR's files with the visible tests, run them
  dplab-course grade HW DIR [--json F]   the same with the hidden tests too: a score out of
                                         100, and Gradescope's results.json with --json
  dplab-course grade HW --reference      grade the reference solution (it must score 100)

Grading builds the student's files, the assignment's support code and its tests against
dplab (found through pkg-config), then runs every test case in a process of its own with a
time limit, so a hanging ring or a crash costs that test's points and nothing more.
A test's points are in its name: "... (20 points)". DPLAB_COURSE_CACHE=DIR keeps the compiled
tests between grades (for grading many submissions; use a fresh DIR after changing dplab).
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# Filled in by Meson (configure_file): where the assignments, their generated starters and
# dplab's pkg-config file are. Environment variables override them.
COURSE_DIR = os.environ.get("DPLAB_COURSE_DIR", "@COURSE_DIR@")
STARTER_DIR = os.environ.get("DPLAB_COURSE_STARTERS", "@STARTER_DIR@")
PKG_CONFIG_PATH = os.environ.get("DPLAB_COURSE_PKG_CONFIG_PATH", "@PKG_CONFIG_PATH@")
CXX = os.environ.get("CXX", "c++")

POINTS = re.compile(r"\((\d+) points?\)\s*$")


def fail(message):
    print(f"dplab-course: error: {message}", file=sys.stderr)
    sys.exit(2)


def assignments():
    found = []
    for name in sorted(os.listdir(COURSE_DIR)):
        manifest = os.path.join(COURSE_DIR, name, "assignment.json")
        if os.path.isfile(manifest):
            with open(manifest) as f:
                found.append((name, json.load(f)))
    return found


def load(hw):
    for name, manifest in assignments():
        if name == hw:
            return manifest
    fail(f"no assignment '{hw}'; `dplab-course list` shows them")


def compile_flags():
    env = dict(os.environ)
    if PKG_CONFIG_PATH:
        env["PKG_CONFIG_PATH"] = PKG_CONFIG_PATH + os.pathsep + env.get("PKG_CONFIG_PATH", "")
    run = subprocess.run(["pkg-config", "--cflags", "--libs", "dplab"], capture_output=True,
                         text=True, env=env)
    if run.returncode != 0:
        fail("pkg-config cannot find dplab: install it (meson install -C build) or set "
             "DPLAB_COURSE_PKG_CONFIG_PATH to build/meson-uninstalled\n" + run.stderr)
    return run.stdout.split()


def compile_object(source, flags, cache_dir):
    """source compiled to an object in cache_dir, reused while the file and the flags are
    the same: an assignment's tests and support code compile once, not at every grade."""
    st = os.stat(source)
    key = hashlib.sha1(f"{os.path.abspath(source)}|{st.st_mtime_ns}|{st.st_size}|{' '.join(flags)}".encode()).hexdigest()
    obj = os.path.join(cache_dir, key + ".o")
    if os.path.exists(obj):
        return True, obj, ""
    tmp = f"{obj}.{os.getpid()}.tmp"
    run = subprocess.run([CXX, "-c", source, "-o", tmp] + flags, capture_output=True, text=True)
    if run.returncode != 0:
        return False, None, run.stdout + run.stderr
    os.replace(tmp, obj)  # atomic: two graders at once share the cache safely
    return True, obj, ""


def build(hw, manifest, student_dir, suites, workdir):
    """Compiles the student's files with the tests of `suites`; (ok, compiler output)."""
    hw_dir = os.path.join(COURSE_DIR, hw)
    student = []
    for name in manifest["student_files"]:
        path = os.path.join(student_dir, name)
        if not os.path.isfile(path):
            return False, f"{path} is missing: the assignment expects your {name} there"
        student.append(path)
    given = [os.path.join(hw_dir, f) for f in manifest.get("support_files", [])]
    for suite in suites:
        given += [os.path.join(hw_dir, f) for f in manifest[f"{suite}_tests"]]
    given.append(os.path.join(COURSE_DIR, "grader_main.cpp"))
    flags = compile_flags()
    include = os.path.dirname(os.path.abspath(COURSE_DIR))  # "coursework/..." includes
    cflags = ["-std=c++20", "-O2", "-I", include] + [f for f in flags if f.startswith(("-I", "-std", "-f", "-D", "-pthread"))]
    # DPLAB_COURSE_CACHE: a folder to keep the compiled tests and support code in between
    # grades (a grading session; the key does not see headers, so use a fresh one after any
    # change to dplab or the assignment). Default: none, everything compiles each time.
    cache_dir = os.environ.get("DPLAB_COURSE_CACHE") or workdir
    os.makedirs(cache_dir, exist_ok=True)
    objects, output = [], ""
    for source in student + given:  # the student's files are never cached
        ok, obj, out = compile_object(source, cflags, workdir if source in student else cache_dir)
        output += out
        if not ok:
            return False, output[-6000:]
        objects.append(obj)
    exe = os.path.join(workdir, "tests")
    run = subprocess.run([CXX, "-std=c++20"] + objects + ["-o", exe] + flags, capture_output=True, text=True)
    return run.returncode == 0, (output + run.stdout + run.stderr)[-6000:]


def list_tests(exe, suites):
    run = subprocess.run([exe, "--list-test-cases", "--no-version",
                          "--test-suite=" + ",".join(suites)], capture_output=True, text=True)
    names = [l.strip() for l in run.stdout.splitlines()]
    return [n for n in names if n and not n.startswith("[doctest]") and not n.startswith("===")]


def feedback_of(output, most=5):
    """The messages of doctest's report that a student can act on: what each failed check
    logged, or the exception a test threw, without doctest's own bookkeeping; plus anything
    the test printed itself (figures)."""
    messages, printed = [], []
    for line in output.splitlines():
        text = line.strip()
        if text.startswith("logged:"):
            messages.append(text[len("logged:"):].strip())
        elif "FATAL ERROR:" in text or "THREW exception:" in text:
            messages.append(text.split("ERROR:", 1)[-1].strip())
        elif "ERROR:" in text and "is NOT correct" not in text:
            messages.append(text.split("ERROR:", 1)[-1].strip())
        elif not (text.startswith("[doctest]") or text.startswith("TEST ") or
                  text.startswith("values:") or "is NOT correct" in text or
                  re.match(r"^\S+:\d+:$", text) or set(text) <= set("=-")):
            printed.append(text)
    lines = printed + messages[:most]
    if len(messages) > most:
        lines.append(f"(and {len(messages) - most} more failures)")
    return "\n".join(lines).strip()


def run_test(exe, name, timeout):
    """(passed, output) for one test case, in its own process group, killed at the limit."""
    # doctest's filters treat "," "*" "?" specially; test names here have none of them
    proc = subprocess.Popen([exe, "--test-case=" + name, "--no-version"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return False, (f"timed out after {timeout} s: a rank waiting for a message that never "
                       f"comes? (a send without its matching receive, or the other way round)\n"
                       + feedback_of(out))
    if proc.returncode < 0:
        return False, f"crashed with signal {-proc.returncode} ({signal.Signals(-proc.returncode).name})\n" + feedback_of(out)
    return proc.returncode == 0, feedback_of(out)  # a passing test may print figures


def grade(hw, student_dir, suites, json_path=None):
    manifest = load(hw)
    timeout = manifest.get("test_timeout_s", 60)
    results = []
    with tempfile.TemporaryDirectory(prefix="dplab-course-") as work:
        print(f"== building {hw} from {student_dir}", flush=True)
        ok, compiler = build(hw, manifest, student_dir, suites, work)
        exe = os.path.join(work, "tests")
        if not ok:
            print(compiler)
            results = [{"name": "build", "score": 0, "max_score": 100,
                        "output": "your files do not compile:\n" + compiler}]
        else:
            visible = set(list_tests(exe, ["visible"]))
            for name in list_tests(exe, suites):
                points = int(POINTS.search(name).group(1)) if POINTS.search(name) else 0
                t0 = time.time()
                passed, output = run_test(exe, name, timeout)
                score = points if passed else 0
                print(f"{'PASS' if passed else 'FAIL'} {score:3d}/{points:<3d} {name}  "
                      f"({time.time() - t0:.1f} s)", flush=True)
                if output:
                    print("     " + output.replace("\n", "\n     "))
                results.append({"name": name, "score": score, "max_score": points, "output": output,
                                "visibility": "visible" if name in visible else "after_published"})
    got = sum(r["score"] for r in results)
    most = sum(r["max_score"] for r in results) or 1
    total = round(100.0 * got / most, 1)
    print(f"score: {total:g} / 100 ({got} of {most} points)")
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"score": total, "output": f"{got} of {most} points", "tests": results}, f,
                      indent=2)
    return total


def start(hw, target):
    manifest = load(hw)
    os.makedirs(target, exist_ok=True)
    for name in manifest["student_files"]:
        src = os.path.join(STARTER_DIR, hw, name)
        if not os.path.isfile(src):
            fail(f"the starter {src} is missing: build dplab first (ninja -C build)")
        dst = os.path.join(target, name)
        if os.path.exists(dst):
            fail(f"{dst} exists already; not overwriting your work")
        shutil.copyfile(src, dst)
    shutil.copyfile(os.path.join(COURSE_DIR, hw, "README.md"), os.path.join(target, "README.md"))
    print(f"{hw}: {', '.join(manifest['student_files'])} and the handout (README.md) are in {target}")
    print(f"next: read README.md, write your code, then `dplab-course test {hw} {target}`")


def main():
    parser = argparse.ArgumentParser(prog="dplab-course", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the assignments")
    p = sub.add_parser("start", help="copy an assignment's starter files into DIR")
    p.add_argument("hw")
    p.add_argument("dir")
    for command in ("test", "grade"):
        p = sub.add_parser(command, help="build and run the " +
                           ("visible tests" if command == "test" else "visible and hidden tests"))
        p.add_argument("hw")
        p.add_argument("dir", nargs="?")
        p.add_argument("--reference", action="store_true", help="the library's own solution")
        p.add_argument("--json", help="write Gradescope's results.json here")
    args = parser.parse_args()
    if args.command == "list":
        for name, manifest in assignments():
            print(f"{name:24s} {manifest['title']}")
        return 0
    if args.command == "start":
        start(args.hw, args.dir)
        return 0
    if args.reference == bool(args.dir):
        fail("give either DIR (your files) or --reference")
    student_dir = os.path.join(COURSE_DIR, args.hw) if args.reference else args.dir
    suites = ["visible"] if args.command == "test" else ["visible", "hidden"]
    total = grade(args.hw, student_dir, suites, args.json)
    return 0 if total == 100 else 1


if __name__ == "__main__":
    sys.exit(main())
