#!/usr/bin/env bash
# gpumeter collection overhead on a GPU (issue 13 "Deliver 6", docs/PERFORMANCE.md, "Targets": ≤ 2 %;
# docs/PERFORMANCE.md "Issue 13"). Not part of CI.
#
# Runs one kernel-heavy CUDA workload — many small kernels (launch-bound: CUPTI's worst case,
# one activity record per few µs) and a few large ones — alternately unmetered and under
# `gpumeter record`, OVERHEAD_REPS times each (the order flips every rep so drift cancels), and
# prints the median times and the overhead ratio, for
#   * the workload's own timed loop (after a warm-up, CUDA and CUPTI set-up excluded: the
#     steady-state cost of collection), the figure docs/PERFORMANCE.md, "Targets" bounds, and
#   * the whole process (start, CUDA context, collector start-up and final flush included).
# It checks that the last recording metered every launch (`gpumeter usage --json`).
#
#   scripts/gpu-smoke.sh --prepare [DIR]   on the build machine: builds `gpumeter` and
#                                          `libgpumeter_inject.so` into DIR (target/gpu-smoke)
#   scripts/gpu-overhead.sh [DIR]          on the GPU machine (DIR as for gpu-smoke.sh)
#
# Environment: OVERHEAD_REPS (default 5), OVERHEAD_SMALL (small launches, default 100000),
# OVERHEAD_LARGE (large launches, default 20), GPUMETER_CUPTI_LIB (else the CUDA install's
# libcupti), CUDA_HOME. Budget: about one minute on an H100/H200 (nvcc included).
# Exit status: 0 measured (overhead ≤ 2 % or not: read the line), 1 a run failed or the
# recording is wrong, 2 cannot run (no GPU, no nvcc, no binaries, no libcupti).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=/dev/null # scripts/lib/gpu-common.sh, checked on its own
. "$ROOT/scripts/lib/gpu-common.sh"
gpu_bin_dir "${1:-}"
REPS="${OVERHEAD_REPS:-5}"
SMALL="${OVERHEAD_SMALL:-100000}"
LARGE="${OVERHEAD_LARGE:-20}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpumeter-overhead.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

say() { printf '%s\n' "$*"; }
cannot() { say "CANNOT RUN: $*"; exit 2; }
fail() { say "FAIL: $*"; exit 1; }

say "== gpumeter collection overhead ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
command -v nvidia-smi >/dev/null || cannot "no nvidia-smi: this needs an NVIDIA GPU and driver"
GPUS="$(nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>&1)" ||
  cannot "nvidia-smi finds no GPU: $GPUS"
[ -n "$GPUS" ] || cannot "nvidia-smi lists no GPU"
say "gpu:      $(head -n 1 <<<"$GPUS")"
[ -x "$GM" ] || cannot "no gpumeter at $GM (build with: scripts/gpu-smoke.sh --prepare)"
[ -f "$INJECT" ] || cannot "no libgpumeter_inject.so at $INJECT"
command -v python3 >/dev/null || cannot "python3 is needed to read the usage report"
NVCC=""
for c in "${CUDA_HOME:-}/bin/nvcc" /usr/local/cuda/bin/nvcc "$(command -v nvcc 2>/dev/null)"; do
  if [ -n "$c" ] && [ -x "$c" ]; then NVCC="$c"; break; fi
done
[ -n "$NVCC" ] || cannot "no nvcc (set CUDA_HOME)"
CUDA_ROOT="$(cd "$(dirname "$NVCC")/.." && pwd)"
CUPTI="${GPUMETER_CUPTI_LIB:-}"
if [ -z "$CUPTI" ]; then
  for f in "$CUDA_ROOT"/extras/CUPTI/lib64/libcupti.so.1[0-9]* "$CUDA_ROOT"/extras/CUPTI/lib64/libcupti.so \
    "$CUDA_ROOT"/lib64/libcupti.so.1[0-9]* "$CUDA_ROOT"/targets/x86_64-linux/lib/libcupti.so.1[0-9]*; do
    [ -f "$f" ] && { CUPTI="$f"; break; }
  done
fi
[ -n "$CUPTI" ] || cannot "no libcupti found (set GPUMETER_CUPTI_LIB)"
say "gpumeter: $GM ($("$GM" --version 2>&1)); libcupti: $CUPTI"
export GPUMETER_INJECT_LIB="$INJECT" GPUMETER_CUPTI_LIB="$CUPTI"

cat >"$WORK/overhead.cu" <<'EOF'
// gpumeter overhead workload: SMALL launches of a tiny kernel (launch-bound) and LARGE launches
// of a ~10 ms kernel on 4 streams, after a warm-up; prints the timed loop's wall seconds and the
// launches.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

extern "C" __global__ void gm_ovh_small(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 0.999f + 1.0f;
}
extern "C" __global__ void gm_ovh_large(float *x, int n, int rounds) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = x[i];
    for (int r = 0; r < rounds; r++) v = v * 1.0000001f + 1e-7f;
    x[i] = v;
  }
}

