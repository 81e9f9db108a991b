#!/usr/bin/env bash
# gpumeter GPU smoke test (issue 4; docs/COLLECTION.md "Smoke test").
#
# Records small CUDA workloads with `gpumeter record` and checks that gpumeter metered exactly
# what the workloads say they did: the number of kernel launches (`gpumeter usage --json`)
# and the kernel names with their counts (`gpumeter recording show --json`), and that the
# CUDA C recording has NVML energy frames for its device (at least 2, timestamps increasing on
# CUPTI's clock, the counter never falling and growing); records the CUDA C workload again in
# instrumented mode (`--instructions`, SASS metrics) and checks one instruction-count frame
# per launch, every count > 0 and the same count for every launch of a kernel (one launch
# configuration each); runs `gpumeter preview` with examples/pricebook.toml. Prints PASS or
# FAIL with the numbers.
#
#   scripts/gpu-smoke.sh --prepare [DIR]   on the build machine (Rust, network): builds the
#                                          release binaries and copies them, stripped, to DIR
#                                          (default target/gpu-smoke)
#   scripts/gpu-smoke.sh [DIR]             on the GPU machine (no network needed): DIR holds
#                                          `gpumeter` and `libgpumeter_inject.so` (default
#                                          $GPUMETER_BIN_DIR, else target/gpu-smoke when it
#                                          exists, else target/release)
#
# Needs on the GPU machine: an NVIDIA GPU and driver, nvcc ($CUDA_HOME/bin, /usr/local/cuda/bin
# or PATH), python3; optional: PyTorch with CUDA (a second workload). Environment:
#   GPUMETER_CUPTI_LIB  the libcupti to use (else found and printed: the CUDA install's for the
#                       CUDA C workload, the pip wheel's that PyTorch loads for the PyTorch one)
#   SMOKE_ITERS         loop iterations of the CUDA C workload (default 1000: 2101 launches)
#   SMOKE_TORCH_ITERS   in-place multiplications of the PyTorch workload (default 500)
#   SMOKE_TORCH=0       skip the PyTorch workload
#   SMOKE_GREEN=0       skip the green-context (SM partition) workload
#   SMOKE_INSTR_ITERS   loop iterations of the instrumented CUDA C run (default 50: 106 launches)
#   SMOKE_INSTRUCTIONS=0  skip the instrumented run
#   GPUMETER_ENERGY_INTERVAL_MS  energy sampling interval while recording (default here 200)
#   OUT                 when set, the recordings, reports and logs are copied there
# Exit status: 0 PASS, 1 FAIL, 2 could not run (no GPU, no nvcc, binaries missing).
# Budget: well under 5 minutes (each step has a timeout).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [ "${1:-}" = "--prepare" ]; then
  DEST="${2:-$ROOT/target/gpu-smoke}"
  set -e
  (cd "$ROOT" && cargo build --release --locked -p gpumeter-cli -p gpumeter-inject)
  mkdir -p "$DEST"
  cp "$ROOT/target/release/gpumeter" "$ROOT/target/release/libgpumeter_inject.so" "$DEST/"
  if command -v strip >/dev/null; then
    strip "$DEST/gpumeter"
    strip --strip-unneeded "$DEST/libgpumeter_inject.so"
  fi
  ls -l "$DEST"
  echo "prepared $DEST: carry it to the GPU machine and run scripts/gpu-smoke.sh ${DEST#"$ROOT"/}"
  exit 0
fi

# shellcheck source=/dev/null # scripts/lib/gpu-common.sh, checked on its own
. "$ROOT/scripts/lib/gpu-common.sh"
gpu_bin_dir "${1:-}"
BOOK="$ROOT/examples/pricebook.toml"
ITERS="${SMOKE_ITERS:-1000}"
TORCH_ITERS="${SMOKE_TORCH_ITERS:-500}"
INSTR_ITERS="${SMOKE_INSTR_ITERS:-50}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpumeter-smoke.XXXXXX")"
T0=$(date +%s)

