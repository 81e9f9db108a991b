"""fork() while another thread is inside a call on a handle, from Python (tests/fork.rs; docs/C_ABI.md,
"Processes: fork()", issue 30 item 18): multiprocessing's fork start method, the common case. The child's calls
on the parent's handles fail at once with GM_ERR_FORKED (before, the first one waited forever
for a lock held by a thread that does not exist in the child); a meter made in the child works.

    GPUMETER_FFI_LIB=.../libgpumeter_ffi.so.1 python3 fork.py LEDGER

The same conversation with the test as tests/c/fork.c: "ready", a line back (the test then
holds the ledger's write lock), "child: ok" (or what went wrong), then the grant's status and
"ok".
"""

import ctypes
import multiprocessing
import os
import sys
import threading
import time

GM_OK = 0
GM_ERR_FORKED = 14

lib = ctypes.CDLL(os.environ["GPUMETER_FFI_LIB"])
P = ctypes.POINTER
for name, restype, argtypes in [
    ("gm_last_error_message", ctypes.c_size_t, [ctypes.c_char_p, ctypes.c_size_t]),
    ("gm_string_free", None, [ctypes.c_void_p]),
    ("gm_meter_new", ctypes.c_uint32, [ctypes.c_char_p, P(ctypes.c_void_p)]),
    ("gm_meter_free", None, [ctypes.c_void_p]),
    ("gm_meter_watermark_ns", ctypes.c_uint32, [ctypes.c_void_p, P(ctypes.c_uint64)]),
    ("gm_meter_usage_json", ctypes.c_uint32, [ctypes.c_void_p, P(ctypes.c_void_p)]),
    ("gm_bank_open", ctypes.c_uint32, [ctypes.c_char_p, P(ctypes.c_void_p)]),
    ("gm_bank_free", None, [ctypes.c_void_p]),
    ("gm_bank_grant_json", ctypes.c_uint32, [ctypes.c_void_p, ctypes.c_char_p, P(ctypes.c_void_p)]),
    ("gm_bank_balance_json", ctypes.c_uint32,
     [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64, P(ctypes.c_void_p)]),
]:
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = argtypes


def last_error():
    buf = ctypes.create_string_buffer(1024)
    lib.gm_last_error_message(buf, len(buf))
    return buf.value.decode()


def in_child(bank, meter):
    """The child's checks: exit status 0 when all hold."""
    failures = []
    out = ctypes.c_void_p()
    for what, status in [
        ("gm_bank_balance_json", lib.gm_bank_balance_json(bank, b"acme", 0, ctypes.byref(out))),
        ("gm_meter_watermark_ns", lib.gm_meter_watermark_ns(meter, ctypes.byref(ctypes.c_uint64()))),
    ]:
        if status != GM_ERR_FORKED or "fork()" not in last_error():
            failures.append(f"{what}: status {status}: {last_error()}")
    if out.value is not None:
        failures.append("an output was written")
    mine = ctypes.c_void_p()
    if lib.gm_meter_new(None, ctypes.byref(mine)) != GM_OK or \
            lib.gm_meter_usage_json(mine, ctypes.byref(out)) != GM_OK:
        failures.append(f"a meter made in the child: {last_error()}")
    lib.gm_string_free(out)
    lib.gm_meter_free(mine)
    # The parent's handles are left alone.
    lib.gm_bank_free(bank)
    lib.gm_meter_free(meter)
    for f in failures:
        print(f"child: {f}", file=sys.stderr)
    sys.exit(1 if failures else 0)


def main():
    bank = ctypes.c_void_p()
    meter = ctypes.c_void_p()
    if lib.gm_bank_open(sys.argv[1].encode(), ctypes.byref(bank)) != GM_OK or \
            lib.gm_meter_new(None, ctypes.byref(meter)) != GM_OK:
        sys.exit(f"fork.py: {last_error()}")
    print("ready", flush=True)
    sys.stdin.readline()
    result = {}

    def grant():
        out = ctypes.c_void_p()
        result["status"] = lib.gm_bank_grant_json(
            bank, b'{"tenant": "acme", "credits": "5", "rate": "1", "key": "fork", '
                  b'"at_ns": 1700000000000000000}', ctypes.byref(out))
        lib.gm_string_free(out)

    # ctypes lets go of the GIL during the call: the thread waits inside the bank's lock.
    thread = threading.Thread(target=grant)
    thread.start()
    time.sleep(0.3)
    child = multiprocessing.get_context("fork").Process(target=in_child, args=(bank, meter))
    child.start()
    child.join(20)
    if child.exitcode is None:
        child.kill()
        child.join()
        print("child: hung", flush=True)
    elif child.exitcode == 0:
        print("child: ok", flush=True)
    else:
        print(f"child: exit status {child.exitcode}", flush=True)
    thread.join()
    print(f"grant: {result.get('status')}", flush=True)
    out = ctypes.c_void_p()
    if result.get("status") == GM_OK and \
            lib.gm_bank_balance_json(bank, b"acme", 0, ctypes.byref(out)) == GM_OK:
        print(f"balance {ctypes.string_at(out).decode()}")
        lib.gm_string_free(out)
        print("ok")
    lib.gm_meter_free(meter)
    lib.gm_bank_free(bank)


if __name__ == "__main__":
    main()
