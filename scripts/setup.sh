#!/usr/bin/env bash
# setup.sh: the README's two commands. On a fresh Debian 12 machine (root, apt available):
#   bash scripts/setup.sh main   installs what is missing, builds dplab-compare, runs the main job
#   bash scripts/setup.sh test   installs what is missing, builds everything, runs every test
# The build goes to ./build (Meson + Ninja). `main` builds only the main job's program and the
# libraries it links (Ninja target benchmarks/compare/dplab-compare), so the job starts within
# minutes; `test` builds the rest (tests, tutorials, benchmarks, coursework). CUDA is compiled
# when nvcc is found. .ci/run calls `bash scripts/setup.sh test`, exactly as the README says.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-}"
case "$what" in main|test) ;; *) echo "usage: bash scripts/setup.sh main|test" >&2; exit 2 ;; esac

packages=(meson ninja-build pkg-config g++ libeigen3-dev libfmt-dev doctest-dev zlib1g-dev
          libcli11-dev libssl-dev libbackward-cpp-dev libopenmpi-dev openmpi-bin libgloo-dev
          dataset-fashion-mnist
          jargon-text  # the Jargon File, the GPT's byte-level text corpus: datasets/text_corpus.h
          python3-matplotlib
          iproute2 procps)  # ip, tc, pgrep: the multi-node tests' network namespaces
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# nvcc lives in /usr/local/cuda on machines with the CUDA toolkit; not on PATH by default.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

if [ ! -f build/build.ninja ]; then
  meson setup build
fi
# What the build compiles, in one line (meson.build writes it when it configures).
grep -h -o "dplab compiles: .*" build/meson-logs/meson-log.txt 2>/dev/null | tail -n 1 | sed 's/^/== /' || true
target=""
[ "$what" = main ] && target="benchmarks/compare/dplab-compare"
steps=$(ninja -C build -n $target | grep -c "^\[" || true)
echo "== building ${target:-everything}: $steps steps on $(nproc) cores"
build_start=$SECONDS
ninja -C build -j "$(nproc)" $target
echo "== built in $((SECONDS - build_start)) s"

if [ "$what" = test ]; then
  echo "== running the tests"
  status=0
  tests_start=$SECONDS
  meson test -C build --print-errorlogs --num-processes "$(nproc)" || status=$?
  echo "== tests ran in $((SECONDS - tests_start)) s"
  # One closing line for CI: "N passed, N failed, N skipped".
  python3 - build/meson-logs/testlog.json <<'PY'
# Counts doctest's test cases where a test printed them, else the Meson test itself.
import json, re, sys
counts = {"passed": 0, "failed": 0, "skipped": 0}
case_line = re.compile(r"test cases:\s*(\d+) \|\s*(\d+) passed \|\s*(\d+) failed \|\s*(\d+) skipped")
for line in open(sys.argv[1]):
    t = json.loads(line)
    m = case_line.search(t.get("stdout") or "")
    if t["result"] == "SKIP":
        # doctest's "test cases: N" leaves out its skipped cases, which it counts apart
        counts["skipped"] += int(m.group(1)) + int(m.group(4)) if m else 1
    elif m:
        counts["passed"] += int(m.group(2)); counts["failed"] += int(m.group(3)); counts["skipped"] += int(m.group(4))
        if t["result"] != "OK" and int(m.group(3)) == 0: counts["failed"] += 1  # crashed or timed out
    else:
        counts["passed" if t["result"] == "OK" else "failed"] += 1
print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
PY
  exit $status
fi

echo "== running the main job: PS vs ring on Fashion-MNIST (results/ holds the report and plots)"
exec ./build/benchmarks/compare/dplab-compare "${@:2}"
