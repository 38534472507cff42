#!/usr/bin/env bash
# check_install.sh BUILD_DIR SOURCE_DIR: `meson install --destdir` of the build, then a
# program outside the tree (out_of_tree.cpp) built twice with nothing but what the install
# provides, and run: by g++ with pkg-config's flags, and by a Meson project with
# dependency('dplab'). Fails if a header, a library or a dependency is missing.
set -euo pipefail
build="$1"; src="$2"
dest="$(mktemp -d)"; trap 'rm -rf "$dest"' EXIT
meson install -C "$build" --destdir "$dest" --no-rebuild --quiet >/dev/null
pc="$(find "$dest" -name dplab.pc | head -n 1)"
[ -n "$pc" ] || { echo "no dplab.pc installed"; exit 1; }
# the .pc file names the real prefix; a copy points at the staging directory instead
prefix="$(sed -n 's/^prefix=//p' "$pc")"
mkdir -p "$dest/pkgconfig"
sed "s|^prefix=.*|prefix=$dest$prefix|" "$pc" > "$dest/pkgconfig/dplab.pc"
export PKG_CONFIG_PATH="$dest/pkgconfig"

flags="$(pkg-config --cflags --libs dplab)"
echo "pkg-config --cflags --libs dplab: $flags"
# shellcheck disable=SC2086
c++ -std=c++20 "$src/tests/build/out_of_tree.cpp" -o "$dest/out_of_tree" $flags
"$dest/out_of_tree"

mkdir -p "$dest/project"
cp "$src/tests/build/out_of_tree.cpp" "$dest/project/"
cat > "$dest/project/meson.build" <<'MESON'
project('uses_dplab', 'cpp', default_options: ['cpp_std=c++20'])
executable('out_of_tree', 'out_of_tree.cpp', dependencies: dependency('dplab'))
MESON
meson setup "$dest/project/build" "$dest/project" >/dev/null
ninja -C "$dest/project/build" >/dev/null
"$dest/project/build/out_of_tree"
