#!/usr/bin/env bash
# gpumeter against its peers, and its memory (issue 13 "Deliver 3" and "Deliver 5";
# docs/PERFORMANCE.md "Issue 13"). Not part of CI. From a clean clone:
#
#   bash scripts/bench-peers.sh
#
# Builds the release `gpumeter` and `gpumeter-synth`, then prints, each figure the median of
# BENCH_RUNS runs, and the ratios:
#
# Every timed command runs once untimed first (page cache, binary, HTA's lazy imports).
#
#  1. Kineto traces: HolisticTraceAnalysis 0.5.0 (in a venv) `TraceAnalysis(trace_dir=…)` +
#     `get_gpu_kernel_breakdown(visualize=False)`, timed in-process (Python start-up and the
#     `import hta` excluded; HTA wants a directory of rank traces, so each trace is copied alone
#     into a temp dir, outside the timing), against `gpumeter usage TRACE` (whole process) on
#     the same file: HTA ÷ gpumeter = gpumeter's speed-up. Traces: BENCH_TRACES, else
#     ../shared/data/*.json.gz and examples/data/*.json.gz.
#  2. A 10 M-record raw CUPTI 12.8 buffer from gpumeter-synth: `openssl dgst -sha256 FILE`
#     against `gpumeter usage FILE` (usage ÷ openssl; the target is ≤ 1.5).
#  3. Peak RSS (`/usr/bin/time -v`, "Maximum resident set size") of `gpumeter usage` on 1 M and
#     10 M record raw buffers and `.gmr` recordings, and on the B200 Kineto trace and that
#     trace repeated to 10× its events (generated here: traceEvents repeated with shifted
#     timestamps, correlation and flow ids); ratios 10 M ÷ 1 M and 10× ÷ 1× (target ≤ 1.1).
#  4. `pipeline` (issue 34's first two rows): the criterion group `pipeline`
#     (benches/pipeline.rs) on the kernels-only mix and on the full mix, 1 M launches each:
#     `decode_and_meter` (in memory, `CuptiStream`) in kernel records per second and ÷
#     `libcupti_walk` (libcupti 12.8's own walk of the same buffers, from the CUPTI wheels of
#     bindings/cupti/fetch-wheels.sh; without them that ratio is missing), with the typed
#     path (`decode_and_meter_typed`) beside it. Read from criterion's estimates (medians).
#  5. `agent` (issue 34's last row): the agent bench's CPU part
#     (crates/gpumeter-agent/benches/agent.rs): the agent's CPU per million kernel records,
#     live and `--once`, ÷ the in-memory `meter_gmr` of the same recordings.
#
# Environment:
#   BENCH_RUNS=3         runs per timed figure (medians)
#   BENCH_MIX=kernels    synthetic records: `kernels` (CONCURRENT_KERNEL records only, 208 B
#                        each, as issue 13's "now" figures) or `full` (each kernel with its
#                        EXTERNAL_CORRELATION and RUNTIME records: 8 tenants, 4 processes; N
#                        records = N/3 launches)
#   BENCH_SMALL=1000000 BENCH_LARGE=10000000   records of the two synthetic sizes
#   BENCH_TRACES="a.json.gz b.json.gz"         Kineto traces to time against HTA
#   BENCH_SKIP_HTA=1     skip HTA (no venv, no network)
#   BENCH_PARTS="pipeline kineto sha rss agent"   which parts to run (default all)
#   BENCH_VENV=DIR       the venv (default: $CARGO_TARGET_DIR or target/, bench-peers-venv)
#   BENCH_TMP=DIR        where the work dir goes (default $TMPDIR or /tmp; needs ≈ 4.5 GB
#                        for the 10 M-record files of the `kernels` mix)
#   CARGO_TARGET_DIR     as cargo's
# Exit status: 0 done, 1 a step failed, 2 cannot run (python3, openssl, GNU time or cargo
# missing, HTA cannot be installed).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="${BENCH_RUNS:-3}"
MIX="${BENCH_MIX:-kernels}"
SMALL="${BENCH_SMALL:-1000000}"
LARGE="${BENCH_LARGE:-10000000}"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
VENV="${BENCH_VENV:-$TARGET/bench-peers-venv}"
HTA_VERSION=0.5.0
PARTS=" ${BENCH_PARTS:-pipeline kineto sha rss agent} "
part() { [[ "$PARTS" == *" $1 "* ]]; }
FAILED=""

