#!/usr/bin/env bash
# gpumeter's SM-time model held against the hardware (issue 16 item 3; docs/METERING.md "Model
# against hardware (PM sampling)"). Not part of CI: it needs an NVIDIA GPU.
#
# Builds the CUDA kernel suite scripts/gpu-truth/truth.cu (classes full, tail, tiny, single,
# copy, streams, green, and `all` of them in one process) and records each class twice with
# `gpumeter record`: (a) without PM sampling, (b) with `--pm-sampling`.
# scripts/gpu-truth/table.py then reads the recordings and `gpumeter usage --json` reports and
# prints, per class, modelled sm_ns ÷ measured sm_active_ns, dram_bytes against the bytes the
# copy provably moves (2N per rep: PASS within 2 %), whether Σ tenants = the device's measured total in every window (the total decoded
# from the recording's PM frames), and the overhead wall(b) ÷ wall(a); then a Markdown table
# (GPU, driver, CUDA and CUPTI versions) ready for docs/METERING.md.
#
#   scripts/gpu-truth.sh --prepare [DIR]   on the build machine (Rust, network): builds the
#                                          release binaries into DIR (default target/gpu-smoke;
#                                          as scripts/gpu-smoke.sh --prepare) and, when it has
#                                          nvcc, the suite (DIR/truth, used on a GPU machine
#                                          without nvcc)
#   scripts/gpu-truth.sh [DIR]             on the GPU machine (no network needed): DIR holds
#                                          `gpumeter` and `libgpumeter_inject.so` (default
#                                          $GPUMETER_BIN_DIR, else target/gpu-smoke when it
#                                          exists, else target/release)
#
# Needs on the GPU machine: an NVIDIA GPU and driver (profiling allowed to this user: root, or
# the driver option NVreg_RestrictProfilingToAdminUsers=0), python3, libcupti 12.6+ (PM
# sampling), and nvcc 12.5+ ($CUDA_HOME/bin, /usr/local/cuda/bin, PATH, or NVIDIA's CUDA 13 pip
# wheels nvidia-cuda-nvcc + nvidia-cuda-runtime in python3's path) with a C++ compiler, unless
# DIR/truth was built by --prepare.
# Environment:
#   GPUMETER_CUPTI_LIB   the libcupti to use (else the CUDA install's, else the pip wheel's)
#   TRUTH_CLASSES        the classes to run (default "full tail tiny single copy streams green
#                        all"; `all` runs every class in one process: all.b.gmr is the suite's
#                        recording for examples/data/)
#   TRUTH_PM_INTERVAL    passed as --pm-interval (default: the collector's)
#   TRUTH_WINDOW         usage window (default 1s: several windows per run)
#   TRUTH_COPY_BYTES, TRUTH_COPY_REPS, TRUTH_WAVES, TRUTH_TINY_LAUNCHES, TRUTH_ROUNDS
#                        the suite's sizes (scripts/gpu-truth/truth.cu)
#   OUT                  when set, the recordings, reports, logs and table are copied there
#                        (the (b) recordings are the ones for examples/data/)
# Exit status: 0 PASS, 1 FAIL, 2 could not run (no GPU, no nvcc, binaries missing, profiling
# not permitted, PM sampling unsupported).
# Budget: under 5 minutes: the build and the recordings end within 230 s (every step's timeout
# is cut to what is left of them; classes not started with 60 s of them left are skipped, and
# missing from the table), the table gets what is left of 290 s (10 to 60 s); the whole suite
# should take about 1 to 2 minutes on an H200.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Sets NVCC (empty when none) and NVCC_FLAGS: the CUDA install's nvcc, else NVIDIA's pip wheels
# in python3's path (CUDA 13: nvidia-cuda-nvcc with nvidia-nvvm, nvidia-cuda-crt and
# nvidia-cuda-runtime, all under nvidia/cu13; NVIDIA's CUDA 12 nvcc wheel has no nvcc).
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
  echo "gpu-truth.sh: unknown option $1 (usage: scripts/gpu-truth.sh [--prepare] [DIR]; --help)" >&2
  exit 2
  ;;
esac

