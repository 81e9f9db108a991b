#!/usr/bin/env python3
"""Writes the binary seeds of the kineto_json and nsys_sqlite fuzz targets, and the gmr_reader
seed with PM-sample frames (fuzz/README.md).

Every file is made here, by this project, from nothing: small traces in the shape the real tools
write (Kineto / PyTorch-profiler JSON, modern and 2021 schemas; Nsight Systems SQLite exports
with the tables and columns gpumeter reads), a few KB each. No real trace is copied. The output
is deterministic (fixed gzip mtime; SQLite files built the same way every run with the same
SQLite library).

Usage: python3 fuzz/seeds/make_seeds.py   (from the repository root or anywhere)
"""
import gzip
import json
import os
import sqlite3
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))

# 2026-12-01T07:59:00Z
BASE_NS = 1_796_111_940_000_000_000


def write(target: str, name: str, data: bytes) -> None:
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


# --- Kineto -----------------------------------------------------------------------------------
# kineto_json input: byte 0 = flags (bit 0 gzip the rest, bit 1 two gzip members, bit 2
# Format::Auto), the rest = the file.

def modern() -> bytes:
    """Modern schema: fractional µs relative to baseTimeNanoseconds, deviceProperties."""
    props = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-00000000-0000-0000-0000-000000000100",
              "computeMajor": 9, "computeMinor": 0, "numSms": 132, "warpSize": 32,
              "maxThreadsPerMultiprocessor": 2048, "maxBlocksPerMultiProcessor": 32,
              "regsPerBlock": 65536, "regsPerMultiprocessor": 65536, "sharedMemPerBlock": 49152,
              "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472},
             {"id": 1, "name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "computeMinor": 0,
              "numSms": 108}]
    ev = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242,
         "ts": 59999990.5, "dur": 4.2, "args": {"cbid": 211, "correlation": 11}},
        {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7,
         "ts": 60000000.125, "dur": 1500.5,
         "args": {"External id": 3, "device": 0, "context": 1, "stream": 7, "correlation": 11,
                  "registers per thread": 168, "shared memory": 213248,
                  "grid": [66, 2, 1], "block": [384, 1, 1]}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0,
         "tid": "stream 7", "ts": 59999000, "dur": 800.001,
         "args": {"device": 0, "context": 1, "stream": 7, "correlation": 10, "bytes": 67108864}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 1,
         "tid": 9, "ts": 60002000, "dur": 12, "args": {"device": 1, "bytes": 4096}},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7,
         "ts": 60001600, "dur": 1.5, "args": {"device": 0, "stream": 7, "bytes": 4096}},
        {"ph": "X", "cat": "kernel", "name": "nccl_kernel", "pid": 1, "tid": 21,
         "ts": 60000100, "dur": -3, "args": {"device": 1, "stream": 21, "grid": [24, 1, 1],
                                             "block": [640, 1, 1]}},
        {"ph": "X", "cat": "kernel", "name": "unrecorded", "pid": 1, "tid": 21, "ts": 0, "dur": 1,
         "args": {"device": 1}},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#1", "pid": 0, "tid": 7,
         "ts": 59999000, "dur": 3000},
        {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7,
         "ts": 60002000, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4242, "tid": 4242,
         "ts": 59999980, "dur": 30},
        {"ph": "f", "cat": "ac2g", "name": "launch", "id": 11, "pid": 4242, "tid": 4242,
         "ts": 59999990.5},
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
    ]
    doc = {"schemaVersion": 1, "deviceProperties": props, "baseTimeNanoseconds": BASE_NS,
           "traceEvents": ev, "traceName": "fuzz-seed"}
    return json.dumps(doc, separators=(",", ":")).encode()


def legacy() -> bytes:
    """2021 schema: integer absolute µs, category names Kernel/Memcpy/Memset/Runtime."""
    t = BASE_NS // 1000 + 60_000_000
    ev = [
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 777, "tid": 777,
         "ts": t - 10, "dur": 5, "args": {"correlation": 5}},
        {"ph": "X", "cat": "Kernel", "name": "volta_sgemm_128x64_nn", "pid": 0, "tid": "stream 7",
         "ts": t, "dur": 250, "args": {"device": 0, "stream": 7, "correlation": 5,
                                      "registers per thread": 128, "shared memory": 12288,
                                      "grid": [80, 1, 1], "block": [256, 1, 1]}},
        {"ph": "X", "cat": "Memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": 7,
         "ts": t + 300, "dur": 2, "args": {"device": 0, "bytes": 1024}},
        {"ph": "X", "cat": "Memset", "name": "Memset (Device)", "pid": 0, "tid": 7,
         "ts": t + 310, "dur": 1, "args": {"device": 0, "bytes": 512}},
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler", "pid": "Spans", "tid": 0,
         "ts": t - 100, "dur": 1000},
    ]
    return json.dumps({"traceEvents": ev}, indent=1).encode()


