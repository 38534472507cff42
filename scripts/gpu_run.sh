#!/usr/bin/env bash
# gpu_run.sh: the GPU half of dplab, from a bare GPU machine to a verdict, in one command.
#   bash scripts/gpu_run.sh OUT [--budget SECONDS] [--only STEPS] [--build DIR]
# Run it on the GPU machine, in a tree that holds gpu_bundle/ (scripts/gpu_bundle.sh, run on
# a development machine, made it: Eigen, fmt, CLI11, doctest, zlib, OpenSSL's headers and
# Fashion-MNIST, which such a machine lacks); on a GPU machine with the README's packages
# the system's libraries serve instead. It finds nvcc, cuBLAS and NCCL where the image has them (a CUDA
# toolkit, or the Python wheels' folders), joins them into one toolkit view that Meson's CUDA
# dependency understands, builds only what the GPU run needs (MPI off), then runs these
# steps, each bounded in time, writing a log (and CSV where there are figures) into OUT:
#   env        the GPU, driver, nvcc, cuBLAS / NCCL / PyTorch found        env.txt
#   build      meson setup + ninja of the GPU targets                      build.log
#   tests      every GPU suite with DPLAB_REQUIRE_GPU=1                     test_*.log
#   doctor     dplab-doctor --json (what works on this machine)            doctor.json
#   bench_ops  bench_ops_gpu: matmul vs cuBLAS, elementwise vs D2D copy    bench_ops_gpu.csv
#   allreduce  bench_allreduce_gpu: the algorithms over cuda_ipc at
#              N = 2, 4, 8 on the one GPU, NCCL at N = 1                    allreduce_gpu.csv
#   allreduce_mps  the same with CUDA's MPS daemon up (several processes'
#              kernels then share the GPU instead of taking turns)          allreduce_gpu_mps.csv
#   compare    dplab-compare --device cuda: single, dp, star, ring at
#              N = 1, 2, 4 logical GPUs                                     compare/
#   compare_mps  the same with MPS up                                       compare_mps/
#   torch      the MLP and the CNN trained by dplab and by PyTorch on the
#              same GPU, paired rounds (train_throughput_torch_gpu.py)     torch_gpu.csv
#   sanitize   compute-sanitizer memcheck, racecheck, synccheck over the
#              GPU suites (the slowest step: it gets what time is left)     sanitize_*.log
#              (SANITIZE_TOOLS="memcheck synccheck" picks tools)
# and summary.md: every step's verdict, its time and its figures. --budget (default 570 s,
# inside the device tool's 10 minutes) bounds the whole run: a step gets at most what is
# left, and the steps after a spent budget are reported "not run". --only runs some steps
# (e.g. --only compare,torch,sanitize on a machine where an earlier call built; the build
# directory, default build-gpu, is reused when it is there). Exit status: 0 when every step
# that ran passed.
# Read next: scripts/gpu_bundle.sh, docs/gpu.md.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

usage() { echo "usage: bash scripts/gpu_run.sh OUT [--budget SECONDS] [--only STEPS] [--build DIR]" >&2; exit 2; }
[ $# -ge 1 ] || usage
out=$1; shift
budget=570 only="" build=build-gpu
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) [ $# -ge 2 ] || usage; budget=$2; shift 2 ;;
    --only) [ $# -ge 2 ] || usage; only=",$2,"; shift 2 ;;
    --build) [ $# -ge 2 ] || usage; build=$2; shift 2 ;;
    *) usage ;;
  esac
done
case "$budget" in ''|*[!0-9]*) echo "gpu_run: --budget expects whole seconds, got '$budget'" >&2; exit 2 ;; esac
all_steps="env build tests doctor bench_ops allreduce allreduce_mps compare compare_mps torch sanitize"
if [ -n "$only" ]; then
  for s in ${only//,/ }; do
    case " $all_steps " in *" $s "*) ;; *) echo "gpu_run: --only: unknown step '$s' (steps: $all_steps)" >&2; exit 2 ;; esac
  done
fi
mkdir -p "$out" || exit 2
out=$(readlink -f "$out")
start=$(date +%s)
steps_tsv="$out/steps.tsv"
: >"$steps_tsv"

