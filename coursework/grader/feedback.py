"""feedback.py: a test run's verdict and the words the student reads.

The verdict comes from the channel's records only (runner.py). The words say what went
wrong in the assignment's terms: the failed checks' messages (written by the tests), or,
when the test never reached its verdict, why: a crash (the signal, the rank and step it
happened on, and the student's own frames of the stack, named by addr2line from the
program the grader kept), running out of time (where each thread was), exiting early.
What the program printed comes last, capped, and labelled as the program's.
Read next: results.py (results.json and the console).
"""
import os
import signal
import subprocess

from manifest import points_of

MAX_PRINTED_LINES, MAX_PRINTED_CHARS = 20, 2000
SIGNAL_WORDS = {
    "SIGSEGV": "a bad memory access",
    "SIGBUS": "a bad memory access",
    "SIGFPE": "an arithmetic error (an integer divided by zero?)",
    "SIGILL": "an illegal instruction",
    "SIGABRT": "abort(): an exception nobody caught, or a failed assertion",
}


class Symbolizer:
    """Addresses of the kept test program -> (function, file, line) with addr2line, and
    which of them are the student's (compiled from the sandbox's copy of their files)."""

    def __init__(self, exe, student_src_dir):
        self.exe, self.src = exe, os.path.realpath(student_src_dir)
        self.size = os.path.getsize(exe)

    def frames(self, record):
        try:
            base = int(record.get("base", "0"), 16)
            addrs = [int(a, 16) for a in record.get("frames", [])]
        except (TypeError, ValueError):
            return []
        offsets = [a - base for a in addrs if base <= a < base + self.size]
        if not offsets:
            return []
        r = subprocess.run(["addr2line", "-a", "-C", "-f", "-i", "-e", self.exe] + [hex(o) for o in offsets],
                           capture_output=True, text=True, timeout=30)
        out, lines = [], r.stdout.splitlines()
        i = 0
        while i < len(lines):
            if lines[i].startswith("0x"):
                i += 1
                continue
            function, where = lines[i], lines[i + 1] if i + 1 < len(lines) else "??:0"
            i += 2
            path, _, line = where.rpartition(":")
            line = line.split(" ")[0]
            mine = os.path.realpath(path).startswith(self.src + "/") if path and path != "??" else False
            out.append((function, os.path.basename(path), line, mine))
        return out

    def student_frames(self, record):
        return [f for f in self.frames(record) if f[3]]


def describe_frames(frames, most=6):
    return "\n".join(f"    {file}:{line}  in {function}" for function, file, line, _ in frames[:most])


def place_of(rec, verb=""):
    """"rank 2 of 4 crashed in ring step 3" (verb "crashed"), or "rank 2 of 4: ..."."""
    rank, size, step = rec.get("rank", -1), rec.get("size", 0), rec.get("step", -1)
    words = f"rank {rank} of {size}" if rank >= 0 else "the test's main thread"
    if verb:
        words += f" {verb}"
    if step >= 0 and rec.get("step_word"):
        words += f" in {rec['step_word']} {step}"
    return words


def address_words(addr):
    try:
        value = int(addr, 16) if addr and addr != "(nil)" else 0
    except ValueError:
        return f"at address {addr}"
    return "at address 0: a null pointer" if value < 4096 else f"at address {hex(value)}"


def crash_words(rec, symbolizer):
    sig = rec.get("signal", "?")
    text = f"{place_of(rec, 'crashed')}: {sig} ({SIGNAL_WORDS.get(sig, 'a fatal signal')}"
    if sig in ("SIGSEGV", "SIGBUS"):
        text += " " + address_words(rec.get("addr"))
    text += ")"
    mine = symbolizer.student_frames(rec) if symbolizer else []
    if mine:
        text += ". Your code on the stack, innermost first:\n" + describe_frames(mine)
    else:
        text += ", outside your files (in code your function called?)"
    return text


def hang_words(run, symbolizer, worker_symbolizer=None):
    """Where each thread was when the test ran out of time, and a key for 'the same place'
    (a judge outside: the worker's threads, which run the student's code, too)."""
    places, key = [], None
    reports = [(rec, symbolizer) for rec in run.records] + \
        [(rec, worker_symbolizer) for rec in getattr(run, "worker_records", [])]
    for rec, sym in reports:
        if rec.get("kind") != "stack":
            continue
        mine = sym.student_frames(rec) if sym else []
        if mine:
            function, file, line, _ = mine[0]
            where = f"at {file}:{line} ({function.split('(')[0]})"
            places.append(f"{place_of(rec)}: {where}")
            key = key or where
    if not places:
        return "", "outside your code (each rank waiting on another?)"
    return "Where the threads were:\n" + "\n".join(f"    {p}" for p in sorted(set(places))[:8]), key