def kineto() -> None:
    m, l = modern(), legacy()
    write("kineto_json", "modern.bin", b"\x00" + m)
    write("kineto_json", "modern_gzipped_by_target.bin", b"\x01" + m)
    write("kineto_json", "modern_gzip_file.bin", b"\x00" + gz(m))
    write("kineto_json", "legacy_2021.bin", b"\x00" + l)
    write("kineto_json", "legacy_two_gzip_members.bin", b"\x03" + l)
    write("kineto_json", "modern_bom_auto.bin", b"\x04" + b"\xef\xbb\xbf \n" + m)


# --- Nsight Systems ---------------------------------------------------------------------------
# nsys_sqlite input: the whole SQLite file. Page size 512 keeps each table to a page or two.

def new_db(path: str) -> sqlite3.Connection:
    if os.path.exists(path):
        os.remove(path)
    c = sqlite3.connect(path)
    c.execute("PRAGMA page_size = 512")
    c.execute("PRAGMA journal_mode = DELETE")
    return c


def finish_db(c: sqlite3.Connection, path: str, target_name: str) -> None:
    c.commit()
    c.execute("VACUUM")
    c.close()
    with open(path, "rb") as f:
        data = f.read()
    os.remove(path)
    write("nsys_sqlite", target_name, data)


def nsys_full(path: str) -> None:
    """Schema 3.x-like: session start, one GPU with UUID and limits, StringIds, all kinds."""
    c = new_db(path)
    c.executescript("""
    CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
    CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT,
        uuid TEXT, cuDevice INTEGER, smCount INTEGER, computeMajor INTEGER, computeMinor INTEGER,
        maxShmemPerBlock INTEGER, maxShmemPerBlockOptin INTEGER, maxShmemPerSm INTEGER,
        maxRegistersPerSm INTEGER, maxRegistersPerBlock INTEGER, threadsPerWarp INTEGER,
        maxWarpsPerSm INTEGER, maxBlocksPerSm INTEGER);
    CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
        deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
        correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,
        shortName INTEGER NOT NULL, registersPerThread INTEGER NOT NULL,
        gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL,
        blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL,
        staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL,
        graphNodeId INTEGER);
    CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL,
        deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
        correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL,
        copyKind INTEGER NOT NULL, graphNodeId INTEGER);
    CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL,
        deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
        correlationId INTEGER, globalPid INTEGER, value INTEGER NOT NULL,
        bytes INTEGER NOT NULL, graphNodeId INTEGER);
    """)
    c.executemany("INSERT INTO StringIds VALUES (?, ?)",
                  [(0, "[Unknown]"), (1, "saxpy(int, float, float*, float*)"), (2, "saxpy"),
                   (3, "void reduce<256>(float const*, float*)"), (4, "reduce")])
    c.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, ?, ?)",
              (BASE_NS, "2026-12-01T07:59:00", "2026-12-01T08:59:00"))
    c.execute("INSERT INTO TARGET_INFO_GPU VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
              (1 << 48, 0, "NVIDIA A100-SXM4-40GB", "74e128b2-90b6-b409-07c8-33bee5ff6f88", 0, 108,
               8, 0, 49152, 166912, 167936, 65536, 65536, 32, 64, 32))
    gpid = (1 << 48) | (4242 << 24)
    c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES "
                  "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                  [(60_000_000_000, 60_000_900_000, 0, 1, 7, 140, gpid, 1, 2, 26, 2, 1, 1,
                    512, 1, 1, 0, 0, None),
                   (60_000_950_000, 60_001_000_000, 0, 1, 13, 141, gpid, 3, 4, 32, 432, 1, 1,
                    256, 1, 1, 1024, 4096, 5),
                   (60_001_100_000, 60_001_200_000, 0, 1, 7, 142, gpid, 99, 99, 16, 1, 1, 1,
                    32, 1, 1, 0, 0, None)])
    c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,?,?,?,?,?,?,?)",
                  [(59_990_000_000, 59_999_000_000, 0, 1, 7, 138, gpid, 262144000, 1, None),
                   (60_002_000_000, 60_002_100_000, 0, 1, 7, 143, gpid, 4096, 2, None),
                   (60_002_200_000, 60_002_300_000, 0, 1, 7, 144, gpid, 4096, 8, None),
                   (60_002_400_000, 60_002_500_000, 0, 1, 7, 145, gpid, 4096, 10, None)])
    c.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?,?,?,?,?,?,?,?,?,?)",
              (59_999_500_000, 59_999_600_000, 0, 1, 7, 139, gpid, 0, 8192, None))
    finish_db(c, path, "full.sqlite")


