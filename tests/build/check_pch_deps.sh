#!/bin/sh
# check_pch_deps.sh BUILD_DIR OBJECT HEADER: the object, compiled with tools/pch's precompiled
# header, lists HEADER (which the precompiled header includes) among its dependencies, so
# that an edit of HEADER recompiles it. Without -fpch-deps GCC lists neither the headers
# inside a precompiled header nor the .gch itself, and Ninja keeps objects built against the
# old header: a link then fails on a symbol the header renamed, or worse, a stale layout runs.
set -eu
build=$1 object=$2 header=$3
deps=$(ninja -C "$build" -t deps "$object")
case "$deps" in
  *"#deps 0"*|"") echo "FAIL: ninja has no dependencies for $object (built?)"; exit 1 ;;
esac
if printf '%s\n' "$deps" | grep -q "/$header\$"; then
  echo "ok: $object depends on $header through the precompiled header"
else
  echo "FAIL: $object does not list $header among its dependencies:"
  echo "an edit of $header would not recompile it (tools/pch/meson.build: -fpch-deps)"
  exit 1
fi
