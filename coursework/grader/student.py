"""student.py: `dplab-course start HW DIR`, everything a student needs to work on their own.

DIR gets the handout (README.md), the starter (the files they write), the assignment's own
headers and given code, the visible tests with the test main under tests/, and a
meson.build that builds them against dplab (pkg-config), one `meson test` per visible
test case. So `meson setup build && meson test -C build` works in DIR, gdb can run
build/visible_tests, and an editor's language server finds build/compile_commands.json.
`dplab-course test HW DIR` is the same tests the way the grader runs them.
Read next: ../dplab_course.py.
"""
import os
import re
import shutil

import manifest
from runner import test_names


class StartError(Exception):
    pass


def meson_quoted(text):
    """text inside a Meson '...' string."""
    return text.replace("\\", "\\\\").replace("'", "\\'")


def meson_build(a, cases, pkg_config_path):
    """The folder's meson.build. Where dplab.pc is outside pkg-config's own path (dplab's
    build folder, an install under another prefix), its folder is the project's default
    pkg_config_path, so that the handout's plain `meson setup build` finds dplab."""
    sources = a.student_files + a.given_files + [f"tests/{f}" for f in a.visible_tests] + \
        [f"tests/{f}" for f in manifest.COMMON_SOURCES]
    lines = [
        f"# {a.name}: your files with the visible tests, made by `dplab-course start`.",
        "#   meson setup build",
        "#   meson test -C build                 every visible test (one per test case)",
        "#   gdb --args build/visible_tests -tc=\"NAME\"",
        f"# The grader builds the same files: `dplab-course test {a.short} .` runs them its way.",
        f"project('{a.name}', 'cpp', default_options: ['cpp_std=c++20', 'buildtype=debug',",
        "                                            'warning_level=2'" +
        (f",\n                                            'pkg_config_path={meson_quoted(pkg_config_path)}'])"
         if pkg_config_path else "])"),
        "dplab = dependency('dplab')",
        "visible_tests = executable('visible_tests',",
        "  " + ", ".join(repr(s) for s in sources) + ",",
        "  include_directories: include_directories('.', 'tests'), dependencies: dplab)",
    ]
    for i, name in enumerate(cases):
        label = re.sub(r"\s*\(\d+ points?\)\s*$", "", name)
        label = re.sub(r"[^A-Za-z0-9 _.,:=+-]", "", label)[:60].strip()
        lines.append(f"test({f'{i + 1:02d} {label}'!r}, visible_tests, args: [{('--test-case=' + name)!r}])")
    return "\n".join(lines) + "\n"


def start(a, starter_dir, target, pkg_config_path=""):
    common = os.path.join(a.course_dir, "common")
    starters = [os.path.join(starter_dir, a.name, f) for f in a.student_files]
    for s in starters:
        if not os.path.isfile(s):
            raise StartError(f"the starter {s} is missing: build dplab first (ninja -C build)")
    os.makedirs(os.path.join(target, "tests"), exist_ok=True)
    for src, name in zip(starters, a.student_files):
        dst = os.path.join(target, name)
        if os.path.exists(dst):
            print(f"kept your {name} (it exists already)")
        else:
            shutil.copyfile(src, dst)
    # the course's side: the handout, the headers and given code next to your files,
    # the tests and whatever they include under tests/
    given = [a.path("README.md")] + [a.path(h) for h in a.student_headers if os.path.isfile(a.path(h))] + \
        [a.path(f) for f in a.given_files]
    hw_dir = os.path.realpath(a.dir)
    code = manifest.course_includes([p for p in given if p.endswith((".h", ".cpp"))], [a.dir, common])
    for path in code + [os.path.realpath(given[0])]:
        if os.path.dirname(path) == hw_dir and os.path.basename(path) not in a.student_files:
            shutil.copyfile(path, os.path.join(target, os.path.basename(path)))
    tests = [a.path(f) for f in a.visible_tests] + [a.common(f) for f in manifest.COMMON_SOURCES]
    for path in manifest.course_includes(tests, [a.dir, common]):
        name = os.path.basename(path)
        if not os.path.exists(os.path.join(target, name)):  # your headers stay next to your files
            shutil.copyfile(path, os.path.join(target, "tests", name))
    cases = test_names([a.path(f) for f in a.visible_tests])
    with open(os.path.join(target, "meson.build"), "w") as f:
        f.write(meson_build(a, cases, pkg_config_path))
    print(f"{a.short}: {', '.join(a.student_files)}, the handout (README.md), the headers, the visible tests "
          f"(tests/) and a meson.build are in {target}")
    print(f"next: read README.md, write your code, then `dplab-course test {a.short} {target}`")
    print(f"to build and debug there yourself: cd {target} && meson setup build && meson test -C build")