wanted() { [ -z "$only" ] || [[ "$only" == *",$1,"* ]]; }
left() { echo $((budget - ($(date +%s) - start))); }
note() { echo "[gpu_run $(($(date +%s) - start))s] $*"; }
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$steps_tsv"; note "$1: $2 ($3 s) $4"; }

# run_bounded NAME LIMIT LOG CMD...: runs CMD with at most min(LIMIT, budget left - 5) seconds,
# its output in LOG, and records PASS / FAIL (exit code) / TIMEOUT / SKIP (77) / NOT RUN.
run_bounded() {
  local name=$1 limit=$2 log=$3; shift 3
  local have; have=$(( $(left) - 5 ))
  if [ "$have" -lt 10 ]; then record "$name" "NOT RUN" 0 "budget spent"; return 3; fi
  [ "$limit" -gt "$have" ] && limit=$have
  local t0; t0=$(date +%s)
  timeout -k 5 "$limit" "$@" >"$log" 2>&1
  local rc=$? secs=$(($(date +%s) - t0))
  local tail_line; tail_line=$(grep -E 'test cases:|passed|failed|ERROR SUMMARY' "$log" | tail -1 | tr '\t' ' ')
  case $rc in
    0) record "$name" PASS "$secs" "$tail_line" ;;
    77) record "$name" SKIP "$secs" "exit 77: $tail_line" ;;
    124|137) record "$name" TIMEOUT "$secs" "stopped after ${limit} s; $(tail -1 "$log" | cut -c1-160)" ;;
    *) record "$name" FAIL "$secs" "exit $rc: ${tail_line:-$(tail -1 "$log" | cut -c1-160)}" ;;
  esac
  return $rc
}

# ---- find the CUDA parts: a toolkit, or the Python wheels' include/ and lib/ folders ----
py=$(command -v python3 || true)
site_dirs=""
[ -n "$py" ] && site_dirs=$("$py" -c 'import site, sysconfig; print("\n".join(set(site.getsitepackages() + [sysconfig.get_paths()["purelib"]])))' 2>/dev/null)
nvcc=$(command -v nvcc || true)
for c in /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc; do [ -z "$nvcc" ] && [ -x "$c" ] && nvcc=$c; done
if [ -z "$nvcc" ]; then
  for d in $site_dirs; do c=$(find "$d/nvidia" -path '*/bin/nvcc' -type f 2>/dev/null | head -1); [ -n "$c" ] && { nvcc=$c; break; }; done
fi
toolkit=""
[ -n "$nvcc" ] && toolkit=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
search_roots=("$toolkit" /usr/local/cuda /usr/local/nvidia /usr/lib/x86_64-linux-gnu /usr/include)
for d in $site_dirs; do [ -d "$d/nvidia" ] && search_roots+=("$d/nvidia"); done
# first_dir FILE-PATTERN: the folder of the first file of that name under the search roots
first_dir() {
  local r f
  for r in "${search_roots[@]}"; do
    [ -n "$r" ] && [ -d "$r" ] || continue
    f=$(find -L "$r" -maxdepth 6 -name "$1" \( -type f -o -type l \) -not -path '*/stubs/*' 2>/dev/null | head -1)
    [ -n "$f" ] && { dirname "$f"; return 0; }
  done
  return 1
}