say() { printf '%s\n' "$*"; }
cannot() { say "CANNOT RUN: $*"; collect; exit 2; }
collect() {
  if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT" && cp -r "$WORK"/. "$OUT"/ 2>/dev/null
    rm -f "$OUT/smoke" 2>/dev/null
    say "artifacts copied to $OUT"
  fi
}

say "== gpumeter GPU smoke test ($(date -u +%Y-%m-%dT%H:%M:%SZ)), work dir $WORK"
[ -x "$GM" ] || cannot "no gpumeter binary at $GM (build with: scripts/gpu-smoke.sh --prepare)"
[ -f "$INJECT" ] || cannot "no libgpumeter_inject.so at $INJECT"
say "gpumeter:   $GM ($("$GM" --version 2>&1))"
say "inject lib: $INJECT"
export GPUMETER_INJECT_LIB="$INJECT" GPUMETER_VERBOSE=1
export GPUMETER_ENERGY_INTERVAL_MS="${GPUMETER_ENERGY_INTERVAL_MS:-200}"
command -v python3 >/dev/null || cannot "python3 is needed to compare the JSON outputs"

if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,driver_version,uuid --format=csv,noheader 2>&1 | sed 's/^/gpu:        /'
else
  say "gpu:        (no nvidia-smi)"
fi

NVCC=""
for c in "${CUDA_HOME:-}/bin/nvcc" /usr/local/cuda/bin/nvcc "$(command -v nvcc 2>/dev/null)"; do
  if [ -n "$c" ] && [ -x "$c" ]; then NVCC="$c"; break; fi
done
[ -n "$NVCC" ] || cannot "no nvcc (set CUDA_HOME)"
CUDA_ROOT="$(cd "$(dirname "$NVCC")/.." && pwd)"
say "nvcc:       $NVCC ($("$NVCC" --version | tail -n 1))"

# libcupti: the CUDA install's, and the pip wheel's (the copy PyTorch itself loads).
CUPTI_CUDA="$(cuda_cupti "$CUDA_ROOT")"
CUPTI_PY="$(wheel_cupti)"
if [ -n "${GPUMETER_CUPTI_LIB:-}" ]; then
  CUPTI_C="$GPUMETER_CUPTI_LIB"; CUPTI_T="$GPUMETER_CUPTI_LIB"
  say "libcupti:   $GPUMETER_CUPTI_LIB (GPUMETER_CUPTI_LIB, both workloads)"
else
  CUPTI_C="${CUPTI_CUDA:-$CUPTI_PY}"; CUPTI_T="${CUPTI_PY:-$CUPTI_CUDA}"
  say "libcupti:   CUDA install: ${CUPTI_CUDA:-none}; python wheel: ${CUPTI_PY:-none}"
  say "            CUDA C workload uses ${CUPTI_C:-none}; PyTorch workload uses ${CUPTI_T:-none}"
fi
[ -n "$CUPTI_C" ] || cannot "no libcupti found (set GPUMETER_CUPTI_LIB)"

# --------------------------------------------------------------------------- CUDA C workload
# The CUDA runtime error check both CUDA workloads use.
cat >"$WORK/gm_check.h" <<'EOF'
// CK(call): return 3 from main, naming the call, when a CUDA runtime call fails.
#include <cstdio>
#include <cuda_runtime.h>
#define CK(call)                                                                  \
  do {                                                                            \
    cudaError_t e_ = (call);                                                      \
    if (e_ != cudaSuccess) {                                                      \
      fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));                 \
      return 3;                                                                   \
    }                                                                             \
  } while (0)
EOF

cat >"$WORK/smoke.cu" <<'EOF'
// gpumeter smoke workload: known launches of three named kernels (extern "C": unmangled
// names), a copy each way, a result check. Prints what it launched.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

