#!/usr/bin/env python3
"""check_student_loop.py DPLAB_COURSE: a student's loop works, as a student (not root) runs it.

  - `dplab-course start hw3 DIR` (the short name) puts the starter, the handout, the headers,
    the visible tests and a meson.build in DIR; a second start keeps the student's file;
  - `meson setup`, `ninja` and `meson test` work in DIR (one meson test per visible test);
  - `dplab-course test hw3 DIR` with the reference's code says "visible tests: 20 of 20
    points; the hidden tests run when graded", never a score out of 100; -k runs one test;
    --keep leaves a test program in DIR that runs a test by name;
  - a detached child started by the student's code does not outlive `test` (no root here:
    the grader kills it as the subreaper of its tests);
  - an unknown assignment gets the list of the real ones.
When the check runs as root, the student is user 65534 (nobody) with a home of their own.
The grader's runs have CI's limits (ci_limits.py: generous hang guards on a busy machine).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cheats  # noqa: E402
import ci_limits  # noqa: E402
import report  # noqa: E402

STUDENT_UID = 65534


def processes_named(name):
    """Pids whose comm is name (a process that ends while we look is simply not one)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc") if os.path.isdir("/proc") else []):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == name:
                    found.append(pid)
        except OSError:
            pass
    return found


def main():
    tool = os.path.abspath(sys.argv[1])
    course = os.environ["DPLAB_COURSE_DIR"]
    problems = []
    home = tempfile.mkdtemp(prefix="dplab-student-")
    os.chmod(home, 0o755)
    as_student = []
    if os.geteuid() == 0:
        os.chown(home, STUDENT_UID, STUDENT_UID)
        as_student = ["setpriv", f"--reuid={STUDENT_UID}", f"--regid={STUDENT_UID}", "--clear-groups"]
    sys.path.insert(0, os.path.join(course, "grader"))
    import manifest
    env = {k: v for k, v in ci_limits.environ(os.environ, manifest.resolve(course, "hw3")).items()
           if not k.startswith("DPLAB_COURSE_CACHE")}
    env.update(HOME=home, XDG_CACHE_HOME=os.path.join(home, ".cache"), TMPDIR=home)
    work = os.path.join(home, "hw3")
    # the student's cache (~/.cache/dplab-course) as an earlier run of theirs left it: linked
    # from the build's cache of the same tests, so this check compiles nothing twice
    build_cache = os.environ.get("DPLAB_COURSE_CACHE")
    if build_cache and os.path.isdir(build_cache):
        user_cache = os.path.join(home, ".cache", "dplab-course")
        shutil.copytree(build_cache, user_cache, copy_function=os.link)
        if as_student:
            for root, dirs, _ in os.walk(os.path.join(home, ".cache")):
                os.chown(root, STUDENT_UID, STUDENT_UID)

    def run(args, cwd=None, timeout=600):
        r = subprocess.run(as_student + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        return r.returncode, r.stdout + r.stderr

    def expect(cond, what, output=""):
        if not cond:
            problems.append(what + ("\n" + output[-2500:] if output else ""))

    # start, twice
    rc, out = run([sys.executable, tool, "start", "hw3", work])
    expect(rc == 0, "start hw3 failed", out)
    for f in ("ring_allreduce.cpp", "ring.h", "support.cpp", "README.md", "meson.build", "tests/tests_visible.cpp",
              "tests/grading.h", "tests/grader_main.cpp"):
        expect(os.path.isfile(os.path.join(work, f)), f"start left no {f} in DIR")
    rc, out = run([sys.executable, tool, "start", "hw3", work])
    expect(rc == 0 and "kept your ring_allreduce.cpp" in out, "a second start did not keep the student's file", out)

    # the student's own build: meson, ninja, meson test (the starter fails its two tests)
    pc = re.search(r"--pkg-config-path (\S+)", out)
    # (plain: no debug information, the quickest build; a student's default is debug)
    setup = ["meson", "setup", "build", "--buildtype=plain"] + (["--pkg-config-path", pc.group(1)] if pc else [])
    rc, out = run(setup, cwd=work)
    expect(rc == 0, "meson setup failed in DIR", out)
    rc, out = run(["ninja", "-C", "build", "-j2"], cwd=work)
    expect(rc == 0, "ninja failed in DIR", out)
    rc, out = run(["meson", "test", "-C", "build", "--no-rebuild"], cwd=work)
    log = open(os.path.join(work, "build", "meson-logs", "testlog.txt")).read() if rc != 0 else ""
    expect(rc != 0 and out.count("FAIL") >= 2 and "not implemented yet" in log,
           "meson test in DIR did not run the two visible tests of the starter", out)

    # the grader's way, with the reference's code in place of the starter
    shutil.copyfile(os.path.join(course, "hw3_ring_allreduce", "ring_allreduce.cpp"),
                    os.path.join(work, "ring_allreduce.cpp"))
    rc, out = run([sys.executable, tool, "test", "hw3", work, "--keep"])
    expect(rc == 0 and "visible tests: 20 of 20 points; the hidden tests run when graded" in out,
           "test did not say 'visible tests: 20 of 20 points; the hidden tests run when graded'", out)
    expect("/ 100" not in out, "test printed a score out of 100", out)
    keep = os.path.join(work, "visible_tests")
    expect(os.path.isfile(keep), "--keep left no visible_tests in DIR", out)
    if os.path.isfile(keep):
        rc2, out2 = run([keep, "--test-case=sum of float32 over 2 and 3 ranks (10 points)"])
        expect(rc2 == 0 and "1 passed" in out2, "the kept program does not run a test by name", out2)
    rc, out = run([sys.executable, tool, "test", "hw3", work, "-k", "does not divide"])
    expect(rc == 0 and out.count("PASS") == 1 and "visible tests: 10 of 10 points" in out,
           "-k 'does not divide' did not run exactly that test", out)

    # a detached child of the student's code, without root: still ended with its test
    with open(os.path.join(os.environ["DPLAB_COURSE_STARTERS"], "hw3_ring_allreduce", "ring_allreduce.cpp")) as f:
        starter = f.read()
    child = next(c for c in cheats.RUNTIME if c["name"] == "a child that outlives its test")
    text = cheats.make(starter, child, {}).replace("dplabcheat", "dcstudent")
    with open(os.path.join(work, "ring_allreduce.cpp"), "w") as f:
        f.write(text)
    rc, out = run([sys.executable, tool, "test", "hw3", work, "-k", "does not divide"])
    expect("makes a system call itself" in out, "the student's own test run did not refuse a raw system call", out)
    rc, out = run([sys.executable, tool, "test", "hw3", work, "-k", "does not divide", "--skip-static-checks"])
    survivors = processes_named("dcstudent")
    expect(not survivors, f"a child of the student's code outlived the grade without root: {survivors}", out)
    for p in survivors:
        os.kill(int(p), 9)

    rc, out = run([sys.executable, tool, "test", "hw9", work])
    expect(rc == 2 and "hw3 (hw3_ring_allreduce)" in out, "an unknown assignment did not list the real ones", out)

    shutil.rmtree(home, ignore_errors=True)
    return report.finish("student loop", problems)


if __name__ == "__main__":
    sys.exit(main())