# The toolkit view: the toolkit's own folders as links, with cuBLAS's and NCCL's headers and
# libraries joined into its include/ and lib64/ when the toolkit lacks them (the Python
# wheels' layout), so that Meson's CUDA dependency finds everything under one CUDA_PATH.
view="$root/$build-cuda"
make_cuda_view() {
  rm -rf "$view"
  local tv="$view/targets/x86_64-linux" entry name dir
  mkdir -p "$tv/include" "$tv/lib"
  for entry in "$toolkit"/*; do
    case "$(basename "$entry")" in include|lib|lib64|targets) ;; *) ln -s "$entry" "$view/" ;; esac
  done
  ln -s targets/x86_64-linux/include "$view/include"
  ln -s targets/x86_64-linux/lib "$view/lib64"
  local tk_inc=$toolkit/include tk_lib=$toolkit/lib64
  [ -d "$toolkit/targets/x86_64-linux/include" ] && tk_inc=$toolkit/targets/x86_64-linux/include
  [ -d "$toolkit/targets/x86_64-linux/lib" ] && tk_lib=$toolkit/targets/x86_64-linux/lib
  for entry in "$tk_inc"/* "$tk_lib"/*; do
    dir=$tv/lib; [[ "$entry" == "$tk_inc"/* ]] && dir=$tv/include
    ln -s "$entry" "$dir/"
  done
  # what the toolkit lacks: the folder of the header (all of its entries: first of a name wins)
  for name in cublas_v2.h nccl.h; do
    [ -e "$tv/include/$name" ] && continue
    dir=$(first_dir "$name") || continue
    for entry in "$dir"/*; do [ -e "$tv/include/$(basename "$entry")" ] || ln -s "$entry" "$tv/include/"; done
  done
  # ... and the library's own files only (a system folder holds many others)
  for name in cudart cublas cublasLt nccl; do
    ls "$tv/lib/lib$name.so"* >/dev/null 2>&1 && continue
    dir=$(first_dir "lib$name.so*") || continue
    for entry in "$dir/lib$name.so"*; do ln -s "$entry" "$tv/lib/"; done
    # the linker asks for libX.so; wheels ship only libX.so.MAJOR
    if [ ! -e "$tv/lib/lib$name.so" ]; then
      entry=$(ls "$tv/lib/lib$name.so."* 2>/dev/null | sort -V | tail -1)
      [ -n "$entry" ] && ln -s "$(basename "$entry")" "$tv/lib/lib$name.so"
    fi
  done
  # Meson reads the toolkit's version (version.json / version.txt) and wants nvcc's
  [ -e "$view/version.txt" ] || [ -e "$view/version.json" ] ||
    echo "CUDA Version $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')" >"$view/version.txt"
}

if [ -z "$nvcc" ]; then
  record deps FAIL 0 "nvcc not found (PATH, /usr/local/cuda*/bin, the Python nvidia wheels)"
else
  make_cuda_view
fi
export CUDA_PATH="$view" CUDA_HOME="$view"
export LD_LIBRARY_PATH="$view/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[ -d /usr/local/nvidia/lib64 ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:/usr/local/nvidia/lib64"
[ -n "$nvcc" ] && export PATH="$(dirname "$nvcc"):$PATH"
[ -d "$root/gpu_bundle/data" ] && export DPLAB_DATA="$root/gpu_bundle/data"

# ---- env ----
if wanted env; then
  {
    echo "# gpu_run $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "## nvidia-smi"; nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader 2>&1
    nvidia-smi topo -m 2>&1 | head -5
    echo "## CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) x $(nproc)"
    echo "## nvcc: $nvcc"; [ -n "$nvcc" ] && "$nvcc" --version | tail -2
    echo "## host compiler: $(c++ --version 2>&1 | head -1)"
    echo "## meson $(meson --version 2>&1), ninja $(ninja --version 2>&1)"
    echo "## toolkit view $view: cuBLAS $(readlink -f "$view/lib64/libcublas.so"), NCCL $(readlink -f "$view/lib64/libnccl.so" || echo none), nccl.h $(readlink -f "$view/include/nccl.h" || echo none)"
    echo "## compute-sanitizer: $(command -v compute-sanitizer || ls "$toolkit"/bin/compute-sanitizer 2>/dev/null || echo none)"
    echo "## PyTorch: $("$py" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")' 2>&1 | tail -1)"
    echo "## gpu_bundle: $(head -1 "$root/gpu_bundle/MANIFEST" 2>/dev/null || echo MISSING: run scripts/gpu_bundle.sh on a development machine)"
  } >"$out/env.txt" 2>&1
  record env PASS 0 "$(sed -n 3p "$out/env.txt")"
fi

# ---- build ----
archs=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' ')
archs=${archs:-9.0}
targets=(tests/backend_cuda/test_gpu_rules tests/backend_cuda/test_cuda_kernels
         tests/ops_cuda/test_ops_cuda tests/optim/test_optim_cuda
         tests/parallel/test_collectives_cuda_ipc tests/parallel/cuda_ipc_child
         tests/parallel/test_gpu_training tests/parallel/test_nccl
         benchmarks/bench_ops_gpu benchmarks/bench_allreduce_gpu benchmarks/bench_train_throughput
         benchmarks/compare/dplab-compare tools/doctor/dplab-doctor)