extern "C" __global__ void gm_smoke_add(float *x, const float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += y[i];
}
extern "C" __global__ void gm_smoke_scale(float *x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
extern "C" __global__ void gm_smoke_fill(float *x, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = v;
}

#include "gm_check.h"

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 1000;
  const int n = 1 << 20;
  float *x, *y;
  CK(cudaMalloc(&x, n * sizeof(float)));
  CK(cudaMalloc(&y, n * sizeof(float)));
  float *h = (float *)malloc(n * sizeof(float));
  for (int i = 0; i < n; i++) h[i] = 1.0f;
  CK(cudaMemcpy(y, h, n * sizeof(float), cudaMemcpyHostToDevice));
  long add = 0, scale = 0, fill = 0;
  gm_smoke_fill<<<(n + 127) / 128, 128>>>(x, 0.0f, n); fill++;
  for (int i = 0; i < iters; i++) {
    gm_smoke_add<<<(n + 255) / 256, 256>>>(x, y, n); add++;
    gm_smoke_scale<<<(n + 511) / 512, 512>>>(x, 1.0f, n); scale++;
    if (i % 10 == 0) { gm_smoke_fill<<<(n + 127) / 128, 128>>>(y, 1.0f, n); fill++; }
  }
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(h, x, n * sizeof(float), cudaMemcpyDeviceToHost));
  int ok = h[0] == (float)iters && h[n - 1] == (float)iters;
  printf("KERNEL gm_smoke_add %ld\nKERNEL gm_smoke_scale %ld\nKERNEL gm_smoke_fill %ld\n", add,
         scale, fill);
  printf("TOTAL %ld\nCHECK %s\n", add + scale + fill, ok ? "ok" : "bad");
  CK(cudaFree(x));
  CK(cudaFree(y));
  free(h);
  return ok ? 0 : 4;
}
EOF

say "== building the CUDA C workload"
if ! timeout -k 10 180 "$NVCC" -O2 -arch=native -o "$WORK/smoke" "$WORK/smoke.cu" >"$WORK/nvcc.log" 2>&1; then
  say "   -arch=native failed ($(tail -n 1 "$WORK/nvcc.log")); trying sm_90"
  timeout -k 10 180 "$NVCC" -O2 -arch=sm_90 -o "$WORK/smoke" "$WORK/smoke.cu" >>"$WORK/nvcc.log" 2>&1 \
    || cannot "nvcc failed: $(tail -n 3 "$WORK/nvcc.log")"
fi

# Runs one recorded workload: NAME LIBCUPTI COMMAND...; leaves NAME.{gmr,stdout,stderr,...}.
# RECORD_ARGS: extra `gpumeter record` options (e.g. --instructions).
record() {
  local name="$1" lib="$2"; shift 2
  local t=$(date +%s)
  # shellcheck disable=SC2086
  GPUMETER_CUPTI_LIB="$lib" timeout -k 10 150 "$GM" record ${RECORD_ARGS:-} --out "$WORK/$name.gmr" -- "$@" \
    >"$WORK/$name.stdout" 2>"$WORK/$name.stderr"
  local rc=$?
  say "   $name: exit $rc in $(( $(date +%s) - t )) s"
  sed 's/^/   | /' "$WORK/$name.stderr" | grep -E 'gpumeter|recording|notice|error' | head -n 20
  "$GM" recording show --json "$WORK/$name.gmr" >"$WORK/$name.show.json" 2>>"$WORK/$name.stderr"
  "$GM" recording show "$WORK/$name.gmr" >"$WORK/$name.show.txt" 2>>"$WORK/$name.stderr"
  "$GM" usage --json "$WORK/$name.gmr" >"$WORK/$name.usage.json" 2>>"$WORK/$name.stderr"
  "$GM" usage "$WORK/$name.gmr" >"$WORK/$name.usage.txt" 2>>"$WORK/$name.stderr"
  "$GM" preview "$WORK/$name.gmr" --prices "$BOOK" >"$WORK/$name.preview.txt" 2>>"$WORK/$name.stderr"
  echo "$rc" >"$WORK/$name.rc"
}

say "== recording the CUDA C workload ($ITERS iterations)"
record cuda "$CUPTI_C" "$WORK/smoke" "$ITERS"

