#!/usr/bin/env bash
# FLOP counters held against arithmetic known exactly (issue 17 item 3; docs/COLLECTION.md
# "FLOP counters (range profiler)"). Not part of CI: it needs an NVIDIA GPU.
#
# Builds the CUDA kernel suite scripts/gpu-flops/flops.cu (classes fp64, fp32, fp16: a loop of
# N dependent FMAs per thread, scalar __hfma for fp16, not packed half2; tensor: a wmma GEMM of
# known shape; and `all` of them in one process) and records each class twice with `gpumeter
# record`: (a) without FLOP counters, (b) with `--flops`. scripts/gpu-flops/table.py then reads
# the `gpumeter usage --json` reports and `recording show --json` and checks, per class, that
# every FLOP meter equals EXACTLY what the code performs (computed from the launch shapes the
# suite prints: 2 x grid x block x N per FMA kernel, 2 x m x n x k for the GEMM), and shows the
# raw counters, the replay passes and the cost wall(b) / wall(a), kernel_ns(b) / kernel_ns(a);
# then a Markdown table ready for docs/COLLECTION.md.
#
#   scripts/gpu-flops.sh --prepare [DIR]   on the build machine (Rust, network): builds the
#                                          release binaries into DIR (default target/gpu-smoke;
#                                          as scripts/gpu-smoke.sh --prepare) and, when it has
#                                          nvcc, the suite (DIR/flops)
#   scripts/gpu-flops.sh [DIR]             on the GPU machine: DIR holds `gpumeter` and
#                                          `libgpumeter_inject.so` (default $GPUMETER_BIN_DIR,
#                                          else target/gpu-smoke when it exists, else
#                                          target/release)
#
# Needs on the GPU machine: an NVIDIA GPU of compute capability 7.0+ (wmma) and driver
# (profiling allowed to this user: root, or the driver option
# NVreg_RestrictProfilingToAdminUsers=0), python3, libcupti 12.6+ (the range profiler), and
# nvcc ($CUDA_HOME/bin, /usr/local/cuda/bin, PATH, or NVIDIA's CUDA 13 pip wheels) unless
# DIR/flops was built by --prepare.
# Environment:
#   GPUMETER_CUPTI_LIB   the libcupti to use (else the CUDA install's, else the pip wheel's)
#   FLOPS_CLASSES        the classes to run (default "fp64 fp32 fp16 tensor all")
#   FLOPS_GRID, FLOPS_BLOCK, FLOPS_ITERS, FLOPS_M, FLOPS_N, FLOPS_K
#                        the suite's sizes (scripts/gpu-flops/flops.cu; defaults 264 x 256
#                        threads x 4096 FMAs, a 1024^3 GEMM)
#   OUT                  when set, the recordings, reports, logs and table are copied there
#                        (all.b.gmr is the suite's recording for examples/data/)
# Exit status: 0 PASS, 1 FAIL, 2 could not run (no GPU, no nvcc, binaries missing, profiling
# not permitted, range profiler unsupported).
# Budget: under 5 minutes: the build and the recordings end within 230 s (every step's timeout
# is cut to what is left of them), the table gets what is left of 290 s (10 to 60 s); the
# suite itself takes seconds (its kernels run well under a second each, 10 times with replay).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Sets NVCC (empty when none) and NVCC_FLAGS, as scripts/gpu-truth.sh does.
find_nvcc() {
  NVCC="" NVCC_FLAGS=()
  local c wheel nv d
  for c in "${CUDA_HOME:-}/bin/nvcc" /usr/local/cuda/bin/nvcc "$(command -v nvcc 2>/dev/null)"; do
    if [ -n "$c" ] && [ -x "$c" ]; then NVCC="$c"; return; fi
  done
  wheel="$(python3 - <<'EOF' 2>/dev/null
import os, sys
for d in sys.path:
    for sub in ("nvidia/cu13/bin/nvcc", "nvidia/cuda_nvcc/bin/nvcc"):
        hit = os.path.join(d or ".", sub)
        if os.access(hit, os.X_OK):
            print(hit); sys.exit(0)
EOF
)"
  [ -n "$wheel" ] || return
  NVCC="$wheel"
  nv="$(cd "$(dirname "$wheel")/../.." && pwd)" # site-packages/nvidia
  for d in "$nv/cu13/include" "$nv/cuda_runtime/include"; do
    [ -d "$d" ] && NVCC_FLAGS+=("-I$d")
  done
  # The static CUDA runtime (libcudart_static.a, nvcc's default) is in the runtime wheel.
  for d in "$nv/cu13/lib" "$nv/cuda_runtime/lib"; do
    [ -d "$d" ] && NVCC_FLAGS+=("-L$d")
  done
}