say() { printf '%s\n' "$*"; }
cannot() { say "bench-peers: CANNOT RUN: $*" >&2; exit 2; }
fail() { say "bench-peers: FAILED: $*" >&2; exit 1; }

command -v python3 >/dev/null || cannot "python3 is missing (needed for HTA and the helpers)"
command -v openssl >/dev/null || cannot "openssl is missing (the SHA-256 baseline)"
command -v cargo >/dev/null || cannot "cargo is missing (builds gpumeter)"
[ -x /usr/bin/time ] && /usr/bin/time -v true 2>/dev/null ||
  cannot "GNU time (/usr/bin/time -v) is missing (peak RSS): apt-get install time"
case "$MIX" in kernels | full) ;; *) cannot "BENCH_MIX must be kernels or full, not $MIX" ;; esac

mkdir -p "${BENCH_TMP:-${TMPDIR:-/tmp}}"
WORK="$(mktemp -d "${BENCH_TMP:-${TMPDIR:-/tmp}}/gpumeter-bench.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

say "== gpumeter bench-peers ($(date -u +%Y-%m-%dT%H:%M:%SZ)) at $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
say "machine: $(nproc) cores, $(uname -m), load $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?'); runs: $RUNS; work dir $WORK"

(cd "$ROOT" && cargo build --release --locked -q -p gpumeter-cli -p gpumeter-synth) ||
  fail "cargo build --release -p gpumeter-cli -p gpumeter-synth"
GM="$TARGET/release/gpumeter"
SYNTH="$TARGET/release/gpumeter-synth"
[ -x "$GM" ] && [ -x "$SYNTH" ] || fail "no $GM or $SYNTH after the build"