int main(int argc, char **argv) {
  long small = argc > 1 ? atol(argv[1]) : 100000;
  long large = argc > 2 ? atol(argv[2]) : 20;
  const int n_small = 1 << 12, n_large = 1 << 24;
  float *a, *b;
  if (cudaMalloc(&a, n_small * 4) || cudaMalloc(&b, n_large * 4)) return 3;
  cudaStream_t s[4];
  for (auto &x : s) cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking);
  long launches = 0;
  for (int i = 0; i < 1000; i++, launches++) gm_ovh_small<<<n_small / 256, 256, 0, s[i % 4]>>>(a, n_small);
  gm_ovh_large<<<n_large / 256, 256, 0, s[0]>>>(b, n_large, 64); launches++;
  if (cudaDeviceSynchronize() != cudaSuccess) return 3;
  auto t0 = std::chrono::steady_clock::now();
  long every = large > 0 ? small / large : 0;
  for (long i = 0; i < small; i++, launches++) {
    gm_ovh_small<<<n_small / 256, 256, 0, s[i % 4]>>>(a, n_small);
    if (every > 0 && i % every == 0) { gm_ovh_large<<<n_large / 256, 256, 0, s[(i / every) % 4]>>>(b, n_large, 20000); launches++; }
  }
  cudaError_t e = cudaDeviceSynchronize();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf("LOOP_S %.6f\nLAUNCHES %ld\nCHECK %s\n", secs, launches, e == cudaSuccess ? "ok" : cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 4;
}
EOF
if ! timeout -k 10 180 "$NVCC" -O2 -arch=native -o "$WORK/overhead" "$WORK/overhead.cu" >"$WORK/nvcc.log" 2>&1; then
  timeout -k 10 180 "$NVCC" -O2 -arch=sm_90 -o "$WORK/overhead" "$WORK/overhead.cu" >>"$WORK/nvcc.log" 2>&1 ||
    cannot "nvcc failed: $(tail -n 3 "$WORK/nvcc.log")"
fi

# one MODE REP: runs the workload (MODE plain or record); appends "loop_s wall_s" to MODE.times.
one() {
  local mode="$1" rep="$2" t0 t1 out
  t0=$(date +%s%N)
  if [ "$mode" = plain ]; then
    out="$(timeout -k 10 120 "$WORK/overhead" "$SMALL" "$LARGE" 2>"$WORK/err")" || fail "plain run: $(tail -n 3 "$WORK/err")"
  else
    out="$(timeout -k 10 120 "$GM" record --out "$WORK/rec$rep.gmr" -- "$WORK/overhead" "$SMALL" "$LARGE" 2>"$WORK/err")" ||
      fail "recorded run: $(tail -n 5 "$WORK/err")"
  fi
  t1=$(date +%s%N)
  grep -q '^CHECK ok' <<<"$out" || fail "$mode run: $out"
  LAUNCHES="$(awk '/^LAUNCHES/ {print $2}' <<<"$out")"
  printf '%s %s\n' "$(awk '/^LOOP_S/ {print $2}' <<<"$out")" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.6f", (b-a)/1e9}')" >>"$WORK/$mode.times"
  [ "$mode" = record ] && [ "$rep" -lt "$REPS" ] && rm -f "$WORK/rec$rep.gmr"
  return 0
}

say "== $REPS × (unmetered, recorded), alternating; $SMALL small + $LARGE large launches each"
: >"$WORK/plain.times"; : >"$WORK/record.times"
for rep in $(seq "$REPS"); do
  if [ $((rep % 2)) = 1 ]; then one plain "$rep"; one record "$rep"; else one record "$rep"; one plain "$rep"; fi
  say "   rep $rep: plain $(tail -n 1 "$WORK/plain.times"), recorded $(tail -n 1 "$WORK/record.times") (loop s, process s)"
done

# The last recording metered every launch.
"$GM" usage --json "$WORK/rec$REPS.gmr" >"$WORK/usage.json" 2>"$WORK/usage.err" || fail "gpumeter usage: $(tail -n 3 "$WORK/usage.err")"
METERED="$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(sum(int(t["quantity"]) for t in r["totals"] if t["meter"] == "kernel_launches"))
' "$WORK/usage.json")" || fail "cannot read the usage report"
[ "$METERED" = "$LAUNCHES" ] || fail "the recording metered $METERED launches, the workload made $LAUNCHES"

med() { awk -v c="$2" '{print $c}' "$1" | sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else printf "%.6f\n", (v[NR/2]+v[NR/2+1])/2}'; }
pl="$(med "$WORK/plain.times" 1)"; rl="$(med "$WORK/record.times" 1)"
pw="$(med "$WORK/plain.times" 2)"; rw="$(med "$WORK/record.times" 2)"
pct() { awk -v r="$1" -v p="$2" 'BEGIN {printf "%+.2f %%", (r/p-1)*100}'; }
say "== medians of $REPS ($LAUNCHES launches a run, all $METERED metered)"
say "   timed loop:    unmetered $pl s, recorded $rl s: overhead $(pct "$rl" "$pl") (docs/PERFORMANCE.md: ≤ 2 %)"
say "   whole process: unmetered $pw s, recorded $rw s: overhead $(pct "$rw" "$pw")"