INSTR_STATUS=skip
if [ "${SMOKE_INSTRUCTIONS:-1}" != "0" ]; then
  say "== recording the CUDA C workload in instrumented mode ($INSTR_ITERS iterations, --instructions)"
  RECORD_ARGS=--instructions record cuda_instr "$CUPTI_C" "$WORK/smoke" "$INSTR_ITERS"
  # Two host threads launching into one context at once, each on its own stream: the
  # per-context serialization of instrumented mode must neither hang nor mix their counts.
  cat >"$WORK/mt.cu" <<'CUDA'
// Two host threads launching into the primary context at once (instrumented-mode check).
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <cuda_runtime.h>

extern "C" __global__ void gm_mt_a(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.f;
}
extern "C" __global__ void gm_mt_b(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 1.0001f;
}

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 50;
  const int n = 1 << 20;
  float *x, *y;
  cudaMalloc(&x, n * 4);
  cudaMalloc(&y, n * 4);
  auto work = [&](int which) {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    for (int i = 0; i < iters; i++) {
      if (which == 0)
        gm_mt_a<<<n / 256, 256, 0, s>>>(x, n);
      else
        gm_mt_b<<<n / 256, 256, 0, s>>>(y, n);
    }
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  };
  std::thread t0(work, 0), t1(work, 1);
  t0.join();
  t1.join();
  cudaError_t e = cudaDeviceSynchronize();
  printf("KERNEL gm_mt_a %d\nKERNEL gm_mt_b %d\nTOTAL %d\nCHECK %s\n", iters, iters, 2 * iters,
         e == cudaSuccess ? "ok" : cudaGetErrorString(e));
  cudaFree(x);
  cudaFree(y);
  return e == cudaSuccess ? 0 : 4;
}
CUDA
  if timeout -k 10 180 "$NVCC" -O2 -arch=native -o "$WORK/mt" "$WORK/mt.cu" >"$WORK/mt.nvcc.log" 2>&1 \
     || timeout -k 10 180 "$NVCC" -O2 -arch=sm_90 -o "$WORK/mt" "$WORK/mt.cu" >>"$WORK/mt.nvcc.log" 2>&1; then
    say "== recording a two-thread workload in instrumented mode ($INSTR_ITERS launches per thread)"
    RECORD_ARGS=--instructions record mt_instr "$CUPTI_C" "$WORK/mt" "$INSTR_ITERS"
  fi
  INSTR_STATUS=ran
fi

# ------------------------------------------------------------------ green-context workload
# A green context of (at least) 16 SMs (CUDA driver API, 12.4+); kernels of 16384 blocks run in
# it one after another, so each holds exactly the green context's SMs: the meter must report
# sm_ns = SMs of the green context x kernel_ns (with the device's 132 SMs it would be 8x more).
GREEN_STATUS=skip
if [ "${SMOKE_GREEN:-1}" != "0" ]; then
  cat >"$WORK/green.cu" <<'CUDA'
#include <cstdio>
#include <cstdlib>
#include <cuda.h>
#include <cuda_runtime.h>

// gpumeter smoke workload (partitions): kernels of 16384 blocks in a green context of at least
// 16 SMs, one after another on its stream. Prints the green context's and the device's SMs.
extern "C" __global__ void gm_green_spin(float *x, int n, int rounds) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = x[i];
    for (int r = 0; r < rounds; r++) v = v * 1.0000001f + 1e-7f;
    x[i] = v;
  }
}

