"""package.py: `dplab-course package HW OUT.zip`, a Gradescope autograder for one assignment.

The zip holds, at its top, the two files Gradescope runs (setup.sh once when it builds the
image, run_autograder for each submission), then:
  dplab/   the library's sources, to build there (tests, tutorials and benchmarks left out:
           their meson.build files are empty stubs, so only the libraries build);
  course/  the grader, the common test main and the assignment: handout, headers, given
           code, visible and hidden tests; never the reference solution or ci_checks.json.
run_autograder reads /autograder/submission and writes /autograder/results/results.json;
AUTOGRADER_ROOT moves the whole layout (the grader's own test runs it in a temporary
folder), DPLAB_COURSE_PKG_CONFIG_PATH points at another build of dplab.
Read next: STAFF.md ("Gradescope").
"""
import os
import re
import stat
import zipfile

import manifest

LIBRARY = ["framework", "parallel", "models", "datasets", "scripts"]
LIBRARY_FILES = ["meson.build", "meson_options.txt"]
SKIP_DIRS = {"__pycache__", "build", ".git"}

# What setup.sh installs with apt: the compiler and build tools, the grader's (nm, objdump,
# addr2line: binutils; setpriv, unshare: util-linux), and every library dplab's build finds
# with dependency() when configured with MESON_OPTIONS (libcrypto is libssl-dev's). Every
# package of scripts/setup.sh is here or in NOT_NEEDED, and every dependency this build
# found is here or switched off (course_gradescope checks both).
APT_PACKAGES = ["g++", "python3", "pkg-config", "ninja-build", "meson", "libeigen3-dev", "libfmt-dev", "doctest-dev",
                "zlib1g-dev", "libcli11-dev", "libssl-dev", "libbackward-cpp-dev", "binutils", "util-linux"]
MESON_OPTIONS = ["-Dcuda=disabled", "-Dmpi=disabled", "-Dnccl=disabled"]
NOT_NEEDED = {  # scripts/setup.sh's packages that grading does without, and why
    "libopenmpi-dev": "MPI is off (-Dmpi=disabled)",
    "openmpi-bin": "MPI is off (-Dmpi=disabled)",
    "libgloo-dev": "gloo is optional (-Dgloo=auto): the libraries build without it",
    "dataset-fashion-mnist": "the tutorials' and benchmarks' data set",
    "jargon-text": "the GPT's text corpus; its tests write their own text",
    "python3-matplotlib": "the benchmarks' plots",
    "iproute2": "the multi-node tests' network namespaces",
    "procps": "the multi-node tests (pgrep)",
}

SETUP = """#!/usr/bin/env bash
# setup.sh: Gradescope runs this once, as root, when it builds the autograder's image
# (choose its Ubuntu 24.04 base image). It installs what dplab needs, builds dplab's
# libraries (no CUDA, no MPI) and compiles the course's tests into the grader's cache.
set -euxo pipefail
cd "$(dirname "$0")"
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
  @PACKAGES@
meson setup dplab/build dplab @MESON_OPTIONS@
ninja -C dplab/build
DPLAB_COURSE_DIR="$PWD/course" DPLAB_COURSE_PKG_CONFIG_PATH="$PWD/dplab/build/meson-uninstalled" \\
  python3 course/dplab_course.py warm @HW@ --cache "$PWD/cache"
chmod -R go-rwx .  # the submission's user may not read the hidden tests (nor anything here)
"""

