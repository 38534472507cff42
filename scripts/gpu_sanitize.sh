#!/usr/bin/env bash
# gpu_sanitize.sh: runs NVIDIA compute-sanitizer over every GPU test suite, memcheck (out of
# bounds, misaligned and leaked device memory) then racecheck (shared-memory races, e.g. in
# the reductions' block step), and prints one line per suite and tool, then a total.
# Needs a GPU; without one each suite exits 77 and is reported SKIP.
#   scripts/gpu_sanitize.sh [BUILD_DIR]        (default: build)
# compute-sanitizer passes the program's exit code through when it finds nothing (77 stays
# SKIP) and exits 99 (--error-exitcode) when it reports an error.
# Slow: the sanitizer runs kernels 10-100x slower (minutes per suite).
# GPU_REQUIRED=1 sets DPLAB_REQUIRE_GPU=1: a missing GPU is then a failure, not a skip.
set -u
build="${1:-build}"
# COMPUTE_SANITIZER overrides where the tool is (a toolkit from pip puts it elsewhere)
sanitizer="${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}"
if [ ! -x "$sanitizer" ]; then
  echo "gpu_sanitize: compute-sanitizer not found (CUDA toolkit bin/ on PATH?)" >&2
  exit 2
fi
# suite name, executable
suites=(
  "cuda_kernels tests/backend_cuda/test_cuda_kernels"
  "ops_cuda tests/ops_cuda/test_ops_cuda"
  "optim_cuda tests/optim/test_optim_cuda"
  "parallel_collectives_cuda_ipc tests/parallel/test_collectives_cuda_ipc"
  "parallel_nccl tests/parallel/test_nccl"
  "parallel_gpu_training tests/parallel/test_gpu_training"
)
export CUDA_IPC_CHILD="$build/tests/parallel/cuda_ipc_child"
[ "${GPU_REQUIRED:-0}" = 1 ] && export DPLAB_REQUIRE_GPU=1
passed=0 failed=0 skipped=0
for tool in memcheck racecheck; do
  for entry in "${suites[@]}"; do
    read -r name exe <<<"$entry"
    if [ ! -x "$build/$exe" ]; then
      echo "SKIP  $tool $name ($build/$exe not built)"
      skipped=$((skipped + 1))
      continue
    fi
    log="$build/meson-logs/sanitize_${tool}_${name}.log"
    # leak checks with memcheck; child processes (cuda_ipc ranks, exec'd) are followed by
    # --target-processes all.
    extra=()
    [ "$tool" = memcheck ] && extra=(--leak-check full)
    "$sanitizer" --tool "$tool" "${extra[@]}" --target-processes all --error-exitcode 99 \
      "$build/$exe" >"$log" 2>&1
    rc=$?
    case $rc in
      0) echo "OK    $tool $name"; passed=$((passed + 1)) ;;
      77) echo "SKIP  $tool $name (no GPU)"; skipped=$((skipped + 1)) ;;
      *) echo "FAIL  $tool $name (exit $rc, see $log)"; failed=$((failed + 1)) ;;
    esac
  done
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
