#!/usr/bin/env python3
"""check_doctor_json.py DOCTOR: CI's check of dplab-doctor (meson test 'doctor').

Runs the doctor with --json on this machine and asserts what a course's staff rely on when
they collect the files: every fact and section is there, the CPU self-tests ran and passed,
the GPU part says why it is skipped where there is no GPU, and the exit status follows the
verdicts. Then runs it once more with an unwritable TMPDIR, where the checkpoint self-test
must fail with its cause and fix, and the exit status must say so.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

doctor = sys.argv[1]
problems = []
# A run that takes this long is hung: a guard, not a speed limit (the self-tests start
# processes, which a loaded machine makes slow). Two runs together stay under meson's 200 s.
HANG_GUARD_S = 80


def run(env_extra):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "doctor.json")
        env = {**os.environ, **env_extra}
        try:
            p = subprocess.run([doctor, "--json", out], env=env, capture_output=True, text=True,
                               timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired as e:
            partial = e.stdout or b""  # bytes, whatever text= says
            print(partial.decode(errors="replace") if isinstance(partial, bytes) else partial)
            print(f"FAIL: dplab-doctor did not end within {HANG_GUARD_S} s (hung) with {env_extra}")
            sys.exit(1)
        with open(out) as f:
            return p, json.load(f)


p, report = run({})
print(p.stdout)
facts, checks = report["facts"], report["checks"]
for key in ["dplab", "compiler", "built with", "cpu", "kernels", "DPLAB_* settings", "cores usable",
            "memory", "network"]:
    if key not in facts or not facts[key]:
        problems.append(f"fact '{key}' missing")
if not re.fullmatch(r"cuda (yes|no), mpi (yes|no), nccl (yes|no), gloo (yes|no)", facts.get("built with", "")):
    problems.append(f"fact 'built with' does not name every engine: {facts.get('built with')!r}")
by_name = {c["name"]: c for c in checks}
for name in ["CPU fast kernels against the reference", "checkpoint written and read back",
             "shm all_reduce, 2 processes", "DDP step on 2 processes equals one process on the whole batch",
             "one process opens another's memfd (/proc/<pid>/fd)"]:
    c = by_name.get(name)
    if c is None:
        problems.append(f"check '{name}' missing")
    elif c["verdict"] != "ok":
        problems.append(f"check '{name}': {c['verdict']}: {c['detail']}")
# (a warning where a job of one rank per core would need more descriptors than allowed)
if "file descriptors a process may open (ulimit -n)" not in by_name:
    problems.append("check 'file descriptors a process may open (ulimit -n)' missing")
# the shm transport's block is a memfd: nothing of dplab's looks at /dev/shm
for c in checks:
    if "/dev/shm" in c["name"]:
        problems.append(f"check '{c['name']}': the shm transport does not use /dev/shm")
if not any(c["section"] == "gpu" or c["name"] == "GPU self-tests" for c in checks):
    problems.append("no GPU section: a machine without a GPU must say why it skipped")
for c in checks:
    if c["verdict"] not in ("ok", "warn", "fail", "skip"):
        problems.append(f"check '{c['name']}': verdict {c['verdict']}")
    if c["verdict"] in ("warn", "fail") and not c["fix"]:
        problems.append(f"check '{c['name']}' is {c['verdict']} without a fix")
summary = report["summary"]
if summary["fail"] != sum(c["verdict"] == "fail" for c in checks):
    problems.append(f"summary {summary} does not count the checks")
if (p.returncode == 0) != (summary["fail"] == 0):
    problems.append(f"exit status {p.returncode} with {summary['fail']} failures")

p, report = run({"TMPDIR": "/proc/self"})
ckpt = {c["name"]: c for c in report["checks"]}.get("checkpoint written and read back")
if ckpt is None or ckpt["verdict"] != "fail" or "TMPDIR" not in ckpt["fix"]:
    problems.append(f"with TMPDIR=/proc/self the checkpoint check should fail naming TMPDIR, got {ckpt}")
if p.returncode != 1:
    problems.append(f"with a failed check the exit status should be 1, got {p.returncode}")

for msg in problems:
    print("FAIL:", msg)
print(f"{len(problems)} problem(s)")
sys.exit(1 if problems else 0)