if [ "${1:-}" = "--prepare" ]; then
  DEST="${2:-$ROOT/target/gpu-smoke}"
  "$ROOT/scripts/gpu-smoke.sh" --prepare "$DEST" || exit 1
  # The suite too, when this machine has nvcc: for a GPU machine without one. SASS for the
  # GPUs PM sampling supports (Ampere GA10x to Blackwell) and PTX for later ones.
  find_nvcc
  if [ -n "$NVCC" ]; then
    arches=(-gencode "arch=compute_80,code=sm_80" -gencode "arch=compute_86,code=sm_86"
      -gencode "arch=compute_89,code=sm_89" -gencode "arch=compute_90,code=sm_90"
      -gencode "arch=compute_100,code=sm_100" -gencode "arch=compute_90,code=compute_90")
    if "$NVCC" -O2 "${arches[@]}" -o "$DEST/truth" "$ROOT/scripts/gpu-truth/truth.cu" "${NVCC_FLAGS[@]}" \
      || "$NVCC" -O2 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
        -o "$DEST/truth" "$ROOT/scripts/gpu-truth/truth.cu" "${NVCC_FLAGS[@]}"; then
      echo "built $DEST/truth with $NVCC ($("$NVCC" --version | tail -n 1)): the suite, for a GPU machine without nvcc"
    else
      echo "nvcc failed: the GPU machine must compile the suite itself" >&2
    fi
  else
    echo "no nvcc here: the GPU machine must compile the suite (scripts/gpu-truth/truth.cu) itself"
  fi
  echo "then run scripts/gpu-truth.sh ${DEST#"$ROOT"/} on the GPU machine"
  exit 0
fi

# shellcheck source=/dev/null # scripts/lib/gpu-common.sh, checked on its own
. "$ROOT/scripts/lib/gpu-common.sh"
gpu_bin_dir "${1:-}"
CLASSES="${TRUTH_CLASSES:-full tail tiny single copy streams green all}"
WINDOW="${TRUTH_WINDOW:-1s}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpumeter-truth.XXXXXX")"
T0=$(date +%s)

say() { printf '%s\n' "$*"; }
# Seconds left of the 230 s the build and the recordings may take (the table and the copy to
# $OUT take the rest of 290 s), at least 1; `step N` is N or what is left, whichever is less:
# every step's timeout.
left() { local l=$(( T0 + 230 - $(date +%s) )); echo $(( l > 1 ? l : 1 )); }
# The table's timeout: what is left of 290 s, 10 to 60 s.
table_time() { local l=$(( T0 + 290 - $(date +%s) )); echo $(( l < 10 ? 10 : l > 60 ? 60 : l )); }
step() { local l; l=$(left); echo $(( $1 < l ? $1 : l )); }
collect() {
  if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT" || return
    # Not the suite's binary.
    local f
    for f in "$WORK"/*; do
      [ -e "$f" ] && [ "${f##*/}" != truth ] && cp -r "$f" "$OUT"/
    done
    say "artifacts copied to $OUT"
  fi
}
cannot() { say "CANNOT RUN: $*"; collect; exit 2; }

say "== gpumeter model against hardware ($(date -u +%Y-%m-%dT%H:%M:%SZ)), work dir $WORK"
[ -x "$GM" ] || cannot "no gpumeter binary at $GM (build with: scripts/gpu-truth.sh --prepare)"
[ -f "$INJECT" ] || cannot "no libgpumeter_inject.so at $INJECT"
command -v python3 >/dev/null || cannot "python3 is needed for the table (scripts/gpu-truth/table.py)"
say "gpumeter:   $GM ($("$GM" --version 2>&1))"
export GPUMETER_INJECT_LIB="$INJECT" GPUMETER_VERBOSE=1

command -v nvidia-smi >/dev/null || cannot "no nvidia-smi: this needs an NVIDIA GPU and driver"
GPUS="$(timeout -k 5 30 nvidia-smi --query-gpu=index,name,driver_version,uuid --format=csv,noheader 2>&1)" ||
  cannot "nvidia-smi finds no GPU: $GPUS"
[ -n "$GPUS" ] || cannot "nvidia-smi lists no GPU"
say "gpu:        $GPUS"
# GPU, driver and the driver's CUDA version, for the table.
{
  echo "nvidia_smi_gpus=$GPUS"
  echo "nvidia_smi_cuda=$(timeout -k 5 30 nvidia-smi 2>/dev/null | grep -o 'CUDA Version: *[0-9.]*' | head -n 1 | sed 's/.*: *//')"
} >"$WORK/env.txt"

find_nvcc
if [ -n "$NVCC" ]; then
  CUDA_ROOT="$(cd "$(dirname "$NVCC")/.." && pwd)"
  say "nvcc:       $NVCC ($("$NVCC" --version 2>&1 | tail -n 1))"
  echo "nvcc=$("$NVCC" --version 2>&1 | grep -o 'release [0-9.]*' | head -n 1)" >>"$WORK/env.txt"
elif [ -x "$BIN/truth" ]; then
  CUDA_ROOT=""
  say "nvcc:       none; the suite built by --prepare: $BIN/truth"
  echo "nvcc=none here (the suite built by --prepare)" >>"$WORK/env.txt"
else
  cannot "no nvcc (set CUDA_HOME, or install NVIDIA's pip wheels nvidia-cuda-nvcc and nvidia-cuda-runtime), and no suite built by --prepare at $BIN/truth"
fi

# libcupti (12.6+ for PM sampling): the CUDA install's, else the pip wheel's.
CUPTI="${GPUMETER_CUPTI_LIB:-}"
if [ -z "$CUPTI" ]; then
  CUPTI="$(cuda_cupti "$CUDA_ROOT")"