case "${1:-}" in
-h | --help)
  # The comment block at the top of this file, without its first line and the '# '.
  sed -n '2,/^set -uo pipefail/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
  exit 0
  ;;
--prepare) ;;
-*)
  echo "gpu-flops.sh: unknown option $1 (usage: scripts/gpu-flops.sh [--prepare] [DIR]; --help)" >&2
  exit 2
  ;;
esac

if [ "${1:-}" = "--prepare" ]; then
  DEST="${2:-$ROOT/target/gpu-smoke}"
  "$ROOT/scripts/gpu-smoke.sh" --prepare "$DEST" || exit 1
  find_nvcc
  if [ -n "$NVCC" ]; then
    arches=(-gencode "arch=compute_80,code=sm_80" -gencode "arch=compute_86,code=sm_86"
      -gencode "arch=compute_89,code=sm_89" -gencode "arch=compute_90,code=sm_90"
      -gencode "arch=compute_90,code=compute_90")
    if "$NVCC" -O2 "${arches[@]}" -o "$DEST/flops" "$ROOT/scripts/gpu-flops/flops.cu" "${NVCC_FLAGS[@]}"; then
      echo "built $DEST/flops with $NVCC: the suite, for a GPU machine without nvcc"
    else
      echo "nvcc failed: the GPU machine must compile the suite itself" >&2
    fi
  else
    echo "no nvcc here: the GPU machine must compile the suite (scripts/gpu-flops/flops.cu) itself"
  fi
  echo "then run scripts/gpu-flops.sh ${DEST#"$ROOT"/} on the GPU machine"
  exit 0
fi

# shellcheck source=/dev/null # scripts/lib/gpu-common.sh, checked on its own
. "$ROOT/scripts/lib/gpu-common.sh"
gpu_bin_dir "${1:-}"
CLASSES="${FLOPS_CLASSES:-fp64 fp32 fp16 tensor all}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpumeter-flops.XXXXXX")"
T0=$(date +%s)

say() { printf '%s\n' "$*"; }
left() { local l=$(( T0 + 230 - $(date +%s) )); echo $(( l > 1 ? l : 1 )); }
table_time() { local l=$(( T0 + 290 - $(date +%s) )); echo $(( l < 10 ? 10 : l > 60 ? 60 : l )); }
step() { local l; l=$(left); echo $(( $1 < l ? $1 : l )); }
collect() {
  if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT" || return
    local f
    for f in "$WORK"/*; do
      [ -e "$f" ] && [ "${f##*/}" != flops ] && cp -r "$f" "$OUT"/
    done
    say "artifacts copied to $OUT"
  fi
}
cannot() { say "CANNOT RUN: $*"; collect; exit 2; }

say "== gpumeter FLOP counters against known arithmetic ($(date -u +%Y-%m-%dT%H:%M:%SZ)), work dir $WORK"
[ -x "$GM" ] || cannot "no gpumeter binary at $GM (build with: scripts/gpu-flops.sh --prepare)"
[ -f "$INJECT" ] || cannot "no libgpumeter_inject.so at $INJECT"
command -v python3 >/dev/null || cannot "python3 is needed for the table (scripts/gpu-flops/table.py)"
say "gpumeter:   $GM ($("$GM" --version 2>&1))"
export GPUMETER_INJECT_LIB="$INJECT" GPUMETER_VERBOSE=1

command -v nvidia-smi >/dev/null || cannot "no nvidia-smi: this needs an NVIDIA GPU and driver"
GPUS="$(timeout -k 5 30 nvidia-smi --query-gpu=index,name,driver_version,uuid --format=csv,noheader 2>&1)" ||
  cannot "nvidia-smi finds no GPU: $GPUS"
[ -n "$GPUS" ] || cannot "nvidia-smi lists no GPU"
say "gpu:        $GPUS"
echo "nvidia_smi_gpus=$GPUS" >"$WORK/env.txt"

find_nvcc
if [ -n "$NVCC" ]; then
  CUDA_ROOT="$(cd "$(dirname "$NVCC")/.." && pwd)"
  say "nvcc:       $NVCC ($("$NVCC" --version 2>&1 | tail -n 1))"
  echo "nvcc=$("$NVCC" --version 2>&1 | grep -o 'release [0-9.]*' | head -n 1)" >>"$WORK/env.txt"
elif [ -x "$BIN/flops" ]; then
  CUDA_ROOT=""
  say "nvcc:       none; the suite built by --prepare: $BIN/flops"
else
  cannot "no nvcc (set CUDA_HOME, or install NVIDIA's pip wheels nvidia-cuda-nvcc and nvidia-cuda-runtime), and no suite built by --prepare at $BIN/flops"
