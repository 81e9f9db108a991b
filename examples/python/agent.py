#!/usr/bin/env python3
"""A gpumeter node agent in Python, through ctypes (examples/README.md, "Agents").

It replays a CUPTI recording (a `.gmr`, or a raw activity buffer file) through libgpumeter_ffi
exactly as a live CUPTI subscription would drive it: every completed activity buffer goes to
the hot path (`gm_meter_ingest_cupti_buffer`) one by one, and whenever the meter's watermark
passes a window edge the windows closed before it are drained. Each drained usage report is
printed to stdout, followed by its invoice (`gm_rate_json`); a real agent would ship the
report to the billing service instead. At the end everything left is drained.

    scripts/build-c-abi
    python3 examples/python/agent.py examples/data/h200-cuda13-smoke.gmr

(the library: --lib, else $GPUMETER_FFI_LIB, else target/debug/c-abi/lib/libgpumeter_ffi.so.1).

Only the standard library: the declarations below mirror bindings/c/gpumeter.h.
"""

import argparse
import ctypes
import json
import os
import re
import sys

# The ABI version these declarations were written against (GM_ABI_VERSION in gpumeter.h).
GM_ABI_VERSION = 2
GM_OK = 0
UINT64_MAX = 2**64 - 1

# gm_recording_item_kind
GM_ITEM_END, GM_ITEM_DEVICE, GM_ITEM_BUFFER, GM_ITEM_DROPPED, GM_ITEM_PROCESS_EXIT = range(5)


class DeviceInfo(ctypes.Structure):
    """struct gm_device_info"""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("device_id", ctypes.c_uint32),
        ("sm_count", ctypes.c_uint32),
        ("cc_major", ctypes.c_uint32),
        ("cc_minor", ctypes.c_uint32),
        ("name", ctypes.c_char_p),
        ("uuid", ctypes.c_char_p),
    ]


class RecordingItem(ctypes.Structure):
    """struct gm_recording_item"""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("kind", ctypes.c_uint32),
        ("device_id", ctypes.c_uint32),
        ("pid", ctypes.c_uint32),
        ("device", ctypes.POINTER(DeviceInfo)),
        ("buffer", ctypes.c_void_p),
        ("buffer_size", ctypes.c_size_t),
        ("dropped", ctypes.c_uint64),
        ("timestamp_ns", ctypes.c_uint64),
    ]


class GpumeterError(Exception):
    pass


