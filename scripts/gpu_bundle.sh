#!/usr/bin/env bash
# gpu_bundle.sh: run on a development machine (Debian, the README's packages installed). It
# copies into ./gpu_bundle/ (git-ignored, ~38 MiB) what a GPU run needs and a bare GPU machine
# lacks: the headers of Eigen, fmt (used header-only there), CLI11 and doctest, zlib's
# headers and static library, OpenSSL's headers, one folder each, and Fashion-MNIST's four files. The folder
# travels with the working tree to the GPU machine, where scripts/gpu_run.sh builds with
# -Ddeps_bundle=enabled (meson.build then takes these libraries from the bundle, never from
# the system) and points DPLAB_DATA at the data.
#   bash scripts/gpu_bundle.sh [DIR]        (default: gpu_bundle)
# Read next: scripts/gpu_run.sh, meson.build ("third-party libraries").
set -euo pipefail
cd "$(dirname "$0")/.."
dest="${1:-gpu_bundle}"

need() {  # need FILE PACKAGE: say which package to install when a source is missing
  [ -e "$1" ] || { echo "gpu_bundle: $1 not found: apt-get install $2" >&2; exit 1; }
}
need /usr/include/eigen3/Eigen/Dense libeigen3-dev
need /usr/include/fmt/format-inl.h libfmt-dev
need /usr/include/CLI/CLI.hpp libcli11-dev
need /usr/include/doctest/doctest.h doctest-dev
need /usr/include/zlib.h zlib1g-dev
need /usr/include/openssl/hmac.h libssl-dev
libz_a=$(find /usr/lib -name libz.a -print -quit)
need "${libz_a:-/usr/lib/libz.a}" zlib1g-dev

data=/usr/share/datasets/fashion-mnist
need "$data/train-images-idx3-ubyte.gz" dataset-fashion-mnist

# One folder per library, so a machine that has some of them installed mixes nothing.
rm -rf "$dest"
mkdir -p "$dest"/{eigen,fmt,cli11,doctest,zlib,openssl,data}
cp -r /usr/include/eigen3/Eigen "$dest/eigen/"
cp -r /usr/include/fmt "$dest/fmt/"
cp -r /usr/include/CLI "$dest/cli11/"
cp -r /usr/include/doctest "$dest/doctest/"
cp /usr/include/zlib.h /usr/include/zconf.h "$libz_a" "$dest/zlib/"
cp -r "$data" "$dest/data/fashion-mnist"
# OpenSSL's headers (the store's HMAC), with the multiarch configuration header beside them;
# the library itself is the machine's own libcrypto
cp -r /usr/include/openssl "$dest/openssl/"
cp /usr/include/x86_64-linux-gnu/openssl/* "$dest/openssl/openssl/" 2>/dev/null || true

# What came from where: the versions the GPU machine's build will report.
{
  echo "# gpu_bundle: made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) by scripts/gpu_bundle.sh"
  for p in libeigen3-dev libfmt-dev libcli11-dev doctest-dev zlib1g-dev libssl-dev dataset-fashion-mnist; do
    dpkg-query -W -f='${Package} ${Version}\n' "$p" 2>/dev/null || echo "$p (not from dpkg)"
  done
} >"$dest/MANIFEST"
echo "gpu_bundle: $(du -sh "$dest" | cut -f1) in $dest/ ($(grep -c . "$dest/MANIFEST") lines of MANIFEST)"
