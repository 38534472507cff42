"""runner.py: runs each test case of a built test program and decides its verdict.

Each test case runs in a process of its own, in the sandbox, with a channel only the grader
opened: a pipe for records, and a random token made for that run, handed over through a
second pipe that is closed at once (common/channel.h). A test passes only when a record
with the token says it passed, the process then exited with status 0, and nothing without
the token came through the channel. stdout is what the student printed: capped, shown as
such, never read for a verdict.
Time: each test has test_timeout_s, a guard against hangs, not a verdict on speed. A test
whose work is sized in units of a reference it timed in the same run (hw3 times the
library's own ring first) may ask for more, at that pace ("time" records, up to
paced_timeout_s): on a busy machine the reference is slow too, so the test gets the time
its work needs there. Once one test has run out of time, no other starts until those
running have ended; the later ones get hang_timeout_s, and once two hung at the same place
the rest are not run (the student sees where): which tests ran out of time never depends
on how the machine scheduled them. The whole grade stays within budget_s. Speed tests run
last, alone, and only when every other test passed: a fast wrong answer earns nothing.
An assignment judged outside ("judge": "outside", hw1, hw3) runs each test as the judge (the
tests, holding the channel and token, linked without the student's code) and a worker (the
student's code; hw3: one per rank, assignment.json's "ranks") that the grader starts first,
each as a user id of its own, with only two pipes to the judge (common/wire.h), a rank's two
to the broker in the judge (common/broker.h), and one for its crash reports, read here as
words for the student, never as a verdict. What any of them prints is shown as the program's.
Read next: feedback.py (how a result becomes words), sandbox.py.
"""
import fcntl
import json
import os
import re
import secrets
import selectors
import shutil
import subprocess
import time

import feedback
from manifest import points_of

TEST_CASE = re.compile(r'\bTEST_CASE\s*\(\s*"((?:[^"\\]|\\.)*)"')
# How long a test that ran out of time may take to say where its threads are (each answers
# SIGUSR1 with its stack): a guard, the wait ends as soon as every thread has answered.
SAMPLE_GUARD_S = 10.0


def test_names(paths):
    """The test cases of our own test files, in order (read from the source: the program is
    never asked, as it holds the student's code)."""
    names = []
    for p in paths:
        with open(p) as f:
            names += [bytes(n, "utf-8").decode("unicode_escape") for n in TEST_CASE.findall(f.read())]
    lowered = [n.lower() for n in names]
    for n in names:
        if any(c in n for c in ",*?[]\\") or lowered.count(n.lower()) > 1:
            raise SystemExit(f"dplab-course: error: test name '{n}' is not unique or has one of , * ? [ ] \\ "
                             f"(doctest's filters would not select it alone)")
    return names


def worker_reports(data):
    """A worker's crash and stack reports, from its pipe's bytes: words for the student,
    never a verdict (the worker runs the student's code; every other kind is dropped)."""
    out = []
    for line in data.split(b"\n")[:-1]:  # complete lines only
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("kind") in ("crash", "stack"):
            out.append(rec)
    return out


class Run:
    """One test case in flight."""

    def __init__(self, name, uid):
        self.name, self.uid = name, uid
        self.token = secrets.token_hex(16)
        self.records, self.forged = [], 0
        self.channel, self.stdout = b"", b""
        self.dropped = 0
        self.timed_out = False
        self.sampled_at = None
        self.proc = None
        self.parsed = 0          # how much of the channel was looked at for "time" records
        self.workers = []        # a judge outside: the worker's processes (one, or one per rank)
        self.worker_exits = []   # (index, return code or None) of each as the test ended
        self.worker_records = []  # their crash and stack reports: words, never a verdict
        self.limit_words = ""    # why the limit is not test_timeout_s, for the feedback


class Worker:
    """One process of the student's code beside a judge: its user, its crash reports' pipe."""

    def __init__(self, proc, uid, ch):
        self.proc, self.uid, self.ch = proc, uid, ch
        self.out = proc.stdout.fileno()
        self.channel = b""


def _nonblocking(fd):
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)


