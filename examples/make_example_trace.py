#!/usr/bin/env python3
"""Writes examples/data/finetune-2xh100.json.gz: a synthetic PyTorch-profiler (Kineto) trace made
by the gpumeter project itself, for the README's invoice preview.

It imitates what `torch.profiler` writes for a data-parallel fine-tuning job on two H100 GPUs of
one node (modern schema: fractional microseconds relative to `baseTimeNanoseconds`): per step a
forward GEMM, a backward GEMM, an optimizer kernel on the compute stream, an NCCL all-reduce on a
second stream that overlaps the backward pass, a host-to-device batch copy, a memset, plus the
CPU-side `cudaLaunchKernel` events that carry the process id, one `ProfilerStep#N` GPU annotation
per step and one `cuda_sync` event (both not work). The run crosses midnight UTC into December so the hourly
windows split it. Deterministic: same bytes on every run (fixed seed, fixed gzip mtime).

Usage: python3 examples/make_example_trace.py   (from the repository root)
"""
import gzip
import json
import random

BASE_NS = 1_796_082_800_000_000_000  # 2026-11-30T23:53:20Z: Kineto's baseTimeNanoseconds
START_NS = 1_796_082_960_000_000_000  # 2026-11-30T23:56:00Z
STEPS = 120
PID = 4242

def us(ns: int) -> float:
    """Relative microseconds with 3 decimals, as Kineto writes them."""
    return round((ns - BASE_NS) / 1000.0, 3)

def main() -> None:
    rng = random.Random(20261102)
    events = []
    corr = 1000
    props = [
        {"id": i, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936,
         "computeMajor": 9, "computeMinor": 0, "maxThreadsPerBlock": 1024,
         "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32,
         "sharedMemPerBlock": 49152, "numSms": 132, "regsPerMultiprocessor": 65536,
         "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472}
        for i in range(2)
    ]

    def launch(t_ns: int, name: str) -> int:
        nonlocal corr
        corr += 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": PID, "tid": PID,
                       "ts": us(t_ns), "dur": 4.2, "args": {"cbid": 211, "correlation": corr}})
        return corr

    def kernel(dev, stream, t, dur, name, grid, block, regs, smem):
        c = launch(t - 9_000, "cudaLaunchKernel")
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": dev, "tid": stream,
                       "ts": us(t), "dur": round(dur / 1000, 3),
                       "args": {"External id": c, "queued": 0, "device": dev, "context": 1,
                                "stream": stream, "correlation": c,
                                "registers per thread": regs, "shared memory": smem,
                                "grid": grid, "block": block}})

    for dev in range(2):
        t = START_NS + dev * 1_250_000
        for step in range(STEPS):
            step_start = t
            nbytes = 64 * 1024 * 1024
            c = launch(t - 20_000, "cudaMemcpyAsync")
            copy = 5_200_000 + rng.randrange(0, 400_000)
            events.append({"ph": "X", "cat": "gpu_memcpy",
                           "name": "Memcpy HtoD (Pinned -> Device)", "pid": dev, "tid": 7,
                           "ts": us(t), "dur": round(copy / 1000, 3),
                           "args": {"External id": c, "device": dev, "context": 1, "stream": 7,
                                    "correlation": c, "bytes": nbytes}})
            t += copy + 3_000
            fwd = 1_150_000_000 + rng.randrange(0, 60_000_000)
            kernel(dev, 7, t, fwd, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas",
                   [66, 2, 1], [384, 1, 1], 168, 213_248)
            t += fwd + 2_000
            bwd = 1_700_000_000 + rng.randrange(0, 90_000_000)
            kernel(dev, 7, t, bwd, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize256x128x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas",
                   [132, 1, 1], [384, 1, 1], 168, 213_248)
            # The gradient all-reduce overlaps the second half of the backward pass.
            ar = 610_000_000 + rng.randrange(0, 40_000_000)
            kernel(dev, 21, t + bwd // 2, ar,
                   "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                   [24, 1, 1], [640, 1, 1], 96, 0)
            t += max(bwd, bwd // 2 + ar) + 2_000
            opt = 42_000_000 + rng.randrange(0, 2_000_000)
            kernel(dev, 7, t, opt,
                   "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::FusedAdamMathFunctor<c10::BFloat16, 4> >",
                   [1584, 1, 1], [512, 1, 1], 40, 0)
            t += opt + 1_000
            c = launch(t - 8_000, "cudaMemsetAsync")
            events.append({"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": dev,
                           "tid": 7, "ts": us(t), "dur": 1.6,
                           "args": {"External id": c, "device": dev, "context": 1, "stream": 7,
                                    "correlation": c, "bytes": 4096}})
            t += 1_600 + 40_000_000  # host-side data loading gap
            events.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{step}",
                           "pid": dev, "tid": 7, "ts": us(step_start),
                           "dur": round((t - step_start) / 1000, 3), "args": {"External id": step}})
        events.append({"ph": "X", "cat": "cuda_sync", "name": "Device Synchronize", "pid": dev,
                       "tid": 7, "ts": us(t), "dur": 3.0,
                       "args": {"cuda_sync_kind": "Device Synchronize", "stream": -1,
                                "device": dev, "context": 1, "correlation": corr + 1}})
    events.sort(key=lambda e: (e["ts"], e["pid"] if isinstance(e["pid"], int) else -1))
    trace = {
        "schemaVersion": 1,
        "deviceProperties": props,
        "cupti_version": 24,
        "cuda_runtime_version": 12080,
        "cuda_driver_version": 12080,
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
        "traceName": "finetune-2xh100 (synthetic, made by gpumeter's examples/make_example_trace.py)",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": events,
    }
    data = json.dumps(trace, separators=(",", ":")).encode()
    with open("examples/data/finetune-2xh100.json.gz", "wb") as f:
        with gzip.GzipFile(filename="finetune-2xh100.json", mode="wb", fileobj=f, mtime=0) as gz:
            gz.write(data)

if __name__ == "__main__":
    main()