def nsys_minimal(path: str) -> None:
    """Only a kernel table with the required columns and a shortName without StringIds: no
    session start (times absolute, a warning), no GPU table (a bare device)."""
    c = new_db(path)
    c.executescript("""
    CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
        deviceId INTEGER NOT NULL, shortName INTEGER);
    """)
    t = BASE_NS + 60_000_000_000
    c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?)",
                  [(t, t + 1000, 0, 1), (t + 2000, t + 1500, 0, 1), (0, t + 3000, 1, None)])
    finish_db(c, path, "minimal_kernel_only.sqlite")


def nsys_two_gpus(path: str) -> None:
    """Two GPUs without UUIDs, matched by cuDevice, on two VMs (globalPid bits 48..63);
    memcpy and memset only."""
    c = new_db(path)
    c.executescript("""
    CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER);
    CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, cuDevice INTEGER, name TEXT,
        smCount INTEGER, computeMajor INTEGER, computeMinor INTEGER);
    CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL,
        deviceId INTEGER NOT NULL, globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER);
    CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL,
        deviceId INTEGER NOT NULL, globalPid INTEGER, bytes INTEGER NOT NULL);
    """)
    c.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?)", (BASE_NS,))
    c.executemany("INSERT INTO TARGET_INFO_GPU VALUES (?,?,?,?,?,?)",
                  [(1 << 48, 0, "NVIDIA H100 80GB HBM3", 132, 9, 0),
                   (2 << 48, 0, "NVIDIA H200", 132, 9, 0)])
    c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,?,?,?)",
                  [(1_000, 2_000, 0, (1 << 48) | (11 << 24), 1 << 20, 1),
                   (1_500, 2_500, 0, (2 << 48) | (12 << 24), 1 << 20, 2)])
    c.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?,?,?,?,?)",
              (3_000, 3_100, 0, (2 << 48) | (12 << 24), 64))
    finish_db(c, path, "two_gpus_two_vms.sqlite")


def nsys() -> None:
    tmp = os.path.join(HERE, ".make_seeds.tmp.sqlite")
    nsys_full(tmp)
    nsys_minimal(tmp)
    nsys_two_gpus(tmp)


# --- .gmr with PM samples -------------------------------------------------------------------
# gmr_reader input: recording_130001.gmr (a seed of tests/c/make_buffers.c) with two PM-sample
# frames (type 9, issue 16) before its end frame, so the fuzzer starts from the frame's layout:
# device 0 (the recording's device), 2025-07-18T08:08:05Z + 0..4 µs, over its kernels.

T0_NS = 1_752_826_085_000_000_000
PM_OVERFLOW, PM_ACTIVE, PM_ELAPSED, PM_READ, PM_WRITE = 1, 2, 4, 8, 16


def gmr_frame(frame_type: int, payload: bytes) -> bytes:
    head = struct.pack("<IQ", frame_type, len(payload))
    return head + payload + struct.pack("<I", zlib.crc32(head + payload) & 0xFFFFFFFF)


def pm_frame(device: int, samples: list) -> bytes:
    """samples: (flags, start, end, active, elapsed, read, write); absent counters are 0."""
    p = struct.pack("<II", device, len(samples))
    for flags, start, end, active, elapsed, read, write in samples:
        p += struct.pack("<IIQQQQQQ", flags, 0, start, end, active, elapsed, read, write)
    return gmr_frame(9, p)


def gmr_pm() -> None:
    with open(os.path.join(HERE, "gmr_reader", "recording_130001.gmr"), "rb") as f:
        base = f.read()
    end = gmr_frame(7, b"")
    assert base.endswith(end), "recording_130001.gmr does not end with an end frame"
    every = PM_ACTIVE | PM_ELAPSED | PM_READ | PM_WRITE
    first = pm_frame(0, [
        (every, T0_NS, T0_NS + 1000, 99_000, 1_980, 6_000, 4_000),
        (every | PM_OVERFLOW, T0_NS + 1000, T0_NS + 2000, 13_200, 1_980, 100, 0),
    ])
    second = pm_frame(0, [
        (PM_ACTIVE | PM_ELAPSED | PM_READ, T0_NS + 2000, T0_NS + 3000, 0, 1_980, 64, 0),
        (PM_OVERFLOW, T0_NS + 3000, T0_NS + 4000, 0, 0, 0, 0),
    ])
    write("gmr_reader", "recording_130001_pm.gmr", base[: -len(end)] + first + second + end)


if __name__ == "__main__":
    kineto()
    nsys()
    gmr_pm()
