#!/usr/bin/env bash
# cuda_library_dirs.sh NVCC: the folders holding libcudart, libcublas and libnccl, one per
# line, for dplab.pc. nvcc links with its own -L folders, which g++ does not know: a program
# built with `pkg-config --libs dplab` needs them spelled out. nvcc's --dryrun prints them
# (LIBRARIES=...); the toolkit layout differs between machines (lib64 -> lib on one,
# targets/x86_64-linux/lib only on another), so ask nvcc rather than guess. The stubs folder
# is left out: it holds a libcuda.so without a driver behind it.
set -euo pipefail
nvcc="$1"
"$nvcc" --dryrun -x cu /dev/null -o /dev/null 2>&1 |
  sed -n 's/^#\$ LIBRARIES=//p' | tr ' ' '\n' | tr -d '"' | sed -n 's/^-L//p' |
  while read -r dir; do
    case "$dir" in */stubs) continue ;; esac
    [ -d "$dir" ] && readlink -f "$dir"
  done | awk '!seen[$0]++'
