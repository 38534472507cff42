#!/usr/bin/env python3
"""check_assignment.py DPLAB_COURSE HW: what CI asserts about an assignment's grader.

  - the reference solution scores 100;
  - the untouched starter scores 0, and its feedback says "not implemented yet";
  - each planted mistake (ci_checks.json "mistakes": the reference with texts replaced,
    graded on the tests whose names hold "tests", else all) scores below 100 and the
    feedback names the mistake (its "feedback" words);
  - each cheat (cheats.py, and ci_checks.json "cheats") scores no more than the starter,
    with the feedback the cheat expects and none of the words it must never show; the
    runtime cheats once more with the grader's static checks off, so that the channel's
    token, the sandbox and kill-all hold alone; for an assignment judged outside the
    student's process (hw1), each runtime cheat in a grade of its own, and the cheats only
    that stops (cheats.OUTSIDE), with the static checks on and off;
  - after every grade, no process of the submission is alive, the hidden tests and the
    reference are unchanged, nothing was written into the grader's cache, and no test's
    feedback shows the hidden tests' or the reference's text.
Grades run two at a time and share one cache of compiled tests (fresh for this run), under
ci_limits.py's limits: hang guards made generous for a busy machine, and no grade's
seconds read as a verdict (the grader ends a grade at its budget by itself: a reference
that ran out of it would not score 100).
"""
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cheats  # noqa: E402
import ci_limits  # noqa: E402
import report  # noqa: E402


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def processes_named(name):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == name:
                    found.append(int(pid))
        except OSError:
            pass
    return found