class Runner:
    def __init__(self, exe, assignment, sandbox, run_root, symbolizer, deadline, worker=None):
        self.exe, self.a, self.sandbox = exe, assignment, sandbox
        self.worker_exe, self.worker_symbolizer = worker or (None, None)
        self.run_root, self.symbolizer, self.deadline = run_root, symbolizer, deadline
        self.limits = assignment.limits
        self.timeout = self.limits["test_timeout_s"]
        self.hangs = {}  # where a test hung -> how many did
        self.sel = selectors.DefaultSelector()
        self.judges = {}  # a judge outside, as root: a copy of the judge per user, only it may run
        if self.worker_exe and sandbox.root:
            for uid in sandbox.uids[:self.limits["parallel"]]:
                self.judges[uid] = f"{exe}-{uid}"
                shutil.copyfile(exe, self.judges[uid])
                os.chown(self.judges[uid], 0, uid)
                os.chmod(self.judges[uid], 0o710)  # a worker may not run the judge (its tests' names)

    # ---- starting and finishing one run ----
    def start(self, run, timeout):
        run.dir = os.path.join(self.run_root, f"run-{run.uid}")
        shutil.rmtree(run.dir, ignore_errors=True)  # each test starts in an empty folder
        os.makedirs(run.dir)
        self.sandbox.give(run.dir, run.uid)
        ch_r, ch_w = os.pipe()
        tok_r, tok_w = os.pipe()
        # CPU time: a backstop that never ends a test before its wall clock could (every core
        # busy for as long as a test may get, paced ones included): how many threads a test
        # keeps busy, and on how many cores, is the machine's business, not a verdict
        longest = max(timeout, self.limits["paced_timeout_s"])
        limits = dict(self.limits, cpu_s=int((os.cpu_count() or 1) * longest + 5))
        # the test's name in the environment, which only the test's own user may read, never
        # on the command line, which /proc shows every process (hw1's worker beside its judge,
        # other grades' tests where /proc cannot be made private)
        env = self.sandbox.env(run.dir, {"DPLAB_COURSE_CHANNEL_FD": str(ch_w), "DPLAB_COURSE_TOKEN_FD": str(tok_r),
                                         "DPLAB_COURSE_TEST_CASE": run.name})
        judge_fds, argv = (), [self.exe]
        if self.worker_exe:
            judge_fds, judge_env = self.start_workers(run, limits)
            env.update(judge_env)
            argv = [self.judges.get(run.uid, self.exe)]
        run.proc = subprocess.Popen(argv, cwd=run.dir, env=env,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    pass_fds=(ch_w, tok_r) + judge_fds, start_new_session=True,
                                    preexec_fn=self.sandbox.preexec(run.uid, limits))
        self.sandbox.tracked.add(run.proc.pid)
        for fd in judge_fds:
            os.close(fd)
        os.close(ch_w)
        os.close(tok_r)
        os.write(tok_w, (run.token + "\n").encode())
        os.close(tok_w)
        run.ch = ch_r
        run.out = run.proc.stdout.fileno()
        for fd in (run.ch, run.out):
            _nonblocking(fd)
            self.sel.register(fd, selectors.EVENT_READ, run)
        run.started = time.monotonic()
        run.ends = min(run.started + timeout, self.deadline)
        run.limit = max(run.ends - run.started, 0)
        run.cpu_s = limits["cpu_s"]
        if run.ends < run.started + timeout:
            run.limit_words = " (where the grade's time budget ended)"
        elif timeout < self.limits["test_timeout_s"]:
            run.limit_words = " (the shorter limit after an earlier test ran out of time)"

    def start_workers(self, run, limits):
        """A judge outside: starts the test's worker (hw1), or one per rank (assignment.json's
        ranks: hw3), each as a user of its own paired with the judge's (the judge's own without
        root), with the pipes of its calls and of its crash reports, and a rank's two to the
        broker in the judge. Returns the judge's ends of the pipes and the variables naming them."""
        uids, count = self.sandbox.uids, max(self.a.ranks, 1)
        slot = uids.index(run.uid) if self.sandbox.root else 0
        ends, groups = [], []
        for i in range(count):
            uid = uids[self.limits["parallel"] + slot * count + i] if self.sandbox.root else run.uid
            folder = os.path.join(self.run_root, f"worker-{run.uid}-{i}")
            shutil.rmtree(folder, ignore_errors=True)
            os.makedirs(folder)
            self.sandbox.give(folder, uid)
            to_r, to_w = os.pipe()        # the judge's calls
            from_r, from_w = os.pipe()    # the worker's replies
            rep_r, rep_w = os.pipe()      # its crash reports (crash.cpp), with a token of its own
            tok_r, tok_w = os.pipe()
            mine = [to_r, from_w, rep_w, tok_r]
            extra = {}
            group = [to_w, from_r]
            if self.a.ranks:
                up_r, up_w = os.pipe()      # the rank's frames to the broker
                down_r, down_w = os.pipe()  # the broker's frames to the rank
                mine += [up_w, down_r]
                extra = {"DPLAB_COURSE_TO_BROKER_FD": str(up_w), "DPLAB_COURSE_FROM_BROKER_FD": str(down_r)}
                group += [up_r, down_w]
            env = self.sandbox.env(folder, {"DPLAB_COURSE_WORKER_IN_FD": str(to_r),
                                            "DPLAB_COURSE_WORKER_OUT_FD": str(from_w),
                                            "DPLAB_COURSE_CHANNEL_FD": str(rep_w), "DPLAB_COURSE_TOKEN_FD": str(tok_r),
                                            **extra})
            # ranks apart: no network, no System V or POSIX IPC shared with another rank
            proc = subprocess.Popen([self.worker_exe], cwd=folder, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    pass_fds=tuple(mine), start_new_session=True,
                                    preexec_fn=self.sandbox.preexec(uid, limits, apart=bool(self.a.ranks)))
            self.sandbox.tracked.add(proc.pid)
            for fd in mine:
                os.close(fd)
            os.write(tok_w, (secrets.token_hex(16) + "\n").encode())
            os.close(tok_w)
            w = Worker(proc, uid, rep_r)
            run.workers.append(w)
            for fd in (w.ch, w.out):
                _nonblocking(fd)
                self.sel.register(fd, selectors.EVENT_READ, run)
            ends += group
            groups.append(group)
        if self.a.ranks:
            return tuple(ends), {"DPLAB_COURSE_RANK_FDS": ";".join(",".join(map(str, g)) for g in groups)}
        return tuple(ends), {"DPLAB_COURSE_JUDGE_TO_WORKER_FD": str(ends[0]),
                             "DPLAB_COURSE_JUDGE_FROM_WORKER_FD": str(ends[1])}

    def read(self, run, fd):
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        if not data:
            self.sel.unregister(fd)
            return
        worker = next((w for w in run.workers if fd == w.ch), None)
        if worker:
            if len(worker.channel) < (1 << 20):
                worker.channel += data
        elif fd == run.ch:
            if len(run.channel) < (1 << 20):
                run.channel += data
                self.take_time_requests(run)
        else:
            room = self.limits["output_kib"] * 1024 - len(run.stdout)
            run.stdout += data[:max(room, 0)]
            run.dropped += max(len(data) - max(room, 0), 0)

    def take_time_requests(self, run):
        """The test's "time" records so far (with the run's token): each asks for `seconds`
        more from now, measured against a reference it ran under the same load."""
        end = run.channel.rfind(b"\n") + 1
        for line in run.channel[run.parsed:end].split(b"\n"):
            if b'"time"' not in line:
                continue
            try:
                rec = json.loads(line)
                seconds = float(rec["seconds"]) if rec.get("kind") == "time" else None
            except (ValueError, TypeError, KeyError):
                continue
            if isinstance(rec, dict) and rec.get("token") == run.token and seconds and seconds > 0:
                self.extend(run, seconds)
        run.parsed = end

    def extend(self, run, seconds):
        """Lets a running test go on until `seconds` from now: never shorter than it had,
        never past paced_timeout_s from its start, nor past the grade's budget."""
        if run.timed_out:
            return
        now = time.monotonic()
        ends = min(now + seconds, run.started + self.limits["paced_timeout_s"], self.deadline)
        if ends <= run.ends:
            return
        run.ends, run.limit = ends, ends - run.started
        run.limit_words = (" (the time it asked for at the pace of the reference it measured)"
                           if ends < self.deadline else " (where the grade's time budget ended)")

    def finish(self, run):
        self.sandbox.end_run(run.proc, run.uid)  # nothing of the test lives on
        fds = (run.ch, run.out)
        run.worker_exits = [(i, w.proc.poll()) for i, w in enumerate(run.workers)]  # before they are ended
        for w in run.workers:
            self.sandbox.end_run(w.proc, w.uid)
            fds += (w.ch, w.out)

        def taken():
            return len(run.channel) + len(run.stdout) + run.dropped + sum(len(w.channel) for w in run.workers)
        for fd in fds:  # what was written before the end
            while fd in self.sel.get_map():
                before = taken()
                self.read(run, fd)
                if fd in self.sel.get_map() and taken() == before:
                    self.sel.unregister(fd)
        os.close(run.ch)
        run.proc.stdout.close()
        for w in run.workers:
            os.close(w.ch)
            w.proc.stdout.close()
            run.worker_records += worker_reports(w.channel)
        run.seconds = time.monotonic() - run.started
        for line in run.channel.split(b"\n")[:-1]:  # complete lines only
            try:
                rec = json.loads(line)
            except ValueError:
                run.forged += 1
                continue
            if not isinstance(rec, dict) or rec.get("token") != run.token:
                run.forged += 1
            else:
                run.records.append(rec)
        return feedback.result_of(run, self.a, self.symbolizer, self.worker_symbolizer)

    # ---- the schedule ----
    def run_all(self, names, on_result):
        speed = [n for n in names if n in self.a.speed_tests]
        rest = [n for n in names if n not in speed]
        results = self.run_batch(rest, self.limits["parallel"], on_result)
        failed = [r for r in results if not r["passed"]]
        for n in speed:
            if failed:
                r = feedback.not_run(n, f"not run: speed points need every correctness test to pass first "
                                        f"({len(failed)} did not)")
                on_result(r)
                results.append(r)
            else:
                results += self.run_batch([n], 1, on_result)
        return results

    def run_batch(self, names, parallel, on_result):
        waiting, running, results = list(names), [], []
        free = list(self.sandbox.uids[:parallel]) if self.sandbox.root else list(range(parallel))
        settling = False  # a test ran out of time: the others running then end before any starts
        while waiting or running:
            settling = settling and bool(running)
            while waiting and free and not settling:
                name = waiting.pop(0)
                skip = self.skip_reason()
                if skip:
                    r = feedback.not_run(name, skip)
                    on_result(r)
                    results.append(r)
                    continue
                run = Run(name, free.pop(0))
                self.start(run, self.timeout)
                running.append(run)
            if not running:
                continue
            for key, _ in self.sel.select(timeout=0.02):
                self.read(key.data, key.fd)
            now = time.monotonic()
            for run in list(running):
                if run.proc.poll() is None and now < run.ends:
                    continue
                if run.proc.poll() is None:  # out of time: where is it? then it goes
                    if run.sampled_at is None:
                        run.timed_out = True
                        run.sampled_at = now
                        self.sandbox.sample_stacks(run.proc.pid)
                        for w in run.workers:
                            self.sandbox.sample_stacks(w.proc.pid)
                        continue
                    if now < run.sampled_at + SAMPLE_GUARD_S and not self.samples_complete(run):
                        continue
                running.remove(run)
                free.append(run.uid)
                r = self.finish(run)
                if run.timed_out:
                    self.timeout = self.limits["hang_timeout_s"]
                    self.hangs[r["hung_at"]] = self.hangs.get(r["hung_at"], 0) + 1
                    settling = True
                on_result(r)
                results.append(r)
        return results

    def samples_complete(self, run):
        try:
            threads = len(os.listdir(f"/proc/{run.proc.pid}/task"))
        except OSError:
            return True
        for w in run.workers:  # a worker answers on its own pipe
            try:
                if w.channel.count(b'"kind": "stack"') < len(os.listdir(f"/proc/{w.proc.pid}/task")):
                    return False
            except OSError:
                pass
        return run.channel.count(b'"kind": "stack"') >= threads

    def skip_reason(self):
        if time.monotonic() >= self.deadline:
            return (f"not run: the grade's time budget ({self.limits['budget_s']} s) was spent "
                    f"(tests that run out of time use it up)")
        for where, count in self.hangs.items():
            if count >= 2:
                return f"not run: two tests already ran out of time {where}; fix that first"
        return ""


def score_of(results):
    got = sum(r["score"] for r in results)
    most = sum(r["max_score"] for r in results)
    return got, most


__all__ = ["Runner", "test_names", "score_of", "points_of"]