fi
if [ -z "$CUPTI" ]; then
  CUPTI="$(wheel_cupti)"
fi
[ -n "$CUPTI" ] || cannot "no libcupti found (set GPUMETER_CUPTI_LIB)"
export GPUMETER_CUPTI_LIB="$CUPTI"
say "libcupti:   $CUPTI"
echo "libcupti=$CUPTI" >>"$WORK/env.txt"

say "== building the suite (scripts/gpu-truth/truth.cu)"
cp "$ROOT/scripts/gpu-truth/truth.cu" "$WORK/truth.cu"
built=0
if [ -n "$NVCC" ]; then
  if timeout -k 5 "$(step 90)" "$NVCC" -O2 -arch=native -o "$WORK/truth" "$WORK/truth.cu" "${NVCC_FLAGS[@]}" >"$WORK/nvcc.log" 2>&1; then
    built=1
  else
    say "   -arch=native failed ($(tail -n 1 "$WORK/nvcc.log")); trying sm_90"
    timeout -k 5 "$(step 90)" "$NVCC" -O2 -arch=sm_90 -o "$WORK/truth" "$WORK/truth.cu" "${NVCC_FLAGS[@]}" >>"$WORK/nvcc.log" 2>&1 && built=1
  fi
fi
if [ "$built" = 0 ]; then
  [ -x "$BIN/truth" ] || cannot "nvcc failed: $(tail -n 3 "$WORK/nvcc.log" 2>/dev/null)"
  say "   using the suite built by --prepare ($BIN/truth)"
  cp "$BIN/truth" "$WORK/truth"
fi

# One recorded run: NAME PM(0|1) CLASS; leaves NAME.{gmr,stdout,stderr,rc,wall_ns,usage.json,
# show.json}.
record() {
  local name="$1" pm="$2" class="$3" t rc
  local args=()
  if [ "$pm" = 1 ]; then
    args+=(--pm-sampling)
    [ -n "${TRUTH_PM_INTERVAL:-}" ] && args+=(--pm-interval "$TRUTH_PM_INTERVAL")
  fi
  t=$(date +%s%N)
  timeout -k 5 "$(step 45)" "$GM" record "${args[@]}" --out "$WORK/$name.gmr" -- "$WORK/truth" "$class" \
    >"$WORK/$name.stdout" 2>"$WORK/$name.stderr"
  rc=$?
  echo $(( $(date +%s%N) - t )) >"$WORK/$name.wall_ns"
  echo "$rc" >"$WORK/$name.rc"
  say "   $name: exit $rc in $(( ($(date +%s%N) - t) / 1000000 )) ms: $(tail -n 1 "$WORK/$name.stdout" 2>/dev/null | cut -c1-160)"
  grep -E 'error|Error|denied|privilege|not supported|overflow' "$WORK/$name.stderr" | head -n 5 | sed 's/^/   | /'
  timeout -k 5 "$(step 30)" "$GM" recording show --json "$WORK/$name.gmr" >"$WORK/$name.show.json" 2>>"$WORK/$name.stderr"
  timeout -k 5 "$(step 30)" "$GM" usage --json --window "$WINDOW" "$WORK/$name.gmr" >"$WORK/$name.usage.json" 2>>"$WORK/$name.stderr"
  return 0
}

say "== recording each class: (a) without PM sampling, (b) with --pm-sampling"
for class in $CLASSES; do
  record "$class.a" 0 "$class"
  record "$class.b" 1 "$class"
  # Profiling refused or PM sampling unsupported: the whole check cannot run here (the
  # collector's typed errors, PmSamplingError, say these).
  if grep -qiE 'insufficient.privilege|restricted to administrators|RestrictProfilingToAdminUsers|PM sampling needs CUPTI|PM sampling (is )?(unavailable|not supported)|can PM-sample none|PM sampling: no CUDA driver' "$WORK/$class.b.stderr"; then
    grep -iE 'privilege|administrators|PM sampling|PM-sample' "$WORK/$class.b.stderr" | head -n 3 | sed 's/^/   | /'
    cannot "PM sampling refused on this machine (see $class.b.stderr)"
  fi
  if [ "$(left)" -lt 60 ]; then
    say "   time budget nearly spent ($(left) s left): the remaining classes are not run"
    break
  fi
done

say "== table (scripts/gpu-truth/table.py)"
timeout -k 5 "$(table_time)" python3 "$ROOT/scripts/gpu-truth/table.py" "$WORK" --classes "$CLASSES" | tee "$WORK/table.md"
RESULT=${PIPESTATUS[0]}
collect
say "== done in $(( $(date +%s) - T0 )) s"
case "$RESULT" in
0) say "PASS"; exit 0 ;;
2) say "CANNOT RUN"; exit 2 ;;
*) say "FAIL"; exit 1 ;;
esac