def load(path):
    """Loads the library and declares the functions the agent calls."""
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise GpumeterError(
            f"cannot load {path} ({e}): build it with `scripts/build-c-abi`, "
            "or give its path with --lib or GPUMETER_FFI_LIB"
        ) from None
    P = ctypes.POINTER
    status = ctypes.c_uint32
    # Strings the library returns stay c_void_p: they must go back to gm_string_free.
    decls = {
        "gm_abi_version": (ctypes.c_uint32, []),
        "gm_last_error_message": (ctypes.c_size_t, [ctypes.c_char_p, ctypes.c_size_t]),
        "gm_string_free": (None, [ctypes.c_void_p]),
        "gm_meter_new": (status, [ctypes.c_char_p, P(ctypes.c_void_p)]),
        "gm_meter_free": (None, [ctypes.c_void_p]),
        "gm_meter_register_device": (status, [ctypes.c_void_p, P(DeviceInfo)]),
        "gm_meter_ingest_cupti_buffer": (status, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]),
        "gm_meter_report_dropped": (status, [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64]),
        "gm_meter_process_exited": (status, [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64]),
        "gm_meter_watermark_ns": (status, [ctypes.c_void_p, P(ctypes.c_uint64)]),
        "gm_meter_drain_usage_json": (status, [ctypes.c_void_p, ctypes.c_uint64, P(ctypes.c_void_p)]),
        "gm_rate_json": (status, [ctypes.c_char_p, ctypes.c_char_p, P(ctypes.c_void_p)]),
        "gm_recording_open": (status, [ctypes.c_char_p, ctypes.c_uint32, P(ctypes.c_void_p)]),
        "gm_recording_cupti_api_version": (ctypes.c_uint32, [ctypes.c_void_p]),
        "gm_recording_next": (status, [ctypes.c_void_p, P(RecordingItem)]),
        "gm_recording_free": (None, [ctypes.c_void_p]),
    }
    for name, (restype, argtypes) in decls.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def check(lib, status, what):
    """Raises with the library's message (this thread's last error) unless status is GM_OK."""
    if status != GM_OK:
        n = lib.gm_last_error_message(None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        lib.gm_last_error_message(buf, n + 1)
        raise GpumeterError(f"{what}: status {status}: {buf.value.decode()}")


def take_string(lib, ptr):
    """Copies a string the library returned and frees the library's copy."""
    try:
        return ctypes.string_at(ptr).decode()
    finally:
        lib.gm_string_free(ptr)


def number(lo, hi):
    """An argparse type: a decimal integer from lo to hi (the C agent's ranges)."""

    def parse(text):
        if not re.fullmatch(r"[0-9]+", text) or not lo <= int(text) <= hi:
            raise argparse.ArgumentTypeError(f"not a number from {lo} to {hi}: {text}")
        return int(text)

    return parse


def tenant_name(text):
    """An argparse type: a tenant name of at most 128 bytes (the library checks the rest)."""
    if len(text.encode()) > 128:
        raise argparse.ArgumentTypeError("a tenant name of at most 128 bytes")
    return text


def read_prices(path):
    """The price book's bytes; a file that cannot be read is an error with its reason."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise GpumeterError(f"{path}: {e.strerror or e}") from None


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recording", help=".gmr recording or raw CUPTI activity buffer file")
    ap.add_argument("--lib", default=os.environ.get("GPUMETER_FFI_LIB",
                    os.path.join(root, "target", "debug", "c-abi", "lib",
                                 "libgpumeter_ffi.so.1")),
                    help="libgpumeter_ffi.so.1 (default: $GPUMETER_FFI_LIB, else "
                         "target/debug/c-abi/lib)")
    ap.add_argument("--prices", default="examples/pricebook.toml", help="price book (TOML)")
    # The ranges the C agent (and the library's configuration) take.
    ap.add_argument("--window-seconds", type=number(1, 86400), default=3600)
    ap.add_argument("--reorder-horizon-ns", type=number(0, UINT64_MAX),
                    help="default: the library's (60 s)")
    ap.add_argument("--tenant", type=tenant_name,
                    help="tenant of work no rule attributes (default: unattributed)")
    ap.add_argument("--raw-cupti-api-version", type=number(0, 2**32 - 1), default=0,
                    help="layout of a raw buffer file (0 = 26, CUDA 12.8's); a .gmr has its own")
    args = ap.parse_args()

    lib = load(args.lib)
    if lib.gm_abi_version() != GM_ABI_VERSION:
        sys.exit(f"agent.py: library ABI {lib.gm_abi_version()}, agent written for {GM_ABI_VERSION}")
    prices = read_prices(args.prices)

    rec = ctypes.c_void_p()
    check(lib, lib.gm_recording_open(os.fsencode(args.recording), args.raw_cupti_api_version,
                                     ctypes.byref(rec)), "gm_recording_open")
    meter = ctypes.c_void_p()
    try:
        # The buffers' layout is the producer's CUPTI API version: a live agent passes its
        # CUPTI_API_VERSION, a replay the recording's.
        config = {"cupti_api_version": lib.gm_recording_cupti_api_version(rec),
                  "window_seconds": args.window_seconds}
        if args.reorder_horizon_ns is not None:
            config["reorder_horizon_ns"] = args.reorder_horizon_ns
        if args.tenant is not None:
            config["tenant"] = args.tenant
        check(lib, lib.gm_meter_new(json.dumps(config).encode(), ctypes.byref(meter)), "gm_meter_new")
        run(lib, rec, meter, args.window_seconds * 10**9, prices)
    finally:
        lib.gm_meter_free(meter)
        lib.gm_recording_free(rec)


def run(lib, rec, meter, window_ns, prices):
    """The agent's loop: what a CUPTI subscription's callbacks would do, in order."""
    drained_edge = 0
    # A struct the library fills says how big it is: a later library adds fields at its end.
    item = RecordingItem(struct_size=ctypes.sizeof(RecordingItem))
    while True:
        check(lib, lib.gm_recording_next(rec, ctypes.byref(item)), "gm_recording_next")
        if item.kind == GM_ITEM_END:
            break
        if item.kind == GM_ITEM_DEVICE:
            check(lib, lib.gm_meter_register_device(meter, item.device),
                  "gm_meter_register_device")
        elif item.kind == GM_ITEM_BUFFER:
            # CUPTI's buffer-completed callback: hand the valid bytes over, then drain the
            # windows that closed (those ending at or before the watermark's window edge).
            check(lib, lib.gm_meter_ingest_cupti_buffer(meter, item.buffer, item.buffer_size),
                  "gm_meter_ingest_cupti_buffer")
            watermark = ctypes.c_uint64()
            check(lib, lib.gm_meter_watermark_ns(meter, ctypes.byref(watermark)),
                  "gm_meter_watermark_ns")
            edge = watermark.value - watermark.value % window_ns
            if edge > drained_edge:
                drain(lib, meter, edge, prices)
                drained_edge = edge
        elif item.kind == GM_ITEM_DROPPED:
            check(lib, lib.gm_meter_report_dropped(meter, item.device_id, item.dropped),
                  "gm_meter_report_dropped")
        elif item.kind == GM_ITEM_PROCESS_EXIT:
            check(lib, lib.gm_meter_process_exited(meter, item.pid, item.timestamp_ns),
                  "gm_meter_process_exited")
    # Shutdown: everything left, open windows included.
    drain(lib, meter, UINT64_MAX, prices)


def drain(lib, meter, before_ns, prices):
    """Drains the windows before `before_ns`; prints the usage report, then its invoice."""
    out = ctypes.c_void_p()
    check(lib, lib.gm_meter_drain_usage_json(meter, before_ns, ctypes.byref(out)),
          "gm_meter_drain_usage_json")
    usage = take_string(lib, out)
    check(lib, lib.gm_rate_json(usage.encode(), prices, ctypes.byref(out)), "gm_rate_json")
    invoice = take_string(lib, out)
    print(usage)
    print(invoice)
    sys.stdout.flush()


if __name__ == "__main__":
    try:
        main()
    except GpumeterError as e:
        sys.exit(f"agent.py: {e}")
    except BrokenPipeError:
        # The reader went away (`| head`): as the C agent, which SIGPIPE ends, stop quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