# ------------------------------------------------------------------------------- helpers
# median FILE: the median of the numbers in FILE (one a line).
median() { sort -g "$1" | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else printf "%.6f\n", (v[NR/2]+v[NR/2+1])/2}'; }
# ratio A B: A / B with 2 decimals.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b>0) printf "%.2f", a/b; else print "n/a"}'; }
# timed OUT CMD...: runs CMD (output discarded) once to warm the page cache and the binary,
# then RUNS times; OUT gets the median wall seconds.
timed() {
  local out="$1"; shift
  "$@" >/dev/null 2>"$WORK/stderr" || { cat "$WORK/stderr" >&2; fail "$*"; }
  : >"$WORK/times"
  for _ in $(seq "$RUNS"); do
    local t0 t1
    t0=$(date +%s%N)
    "$@" >/dev/null 2>"$WORK/stderr" || { cat "$WORK/stderr" >&2; fail "$*"; }
    t1=$(date +%s%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.6f\n", (b-a)/1e9}' >>"$WORK/times"
  done
  median "$WORK/times" >"$out"
}
# rss CMD...: peak RSS of one run of CMD in MiB (GNU time -v, "Maximum resident set size").
rss() {
  /usr/bin/time -v -o "$WORK/timev" "$@" >/dev/null 2>"$WORK/stderr" || { cat "$WORK/stderr" >&2; fail "$*"; }
  awk -F: '/Maximum resident set size/ {printf "%.1f\n", $2/1024}' "$WORK/timev"
}
mb() { awk -v b="$(stat -c %s "$1")" 'BEGIN {printf "%.2f", b/1048576}'; }

# ---------------------------------------------------------------------- 1. HTA vs gpumeter
TRACES=()
if [ -n "${BENCH_TRACES:-}" ]; then
  read -r -a TRACES <<<"$BENCH_TRACES"
else
  for f in "$ROOT"/../shared/data/*.json.gz "$ROOT"/examples/data/*.json.gz; do
    [ -f "$f" ] && TRACES+=("$(cd "$(dirname "$f")" && pwd)/$(basename "$f")")
  done
fi
B200=""
for f in "${TRACES[@]}"; do case "$f" in *tracelens_b200_eager_trace.json.gz) B200="$f" ;; esac; done

cat >"$WORK/hta_time.py" <<'EOF'
"""Times HTA's load + kernel breakdown of one Kineto trace in-process: prints the median wall
seconds of RUNS runs (after one untimed warm-up run, which pays HTA's lazy imports) and the
kernels HTA found. The import is outside the timing."""
import os, shutil, statistics, sys, tempfile, time

from hta.trace_analysis import TraceAnalysis  # noqa: E402 (excluded from the timing)

path, runs, work = sys.argv[1], int(sys.argv[2]), sys.argv[3]
times, kernels = [], 0
for _ in range(runs + 1):
    d = tempfile.mkdtemp(dir=work)
    shutil.copy(path, os.path.join(d, os.path.basename(path)))  # a directory of rank traces
    t0 = time.perf_counter()
    analyzer = TraceAnalysis(trace_dir=d)
    by_type, by_kernel = analyzer.get_gpu_kernel_breakdown(visualize=False)
    times.append(time.perf_counter() - t0)
    kernels = len(by_kernel)
    shutil.rmtree(d)
times = times[1:]
print(f"{statistics.median(times):.6f} {kernels}")
EOF

SUMMARY=()
if ! part kineto; then
  :
elif [ "${BENCH_SKIP_HTA:-0}" = 1 ]; then
  say "-- HTA skipped (BENCH_SKIP_HTA=1)"
elif [ "${#TRACES[@]}" -eq 0 ]; then
  fail "no Kineto traces (../shared/data/*.json.gz, examples/data/*.json.gz; or set BENCH_TRACES)"
else
  if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('HolisticTraceAnalysis') != '$HTA_VERSION')" 2>/dev/null; then
    say "-- installing HolisticTraceAnalysis==$HTA_VERSION into $VENV"
    python3 -m venv "$VENV" || cannot "python3 -m venv failed (apt-get install python3-venv)"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "HolisticTraceAnalysis==$HTA_VERSION" ||
      cannot "pip install HolisticTraceAnalysis==$HTA_VERSION failed (network?); BENCH_SKIP_HTA=1 skips it"
  fi
  say "-- Kineto: HTA $HTA_VERSION load + get_gpu_kernel_breakdown (in-process) vs gpumeter usage (whole process), median of $RUNS"
  printf '%-62s %9s %10s %10s %9s\n' trace MiB "HTA s" "gpumeter s" speed-up
  for f in "${TRACES[@]}"; do
    if ! out="$("$VENV/bin/python" "$WORK/hta_time.py" "$f" "$RUNS" "$WORK" 2>"$WORK/hta.log")"; then
      printf '%-62s HTA failed: %s\n' "$(basename "$f")" "$(tail -n 1 "$WORK/hta.log")"
      [ "$f" = "$B200" ] && FAILED="HTA failed on the B200 trace ($WORK/hta.log is removed at exit: rerun with BENCH_TRACES=$f)"
      continue
    fi
    hta_s="${out%% *}"
    timed "$WORK/gm" "$GM" usage "$f"
    gm_s="$(cat "$WORK/gm")"
    printf '%-62s %9s %10s %10s %8s×\n' "$(basename "$f")" "$(mb "$f")" "$hta_s" "$gm_s" "$(ratio "$hta_s" "$gm_s")"
    case "$f" in
      "$B200") SUMMARY+=("Kineto B200: gpumeter is $(ratio "$hta_s" "$gm_s")× faster than HTA $HTA_VERSION (target ≥ 20×)") ;;
    esac
  done
fi

# --------------------------------------------------------- 2. synthetic buffers, openssl
SYNTH_ARGS=()
per_launch=1
if [ "$MIX" = kernels ]; then SYNTH_ARGS+=(--kernels-only); else per_launch=3; fi
gen() { # gen RECORDS FORMAT FILE
  "$SYNTH" --kernels $(($1 / per_launch)) --format "$2" -o "$3" "${SYNTH_ARGS[@]}" 2>"$WORK/synth.log" ||
    { cat "$WORK/synth.log" >&2; fail "gpumeter-synth $*"; }
}
if part sha || part rss; then
  say "-- synthetic CUPTI 12.8 workloads (gpumeter-synth, mix: $MIX)"
  for n in "$SMALL" "$LARGE"; do
    gen "$n" cupti "$WORK/$n.cupti"
    gen "$n" gmr "$WORK/$n.gmr"
    say "   $n records: raw $(mb "$WORK/$n.cupti") MiB, .gmr $(mb "$WORK/$n.gmr") MiB"
  done
fi

if part sha; then
  say "-- $LARGE-record raw buffer: openssl dgst -sha256 vs gpumeter usage, median of $RUNS"
  timed "$WORK/ossl" openssl dgst -sha256 "$WORK/$LARGE.cupti"
  timed "$WORK/gmu" "$GM" usage "$WORK/$LARGE.cupti"
  ossl_s="$(cat "$WORK/ossl")"; gmu_s="$(cat "$WORK/gmu")"
  say "   openssl dgst -sha256: $ossl_s s; gpumeter usage: $gmu_s s ($(awk -v n="$LARGE" -v s="$gmu_s" 'BEGIN {printf "%.2f", n/s/1e6}') M records/s)"
  SUMMARY+=("$LARGE-record raw buffer: gpumeter usage ÷ openssl dgst -sha256 = $(ratio "$gmu_s" "$ossl_s") (target ≤ 1.5)")
fi

# -------------------------------------------------------------------------- 3. peak RSS
if part rss; then
  say "-- peak RSS of gpumeter usage (MiB)"
  declare -A R
  for n in "$SMALL" "$LARGE"; do
    for fmt in cupti gmr; do
      R[$n.$fmt]="$(rss "$GM" usage "$WORK/$n.$fmt")"
      say "   $n records, $fmt: ${R[$n.$fmt]} MiB (file $(mb "$WORK/$n.$fmt") MiB)"
    done
  done
  SUMMARY+=("peak RSS $LARGE ÷ $SMALL records: raw $(ratio "${R[$LARGE.cupti]}" "${R[$SMALL.cupti]}"), .gmr $(ratio "${R[$LARGE.gmr]}" "${R[$SMALL.gmr]}") (target ≤ 1.1)")

  if [ -n "$B200" ]; then
    python3 - "$B200" "$WORK/b200x10.json.gz" <<'EOF'
"""Writes the trace repeated to 10x its events: copy k of traceEvents shifted by k spans
(plus 1 ms) in time, its correlation, External id and flow ids shifted past the original's."""
import gzip, json, sys

src, dst = sys.argv[1], sys.argv[2]
with gzip.open(src, "rt") as f:
    doc = json.load(f)
events = doc["traceEvents"]
ts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
span = max(ts) - min(ts) + max((e.get("dur", 0) for e in events if isinstance(e.get("dur"), (int, float))), default=0) + 1000
ids = [e["args"].get(k) for e in events if isinstance(e.get("args"), dict) for k in ("correlation", "External id")]
step = max([i for i in ids if isinstance(i, int)] + [e.get("id") for e in events if isinstance(e.get("id"), int)] + [0]) + 1
out = []
for k in range(10):
    for e in events:
        c = dict(e)
        if k:
            if isinstance(c.get("ts"), (int, float)):
                c["ts"] = round(c["ts"] + k * span, 3)
            if isinstance(c.get("id"), int):
                c["id"] = c["id"] + k * step
            if isinstance(c.get("args"), dict):
                a = dict(c["args"])
                for key in ("correlation", "External id"):
                    if isinstance(a.get(key), int):
                        a[key] = a[key] + k * step
                c["args"] = a
        out.append(c)
doc["traceEvents"] = out
with gzip.open(dst, "wt") as f:
    json.dump(doc, f)
EOF
    r1="$(rss "$GM" usage "$B200")"
    r10="$(rss "$GM" usage "$WORK/b200x10.json.gz")"
    say "   Kineto B200: $r1 MiB (file $(mb "$B200") MiB); repeated 10×: $r10 MiB (file $(mb "$WORK/b200x10.json.gz") MiB)"
    SUMMARY+=("peak RSS Kineto B200 10× ÷ 1×: $(ratio "$r10" "$r1") (target ≤ 1.1)")
  else
    say "   (no tracelens_b200_eager_trace.json.gz among the traces: no Kineto RSS figure)"
  fi
fi

# ------------------------------------------------ 4. pipeline: in memory, against libcupti
# crit NAME: criterion's median of pipeline/NAME in ns (empty when it did not run).
crit() {
  local f="$TARGET/criterion/pipeline/$1/new/estimates.json"
  [ -f "$f" ] && python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["median"]["point_estimate"])' "$f"
}
if part pipeline; then
  LIBCUPTI=""
  if [ -f "$ROOT/bindings/cupti/.wheels/env.sh" ]; then
    # shellcheck disable=SC1091
    LIBCUPTI="$(. "$ROOT/bindings/cupti/.wheels/env.sh" >/dev/null 2>&1; echo "${CUPTI12_LIB:-}")"
  fi
  [ -n "$LIBCUPTI" ] || say "   (no CUPTI 12.8 wheel: run bindings/cupti/fetch-wheels.sh for the libcupti_walk row)"
  for mix in kernels full; do
    only=0; [ "$mix" = kernels ] && only=1
    say "-- criterion pipeline, 1 M launches, mix: $mix (decode_and_meter, decode_and_meter_typed, libcupti_walk)"
    rm -rf "$TARGET/criterion/pipeline"
    (cd "$ROOT" && GPUMETER_BENCH_KERNELS_ONLY=$only GPUMETER_CUPTI_LIB="${LIBCUPTI:+$LIBCUPTI/libcupti.so.12}" \
      cargo bench --locked -q --bench pipeline -- --warm-up-time 1 --measurement-time 5 \
      'pipeline/(libcupti_walk|decode_and_meter|decode_and_meter_typed)$' >"$WORK/pipeline.log" 2>&1) ||
      { tail -n 20 "$WORK/pipeline.log" >&2; fail "cargo bench --bench pipeline ($mix)"; }
    cupti_ns="$(crit libcupti_walk || true)"; dm_ns="$(crit decode_and_meter)"; typed_ns="$(crit decode_and_meter_typed)"
    rate="$(awk -v ns="$dm_ns" 'BEGIN {printf "%.2f", 1e6 / (ns / 1e9) / 1e6}')"
    say "   decode_and_meter $(awk -v n="$dm_ns" 'BEGIN {printf "%.1f", n/1e6}') ms ($rate M kernel records/s); typed path $(awk -v n="$typed_ns" 'BEGIN {printf "%.1f", n/1e6}') ms; libcupti walk ${cupti_ns:+$(awk -v n="$cupti_ns" 'BEGIN {printf "%.1f", n/1e6}') ms}"
    vs="${cupti_ns:+, $(ratio "$dm_ns" "$cupti_ns")× the libcupti walk}"
    if [ "$mix" = kernels ]; then
      SUMMARY+=("in-memory decode + meter, kernel records only: $rate M/s$vs (target ≥ 5 M/s, ≤ 12×)")
    else
      SUMMARY+=("in-memory decode + meter, full mix: $rate M kernel records/s$vs (target ≥ 3 M/s, ≤ 3×)")
    fi
  done
fi

# --------------------------------------------------------- 5. the agent's CPU, issue 34
if part agent; then
  say "-- the agent's CPU per million kernel records (cargo bench -p gpumeter-agent --bench agent, CPU part)"
  (cd "$ROOT" && GPUMETER_AGENT_BENCH_PARTS=cpu cargo bench --locked -q -p gpumeter-agent --bench agent \
    >"$WORK/agent.log" 2>&1) || { tail -n 20 "$WORK/agent.log" >&2; fail "cargo bench -p gpumeter-agent --bench agent"; }
  grep '^|' "$WORK/agent.log" | sed 's/^/   /'
  live="$(awk -F'|' '/agent live/ {gsub(/[ ×*]/, "", $6); print $6}' "$WORK/agent.log")"
  once="$(awk -F'|' '/agent `--once`/ {gsub(/[ ×*]/, "", $6); print $6}' "$WORK/agent.log")"
  SUMMARY+=("the agent's CPU per million records ÷ in-memory: live ${live:-?}×, --once ${once:-?}× (target ≤ 1.5×)")
fi

say "== ratios"
for s in "${SUMMARY[@]}"; do say "   $s"; done
[ -z "$FAILED" ] || fail "$FAILED"
