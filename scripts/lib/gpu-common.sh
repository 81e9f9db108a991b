# shellcheck shell=bash
# Shared by scripts/gpu-smoke.sh, scripts/gpu-overhead.sh and scripts/gpu-truth.sh, which
# source it after setting ROOT (the repository's root); it runs nothing by itself.

# gpu_bin_dir [DIR]: the folder of the binaries the GPU machine runs. Sets BIN to DIR, else
# $GPUMETER_BIN_DIR, else target/gpu-smoke when `--prepare` filled it, else target/release
# (made absolute when it exists), GM to its `gpumeter` and INJECT to its
# `libgpumeter_inject.so`. Whether they exist is the caller's to check.
gpu_bin_dir() {
  BIN="${1:-${GPUMETER_BIN_DIR:-}}"
  if [ -z "$BIN" ]; then
    if [ -x "$ROOT/target/gpu-smoke/gpumeter" ]; then BIN="$ROOT/target/gpu-smoke"; else BIN="$ROOT/target/release"; fi
  fi
  BIN="$(cd "$BIN" 2>/dev/null && pwd || echo "$BIN")"
  # shellcheck disable=SC2034 # read by the scripts that source this file
  GM="$BIN/gpumeter"
  # shellcheck disable=SC2034 # read by the scripts that source this file
  INJECT="$BIN/libgpumeter_inject.so"
}

# first_file PATH...: the first of the PATHs that is a file, else nothing.
first_file() { for f in "$@"; do [ -f "$f" ] && { echo "$f"; return; }; done; }

# cuda_cupti CUDA_ROOT: the CUDA install's libcupti (versioned first), else nothing.
cuda_cupti() {
  first_file "$1"/extras/CUPTI/lib64/libcupti.so.1[0-9]* \
    "$1"/extras/CUPTI/lib64/libcupti.so "$1"/lib64/libcupti.so.1[0-9]* \
    "$1"/lib64/libcupti.so "$1"/targets/x86_64-linux/lib/libcupti.so.1[0-9]*
}

# wheel_cupti: the libcupti of NVIDIA's pip wheel python3 finds (CUDA 13's, else 12's), the
# copy PyTorch itself loads, else nothing.
wheel_cupti() {
  python3 - <<'PY' 2>/dev/null
import glob, os, sys
for d in sys.path:
    for sub in ("nvidia/cu13/lib/libcupti.so*", "nvidia/cuda_cupti/lib/libcupti.so*"):
        hits = sorted(glob.glob(os.path.join(d or ".", sub)))
        if hits:
            print(hits[0]); sys.exit(0)
PY
}
