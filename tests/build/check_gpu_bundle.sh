#!/usr/bin/env bash
# check_gpu_bundle.sh SOURCE_DIR: the GPU machine has none of Debian's -dev packages, so a
# GPU run builds with gpu_bundle/ (scripts/gpu_bundle.sh). This test makes the bundle, then,
# in a mount namespace where the system's Eigen, fmt, CLI11, doctest, zlib and OpenSSL
# headers (and fmt's CMake files, zlib's static library) are hidden and pkg-config finds
# nothing, configures a build with -Ddeps_bundle=enabled (CUDA on where nvcc is), compiles,
# links and runs bundle_probe (Eigen, fmt, CLI11, doctest, zlib's static library), and runs
# the preprocessor over a file of each kind that uses a bundled header (the Eigen GEMM, fmt,
# the IDX reader's zlib, the job token's OpenSSL, a .cu kernel file, the cuBLAS backend) with
# the bundle build's own command: a header missing from the bundle stops the preprocessor as
# it would the compiler. (Their full compiles, -O3 and nvcc, were most of this test's time;
# the normal build compiles the same files.)
# A header missing from the bundle fails here, not on the GPU machine. Root only (mount
# namespaces): elsewhere it says so and exits 77 (SKIP).
set -euo pipefail
src="$1"
if [ "$(id -u)" -ne 0 ] || ! unshare -m true 2>/dev/null; then
  echo "check_gpu_bundle: needs root and mount namespaces (unshare -m): skipped"
  exit 77
fi
PATH="$PATH:/usr/local/cuda/bin"
work="$(mktemp -d)"
made_bundle=0
[ -d "$src/gpu_bundle" ] || made_bundle=1
cleanup() {
  rm -rf "$work"
  [ "$made_bundle" = 1 ] && rm -rf "$src/gpu_bundle"
  return 0
}
trap cleanup EXIT INT TERM
bash "$src/scripts/gpu_bundle.sh" "$src/gpu_bundle" >/dev/null
mkdir -p "$work/empty" && : >"$work/empty_file"

objects=(framework/libdplab_framework.a.p/backend_cpu_reference_cpu_gemm_eigen.cpp.o
         framework/libdplab_framework.a.p/error.cpp.o
         datasets/libdplab_datasets.a.p/idx_file.cpp.o
         parallel/libdplab_parallel.a.p/rendezvous_job_token.cpp.o)
cuda=disabled
if command -v nvcc >/dev/null; then
  cuda=enabled
  objects+=(framework/libdplab_framework.a.p/backend_cuda_cuda_half.cu.o
            framework/libdplab_framework.a.p/backend_cuda_cuda_backend.cpp.o)
fi
# shellcheck disable=SC2016
unshare -m bash -euo pipefail -c '
  work=$1 src=$2 cuda=$3; shift 3
  for d in /usr/include/eigen3 /usr/include/fmt /usr/include/CLI /usr/include/doctest \
           /usr/include/openssl /usr/include/x86_64-linux-gnu/openssl /usr/lib/x86_64-linux-gnu/cmake/fmt; do
    [ -d "$d" ] && mount -t tmpfs none "$d"
  done
  for f in /usr/include/zlib.h /usr/include/zconf.h /usr/lib/x86_64-linux-gnu/libz.a; do
    [ -f "$f" ] && mount --bind "$work/empty_file" "$f"
  done
  export PKG_CONFIG_LIBDIR="$work/empty"
  CCACHE_DISABLE=1 meson setup "$work/build" "$src" -Ddeps_bundle=enabled -Dmpi=disabled -Dgloo=disabled \
    -Dcuda=$cuda -Dgpu_archs=9.0 >"$work/setup.log" 2>&1 || { tail -20 "$work/setup.log"; exit 1; }
  CCACHE_DISABLE=1 ninja -C "$work/build" tests/build/bundle_probe
  "$work/build/tests/build/bundle_probe"
  # each object: its compile command from the bundle build, run as -E into /dev/null
  CCACHE_DISABLE=1 ninja -C "$work/build" -t compdb >"$work/compdb.json"
  python3 - "$work/build" "$work/compdb.json" "$@" <<"PY"
import json, shlex, subprocess, sys
build, db, wanted = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3:]
by_output = {e["output"]: e for e in db if "output" in e}
for obj in wanted:
    if obj not in by_output:
        sys.exit(f"check_gpu_bundle: no compile command for {obj} in the bundle build")
    argv = shlex.split(by_output[obj]["command"])
    argv[argv.index("-o") + 1] = "/dev/null"
    argv[argv.index("-c")] = "-E"
    r = subprocess.run(argv, cwd=build, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"check_gpu_bundle: {obj} does not preprocess with the bundle alone:\n{r.stderr[-3000:]}")
    print(f"check_gpu_bundle: {obj}: every header it includes is in the bundle")
PY
' bash "$work" "$src" "$cuda" "${objects[@]}"
echo "check_gpu_bundle: the bundle builds with the system's copies hidden (CUDA $cuda)"