RUN = """#!/usr/bin/env bash
# run_autograder: Gradescope runs this as root for each submission: it grades the files in
# $ROOT/submission (ROOT=/autograder unless AUTOGRADER_ROOT says otherwise) and writes
# $ROOT/results/results.json. The submission runs as an unprivileged user that can reach
# nothing of $ROOT/source or $ROOT/results (dplab-course's sandbox; STAFF.md). Arguments go
# on to `dplab-course grade` (Gradescope gives none).
set -uo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
SRC="$ROOT/source"
mkdir -p "$ROOT/results"
rm -f "$ROOT/results/results.json"
chmod 700 "$SRC" "$ROOT/results"
export DPLAB_COURSE_DIR="$SRC/course"
export DPLAB_COURSE_PKG_CONFIG_PATH="${DPLAB_COURSE_PKG_CONFIG_PATH:-$SRC/dplab/build/meson-uninstalled}"
export DPLAB_COURSE_HIDE="$SRC:$ROOT/results${DPLAB_COURSE_HIDE:+:$DPLAB_COURSE_HIDE}"
python3 "$SRC/course/dplab_course.py" grade @HW@ "$ROOT/submission" \\
  --json "$ROOT/results/results.json" --cache "$SRC/cache" "$@"
status=$?
if [ "$status" -ge 2 ] || [ ! -s "$ROOT/results/results.json" ]; then
  # the grader itself failed: say so rather than leave Gradescope with nothing
  printf '{"score": 0, "output": "The autograder failed (status %s): please tell the course staff."}\\n' \\
    "$status" > "$ROOT/results/results.json"
fi
exit 0
"""


class PackageError(Exception):
    pass


def _add(z, path, arcname, mode=None):
    info = zipfile.ZipInfo.from_file(path, arcname)
    if mode is not None:
        info.external_attr = (stat.S_IFREG | mode) << 16
    with open(path, "rb") as f:
        z.writestr(info, f.read(), compress_type=zipfile.ZIP_DEFLATED)


def _add_text(z, text, arcname, mode=0o644):
    info = zipfile.ZipInfo(arcname, date_time=(2024, 1, 1, 0, 0, 0))
    info.external_attr = (stat.S_IFREG | mode) << 16
    z.writestr(info, text, compress_type=zipfile.ZIP_DEFLATED)


def _add_tree(z, folder, arcdir, skip=()):
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for f in sorted(files):
            path = os.path.join(root, f)
            if os.path.islink(path) or os.path.realpath(path) in skip:
                continue
            _add(z, path, os.path.join(arcdir, os.path.relpath(path, folder)))


def write(a, out):
    source_root = os.path.dirname(a.course_dir)
    top = os.path.join(source_root, "meson.build")
    if not os.path.isfile(top) or not a.hidden_tests_present():
        raise PackageError("package needs the course's source folder (a dplab checkout with the hidden tests); "
                           f"{a.course_dir} is not one")
    with open(top) as f:
        subdirs = re.findall(r"^\s*subdir\('([^']+)'\)", f.read(), re.M)
    staff = {os.path.realpath(a.path(f)) for f in a.student_files + ["ci_checks.json"]}
    with zipfile.ZipFile(out, "w") as z:
        setup = SETUP.replace("@HW@", a.name).replace("@PACKAGES@", " ".join(APT_PACKAGES)) \
            .replace("@MESON_OPTIONS@", " ".join(MESON_OPTIONS))
        _add_text(z, setup, "setup.sh", 0o755)
        _add_text(z, RUN.replace("@HW@", a.name), "run_autograder", 0o755)
        for name in LIBRARY_FILES:
            _add(z, os.path.join(source_root, name), f"dplab/{name}")
        for d in LIBRARY:
            if os.path.isdir(os.path.join(source_root, d)):
                _add_tree(z, os.path.join(source_root, d), f"dplab/{d}")
        for d in subdirs:  # the rest of the build: empty, so that only the libraries build
            if d not in LIBRARY:
                _add_text(z, "# left out of the Gradescope package: only dplab's libraries build here\n",
                          f"dplab/{d}/meson.build")
        _add(z, os.path.join(a.course_dir, "dplab_course.py"), "course/dplab_course.py", 0o755)
        for d in ("grader", "common"):
            _add_tree(z, os.path.join(a.course_dir, d), f"course/{d}")
        _add_tree(z, a.dir, f"course/{a.name}", skip=staff)
    print(f"{out}: a Gradescope autograder for {a.name} (setup.sh, run_autograder, dplab's sources, the "
          f"grader and the tests; no reference solution)")
