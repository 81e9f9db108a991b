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
