#!/usr/bin/env bash
# check_install.sh BUILD_DIR SOURCE_DIR: `meson install --destdir` of the build, then a
# program outside the tree (out_of_tree.cpp) compiled with nothing but pkg-config's flags,
# and run. Fails if a header, a library or a dependency is missing from the install.
set -euo pipefail
build="$1"; src="$2"
dest="$(mktemp -d)"; trap 'rm -rf "$dest"' EXIT
meson install -C "$build" --destdir "$dest" --no-rebuild --quiet >/dev/null
pc_dir="$(dirname "$(find "$dest" -name dplab.pc | head -n 1)")"
[ -n "$pc_dir" ] || { echo "no dplab.pc installed"; exit 1; }
export PKG_CONFIG_PATH="$pc_dir"
# the .pc file names the real prefix; point it at the staging copy (only dplab's own paths)
prefix="$(pkg-config --variable=prefix dplab)"
flags="$(pkg-config --define-variable=prefix="$dest$prefix" --cflags --libs dplab)"
echo "pkg-config --cflags --libs dplab: $flags"
# shellcheck disable=SC2086
c++ -std=c++20 "$src/tests/build/out_of_tree.cpp" -o "$dest/out_of_tree" $flags
"$dest/out_of_tree"
