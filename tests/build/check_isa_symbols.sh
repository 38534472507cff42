#!/bin/sh
# check_isa_symbols.sh LIBRARY NAMESPACE: fails if LIBRARY (built for another instruction set)
# defines a weak symbol outside NAMESPACE. The linker keeps one copy of each weak symbol (an
# inline function or template instantiation) across all objects, so such a symbol could make
# baseline code run AVX-512 instructions on a CPU without them (reference/cpu_gemm_eigen.cpp).
set -eu
lib=$1
namespace=$2
# weak symbols: W/V (weak function/object), u (unique global); the personality-routine
# reference (DW.ref.__gxx_personality_v0) is a pointer every C++ object shares, no code.
leaks=$(nm -C --defined-only "$lib" | awk '$2 ~ /^[WVuvw]$/' |
        grep -v -e " ${namespace}::" -e "guard variable for ${namespace}::" \
                -e " DW.ref.__gxx_personality_v0\$" || true)
if [ -n "$leaks" ]; then
  echo "$lib defines weak symbols outside ${namespace}:: (shared with the baseline build):"
  echo "$leaks"
  exit 1
fi
count=$(nm -C --defined-only "$lib" | awk '$2 ~ /^[WVuvw]$/' | wc -l)
echo "$lib: all $count weak symbols are in ${namespace}:: (or the personality reference)"