configure_and_build() {
  if [ ! -f "$build/build.ninja" ]; then
    # the bundle's libraries where it came with the tree, else the system's (a GPU machine
    # with the README's packages)
    local bundle=auto
    [ -d gpu_bundle ] && bundle=enabled
    meson setup "$build" -Ddeps_bundle=$bundle -Dmpi=disabled -Dgloo=disabled -Dcuda=enabled -Dnccl=auto \
      "-Dgpu_archs=$archs" -Dbuildtype=release || return 1
  fi
  # only targets this build defines (NCCL's suite needs NCCL found)
  local have t list=()
  have=$(ninja -C "$build" -t targets all 2>/dev/null | cut -d: -f1)
  for t in $target_list; do grep -qx "$t" <<<"$have" && list+=("$t"); done
  echo "== building ${#list[@]} targets: ${list[*]}"
  [ ${#list[@]} -gt 0 ] || { echo "none of the GPU targets is defined: is CUDA found?"; return 1; }
  ninja -C "$build" -j "$(nproc)" "${list[@]}"
}
if wanted build; then
  export -f configure_and_build
  export build archs target_list="${targets[*]}"
  run_bounded build 420 "$out/build.log" bash -c configure_and_build
fi

# ---- tests: the GPU suites, a GPU required ----
gpu_suites=("cuda_kernels tests/backend_cuda/test_cuda_kernels 180"
            "ops_cuda tests/ops_cuda/test_ops_cuda 300"
            "optim_cuda tests/optim/test_optim_cuda 120"
            "collectives_cuda_ipc tests/parallel/test_collectives_cuda_ipc 300"
            "gpu_training tests/parallel/test_gpu_training 300"
            "nccl tests/parallel/test_nccl 120")
export CUDA_IPC_CHILD="$root/$build/tests/parallel/cuda_ipc_child"
if wanted tests; then
  run_bounded test_gpu_rules 60 "$out/test_gpu_rules.log" "$build/tests/backend_cuda/test_gpu_rules"
  for entry in "${gpu_suites[@]}"; do
    read -r name exe limit <<<"$entry"
    if [ ! -x "$build/$exe" ]; then record "test_$name" "NOT RUN" 0 "$build/$exe not built"; continue; fi
    DPLAB_REQUIRE_GPU=1 run_bounded "test_$name" "$limit" "$out/test_$name.log" "$build/$exe"
  done
fi

if wanted doctor && [ ! -x "$build/tools/doctor/dplab-doctor" ]; then
  record doctor "NOT RUN" 0 "$build/tools/doctor/dplab-doctor not built"
elif wanted doctor; then
  run_bounded doctor 60 "$out/doctor.log" "$build/tools/doctor/dplab-doctor" --json "$out/doctor.json"
fi

if wanted bench_ops; then
  run_bounded bench_ops 120 "$out/bench_ops_gpu.log" "$build/benchmarks/bench_ops_gpu" "$out/bench_ops_gpu.csv"
fi

allreduce_args=(--ranks 2,4,8 --algorithms ring,one_shot,recursive_doubling,halving_doubling,star
                --max-bytes $((64 << 20)))
if wanted allreduce; then
  run_bounded allreduce 180 "$out/allreduce_gpu.log" "$build/benchmarks/bench_allreduce_gpu" \
    "${allreduce_args[@]}" --nccl --csv "$out/allreduce_gpu.csv"
fi

# The same with MPS: without it, processes sharing a GPU get it in turns (time slices), and
# every hand-off of a ring step between two processes may wait for the other's turn.
mps=$(command -v nvidia-cuda-mps-control || ls "$toolkit"/bin/nvidia-cuda-mps-control 2>/dev/null || true)
mps_start() {  # mps_start STEP: 0 when the daemon is up (else records STEP as not run)
  if [ -z "$mps" ]; then record "$1" "NOT RUN" 0 "nvidia-cuda-mps-control not found"; return 1; fi
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/dplab-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/dplab-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if ! "$mps" -d >>"$out/mps.log" 2>&1; then
    record "$1" FAIL 0 "the MPS daemon did not start: $(tail -1 "$out/mps.log")"
    return 1
  fi
}
mps_stop() {
  echo quit | "$mps" >>"$out/mps.log" 2>&1
  sleep 1
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
if wanted allreduce_mps && mps_start allreduce_mps; then
  run_bounded allreduce_mps 180 "$out/allreduce_gpu_mps.log" "$build/benchmarks/bench_allreduce_gpu" \
    "${allreduce_args[@]}" --csv "$out/allreduce_gpu_mps.csv"
  mps_stop
fi

compare_args=(--device cuda --ns 1,2,4 --modes single,dp,star,ring --steps 60)
if wanted compare; then
  run_bounded compare 180 "$out/compare.log" "$build/benchmarks/compare/dplab-compare" \
    "${compare_args[@]}" --out "$out/compare"
fi
if wanted compare_mps && mps_start compare_mps; then
  run_bounded compare_mps 180 "$out/compare_mps.log" "$build/benchmarks/compare/dplab-compare" \
    "${compare_args[@]}" --out "$out/compare_mps"
  mps_stop
fi

if wanted torch; then
  run_bounded torch 180 "$out/torch_gpu.log" "$py" "$root/benchmarks/train_throughput_torch_gpu.py" \
    --dplab-bin "$build/benchmarks/bench_train_throughput" --rounds 3 --csv "$out/torch_gpu.csv"
fi

# ---- sanitize: what time is left, one tool and suite at a time ----
if wanted sanitize; then
  sanitizer=$(command -v compute-sanitizer || true)
  [ -z "$sanitizer" ] && [ -x "$toolkit/bin/compute-sanitizer" ] && sanitizer="$toolkit/bin/compute-sanitizer"
  [ -z "$sanitizer" ] && sanitizer=$(find /usr/local /opt -name compute-sanitizer -type f 2>/dev/null | head -1)
  if [ -z "$sanitizer" ]; then
    record sanitize "NOT RUN" 0 "compute-sanitizer not found"
  else
    # memcheck without its leak check: the caching allocator keeps its blocks until the
    # process ends (as PyTorch's does), which the leak check lists as leaks; and without API
    # error reports: tests that provoke an out-of-memory on purpose, and NCCL probing its own
    # kernels, make expected failing calls, while dplab checks every call it makes itself.
    # The failure cases that kill a rank or time out are left out: the sanitizer slows start-up
    # past their deadlines (they run, unsanitized, in the tests step).
    for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
      for entry in "${gpu_suites[@]}"; do
        read -r name exe limit <<<"$entry"
        [ -x "$build/$exe" ] || continue
        extra=(); [ "$tool" = memcheck ] && extra=(--leak-check no --report-api-errors no)
        DPLAB_REQUIRE_GPU=1 run_bounded "sanitize_${tool}_$name" 240 "$out/sanitize_${tool}_$name.log" \
          "$sanitizer" --tool "$tool" "${extra[@]}" --target-processes all --error-exitcode 99 \
          "$build/$exe" "--test-case-exclude=*fail fast*,*SIGKILLed*"
      done
    done
  fi
fi

# ---- summary ----
{
  echo "# gpu_run summary"
  echo
  sed -n '1p;3p' "$out/env.txt" 2>/dev/null
  echo
  echo "| step | verdict | seconds | detail |"
  echo "|---|---|---|---|"
  while IFS=$'\t' read -r n v s d; do echo "| $n | $v | $s | ${d//|//} |"; done <"$steps_tsv"
  echo
  printf 'passed %s, failed %s, timed out %s, skipped %s, not run %s\n' \
    "$(grep -c $'\tPASS\t' "$steps_tsv")" "$(grep -c $'\tFAIL\t' "$steps_tsv")" \
    "$(grep -c $'\tTIMEOUT\t' "$steps_tsv")" "$(grep -c $'\tSKIP\t' "$steps_tsv")" \
    "$(grep -c $'\tNOT RUN\t' "$steps_tsv")"
  for d in compare compare_mps; do
    [ -s "$out/$d/report.md" ] || continue
    echo; echo "## $d (report.md's table)"; grep '^|' "$out/$d/report.md" | head -20
  done
  for f in doctor.log bench_ops_gpu.log allreduce_gpu.log allreduce_gpu_mps.log torch_gpu.log; do
    [ -s "$out/$f" ] || continue
    echo; echo "## $f"; echo '```'; tail -40 "$out/$f"; echo '```'
  done
} >"$out/summary.md"
cat "$out/summary.md"
! grep -qE $'\t(FAIL|TIMEOUT)\t' "$steps_tsv"
