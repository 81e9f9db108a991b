#!/usr/bin/env bash
# Peak RSS of `gpumeter usage` on one synthetic CUPTI source against two merged as streams
# (issue 13, `gpumeter_recording::meter_files`; docs/PERFORMANCE.md "Several inputs merged as
# streams"). Not part of CI. From a clean clone:
#
#   bash scripts/bench-merge-rss.sh
#
# Builds the release `gpumeter` and `gpumeter-synth`, writes 1 M-launch workloads (full mix:
# EXTERNAL_CORRELATION + RUNTIME + kernel records, raw and `.gmr`; and kernels only) of two
# seeds, and prints the peak RSS (`/usr/bin/time -v`, "Maximum resident set size") of one
# source, two merged, and two that the merge refuses (the same work in other bytes: a raw
# buffer and a copy with 64 zero bytes appended), which the whole-file path meters.
# BENCH_KERNELS (default 1000000) sets the launches per source; BENCH_WORK the folder.
set -euo pipefail
cd "$(dirname "$0")/.."
N="${BENCH_KERNELS:-1000000}"
W="${BENCH_WORK:-$(mktemp -d)}"
T="${CARGO_TARGET_DIR:-target}/release"
[ -x /usr/bin/time ] || { echo "GNU time (/usr/bin/time -v) is missing: apt-get install time" >&2; exit 1; }
cargo build --release -q -p gpumeter-cli -p gpumeter-synth
gen() { [ -f "$W/$1" ] || "$T/gpumeter-synth" --kernels "$N" "${@:2}" -o "$W/$1" >/dev/null; }
for s in 21 22; do
  gen "$s.cupti" --seed "$s"
  gen "$s.gmr" --seed "$s" --format gmr
  gen "k$s.cupti" --seed "$s" --kernels-only
done
for f in 21.cupti k21.cupti; do
  [ -f "$W/padded-$f" ] || { cp "$W/$f" "$W/padded-$f"; head -c 64 /dev/zero >>"$W/padded-$f"; }
done
rss() {
  /usr/bin/time -v -o "$W/timev" "$T/gpumeter" usage --json "$@" >/dev/null
  awk -F: '/Maximum resident set size/ {printf "%.1f MiB\n", $2/1024}' "$W/timev"
}
echo "$N launches per source, files in $W"
echo "full mix, raw:   one $(rss "$W/21.cupti"); two merged $(rss "$W/21.cupti" "$W/22.cupti"); two whole (same work) $(rss "$W/21.cupti" "$W/padded-21.cupti")"
echo "full mix, .gmr:  one $(rss "$W/21.gmr"); two merged $(rss "$W/21.gmr" "$W/22.gmr"); raw + .gmr merged $(rss "$W/21.cupti" "$W/22.gmr")"
echo "kernels only:    one $(rss "$W/k21.cupti"); two merged $(rss "$W/k21.cupti" "$W/k22.cupti"); two whole (same work) $(rss "$W/k21.cupti" "$W/padded-k21.cupti")"