fi

CUPTI="${GPUMETER_CUPTI_LIB:-}"
[ -n "$CUPTI" ] || CUPTI="$(cuda_cupti "$CUDA_ROOT")"
[ -n "$CUPTI" ] || CUPTI="$(wheel_cupti)"
[ -n "$CUPTI" ] || cannot "no libcupti found (set GPUMETER_CUPTI_LIB)"
export GPUMETER_CUPTI_LIB="$CUPTI"
say "libcupti:   $CUPTI"
echo "libcupti=$CUPTI" >>"$WORK/env.txt"

say "== building the suite (scripts/gpu-flops/flops.cu)"
cp "$ROOT/scripts/gpu-flops/flops.cu" "$WORK/flops.cu"
built=0
if [ -n "$NVCC" ]; then
  if timeout -k 5 "$(step 120)" "$NVCC" -O2 -arch=native -o "$WORK/flops" "$WORK/flops.cu" "${NVCC_FLAGS[@]}" >"$WORK/nvcc.log" 2>&1; then
    built=1
  else
    say "   -arch=native failed ($(tail -n 1 "$WORK/nvcc.log")); trying sm_90"
    timeout -k 5 "$(step 120)" "$NVCC" -O2 -arch=sm_90 -o "$WORK/flops" "$WORK/flops.cu" "${NVCC_FLAGS[@]}" >>"$WORK/nvcc.log" 2>&1 && built=1
  fi
  # The SASS the counters count, for the record: one DFMA/FFMA/HFMA per iteration.
  command -v cuobjdump >/dev/null && cuobjdump -sass "$WORK/flops" >"$WORK/flops.sass" 2>/dev/null
fi
if [ "$built" = 0 ]; then
  [ -x "$BIN/flops" ] || cannot "nvcc failed: $(tail -n 3 "$WORK/nvcc.log" 2>/dev/null)"
  cp "$BIN/flops" "$WORK/flops"
fi

# One recorded run: NAME FLOPS(0|1) CLASS; leaves NAME.{gmr,stdout,stderr,rc,wall_ns,usage.json,
# show.json}.
record() {
  local name="$1" flops="$2" class="$3" t rc
  local args=()
  [ "$flops" = 1 ] && args+=(--flops)
  t=$(date +%s%N)
  timeout -k 5 "$(step 60)" "$GM" record "${args[@]}" --out "$WORK/$name.gmr" -- "$WORK/flops" "$class" \
    >"$WORK/$name.stdout" 2>"$WORK/$name.stderr"
  rc=$?
  echo $(( $(date +%s%N) - t )) >"$WORK/$name.wall_ns"
  echo "$rc" >"$WORK/$name.rc"
  say "   $name: exit $rc in $(( ($(date +%s%N) - t) / 1000000 )) ms"
  grep -E 'FLOP counters|error|Error|denied|privilege|not supported' "$WORK/$name.stderr" | head -n 6 | sed 's/^/   | /'
  timeout -k 5 "$(step 30)" "$GM" recording show --json "$WORK/$name.gmr" >"$WORK/$name.show.json" 2>>"$WORK/$name.stderr"
  timeout -k 5 "$(step 30)" "$GM" usage --json "$WORK/$name.gmr" >"$WORK/$name.usage.json" 2>>"$WORK/$name.stderr"
  return 0
}

say "== recording each class: (a) without FLOP counters, (b) with --flops"
for class in $CLASSES; do
  record "$class.a" 0 "$class"
  record "$class.b" 1 "$class"
  if grep -qiE 'restricted to administrators|RestrictProfilingToAdminUsers|FLOP counters need CUPTI|range profiler is not supported|offers none of the FLOP counters' "$WORK/$class.b.stderr"; then
    grep -iE 'administrators|range profiler|FLOP counters' "$WORK/$class.b.stderr" | head -n 3 | sed 's/^/   | /'
    cannot "the range profiler refused on this machine (see $class.b.stderr)"
  fi
  if [ "$(left)" -lt 30 ]; then
    say "   time budget nearly spent ($(left) s left): the remaining classes are not run"
    break
  fi
done

say "== table (scripts/gpu-flops/table.py)"
timeout -k 5 "$(table_time)" python3 "$ROOT/scripts/gpu-flops/table.py" "$WORK" --classes "$CLASSES" | tee "$WORK/table.md"
RESULT=${PIPESTATUS[0]}
collect
say "== done in $(( $(date +%s) - T0 )) s"
case "$RESULT" in
0) say "PASS"; exit 0 ;;
2) say "CANNOT RUN"; exit 2 ;;
*) say "FAIL"; exit 1 ;;
esac
