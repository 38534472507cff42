#!/usr/bin/env python3
"""check_gradescope.py DPLAB_COURSE: a Gradescope package grades as Gradescope runs it.

`dplab-course package hw3` makes the zip; it is unpacked into ROOT/source of a folder laid
out like /autograder (ROOT/submission, ROOT/results), and its run_autograder runs as root
with AUTOGRADER_ROOT=ROOT and this build's dplab (setup.sh, which installs packages and
builds dplab, is checked for syntax, and for what it installs: every package of
scripts/setup.sh that grading needs, and the Debian package of every dependency this build
found (dpkg -S), except those its meson options switch off; its warm step is a copy of the
build's cache of the same tests). Four submissions:
  - correct (the reference's code, in a subfolder as an upload keeps it): 100, with
    results.json's fields (execution_time, stdout_visibility, each test's visibility:
    "visible" for the visible tests, "after_due_date" for the hidden ones);
  - wrong (the average never taken): below 100, the cause named;
  - cheating in plain C++ (PASS lines and a score on stdout, then a crash): 0;
  - cheating with raw system calls (a detached child that rewrites results.json, a read of
    the hidden tests), graded with the static checks off: 0, no process left, results.json
    as the grader wrote it, no hidden text.
Then hw1's package, judged outside the student's process: the reference scores 100, and a
weak fmt::vformat with nothing implemented, graded with the static checks off, scores 0.
The zip holds no reference solution and no ci_checks.json. The grades run under CI's limits
(ci_limits.py: generous hang guards), and their seconds are never a verdict.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cheats  # noqa: E402
import ci_limits  # noqa: E402
import report  # noqa: E402


def comm_pids(name):
    found = []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{p}/comm") as f:
                if f.read().strip() == name:
                    found.append(int(p))
        except OSError:
            pass
    return found


def apt_installs(script):
    """The packages a shell script installs with `apt-get install` (its continued lines too)."""
    words, inside = [], False
    for line in script.splitlines():
        if "apt-get install" in line:
            inside, line = True, line.split("apt-get install", 1)[1]
        if inside:
            words += line.rstrip("\\").split()
            inside = line.rstrip().endswith("\\")
    return {w for w in words if not w.startswith("-") and "=" not in w and not w.startswith("$")}


# A dependency the package's build may lack: the meson option that switches it off.
SWITCHED_OFF_BY = {"cuda": "cuda", "nccl": "nccl", "ompi-cxx": "mpi", "ompi-c": "mpi", "ompi": "mpi", "mpich": "mpi"}


def setup_problems(setup_text, source_root, build_dir, package):
    """What the package's setup.sh fails to install: a package of scripts/setup.sh (the
    repository's own list) that is neither installed nor in package.NOT_NEEDED, and the
    Debian package of each dependency this build found (its pkg-config file's, or
    doctest's header's, owner by dpkg -S) that the package's build does not switch off."""
    problems, installs = [], apt_installs(setup_text)
    with open(os.path.join(source_root, "scripts", "setup.sh")) as f:
        m = re.search(r"^packages=\((.*?)\)", f.read(), re.S | re.M)
    repo = re.sub(r"#[^\n]*", "", m.group(1)).split() if m else []
    if not repo:
        problems.append("scripts/setup.sh has no packages=(...) list to compare with")
    for p in repo:
        if p not in installs and p not in package.NOT_NEEDED:
            problems.append(f"setup.sh does not install {p}, which scripts/setup.sh does (add it to package.py's "
                            f"APT_PACKAGES, or to NOT_NEEDED with the reason)")
    if not shutil.which("dpkg"):
        print("note: no dpkg here: the owners of the build's dependencies are not checked")
        return problems
    with open(os.path.join(build_dir, "meson-info", "intro-dependencies.json")) as f:
        found = {d["name"] for d in json.load(f)}
    files = {}
    for name in sorted(found):
        option = SWITCHED_OFF_BY.get(name)
        if option and f"-D{option}=disabled" in setup_text:
            continue
        r = subprocess.run(["pkg-config", "--variable=pcfiledir", name], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip():
            files[f"dependency('{name}')"] = os.path.join(r.stdout.strip(), name + ".pc")
    files["doctest/doctest.h"] = "/usr/include/doctest/doctest.h"  # meson.build's check_header
    for what, path in files.items():
        r = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
        if r.returncode != 0:
            continue  # not from a Debian package here (a local build): nothing to compare
        owner = r.stdout.split(":")[0].strip()
        if owner not in installs:
            problems.append(f"setup.sh does not install {owner}, which dplab's build needs for {what} ({path})")
    return problems


def judged_outside(tool, course, build_pc):
    """hw1, judged outside the student's process, through its own package: the reference
    scores 100, and a weak fmt::vformat with every backward returning nothing (which scored
    100 through run_autograder while hw1's tests ran in the student's process), graded with
    the static checks off, scores 0 with the words of a wrong answer."""
    problems = []
    root = tempfile.mkdtemp(prefix="dplab-autograder-hw1-")
    zip_path = os.path.join(root, "hw1.zip")
    r = subprocess.run([sys.executable, tool, "package", "hw1", zip_path], capture_output=True, text=True)
    if r.returncode != 0:
        return [f"dplab-course package hw1 failed:\n{r.stdout}{r.stderr}"]
    src = os.path.join(root, "source")
    with zipfile.ZipFile(zip_path) as z:
        for n in z.namelist():
            if n.endswith(("hw1_autograd/autograd.cpp", "ci_checks.json")):
                problems.append(f"the hw1 zip holds {n}")
        z.extractall(src)
    import manifest
    a = manifest.resolve(course, "hw1")
    env = dict(ci_limits.environ(os.environ, a), AUTOGRADER_ROOT=root, DPLAB_COURSE_PKG_CONFIG_PATH=build_pc)
    env.pop("DPLAB_COURSE_DIR")
    build_cache = env.pop("DPLAB_COURSE_CACHE", None)
    if build_cache and os.path.isdir(build_cache):
        shutil.copytree(build_cache, os.path.join(src, "cache"), copy_function=os.link)
    starter = open(os.path.join(os.environ["DPLAB_COURSE_STARTERS"], a.name, a.student_files[0])).read()
    vformat = next(c for c in cheats.OUTSIDE if "vformat" in c["name"])
    for label, text, args, want in (
            ("hw1 correct", open(a.path(a.student_files[0])).read(), [], 100),
            ("hw1 cheating with a weak fmt::vformat (static checks off)", cheats.make(starter, vformat, {}),
             ["--skip-static-checks"], 0)):
        sub = os.path.join(root, "submission")
        shutil.rmtree(sub, ignore_errors=True)
        os.makedirs(sub)
        with open(os.path.join(sub, a.student_files[0]), "w") as f:
            f.write(text)
        r = subprocess.run(["bash", os.path.join(src, "run_autograder"), *args], env=env, capture_output=True,
                           text=True, timeout=600)
        try:
            with open(os.path.join(root, "results", "results.json")) as f:
                results = json.load(f)
        except (OSError, ValueError):
            results = {}
        print(f"{label}: {results.get('score')} in {results.get('execution_time')} s", flush=True)
        feedback = "\n".join(t["output"] for t in results.get("tests", []))
        if r.returncode != 0:
            problems.append(f"{label}: run_autograder exited with {r.returncode}:\n{r.stderr[-2000:]}")
        if results.get("score") != want:
            problems.append(f"{label} scored {results.get('score')}, not {want}:\n{feedback[:2000]}")
        if want == 0 and not any(e in feedback for e in vformat["expect"]):
            problems.append(f"{label}: the feedback says none of {vformat['expect']}:\n{feedback[:2000]}")
    shutil.rmtree(root, ignore_errors=True)
    return problems


def main():
    if os.geteuid() != 0:
        print("SKIP: run_autograder runs as root (as on Gradescope); this check needs root")
        return 77
    tool = os.path.abspath(sys.argv[1])
    course = os.environ["DPLAB_COURSE_DIR"]
    build_pc = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(tool))), "meson-uninstalled")
    problems = []
    root = tempfile.mkdtemp(prefix="dplab-autograder-")
    zip_path = os.path.join(root, "hw3.zip")
    r = subprocess.run([sys.executable, tool, "package", "hw3", zip_path], capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        return 1
    with zipfile.ZipFile(zip_path) as z:
        names = z.namelist()
        for n in names:
            if n.endswith(("hw3_ring_allreduce/ring_allreduce.cpp", "ci_checks.json")):
                problems.append(f"the zip holds {n}")
        for n in ("setup.sh", "run_autograder", "course/hw3_ring_allreduce/tests_hidden.cpp"):
            if n not in names:
                problems.append(f"the zip has no {n}")
        z.extractall(os.path.join(root, "source"))
    src = os.path.join(root, "source")
    sys.path.insert(0, os.path.join(course, "grader"))
    import package
    with open(os.path.join(src, "setup.sh")) as f:
        problems += setup_problems(f.read(), os.path.dirname(os.path.realpath(course)),
                                   os.path.dirname(build_pc), package)
    for script in ("setup.sh", "run_autograder"):
        os.chmod(os.path.join(src, script), 0o755)
        if subprocess.run(["bash", "-n", os.path.join(src, script)]).returncode != 0:
            problems.append(f"{script} is not valid bash")
    hidden_marker = open(os.path.join(course, "hw3_ring_allreduce", "tests_hidden.cpp")).readline().strip()
    import manifest
    env = dict(ci_limits.environ(os.environ, manifest.resolve(course, "hw3")), AUTOGRADER_ROOT=root,
               DPLAB_COURSE_PKG_CONFIG_PATH=build_pc)
    env.pop("DPLAB_COURSE_DIR")
    build_cache = env.pop("DPLAB_COURSE_CACHE", None)
    if build_cache and os.path.isdir(build_cache):  # setup.sh's warm step, from the same sources
        shutil.copytree(build_cache, os.path.join(src, "cache"), copy_function=os.link)

    consoles = []  # what each run_autograder printed

    def grade(label, folder_files, args=()):
        sub = os.path.join(root, "submission")
        shutil.rmtree(sub, ignore_errors=True)
        for rel, text in folder_files.items():
            os.makedirs(os.path.dirname(os.path.join(sub, rel)), exist_ok=True)
            with open(os.path.join(sub, rel), "w") as f:
                f.write(text)
        r = subprocess.run(["bash", os.path.join(src, "run_autograder"), *args], env=env, capture_output=True, text=True,
                           timeout=600)
        consoles.append(r.stdout)
        results = results_as_printed(label, r.stdout)
        print(f"{label}: {results.get('score')} in {results.get('execution_time')} s", flush=True)
        if r.returncode != 0:
            problems.append(f"{label}: run_autograder exited with {r.returncode}:\n{r.stderr[-2000:]}")
        return results

    def results_as_printed(label, console):
        """results.json, which must say the score the grader printed as its closing line: a
        process of the submission that outlived the grade could have rewritten it."""
        with open(os.path.join(root, "results", "results.json")) as f:
            results = json.load(f)
        printed = re.findall(r"^score: (\S+) / 100", console, re.M)
        if not printed or results.get("score") != float(printed[-1]):
            problems.append(f"{label}: results.json says score {results.get('score')}, the grader printed "
                            f"{printed[-1:]}: rewritten after run_autograder returned?")
        return results

    reference = open(os.path.join(course, "hw3_ring_allreduce", "ring_allreduce.cpp")).read()
    results = grade("correct", {"hw3/ring_allreduce.cpp": reference})
    if results.get("score") != 100:
        problems.append(f"the correct submission scored {results.get('score')}: {json.dumps(results)[:3000]}")
    for field in ("score", "execution_time", "output", "stdout_visibility", "tests"):
        if field not in results:
            problems.append(f"results.json has no '{field}'")
    visible = {"sum of float32 over 2 and 3 ranks (10 points)",
               "a count that N does not divide: 10 elements over 4 ranks (10 points)"}
    for t in results.get("tests", []):
        want = "visible" if t["name"] in visible else "after_due_date"
        if t.get("visibility") != want:
            problems.append(f"test {t['name']!r} has visibility {t.get('visibility')}, not {want}")
        if set(t) < {"name", "score", "max_score", "output", "visibility", "status"}:
            problems.append(f"test {t['name']!r} lacks fields: {sorted(t)}")

    wrong = reference.replace("if (op == Op::Avg) divide(data, count, dtype, n);", "")
    results = grade("wrong", {"ring_allreduce.cpp": wrong})
    feedback = "\n".join(t["output"] for t in results.get("tests", []))
    if not results.get("score", 100) < 100 or "it is the sum, not the average" not in feedback:
        problems.append(f"the wrong submission scored {results.get('score')}:\n{feedback[:2000]}")

    starter = open(os.path.join(os.environ["DPLAB_COURSE_STARTERS"], "hw3_ring_allreduce",
                                "ring_allreduce.cpp")).read()
    results_path = os.path.join(root, "results", "results.json")
    # a cheat in plain C++ that passes the static checks: PASS lines and a score on stdout,
    # then a crash
    plain = {"top": "#include <cstdio>\n",
             "body": 'std::printf("PASS 100/100\\n[doctest] Status: SUCCESS!\\nscore: 100 / 100\\n"); '
                     'std::fflush(stdout); *static_cast<volatile int*>(nullptr) = 1;'}
    results = grade("cheating in plain C++", {"ring_allreduce.cpp": cheats.make(starter, plain, {})})
    if results.get("score") != 0 or "crashed: SIGSEGV" not in json.dumps(results):
        problems.append(f"the plain cheat scored {results.get('score')}: {json.dumps(results)[:2000]}")
    # raw system calls, graded with the static checks off (run_autograder passes on its
    # arguments): a detached child that rewrites results.json, a read of the hidden tests
    runtime = [c for c in cheats.RUNTIME if c["name"].startswith(("a detached child", "reads"))]
    cheat = {"top": cheats.RAW, "body": " ".join("{ " + c["body"] + " }" for c in runtime)}
    values = {"RESULTS": results_path, "HIDDEN": os.path.join(src, "course/hw3_ring_allreduce/tests_hidden.cpp"),
              "REFERENCE": os.path.join(course, "hw3_ring_allreduce", "ring_allreduce.cpp"),
              "CACHE": os.path.join(src, "cache")}
    text = cheats.make(starter, cheat, values).replace("dplabcheat", "dcgradescope")
    results = grade("cheating with raw system calls", {"ring_allreduce.cpp": text}, ["--skip-static-checks"])
    survivors = comm_pids("dcgradescope")
    time.sleep(cheats.SETTLE_S)  # a surviving child rewrites results.json every 50 ms: let it, before looking
    results_as_printed("cheating with raw system calls, a moment later", consoles[-1])
    for pid in survivors:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    if survivors:
        problems.append(f"{len(survivors)} process(es) of the cheating submission outlived run_autograder")
    if results.get("score") != 0:
        problems.append(f"the cheating submission scored {results.get('score')}")
    if hidden_marker in json.dumps(results):
        problems.append("the cheating submission's results show the hidden tests")

    shutil.rmtree(root, ignore_errors=True)
    problems += judged_outside(tool, course, build_pc)
    return report.finish("gradescope", problems)


if __name__ == "__main__":
    sys.exit(main())
