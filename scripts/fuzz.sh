#!/usr/bin/env bash
# fuzz.sh: fuzz the safetensors and IDX parsers with libFuzzer, AddressSanitizer and
# UndefinedBehaviorSanitizer (not part of CI: it runs as long as you let it).
#   bash scripts/fuzz.sh [SECONDS_PER_TARGET]    (default 60)
# Builds build-fuzz/ with clang (-Dfuzz=true, CPU only), seeds each corpus with a few valid
# files, then runs each target. A crash leaves crash-<hash> in fuzz-corpus/ and exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
if ! command -v clang++ >/dev/null; then
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get install -y -qq --no-install-recommends clang libclang-rt-dev
fi
if [ ! -f build-fuzz/build.ninja ]; then
  CXX=clang++ CC=clang meson setup build-fuzz -Dfuzz=true -Dcuda=disabled -Dmpi=disabled \
    -Dnccl=disabled -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized
fi
ninja -C build-fuzz tests/fuzz/fuzz_safetensors tests/fuzz/fuzz_idx
mkdir -p fuzz-corpus/safetensors fuzz-corpus/idx
# Seeds: a real checkpoint and real IDX headers make the fuzzer start inside the formats.
python3 - <<'PY'
import json, struct, gzip
def st(tensors):
    header, data, off = {}, b"", 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        data += raw; off += len(raw)
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data
open("fuzz-corpus/safetensors/seed1", "wb").write(st({"w": ("F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4))}))
open("fuzz-corpus/safetensors/seed2", "wb").write(st({"a": ("I64", [3], struct.pack("<3q", 1, 2, 3)),
                                                      "b": ("F16", [1], b"\x00\x3c")}))
open("fuzz-corpus/idx/labels", "wb").write(struct.pack(">II", 0x801, 4) + bytes([1, 2, 3, 4]))
open("fuzz-corpus/idx/images", "wb").write(struct.pack(">IIII", 0x803, 2, 2, 2) + bytes(8))
open("fuzz-corpus/idx/images.gz", "wb").write(gzip.compress(struct.pack(">IIII", 0x803, 1, 3, 3) + bytes(9)))
PY
export ASAN_OPTIONS=allocator_may_return_null=0:detect_leaks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
for target in safetensors idx; do
  echo "== fuzz_$target for $seconds s"
  ./build-fuzz/tests/fuzz/fuzz_$target -max_total_time="$seconds" -rss_limit_mb=2048 \
    -malloc_limit_mb=1024 -artifact_prefix=fuzz-corpus/ fuzz-corpus/$target
done
