#!/usr/bin/env python3
"""check_install.py BUILD_DIR COURSE_DIR: `meson install` ships no answers, and what a
student's `dplab-course start` and `test` need.

From `meson introspect --installed` (no install is made): no reference solution, no hidden
test and no ci_checks.json of any assignment is installed; every file the visible tests,
the given code and the student's headers include from the course (followed through their
#include "..." lines, manifest.course_includes: the walk `start` makes) is; so are the
starters, the grader and the common test main.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402


def main():
    build_dir, course = sys.argv[1], os.path.realpath(sys.argv[2])
    sys.path.insert(0, os.path.join(course, "grader"))
    import manifest
    r = subprocess.run(["meson", "introspect", "--installed", build_dir], capture_output=True, text=True, check=True)
    sources = {os.path.realpath(src) for src in json.loads(r.stdout)}
    # a file is installed when it is listed, or a folder above it is (install_subdir)
    installed = {p for p in sources if not os.path.isdir(p)}
    for folder in (p for p in sources if os.path.isdir(p)):
        for root, dirs, files in os.walk(folder):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            installed |= {os.path.realpath(os.path.join(root, f)) for f in files}
    installed_names = {os.path.basename(dst) for dst in json.loads(r.stdout).values()}
    problems = []
    for a in manifest.list_assignments(course):
        staff = [a.path(f) for f in a.student_files + a.hidden_tests + ["ci_checks.json"]]
        for path in staff:
            if os.path.realpath(path) in installed:
                problems.append(f"{a.name}: {os.path.basename(path)} is installed (staff only)")
        common = os.path.join(course, "common")
        roots = [a.path(f) for f in a.visible_tests + a.given_files] + \
            [a.path(h) for h in a.student_headers if os.path.isfile(a.path(h))] + \
            [a.common(f) for f in manifest.COMMON_SOURCES]
        needed = set(manifest.course_includes(roots, [a.dir, common]))
        needed |= {os.path.realpath(a.path(f)) for f in ("README.md", "assignment.json")}
        for path in sorted(needed):
            if path.startswith(course + "/") and path not in installed:
                problems.append(f"{a.name}: {os.path.relpath(path, course)} is not installed; `dplab-course "
                                f"start` and `test` need it")
        for f in a.student_files:
            if f not in installed_names:
                problems.append(f"{a.name}: no starter {f} is installed")
    for rel in ("grader/grade.py", "grader/sandbox.py", "common/symbols.json", "STAFF.md"):
        if os.path.realpath(os.path.join(course, rel)) not in installed:
            problems.append(f"{rel} is not installed")
    return report.finish("install", problems, f"({len(installed)} files installed in all)")


if __name__ == "__main__":
    sys.exit(main())