#define CU(call)                                                                  \
  do {                                                                            \
    CUresult e_ = (call);                                                         \
    if (e_ != CUDA_SUCCESS) {                                                     \
      const char *m_ = "?";                                                       \
      cuGetErrorString(e_, &m_);                                                  \
      fprintf(stderr, "%s: %s\n", #call, m_);                                     \
      return 3;                                                                   \
    }                                                                             \
  } while (0)
#include "gm_check.h"

int main(int argc, char **argv) {
  int launches = argc > 1 ? atoi(argv[1]) : 20;
  const int n = 1 << 22;
  float *x;
  CK(cudaMalloc(&x, n * sizeof(float)));
  CK(cudaMemset(x, 0, n * sizeof(float)));
  CK(cudaDeviceSynchronize());
  CUcontext primary;
  CU(cuCtxGetCurrent(&primary));
  CUdevice dev;
  CU(cuDeviceGet(&dev, 0));
  CUdevResource sm, rest, group[1];
  unsigned int groups = 1;
  CU(cuDeviceGetDevResource(dev, &sm, CU_DEV_RESOURCE_TYPE_SM));
  CU(cuDevSmResourceSplitByCount(group, &groups, &sm, &rest, 0, 16));
  CUdevResourceDesc desc;
  CU(cuDevResourceGenerateDesc(&desc, group, 1));
  CUgreenCtx green;
  CU(cuGreenCtxCreate(&green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
  CUcontext ctx;
  CU(cuCtxFromGreenCtx(&ctx, green));
  CU(cuCtxSetCurrent(ctx));
  CUstream stream;
  CU(cuGreenCtxStreamCreate(&stream, green, CU_STREAM_NON_BLOCKING, 0));
  for (int i = 0; i < launches; i++)
    gm_green_spin<<<n / 256, 256, 0, (cudaStream_t)stream>>>(x, n, 400);
  CK(cudaGetLastError());
  CK(cudaStreamSynchronize((cudaStream_t)stream));
  printf("GREEN_SMS %u\nDEVICE_SMS %u\nKERNEL gm_green_spin %d\nTOTAL %d\nCHECK ok\n",
         group[0].sm.smCount, sm.sm.smCount, launches, launches);
  CU(cuStreamDestroy(stream));
  CU(cuCtxSetCurrent(primary));
  CU(cuGreenCtxDestroy(green));
  CK(cudaFree(x));
  return 0;
}
CUDA
  say "== building and recording the green-context workload (partitions)"
  if timeout -k 10 180 "$NVCC" -O2 -arch=native -o "$WORK/green" "$WORK/green.cu" -lcuda >"$WORK/green.nvcc.log" 2>&1 \
     || timeout -k 10 180 "$NVCC" -O2 -arch=sm_90 -o "$WORK/green" "$WORK/green.cu" -lcuda >>"$WORK/green.nvcc.log" 2>&1; then
    record green "$CUPTI_C" "$WORK/green" 20
    GREEN_STATUS=ran
  else
    say "   nvcc failed: $(tail -n 3 "$WORK/green.nvcc.log")"
    GREEN_STATUS=nobuild
  fi
fi

TORCH_STATUS=skip
if [ "${SMOKE_TORCH:-1}" != "0" ] && [ -n "$CUPTI_T" ] \
   && timeout -k 10 90 python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  cat >"$WORK/smoke_torch.py" <<'EOF'
# gpumeter smoke workload (PyTorch): N in-place scalar multiplications, one CUDA kernel each
# (an elementwise kernel whose name contains MulFunctor), after a warm-up fill.
import sys
import torch
n = int(sys.argv[1])
x = torch.ones(1 << 20, device="cuda")
torch.cuda.synchronize()
for _ in range(n):
    x.mul_(1.0001)
torch.cuda.synchronize()
print(f"TORCH {torch.__version__} cuda {torch.version.cuda} MUL {n} value {x[0].item():.4f}")
EOF
  say "== recording the PyTorch workload ($TORCH_ITERS multiplications)"
  record torch "$CUPTI_T" python3 "$WORK/smoke_torch.py" "$TORCH_ITERS"
  TORCH_STATUS=ran
else
  say "== PyTorch workload skipped (SMOKE_TORCH=0, no libcupti wheel, or no torch with CUDA)"
fi

say "== comparing"
python3 - "$WORK" "$TORCH_STATUS" "$TORCH_ITERS" "$INSTR_STATUS" "$GREEN_STATUS" <<'EOF' | tee "$WORK/summary.txt"
import json, os, sys

work, torch_status, torch_iters = sys.argv[1], sys.argv[2], int(sys.argv[3])
instr_status = sys.argv[4]
green_status = sys.argv[5]

def load(name):
    try:
        with open(os.path.join(work, name)) as f:
            return json.load(f)
    except Exception as e:  # missing or not JSON: reported as a failure below
        return {"_error": f"{name}: {e}"}

def launches(usage):
    return sum(int(t["quantity"]) for t in usage.get("totals", []) if t.get("meter") == "kernel_launches")

def loss(usage):
    return sum(int(l.get("records", 0)) for l in usage.get("loss", []))

results = []

def check(label, ok, detail):
    results.append(ok)
    print(f"  [{'ok' if ok else 'FAIL'}] {label}: {detail}")

# CUDA C workload.
print("CUDA C workload")
rc = open(os.path.join(work, "cuda.rc")).read().strip()
out = open(os.path.join(work, "cuda.stdout")).read()
expected = {}
total = None
for line in out.splitlines():
    p = line.split()
    if len(p) == 3 and p[0] == "KERNEL":
        expected[p[1]] = int(p[2])
    elif len(p) == 2 and p[0] == "TOTAL":
        total = int(p[1])
check("workload ran", rc == "0" and "CHECK ok" in out, f"exit {rc}, {out.strip().splitlines()[-1] if out.strip() else 'no output'}")
show, usage = load("cuda.show.json"), load("cuda.usage.json")
names = {k["name"]: k["count"] for k in show.get("kernel_names", [])}
check("kernel launches (usage kernel_launches)", total is not None and launches(usage) == total,
      f"expected {total}, metered {launches(usage)}")
check("kernel records in the recording", show.get("kernels") == total,
      f"expected {total}, recorded {show.get('kernels')} ({show.get('unnamed_kernels')} unnamed)")
check("kernel names and counts", names == expected, f"expected {expected}, recorded {names}")
check("no loss", loss(usage) == 0 and show.get("dropped", 0) == 0,
      f"loss {usage.get('loss', [])}, dropped {show.get('dropped')}")
devs = show.get("header", {}).get("devices", [])
check("device inventory in the header", bool(devs) and all(d.get("name") and d.get("uuid") and d.get("sm_count") for d in devs),
      "; ".join(f"{d.get('id')}: {d.get('name')} {d.get('uuid')} {d.get('sm_count')} SMs cc {d.get('compute_capability')}" for d in devs) or "none")
# Energy (NVML counter, frame type 6): per device of the header, at least 2 frames (start and
# stop), timestamps increasing and on CUPTI's clock (not before the header's clock pair, within
# the run), the counter never falling, and grown over the run.
energy = {e.get("device"): e for e in show.get("energy", [])}
t0 = show.get("header", {}).get("clock", {}).get("cupti_timestamp_ns", 0)
for d in devs or [{"id": 0}]:
    e = energy.get(d.get("id"))
    if not e:
        check(f"energy frames of device {d.get('id')}", False,
              f"none (devices with energy: {sorted(energy)})")
        continue
    first, last = e["first_timestamp_ns"], e["last_timestamp_ns"]
    ok = (e["samples"] >= 2 and e["out_of_order"] == 0 and last > first and e["decreases"] == 0
          and e["delta_mj"] > 0 and first >= t0 and last - first < 600 * 10**9)
    check(f"energy frames of device {d.get('id')}", ok,
          f"{e['samples']} samples over {(last - first) / 1e9:.3f} s (from {first - t0} ns after the "
          f"clock pair), {e['first_mj']} -> {e['last_mj']} mJ (delta {e['delta_mj']} mJ), "
          f"{e['out_of_order']} out of order, {e['decreases']} decreases")
# The meters built on the new inputs: memory_byte_ns from the workload's two cudaMalloc /
# cudaFree pairs (4 MiB each, held at least while the kernels ran, nothing left open), and
# energy_mj from the energy frames.
meters = {}
for t in usage.get("totals", []):
    meters[t.get("meter")] = meters.get(t.get("meter"), 0) + int(t["quantity"])
busy = meters.get("gpu_busy_ns", 0)
check("memory_byte_ns (2 x 4 MiB held, none open)",
      meters.get("memory_byte_ns", 0) >= 4 * 2**20 * busy and not usage.get("open_allocations"),
      f"{meters.get('memory_byte_ns')} byte-ns (gpu_busy_ns {busy}), open {usage.get('open_allocations')}")
check("energy_mj metered", meters.get("energy_mj", 0) > 0,
      f"{meters.get('energy_mj')} mJ; not meterable: {[n for d in usage.get('devices', []) for n in d.get('not_meterable', [])]}")
print(f"  info: API {show.get('header', {}).get('cupti_api_version')}, {show.get('buffers')} buffers, "
      f"records {show.get('records')}, usage devices {[(d.get('device_key'), d.get('name')) for d in usage.get('devices', [])]}")
for e in [show.get("_error"), usage.get("_error")] + show.get("decode_errors", []):
    if e:
        check("readable", False, e)

# Instrumented mode (SASS metrics, frame type 8): one instruction-count frame per launch, every
# count > 0, each kernel in as many frames as it was launched, and the same count for every
# launch of a kernel (each kernel has one launch configuration and size in the workload).
def instrumented(name, title):
    print(title)
    if not os.path.exists(os.path.join(work, f"{name}.rc")):
        check("workload built and recorded", False, f"no {name} run (see its nvcc log)")
        return
    rc = open(os.path.join(work, f"{name}.rc")).read().strip()
    out = open(os.path.join(work, f"{name}.stdout")).read()
    expected, total = {}, None
    for line in out.splitlines():
        p = line.split()
        if len(p) == 3 and p[0] == "KERNEL":
            expected[p[1]] = int(p[2])
        elif len(p) == 2 and p[0] == "TOTAL":
            total = int(p[1])
    check("workload ran", rc == "0" and "CHECK ok" in out,
          f"exit {rc}, {out.strip().splitlines()[-1] if out.strip() else 'no output'}")
    show, usage = load(f"{name}.show.json"), load(f"{name}.usage.json")
    check("header marked instrumented", show.get("header", {}).get("instrumented") is True,
          f"instrumented = {show.get('header', {}).get('instrumented')}")
    check("one instruction-count frame per launch", total is not None and show.get("instruction_frames") == total,
          f"expected {total}, recorded {show.get('instruction_frames')} (kernel records {show.get('kernels')})")
    funcs = {f["name"]: f for f in show.get("instructions", [])}
    check("functions and their launches", {n: f["launches"] for n, f in funcs.items()} == expected,
          f"expected {expected}, recorded {({n: f['launches'] for n, f in funcs.items()})}")
    check("every count > 0", bool(funcs) and all(f["min_per_launch"] > 0 for f in funcs.values()),
          ", ".join(f"{n}: min {f['min_per_launch']}" for n, f in sorted(funcs.items())) or "no functions")
    check("same count for every launch of a kernel", bool(funcs) and all(f["min_per_launch"] == f["max_per_launch"] for f in funcs.values()),
          ", ".join(f"{n}: {f['min_per_launch']}..{f['max_per_launch']} per launch" for n, f in sorted(funcs.items())))
    # At least one instruction per warp: n = 2^20 threads, so 32768 warps per kernel.
    check("at least one instruction per warp", bool(funcs) and all(f["min_per_launch"] >= (1 << 20) // 32 for f in funcs.values()),
          ", ".join(f"{n}: {f['min_per_launch']}" for n, f in sorted(funcs.items())))
    meters = {t.get("meter"): int(t["quantity"]) for t in usage.get("totals", []) if "quantity" in t}
    check("usage warp_instructions = the frames' sum",
          meters.get("warp_instructions") == sum(f["warp_instructions"] for f in funcs.values()),
          f"Σ frames {sum(f['warp_instructions'] for f in funcs.values())}, usage {meters.get('warp_instructions', 'not metered')}")
    errs = [l for l in open(os.path.join(work, f"{name}.stderr")).read().splitlines() if "instruction" in l]
    for l in errs[:10]:
        print(f"  info: {l}")
    for e in [show.get("_error"), usage.get("_error")] + show.get("decode_errors", []):
        if e:
            check("readable", False, e)

if instr_status == "ran":
    instrumented("cuda_instr", "CUDA C workload, instrumented (--instructions)")
    instrumented("mt_instr", "Two-thread workload, instrumented (--instructions)")
else:
    print("CUDA C workload, instrumented: skipped (SMOKE_INSTRUCTIONS=0)")

if green_status == "ran":
    print("Green-context workload (partitions)")
    rc = open(os.path.join(work, "green.rc")).read().strip()
    out = open(os.path.join(work, "green.stdout")).read()
    err = open(os.path.join(work, "green.stderr")).read()
    vals = {l.split()[0]: l.split()[1] for l in out.splitlines()
            if len(l.split()) >= 2 and l.split()[0] in ("GREEN_SMS", "DEVICE_SMS", "TOTAL")}
    check("workload ran", rc == "0" and "CHECK ok" in out,
          f"exit {rc}, {' | '.join(out.strip().splitlines()[-2:])}; stderr: {' | '.join(l for l in err.splitlines() if 'gpumeter' not in l and 'recording' not in l)[-300:]}")
    usage = load("green.usage.json")
    m = {}
    for t in usage.get("totals", []):
        m[t.get("meter")] = m.get(t.get("meter"), 0) + int(t["quantity"])
    green = int(vals.get("GREEN_SMS", 0))
    check("kernel launches", m.get("kernel_launches") == int(vals.get("TOTAL", -1)),
          f"expected {vals.get('TOTAL')}, metered {m.get('kernel_launches')}")
    check("sm_ns = green-context SMs x kernel_ns", green > 0 and m.get("sm_ns") == green * m.get("kernel_ns", -1),
          f"green context {green} of {vals.get('DEVICE_SMS')} SMs: sm_ns {m.get('sm_ns')}, kernel_ns {m.get('kernel_ns')}, "
          f"ratio {m.get('sm_ns', 0) / max(1, m.get('kernel_ns', 0)):.3f}")
    print(f"  info: devices {usage.get('devices')}, warnings {usage.get('warnings', [])[:3]}")
elif green_status == "nobuild":
    print("Green-context workload: not built (see green.nvcc.log)")
    results.append(False)
else:
    print("Green-context workload: skipped (SMOKE_GREEN=0)")

if torch_status == "ran":
    print("PyTorch workload")
    rc = open(os.path.join(work, "torch.rc")).read().strip()
    out = open(os.path.join(work, "torch.stdout")).read()
    show, usage = load("torch.show.json"), load("torch.usage.json")
    names = {k["name"]: k["count"] for k in show.get("kernel_names", [])}
    mul = sum(c for n, c in names.items() if "MulFunctor" in n)
    check("workload ran", rc == "0" and "MUL" in out, f"exit {rc}, {out.strip()[-200:]}")
    check("multiply kernels (names containing MulFunctor)", mul == torch_iters,
          f"expected {torch_iters}, recorded {mul}")
    check("kernel launches (usage = recording)", launches(usage) == show.get("kernels") and launches(usage) >= torch_iters,
          f"usage {launches(usage)}, recording {show.get('kernels')}")
    check("no loss", loss(usage) == 0 and show.get("dropped", 0) == 0, f"loss {usage.get('loss', [])}")
    print(f"  info: API {show.get('header', {}).get('cupti_api_version')}, {len(names)} kernel names, "
          f"top: {sorted(names.items(), key=lambda kv: -kv[1])[:3]}")
else:
    print("PyTorch workload: skipped")

print("RESULT", "PASS" if all(results) else "FAIL", f"({sum(results)}/{len(results)} checks)")
EOF
RESULT=$(grep -c '^RESULT PASS' "$WORK/summary.txt")
say "== preview (CUDA C workload)"
sed 's/^/   /' "$WORK/cuda.preview.txt" | head -n 20
say "== recording (CUDA C workload)"
sed 's/^/   /' "$WORK/cuda.show.txt" | head -n 20
if [ "$INSTR_STATUS" = "ran" ]; then
  say "== recording (CUDA C workload, instrumented)"
  grep -A 5 '^instructions' "$WORK/cuda_instr.show.txt" | sed 's/^/   /'
fi
collect
say "== done in $(( $(date +%s) - T0 )) s"
if [ "$RESULT" = "1" ]; then say "PASS"; exit 0; else say "FAIL"; exit 1; fi