def exit_words(run, limits):
    return status_words(run.proc.returncode, run.cpu_s, limits)


def status_words(rc, cpu_s, limits):
    if rc is None:
        return "it was stopped"
    if rc >= 0:
        return f"it exited with status {rc}"
    try:
        name = signal.Signals(-rc).name
    except ValueError:
        name = f"signal {-rc}"
    if name == "SIGXCPU":
        return f"it used more CPU time than its limit ({cpu_s} s)"
    if name == "SIGXFSZ":
        return f"it wrote a file larger than the limit ({limits['file_mib']} MiB)"
    if name == "SIGKILL":
        return f"it was killed (SIGKILL: over the memory limit of {limits['memory_mib']} MiB?)"
    return f"it was ended by {name}"


def printed_words(run):
    if not run.stdout and not run.dropped:
        return ""
    text = run.stdout.decode("utf-8", "replace")
    lines = text.splitlines()
    shown = "\n".join(lines[:MAX_PRINTED_LINES])[:MAX_PRINTED_CHARS]
    cut = len(lines) > MAX_PRINTED_LINES or len(text) > MAX_PRINTED_CHARS or run.dropped
    return ("Your program printed" + (" (the start of it)" if cut else "") + ":\n" +
            "\n".join("    | " + l for l in shown.splitlines()))


def result_of(run, assignment, symbolizer, worker_symbolizer=None):
    points = points_of(run.name)
    ends = [r for r in run.records if r.get("kind") == "end" and r.get("test") == run.name]
    crashes = [(r, symbolizer) for r in run.records if r.get("kind") == "crash"]
    notes = [str(r.get("text", "")) for r in run.records if r.get("kind") == "note"]
    verdict = ends[-1] if ends else None
    passed = bool(verdict and verdict.get("passed") is True and run.proc.returncode == 0 and not run.forged
                  and not run.timed_out and len(ends) == 1)
    if not passed:  # a judge outside: the worker's crash report, as words (it is the student's process)
        crashes += [(r, worker_symbolizer) for r in getattr(run, "worker_records", []) if r.get("kind") == "crash"]
    parts, hung_at = [], None
    if run.timed_out:
        where, hung_at = hang_words(run, symbolizer, worker_symbolizer)
        parts.append(f"ran out of time after {run.limit:.0f} s{getattr(run, 'limit_words', '')}: a loop that never "
                     f"ends, or ranks waiting on each other")
        if where:
            parts.append(where)
    elif crashes:
        parts.append(crash_words(*crashes[0]))
    elif not verdict:
        parts.append(f"the test ended before its checks ran: {exit_words(run, assignment.limits)}. "
                     f"A test passes only when its checks run and pass")
    elif verdict.get("passed") and run.proc.returncode != 0:
        parts.append(f"the checks passed, but then {exit_words(run, assignment.limits)}")
    if run.forged:
        parts.append("something other than the test harness wrote to the grader's channel (a report "
                     "without the grader's token): only the harness may report a result")
    if verdict and not verdict.get("passed"):
        messages = []
        for m in (str(m) for m in verdict.get("messages", [])):  # the same words once
            if m not in messages:
                messages.append(m)
        parts += messages
        if verdict.get("more"):
            parts.append(f"(and {verdict['more']} more failed checks)")
        if not messages and verdict.get("checks", 0) == 0:
            parts.append("the test ran no checks")
    if not passed:  # a worker that a limit ended says nothing itself: its exit does
        for index, rc in getattr(run, "worker_exits", []):
            if rc is not None and rc < 0:
                who = f" as rank {index}" if len(run.workers) > 1 else ""
                parts.append(f"the process running your code{who} ended: {status_words(rc, run.cpu_s, assignment.limits)}")
    parts += notes
    printed = printed_words(run)
    if printed:
        parts.append(printed)
    return {"name": run.name, "max_score": points, "score": points if passed else 0, "passed": passed,
            "output": "\n".join(p for p in parts if p).strip(), "seconds": run.seconds, "hung_at": hung_at,
            "status": "passed" if passed else "failed"}


def not_run(name, why):
    return {"name": name, "max_score": points_of(name), "score": 0, "passed": False, "output": why,
            "seconds": 0.0, "hung_at": None, "status": "failed"}