class Check:
    def __init__(self, tool, hw):
        self.tool, self.hw = tool, hw
        self.course = os.environ["DPLAB_COURSE_DIR"]
        sys.path.insert(0, os.path.join(self.course, "grader"))
        import manifest
        self.a = manifest.resolve(self.course, hw)
        with open(os.path.join(self.a.dir, "ci_checks.json")) as f:
            self.checks = json.load(f)
        self.starter_dir = os.path.join(os.environ["DPLAB_COURSE_STARTERS"], self.a.name)
        self.work = tempfile.mkdtemp(prefix=f"dplab-check-{self.a.short}-")  # 0700: no sandbox reaches it
        # outside /tmp, which a test gets afresh: only kill-all stands between a surviving
        # process and these results
        self.open_dir = tempfile.mkdtemp(prefix=f"dplab-check-open-{self.a.short}-",
                                         dir="/run" if os.geteuid() == 0 and os.path.isdir("/run") else None)
        os.chmod(self.open_dir, 0o777)  # results a surviving process could replace: kill-all must hold
        # the build's cache of compiled tests (meson: course_warm_*), else a fresh one
        self.cache = os.environ.get("DPLAB_COURSE_CACHE") or os.path.join(self.work, "cache")
        self.env = ci_limits.environ(os.environ, self.a)
        self.problems = []
        self.jobs = 0
        self.lock = threading.Lock()
        self.protected = {p: sha(p) for p in self.a.test_sources(["hidden"]) + [self.a.path(f) for f in
                                                                                self.a.student_files]}
        with open(self.a.test_sources(["hidden"])[-1]) as f:
            self.hidden_marker = f.readline().strip()

    def folder_with(self, name, files):
        target = os.path.join(self.work, re.sub(r"\W+", "_", name)[:60])
        os.makedirs(target)
        for fname, text in files.items():
            with open(os.path.join(target, fname), "w") as f:
                f.write(text)
        return target

    def next_job(self):
        with self.lock:
            self.jobs += 1
            return self.jobs

    def grade(self, where, results_dir=None, extra=(), job=None, settle=False):
        """Grades a folder (None: the reference); returns (results.json, console, seconds).
        results.json must hold the score the grader printed last; settle: check that once
        more after cheats.SETTLE_S, before any survivor is killed."""
        job = job or self.next_job()
        tag = f"dc{os.getpid() % 1000:03d}{job:02d}"
        if where and os.path.isdir(where):
            for name in os.listdir(where):
                p = os.path.join(where, name)
                with open(p) as f:
                    text = f.read()
                with open(p, "w") as f:
                    f.write(text.replace("dplabcheat", tag))
        json_path = os.path.join(results_dir or self.work, f"results-{job}.json")
        args = [sys.executable, self.tool, "grade", self.hw] + (["--reference"] if where is None else [where])
        t0 = time.monotonic()
        run = subprocess.run(args + ["--json", json_path, "--cache", self.cache, *extra], capture_output=True,
                             text=True, timeout=900, env=self.env)
        seconds = time.monotonic() - t0
        survivors = processes_named(tag)  # right after the grader returned
        result = self.results_as_printed(where, json_path, run.stdout)
        if settle:
            time.sleep(cheats.SETTLE_S)
            self.results_as_printed(where, json_path, run.stdout)
        for pid in survivors:  # leave nothing behind in CI either
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        if survivors:
            self.problems.append(f"{where}: {len(survivors)} process(es) of the submission outlived the grade")
        if run.returncode not in (0, 1):
            self.problems.append(f"{where}: the grader failed (status {run.returncode}):\n{run.stderr[-2000:]}")
        return result, run.stdout + run.stderr, seconds

    def results_as_printed(self, where, json_path, console):
        """results.json, which must say the score the grader printed as its closing line: a
        process of the submission that outlived the grade could have rewritten it."""
        printed = re.findall(r"^score: (\S+) / 100", console, re.M)
        try:
            with open(json_path) as f:
                result = json.load(f)
        except (OSError, ValueError):
            result = {}
        if not printed or result.get("score") != float(printed[-1]):
            self.problems.append(f"{where}: results.json says score {result.get('score')}, the grader printed "
                                 f"{printed[-1:]}: rewritten after the grader returned?")
        return {"score": None, "tests": [], **result}

    # ---- the jobs ----
    def reference(self):
        result, console, seconds = self.grade(None)
        print(f"reference: {result['score']} in {seconds:.1f} s", flush=True)  # the seconds: for the log only
        if result["score"] != 100:
            self.problems.append(f"the reference scored {result['score']}, not 100:\n{console[-3000:]}")

    def starter(self):
        result, console, _ = self.grade(self.starter_dir)
        print(f"starter: {result['score']}", flush=True)
        earned = [t["name"] for t in result["tests"] if t["score"] > 0]
        if earned:
            self.problems.append(f"the untouched starter earned points in: {earned}")
        if not any("not implemented yet" in t["output"] for t in result["tests"]):
            self.problems.append("the starter's feedback never says 'not implemented yet'")

    def mistake(self, m):
        pairs = m["replace"] if isinstance(m["replace"][0], list) else [m["replace"]]
        files = {}
        for name in self.a.student_files:
            with open(self.a.path(name)) as f:
                text = f.read()
            for old, new in pairs:
                text = text.replace(old, new)
            files[name] = text
        if all(files[n] == open(self.a.path(n)).read() for n in files):
            self.problems.append(f"mistake '{m['name']}': its text is not in the reference")
            return
        extra = ["-k", m["tests"]] if m.get("tests") else []
        result, console, _ = self.grade(self.folder_with("mistake " + m["name"], files), extra=extra)
        feedback = "\n".join(t["output"] for t in result["tests"])
        print(f"mistake '{m['name']}': {result['score']}", flush=True)
        for internal in ("(no collective)", "destroyed its ProcessGroup"):  # words the student never met
            if internal in feedback:
                self.problems.append(f"mistake '{m['name']}': the feedback says {internal!r}")
        if result["score"] >= 100:
            self.problems.append(f"mistake '{m['name']}' scored {result['score']}")
        elif m["feedback"] not in feedback:
            self.problems.append(f"mistake '{m['name']}': the feedback does not say '{m['feedback']}':\n"
                                 f"{feedback[:2500]}")

    def cheat_files(self, c, job):
        with open(os.path.join(self.starter_dir, self.a.student_files[0])) as f:
            starter = f.read()
        values = {"RESULTS": os.path.join(self.open_dir, f"results-{job}.json"),
                  "HIDDEN": self.a.test_sources(["hidden"])[-1], "REFERENCE": self.a.path(self.a.student_files[0]),
                  "CACHE": self.cache, "HW_DIR": f"coursework/{self.a.name}", "STUDENT_FILE": self.a.student_files[0]}
        return {self.a.student_files[0]: cheats.make(starter, c, values)}

    def no_leaks(self, label, feedback, console):
        for marker in (self.hidden_marker, "// BEGIN ASSIGNMENT"):
            if marker in feedback or marker in console:
                self.problems.append(f"{label}: the feedback shows the text of {marker!r}")

    def cheat(self, c):
        """A cheat the grader must stop before any test runs (or that gains nothing)."""
        job = self.next_job()
        label = "cheat: " + c["name"]
        result, console, _ = self.grade(self.folder_with(label, self.cheat_files(c, job)),
                                        results_dir=self.open_dir, job=job)
        feedback = "\n".join(t["output"] for t in result["tests"])
        print(f"{label}: {result['score']}", flush=True)
        if result["score"] > 0:
            self.problems.append(f"{label} scored {result['score']}, more than the starter's 0:\n{feedback[:2000]}")
        if not any(e in feedback for e in c["expect"]):
            self.problems.append(f"{label}: the feedback says none of {c['expect']}:\n{feedback[:2000]}")
        for words in c.get("never", []):
            if words in feedback or words in console:
                self.problems.append(f"{label}: the feedback or the console shows {words!r}")
        self.no_leaks(label, feedback, console)

    def runtime_cheats(self):
        """Every runtime cheat, one per test case, with the static checks off: what stops them
        is the channel's token, the sandbox and kill-all."""
        from runner import test_names
        names = [n for n in test_names(self.a.test_sources(["visible", "hidden"])) if n not in self.a.speed_tests]
        c, plan = cheats.combined(names, {})
        job = self.next_job()
        label = "runtime cheats (static checks off)"
        # the detached child would rewrite results.json until long after the grader returned
        result, console, _ = self.grade(self.folder_with(label, self.cheat_files(c, job)),
                                        results_dir=self.open_dir, extra=["--skip-static-checks"], job=job,
                                        settle=True)
        print(f"{label}: {result['score']}", flush=True)
        for t in result["tests"]:
            cheat = plan.get(t["name"])
            if not cheat:  # a speed test: it runs only after every other test passed
                if t["score"] > 0 or "not run" not in t["output"]:
                    self.problems.append(f"{label}: {t['name']!r} ran:\n{t['output'][:500]}")
                continue
            if t["score"] > 0:
                self.problems.append(f"cheat '{cheat['name']}' scored {t['score']} in {t['name']!r}")
            if not any(e in t["output"] for e in cheat["expect"]):
                self.problems.append(f"cheat '{cheat['name']}' in {t['name']!r}: the feedback says none of "
                                     f"{cheat['expect']}:\n{t['output'][:1500]}")
        if os.geteuid() == 0:  # a grader that is not root cannot keep its files from the submission
            self.no_leaks(label, "\n".join(t["output"] for t in result["tests"]), console)

    def runtime_cheat_alone(self, c):
        """A judge outside: one runtime cheat in every test, static checks off (its worker is
        not told which test it serves, so the cheats cannot take turns)."""
        job = self.next_job()
        label = f"runtime cheat (static checks off): {c['name']}"
        result, console, _ = self.grade(self.folder_with(label, self.cheat_files(c, job)),
                                        results_dir=self.open_dir, extra=["--skip-static-checks"], job=job,
                                        settle=True)
        print(f"{label}: {result['score']}", flush=True)
        for t in result["tests"]:
            if t["score"] > 0:
                self.problems.append(f"{label} scored {t['score']} in {t['name']!r}")
            if t["name"] not in self.a.speed_tests and not any(e in t["output"] for e in c["expect"]):
                self.problems.append(f"{label} in {t['name']!r}: the feedback says none of {c['expect']}:\n"
                                     f"{t['output'][:1500]}")
        if os.geteuid() == 0:
            self.no_leaks(label, "\n".join(t["output"] for t in result["tests"]), console)

    def outside_cheat(self, c, static_checks):
        """A cheat that only a judge outside stops: no more than the starter with the static
        checks on, and with them off (its expected words then)."""
        job = self.next_job()
        label = f"cheat{'' if static_checks else ' (static checks off)'}: {c['name']}"
        result, console, _ = self.grade(self.folder_with(label, self.cheat_files(c, job)), results_dir=self.open_dir,
                                        extra=[] if static_checks else ["--skip-static-checks"], job=job)
        feedback = "\n".join(t["output"] for t in result["tests"])
        print(f"{label}: {result['score']}", flush=True)
        if result["score"] > 0:
            self.problems.append(f"{label} scored {result['score']}, more than the starter's 0:\n{feedback[:2000]}")
        if not static_checks and not any(e in feedback for e in c["expect"]):
            self.problems.append(f"{label}: the feedback says none of {c['expect']}:\n{feedback[:2000]}")
        for words in self.never_words(c):
            if words in feedback or words in console:
                self.problems.append(f"{label}: the feedback or the console shows {words!r}")
        self.no_leaks(label, feedback, console)

    def never_words(self, c):
        """A cheat's `never` words, "@TEST@" in them as each of this assignment's test names:
        in CI other checks run beside this one, and a student's own `meson test` (the student
        loop) names its visible tests on the command line, which /proc shows where the kernel
        cannot give a test a /proc of its own (the grader names its tests in their environment;
        in Gradescope each grade has its machine)."""
        from runner import test_names
        # a name's first words: the command line may escape what doctest reads as a pattern
        names = {re.match(r"[\w ]*", n).group(0) for n in test_names(self.a.test_sources(["visible", "hidden"]))}
        words = []
        for w in c.get("never", []):
            words += [w.replace("@TEST@", n) for n in names] if "@TEST@" in w else [w]
        return words

    def run(self):
        jobs = [self.reference, self.starter] + [lambda m=m: self.mistake(m) for m in self.checks["mistakes"]]
        statics = cheats.STATIC + self.checks.get("cheats", [])
        if self.a.judge == "outside":
            jobs += [lambda c=c: self.runtime_cheat_alone(c) for c in cheats.RUNTIME]
            outside = cheats.OUTSIDE + self.checks.get("outside_cheats", [])  # and the assignment's own
            jobs += [lambda c=c, s=s: self.outside_cheat(c, s) for c in outside for s in (True, False)]
        else:
            jobs.append(self.runtime_cheats)
        jobs += [lambda c=c: self.cheat(c) for c in statics]
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            for f in [pool.submit(j) for j in jobs]:
                f.result()
        for path, digest in self.protected.items() if os.geteuid() == 0 else []:
            if sha(path) != digest:
                self.problems.append(f"{path} changed during the grades")
        # the cheats' file is named by grade()'s tag (dc + 5 digits); cache entries are hex hashes
        if any(re.fullmatch(r"dc\d{5}", n) for n in os.listdir(self.cache)):
            self.problems.append("a submission wrote into the grader's cache")
        shutil.rmtree(self.work, ignore_errors=True)
        shutil.rmtree(self.open_dir, ignore_errors=True)
        return report.finish(self.a.name, self.problems, f"({self.jobs} grades)")


if __name__ == "__main__":
    sys.exit(Check(sys.argv[1], sys.argv[2]).run())
