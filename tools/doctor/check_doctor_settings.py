#!/usr/bin/env python3
"""check_doctor_settings.py DOCTOR: dplab-doctor on the environments issue 47 found it wrong on
(meson test 'doctor_settings').

Each DPLAB_* value every program refuses (a timeout of nan, a slot of 0 KiB, a wait policy of
junk, a token too short) must fail the doctor's settings check for that variable, with its
message, and nothing else may fail: the self-tests run without the refused value, and no
fix blames shared memory or asks for a bug report. A descriptor limit of 6 must fail the
file descriptor check with the limit and the number a job needs, the multi-process
self-tests must say they did not run and why, and nothing may blame shared memory; at
the limit the doctor names as enough, they must run and pass. A
machine without /dev/shm (a private mount namespace, where root may make one) must pass,
since the shm transport's block is a memfd.
"""
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile

doctor = sys.argv[1]
problems = []
# A run that takes this long is hung: a guard, not a speed limit (the self-tests start
# processes, which a loaded machine makes slow).
HANG_GUARD_S = 80
FDS = "file descriptors a process may open (ulimit -n)"  # the check's name
MISLEADING = ["cannot share memory", "report it as a bug", "report it with this output"]


def run(env_extra, preexec=None, wrap=None):
    """(exit status, stdout, report) of one doctor run; report None if no JSON came."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "doctor.json")
        env = {k: v for k, v in os.environ.items() if not k.startswith("DPLAB_")}
        env.update(env_extra)
        argv = (wrap or []) + [doctor, "--json", out]
        try:
            p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S,
                               preexec_fn=preexec)
        except subprocess.TimeoutExpired:
            print(f"FAIL: dplab-doctor did not end within {HANG_GUARD_S} s (hung) with {env_extra}")
            sys.exit(1)
        report = None
        if os.path.exists(out):
            with open(out) as f:
                report = json.load(f)
        return p.returncode, p.stdout + p.stderr, report


def failures(report):
    return [c for c in report["checks"] if c["verdict"] == "fail"]


def misleading(case, report):
    for c in report["checks"]:
        for words in MISLEADING:
            if c["verdict"] in ("warn", "fail") and words in c["fix"]:
                problems.append(f"{case}: check '{c['name']}' blames the wrong cause: {c['fix']}")


def bad_setting(name, value, message):
    case = f"{name}={value}"
    rc, text, report = run({name: value})
    print(f"--- {case}\n{text}")
    if report is None:
        problems.append(f"{case}: no JSON report (exit status {rc})")
        return
    fails = failures(report)
    names = [c["name"] for c in fails]
    if names != [name]:
        problems.append(f"{case}: expected exactly the check '{name}' to fail, got {names}")
    for c in fails:
        if c["name"] == name and message not in c["detail"]:
            problems.append(f"{case}: the detail should say {message!r}, got {c['detail']!r}")
        if c["name"] == name and "unset " + name not in c["fix"]:
            problems.append(f"{case}: the fix should say how to unset it, got {c['fix']!r}")
    misleading(case, report)
    if rc != 1:
        problems.append(f"{case}: exit status {rc}, expected 1 (a failed check)")
    if name == "DPLAB_JOB_TOKEN" and value in text + json.dumps(report):
        problems.append(f"{case}: the report shows the token")


bad_setting("DPLAB_TIMEOUT", "nan", "DPLAB_TIMEOUT='nan' is not a number of seconds in (0, 604800]")
bad_setting("DPLAB_SEGMENT_KB", "0", "DPLAB_SEGMENT_KB: expected the slot size in KiB, 1 .. 65536")
bad_setting("DPLAB_WAIT", "junk", "DPLAB_WAIT: expected \"spin_us,yield_us\"")
bad_setting("DPLAB_JOB_TOKEN", "shortsecret", "DPLAB_JOB_TOKEN holds 11 characters")

# ulimit -n 6: the limit and what a job needs, named; nothing blamed on memory.
case = "ulimit -n 6"
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
rc, text, report = run({}, preexec=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (6, hard)))
print(f"--- {case}\n{text}")
if report is None:
    problems.append(f"{case}: no JSON report (exit status {rc})")
else:
    by_name = {c["name"]: c for c in report["checks"]}
    fds = by_name.get(FDS)
    if (fds is None or fds["verdict"] != "fail"
            or not fds["detail"].startswith("6; a job of 2 ranks needs ")):
        problems.append(f"{case}: the descriptor check should fail naming 6 and the need: {fds}")
    elif "ulimit -n" not in fds["fix"]:
        problems.append(f"{case}: the descriptor check's fix should say ulimit -n: {fds['fix']!r}")
    for name in ["shm all_reduce, 2 processes",
                 "DDP step on 2 processes equals one process on the whole batch"]:
        c = by_name.get(name)
        if (c is None or c["verdict"] != "skip"
                or "see the file descriptor check" not in c["detail"]):
            problems.append(f"{case}: '{name}' should be skipped, naming the descriptor limit: {c}")
    if "the doctor itself" in by_name:
        problems.append(f"{case}: the doctor itself failed: {by_name['the doctor itself']}")
    misleading(case, report)
    if rc != 1:
        problems.append(f"{case}: exit status {rc}, expected 1")

# The number the doctor names is enough: at exactly that limit the multi-process
# self-tests run and pass (the count, not the clock, decides).
case = "ulimit -n at the number the doctor names"
rc, text, report = run({})
fds = {c["name"]: c for c in report["checks"]}.get(FDS)
need = re.search(r"a job of 2 ranks needs (\d+)", fds["detail"] if fds else "")
if need is None:
    problems.append(f"{case}: the file descriptor check names no number: {fds}")
else:
    need = int(need.group(1))
    rc, text, report = run({}, preexec=lambda: resource.setrlimit(resource.RLIMIT_NOFILE,
                                                                   (need, hard)))
    print(f"--- ulimit -n {need} (what the doctor says 2 ranks need)\n{text}")
    by_name = {c["name"]: c for c in report["checks"]} if report else {}
    for name in [FDS, "shm all_reduce, 2 processes",
                 "DDP step on 2 processes equals one process on the whole batch"]:
        if by_name.get(name, {}).get("verdict") != "ok":
            problems.append(f"{case} ({need}): '{name}' should pass, got {by_name.get(name)}")

# No /dev/shm: a private mount namespace whose /dev is a fresh tmpfs holding only the
# devices a program opens. Needs root (or a user namespace) and unshare; skipped without.
case = "no /dev/shm"
unshare = shutil.which("unshare")
probe = subprocess.run([unshare, "-m", "true"], capture_output=True) if unshare else None
if probe is None or probe.returncode != 0:
    print(f"--- {case}: skipped (cannot make a mount namespace here)")
else:
    with tempfile.TemporaryDirectory() as old_dev:
        script = (
            "set -e; mount --make-rprivate /; mount --bind /dev \"$OLD\"; "
            "mount -t tmpfs -o size=1m tmpfs /dev; "
            "for d in null zero full random urandom; do touch /dev/$d; "
            "mount --bind \"$OLD/$d\" /dev/$d; done; "
            "ln -s /proc/self/fd /dev/fd; test ! -e /dev/shm; exec \"$@\"")
        wrap = [unshare, "-m", "sh", "-c", script, "sh"]
        rc, text, report = run({"OLD": old_dev}, wrap=wrap)
    print(f"--- {case}\n{text}")
    if report is None:
        problems.append(f"{case}: no JSON report (exit status {rc})")
    else:
        fails = failures(report)
        if fails or rc != 0:
            problems.append(f"{case}: the shm transport needs no /dev/shm, yet exit status {rc} "
                            f"and failed: {[(c['name'], c['detail']) for c in fails]}")
        by_name = {c["name"]: c for c in report["checks"]}
        for name in ["one process opens another's memfd (/proc/<pid>/fd)",
                     "shm all_reduce, 2 processes"]:
            if by_name.get(name, {}).get("verdict") != "ok":
                problems.append(f"{case}: '{name}' should pass, got {by_name.get(name)}")

for msg in problems:
    print("FAIL:", msg)
print(f"{len(problems)} problem(s)")
sys.exit(1 if problems else 0)
