#!/usr/bin/env bash
# Fetch NVIDIA's pinned CUPTI / CUDA-header wheels from PyPI and unpack what the bindings and
# the tests need.
#
#   bindings/cupti/fetch-wheels.sh [DEST]      (DEST defaults to bindings/cupti/.wheels, git-ignored)
#
# Pins: versions.env (wheel versions), wheels.sha256 (their x86_64 files' hashes, checked).
# Needs python3 with pip (`python3 -m pip download`) and network access to PyPI only.
# Idempotent: wheels already downloaded (and verified) and already unpacked are skipped.
#
# Layout written under DEST:
#   dl/*.whl                                   the downloaded wheels
#   cu12/nvidia/cuda_cupti/{include,lib}       CUPTI 12.8 headers, libcupti.so.12
#   cu12/nvidia/cuda_runtime/include           cuda.h (12.8)
#   cu12/nvidia/cuda_nvcc/include              crt/ (12.8)
#   cu130/nvidia/cu13/{include,lib}            CUPTI 13.0 headers + cuda.h + crt/, libcupti.so.13
#   cu13/nvidia/cu13/{include,lib}             CUPTI 13.4 headers + cuda.h + crt/, libcupti.so.13
#   env.sh                                     `source` it: exports the variables below
#
# env.sh exports (absolute paths):
#   CUPTI12_INCLUDE  CUPTI12_LIB  CUDA12_INCLUDE  CUDA12_CRT_INCLUDE
#   CUPTI13_INCLUDE  CUPTI13_LIB  CUDA13_INCLUDE  CUDA13_CRT_INCLUDE            (13.4)
#   CUPTI130_INCLUDE CUPTI130_LIB CUDA130_INCLUDE CUDA130_CRT_INCLUDE           (13.0)
# (CUDA*_INCLUDE holds cuda.h; CUDA*_CRT_INCLUDE is the directory that holds crt/.)
# Tests load libcupti from GPUMETER_CUPTI_LIB, e.g. "$CUPTI12_LIB/libcupti.so.12".
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dest="${1:-$here/.wheels}"
mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"

# shellcheck source=versions.env
. "$here/versions.env"

if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "fetch-wheels: python3 with pip is required (apt-get install python3-pip)" >&2
  exit 1
fi

mkdir -p "$dest/dl" "$dest/cu12" "$dest/cu130" "$dest/cu13"

# wheel_file SPEC: the downloaded wheel of NAME==VERSION in dl/ (empty if absent).
wheel_file() {
  local name="${1%%==*}" version="${1##*==}"
  local stem="${name//-/_}-${version}-"
  local f
  for f in "$dest/dl/$stem"*.whl; do
    if [ -f "$f" ]; then
      echo "$f"
      return
    fi
  done
}

# verify FILE: checks FILE against wheels.sha256 when it is listed there.
verify() {
  local f="$1" base want got
  base="$(basename "$f")"
  want="$(awk -v b="$base" '$2 == b { print $1 }' "$here/wheels.sha256")"
  if [ -z "$want" ]; then
    echo "fetch-wheels: warning: $base has no pinned sha256 (not x86_64?); not verified" >&2
    return 0
  fi
  got="$(sha256sum "$f" | awk '{ print $1 }')"
  if [ "$got" != "$want" ]; then
    echo "fetch-wheels: sha256 mismatch for $base: got $got, pinned $want" >&2
    return 1
  fi
}

# fetch SPEC: downloads the wheel unless it is already there; prints its path.
fetch() {
  local spec="$1" f
  f="$(wheel_file "$spec")"
  if [ -z "$f" ]; then
    echo "fetch-wheels: downloading $spec" >&2
    python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$dest/dl" "$spec" >&2
    f="$(wheel_file "$spec")"
    if [ -z "$f" ]; then
      echo "fetch-wheels: pip did not produce a wheel for $spec" >&2
      exit 1
    fi
  fi
  verify "$f"
  echo "$f"
}

# unpack WHEEL DIR PREFIX...: extracts the members under the PREFIXes into DIR, once.
unpack() {
  local whl="$1" dir="$2"
  shift 2
  local stamp
  stamp="$dir/.unpacked-$(basename "$whl")"
  [ -f "$stamp" ] && return 0
  python3 - "$whl" "$dir" "$@" <<'PY'
import sys, zipfile
whl, out, prefixes = sys.argv[1], sys.argv[2], tuple(sys.argv[3:])
with zipfile.ZipFile(whl) as z:
    z.extractall(out, [m for m in z.namelist() if m.startswith(prefixes)])
PY
  touch "$stamp"
}

unpack "$(fetch "$CUPTI12_WHEEL")" "$dest/cu12" nvidia/cuda_cupti/include/ nvidia/cuda_cupti/lib/
unpack "$(fetch "$CUDA_RUNTIME12_WHEEL")" "$dest/cu12" nvidia/cuda_runtime/include/
unpack "$(fetch "$CUDA_NVCC12_WHEEL")" "$dest/cu12" nvidia/cuda_nvcc/include/
unpack "$(fetch "$CUPTI130_WHEEL")" "$dest/cu130" nvidia/cu13/include/ nvidia/cu13/lib/
unpack "$(fetch "$CUDA_RUNTIME130_WHEEL")" "$dest/cu130" nvidia/cu13/include/
unpack "$(fetch "$CUDA_CRT130_WHEEL")" "$dest/cu130" nvidia/cu13/include/
unpack "$(fetch "$CUPTI13_WHEEL")" "$dest/cu13" nvidia/cu13/include/ nvidia/cu13/lib/
unpack "$(fetch "$CUDA_RUNTIME13_WHEEL")" "$dest/cu13" nvidia/cu13/include/
unpack "$(fetch "$CUDA_CRT13_WHEEL")" "$dest/cu13" nvidia/cu13/include/

c12="$dest/cu12/nvidia"
c130="$dest/cu130/nvidia/cu13"
c13="$dest/cu13/nvidia/cu13"
for p in "$c12/cuda_cupti/include/cupti.h" "$c12/cuda_cupti/lib/libcupti.so.12" \
  "$c12/cuda_runtime/include/cuda.h" "$c12/cuda_nvcc/include/crt/host_defines.h" \
  "$c130/include/cupti.h" "$c130/lib/libcupti.so.13" "$c130/include/cuda.h" \
  "$c130/include/crt/host_defines.h" \
  "$c13/include/cupti.h" "$c13/lib/libcupti.so.13" "$c13/include/cuda.h" \
  "$c13/include/crt/host_defines.h"; do
  if [ ! -f "$p" ]; then
    echo "fetch-wheels: expected $p after unpacking; delete $dest and retry" >&2
    exit 1
  fi
done

cat >"$dest/env.sh" <<EOF
# Written by bindings/cupti/fetch-wheels.sh; source it.
export CUPTI12_INCLUDE="$c12/cuda_cupti/include"
export CUPTI12_LIB="$c12/cuda_cupti/lib"
export CUDA12_INCLUDE="$c12/cuda_runtime/include"
export CUDA12_CRT_INCLUDE="$c12/cuda_nvcc/include"
export CUPTI13_INCLUDE="$c13/include"
export CUPTI13_LIB="$c13/lib"
export CUDA13_INCLUDE="$c13/include"
export CUDA13_CRT_INCLUDE="$c13/include"
export CUPTI130_INCLUDE="$c130/include"
export CUPTI130_LIB="$c130/lib"
export CUDA130_INCLUDE="$c130/include"
export CUDA130_CRT_INCLUDE="$c130/include"
EOF
echo "fetch-wheels: ready; source $dest/env.sh" >&2
cat "$dest/env.sh"
