"""report.py: how every coursework check ends: its problems, one "PROBLEM:" line each, then
one line that says "CHECK: ok" or "CHECK: N problem(s)" (with a note after it), and the exit
status meson test reads (0 or 1).
Read next: check_assignment.py (the checks that use it).
"""


def finish(check, problems, note=""):
    for p in problems:
        print("PROBLEM:", p)
    verdict = "ok" if not problems else f"{len(problems)} problem(s)"
    print(f"{check}: {verdict}" + (f" {note}" if note else ""))
    return 1 if problems else 0
