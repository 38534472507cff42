#!/usr/bin/env python3
"""check_student_loop.py DPLAB_COURSE: a student's loop works, as a student (not root) runs it.

The commands are the handout's, run as written (its "Working on it" block, with `dplab-course`
on PATH, HOME the student's and NAME a visible test's name); every handout's block is hw3's
with its own name and file. So:
  - `dplab-course start hw3 ~/hw3` (the short name) puts the starter, the handout, the
    headers, the visible tests and a meson.build in ~/hw3; a second start keeps the
    student's file;
  - `cd ~/hw3 && meson setup build && meson test -C build` works there, with nothing added
    (one meson test per visible test: the starter fails its two);
  - `dplab-course test hw3 ~/hw3` with the reference's code says "visible tests: 20 of 20
    points; the hidden tests run when graded", never a score out of 100; `-k NAME --keep`
    runs one test and leaves a test program in ~/hw3 that runs a test by name;
  - a detached child started by the student's code does not outlive `test` (no root here:
    the grader kills it as the subreaper of its tests);
  - an unknown assignment gets the list of the real ones.
When the check runs as root, the student is user 65534 (nobody) with a home of their own.
The grader's runs have CI's limits (ci_limits.py: generous hang guards on a busy machine).
"""
import os
import re
import shlex
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


def handout_commands(course, manifest, problems):
    """hw3's "Working on it" commands by what they do (start, test, test -k, meson), each a
    line of the handout as written; every other handout's block must be hw3's with its own
    name and file, so that running hw3's runs theirs."""
    def block(a):
        with open(a.path("README.md")) as f:
            m = re.search(r"## \d+\. Working on it\n+```sh\n(.*?)```", f.read(), re.S)
        if not m:
            problems.append(f"{a.name}'s README.md has no ```sh block under '## N. Working on it'")
            return []
        return m.group(1).splitlines()
    hw3 = manifest.resolve(course, "hw3")
    lines = block(hw3)
    for a in manifest.list_assignments(course):
        theirs = [line.replace(a.short, "hw3").replace(a.student_files[0], hw3.student_files[0]) for line in block(a)]
        if a.short != "hw3" and theirs != lines:
            problems.append(f"{a.name}'s handout commands differ from hw3's (which this check runs):\n" +
                            "\n".join(block(a)))
    kinds = {"start": r"^dplab-course start hw3 ~/hw3\b", "test": r"^dplab-course test hw3 ~/hw3\s*(#|$)",
             "test -k": r"^dplab-course test hw3 ~/hw3 -k NAME --keep\b", "meson": r"\bmeson setup build\b"}
    commands = {}
    for line in lines:
        if line.startswith("#"):
            continue  # "# edit ...": the check edits the file itself
        kind = next((k for k, pattern in kinds.items() if re.search(pattern, line)), None)
        if kind is None:
            problems.append(f"the handout's command `{line}` is not one this check knows how to run: teach it")
        else:
            commands[kind] = line
    for kind in kinds:
        if kind not in commands:
            problems.append(f"the handout has no `{kind}` command (this check runs each of {', '.join(kinds)})")
            commands[kind] = "false"
    return commands


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

    # the handout's commands, each line as written
    commands = handout_commands(course, manifest, problems)
    bindir = os.path.join(home, "bin")  # `dplab-course` on the student's PATH: this build's tool,
    os.makedirs(bindir)                  # run by its own #!/usr/bin/env python3 as an install's is
    os.symlink(tool, os.path.join(bindir, "dplab-course"))
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")

    def handout(kind, name=None):
        line = commands[kind]
        if name is not None:
            line = line.replace("NAME", shlex.quote(name))
        return run(["bash", "-c", line], cwd=home)

    # start, twice
    rc, out = handout("start")
    expect(rc == 0, "the handout's start failed", out)
    for f in ("ring_allreduce.cpp", "ring.h", "support.cpp", "README.md", "meson.build", "tests/tests_visible.cpp",
              "tests/grading.h", "tests/grader_main.cpp"):
        expect(os.path.isfile(os.path.join(work, f)), f"start left no {f} in ~/hw3")
    rc, out = handout("start")
    expect(rc == 0 and "kept your ring_allreduce.cpp" in out, "a second start did not keep the student's file", out)
    if not os.path.isfile(os.path.join(work, "ring_allreduce.cpp")):
        shutil.rmtree(home, ignore_errors=True)
        return report.finish("student loop", problems)  # nothing else can run without the folder

    # the student's own build: meson setup, meson test (the starter fails its two tests)
    rc, out = handout("meson")
    expect(os.path.isfile(os.path.join(work, "build", "build.ninja")),
           f"the handout's `{commands['meson']}` did not set up a build in ~/hw3", out)
    log_path = os.path.join(work, "build", "meson-logs", "testlog.txt")
    log = open(log_path).read() if rc != 0 and os.path.isfile(log_path) else ""
    expect(rc != 0 and out.count("FAIL") >= 2 and "not implemented yet" in log,
           "meson test in ~/hw3 did not run the two visible tests of the starter", out)

    # the grader's way, with the reference's code in place of the starter (the handout's "edit")
    shutil.copyfile(os.path.join(course, "hw3_ring_allreduce", "ring_allreduce.cpp"),
                    os.path.join(work, "ring_allreduce.cpp"))
    rc, out = handout("test")
    expect(rc == 0 and "visible tests: 20 of 20 points; the hidden tests run when graded" in out,
           "test did not say 'visible tests: 20 of 20 points; the hidden tests run when graded'", out)
    expect("/ 100" not in out, "test printed a score out of 100", out)
    rc, out = handout("test -k", "does not divide")
    expect(rc == 0 and out.count("PASS") == 1 and "visible tests: 10 of 10 points" in out,
           "-k 'does not divide' did not run exactly that test", out)
    keep = os.path.join(work, "visible_tests")
    expect(os.path.isfile(keep), "--keep left no visible_tests in ~/hw3", out)
    if os.path.isfile(keep):
        rc2, out2 = run([keep, "--test-case=sum of float32 over 2 and 3 ranks (10 points)"])
        expect(rc2 == 0 and "1 passed" in out2, "the kept program does not run a test by name", out2)

    # a detached child of the student's code, without root: still ended with its test
    with open(os.path.join(os.environ["DPLAB_COURSE_STARTERS"], "hw3_ring_allreduce", "ring_allreduce.cpp")) as f:
        starter = f.read()
    child = next(c for c in cheats.RUNTIME if c["name"] == "a child that outlives its test")
    text = cheats.make(starter, child, {}).replace("dplabcheat", "dcstudent")
    with open(os.path.join(work, "ring_allreduce.cpp"), "w") as f:
        f.write(text)
    rc, out = run([tool, "test", "hw3", work, "-k", "does not divide"])
    expect("makes a system call itself" in out, "the student's own test run did not refuse a raw system call", out)
    rc, out = run([tool, "test", "hw3", work, "-k", "does not divide", "--skip-static-checks"])
    survivors = processes_named("dcstudent")
    expect(not survivors, f"a child of the student's code outlived the grade without root: {survivors}", out)
    for p in survivors:
        os.kill(int(p), 9)

    rc, out = run([tool, "test", "hw9", work])
    expect(rc == 2 and "hw3 (hw3_ring_allreduce)" in out, "an unknown assignment did not list the real ones", out)

    shutil.rmtree(home, ignore_errors=True)
    return report.finish("student loop", problems)


if __name__ == "__main__":
    sys.exit(main())
