#!/usr/bin/env python3
"""The FLOP check of scripts/gpu-flops.sh (issue 17 item 3).

    table.py WORKDIR [--classes "fp64 fp32 fp16 tensor all"]   checks and a Markdown table
    table.py --self-test                                        the arithmetic and decisions,
                                                                on a synthetic work directory
                                                                (no GPU)

WORKDIR is what scripts/gpu-flops.sh leaves, per class C and run R (a: without --flops, b: with
it): C.R.rc, C.R.stdout (the suite's `launch ...` lines), C.R.wall_ns, C.R.usage.json
(`gpumeter usage --json`), C.R.show.json (`gpumeter recording show --json`); and env.txt.

Per class, from the launch lines of run (b), what the code performs (scripts/gpu-flops/flops.cu):
fma_fp64 / fma_fp32 / fma_fp16: 2 * grid * block * iters FLOPs of that precision; gemm_wmma:
2 * m * n * k tensor operations (m*n*k fused multiply-adds, each 2 operations). Every FLOP
meter of run (b)'s report (Σ over tenants and devices) must equal it EXACTLY (the meters the
class does not use: 0 or absent), PASS or FAIL per meter. Also shown, not judged: the raw
counter sums `recording show` lists (so a mismatch says which counter moved), the replay
passes, and the cost: wall(b) / wall(a) of the whole process and kernel_ns(b) / kernel_ns(a).
Exit status: 0 PASS, 1 FAIL, 2 nothing to read (no class ran).
"""

import argparse
import json
import os
import sys
import tempfile

# Meter names of the usage report, in one place.
METERS = ("flops_fp64", "flops_fp32", "flops_fp16", "tensor_ops")
# Which meter each kernel of the suite feeds.
KERNEL_METER = {
    "fma_fp64": "flops_fp64",
    "fma_fp32": "flops_fp32",
    "fma_fp16": "flops_fp16",
    "gemm_wmma": "tensor_ops",
}


def launches(text):
    """The suite's `launch kernel=NAME key=value ...` lines as dicts (integers where they are)."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0] != "launch":
            continue
        d = {}
        for p in parts[1:]:
            if "=" in p:
                k, v = p.split("=", 1)
                d[k] = int(v) if v.lstrip("-").isdigit() else v
        out.append(d)
    return out


def expected(launch_list):
    """What the launches perform, per meter (every meter present, 0 when unused)."""
    want = {m: 0 for m in METERS}
    for l in launch_list:
        k = l.get("kernel")
        if k in ("fma_fp64", "fma_fp32", "fma_fp16"):
            want[KERNEL_METER[k]] += 2 * l["grid"] * l["block"] * l["iters"]
        elif k == "gemm_wmma":
            want["tensor_ops"] += 2 * l["m"] * l["n"] * l["k"]
        else:
            raise ValueError("unknown kernel %r" % (k,))
    return want


def metered(usage, meter):
    """Σ of a meter over the report's totals (None when the report has no row of it)."""
    rows = [t for t in usage.get("totals", []) if t.get("meter") == meter]
    if not rows:
        return None
    return sum(int(t["quantity"]) for t in rows)


def not_meterable(usage):
    """(device key, meter, code) of the report's not_meterable entries of FLOP meters."""
    out = []
    for d in usage.get("devices", []):
        for n in d.get("not_meterable", []):
            if n.get("meter") in METERS:
                out.append((d.get("device_key"), n.get("meter"), n.get("code")))
    return out


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_text(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def evaluate(work, classes):
    """Per class: {"class", "checks": [(label, ok, detail)], "rows": [...], ...}."""
    results = []
    for c in classes:
        usage = load_json(os.path.join(work, c + ".b.usage.json"))
        stdout = read_text(os.path.join(work, c + ".b.stdout"))
        if usage is None or not stdout:
            continue
        r = {"class": c, "checks": [], "rows": []}
        try:
            want = expected(launches(stdout))
        except (KeyError, ValueError) as e:
            r["checks"].append(("launch lines", False, str(e)))
            results.append(r)
            continue
        for m in METERS:
            got = metered(usage, m)
            ok = got == want[m] or (got is None and want[m] == 0)
            r["rows"].append((m, want[m], got))
            r["checks"].append(
                (m, ok, "expected %d, metered %s" % (want[m], "absent" if got is None else got))
            )
        for key, meter, code in not_meterable(usage):
            r["checks"].append(
                ("%s meterable on %s" % (meter, key), False, "not_meterable: %s" % code)
            )
        show = load_json(os.path.join(work, c + ".b.show.json")) or {}
        r["passes"] = show.get("op_passes", [])
        r["counters"] = [(x.get("metric"), x.get("sum")) for x in show.get("op_counters", [])]
        wall = [read_text(os.path.join(work, "%s.%s.wall_ns" % (c, x))).strip() for x in "ab"]
        r["wall_ratio"] = (
            int(wall[1]) / int(wall[0]) if all(w.isdigit() for w in wall) and int(wall[0]) else None
        )
        ua = load_json(os.path.join(work, c + ".a.usage.json")) or {}
        ka, kb = metered(ua, "kernel_ns"), metered(usage, "kernel_ns")
        r["kernel_ratio"] = kb / ka if ka and kb is not None else None
        results.append(r)
    return results


def fmt_ratio(x):
    return "-" if x is None else "%.2f" % x


def markdown(results, env):
    lines = []
    if env:
        lines.append("GPU and software: " + "; ".join(env))
        lines.append("")
    lines.append("| class | meter | expected | metered | result |")
    lines.append("|---|---|---:|---:|---|")
    for r in results:
        for m, want, got in r["rows"]:
            ok = got == want or (got is None and want == 0)
            lines.append(
                "| %s | %s | %d | %s | %s |"
                % (r["class"], m, want, "absent" if got is None else got, "PASS" if ok else "FAIL")
            )
    lines.append("")
    lines.append("| class | replay passes | wall (b) / (a) | kernel_ns (b) / (a) |")
    lines.append("|---|---|---:|---:|")
    for r in results:
        lines.append(
            "| %s | %s | %s | %s |"
            % (
                r["class"],
                ", ".join(str(p) for p in r.get("passes", [])) or "-",
                fmt_ratio(r.get("wall_ratio")),
                fmt_ratio(r.get("kernel_ratio")),
            )
        )
    for r in results:
        if r.get("counters"):
            lines.append("")
            lines.append("raw counters of %s: " % r["class"] + ", ".join(
                "%s=%s" % (m, s) for m, s in r["counters"] if s))
    return "\n".join(lines)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", nargs="?")
    ap.add_argument("--classes", default="fp64 fp32 fp16 tensor all")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args(argv)
    if a.self_test:
        return self_test()
    if not a.work:
        ap.error("WORKDIR is required")
    results = evaluate(a.work, a.classes.split())
    if not results:
        print("nothing to read in %s (no class ran)" % a.work)
        return 2
    env = [l.strip() for l in read_text(os.path.join(a.work, "env.txt")).splitlines() if l.strip()]
    print(markdown(results, env))
    fails = [(r["class"], l, d) for r in results for (l, ok, d) in r["checks"] if not ok]
    for c, l, d in fails:
        print("FAIL %s: %s: %s" % (c, l, d))
    return 1 if fails else 0


# ----------------------------------------------------------------------------------------------
# Self-test: a synthetic work directory, decisions checked against numbers worked out by hand.


def _usage(rows, kernel_ns=1000, not_meterable=()):
    totals = [{"meter": m, "tenant": "alice", "quantity": str(q)} for m, q in rows]
    totals.append({"meter": "kernel_ns", "tenant": "alice", "quantity": str(kernel_ns)})
    devices = [{"device_key": "GPU-x", "not_meterable": [
        {"meter": m, "code": c} for m, c in not_meterable]}]
    return {"totals": totals, "devices": devices}


def _write(work, name, text):
    with open(os.path.join(work, name), "w") as f:
        f.write(text)


def self_test():
    fails = []

    def expect(label, got, want):
        if got != want:
            fails.append("%s: got %r, want %r" % (label, got, want))

    # 264 blocks of 256 threads, 4096 FMAs each: 2 * 264 * 256 * 4096 = 553648128 FLOPs.
    expect("fma", expected(launches("launch kernel=fma_fp32 grid=264 block=256 iters=4096\n")),
           {"flops_fp64": 0, "flops_fp32": 553648128, "flops_fp16": 0, "tensor_ops": 0})
    # 1024^3 GEMM: 2 * 2^30 = 2147483648 tensor operations; lines that are not launches ignored.
    expect("gemm", expected(launches("hello\nlaunch kernel=gemm_wmma grid=512 block=128 "
                                     "m=1024 n=1024 k=1024\n"))["tensor_ops"], 2147483648)
    try:
        expected([{"kernel": "mystery"}])
        fails.append("an unknown kernel must be refused")
    except ValueError:
        pass
    with tempfile.TemporaryDirectory() as work:
        # fp64: exact. fp32: off by one (FAIL). fp16: exact but its device has a kernel
        # without counts (FAIL). tensor: absent meter where 0 is expected for the others.
        _write(work, "fp64.b.stdout", "launch kernel=fma_fp64 grid=2 block=32 iters=10\n")
        _write(work, "fp64.b.usage.json", json.dumps(_usage([("flops_fp64", 1280)], 3000)))
        _write(work, "fp64.a.usage.json", json.dumps(_usage([], 1000)))
        _write(work, "fp64.a.wall_ns", "100\n")
        _write(work, "fp64.b.wall_ns", "250\n")
        _write(work, "fp64.b.show.json", json.dumps({"op_passes": [9], "op_counters": [
            {"metric": "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum", "sum": 640}]}))
        _write(work, "fp32.b.stdout", "launch kernel=fma_fp32 grid=2 block=32 iters=10\n")
        _write(work, "fp32.b.usage.json", json.dumps(_usage([("flops_fp32", 1281)])))
        _write(work, "fp16.b.stdout", "launch kernel=fma_fp16 grid=1 block=32 iters=1\n")
        _write(work, "fp16.b.usage.json", json.dumps(
            _usage([("flops_fp16", 64)], not_meterable=[("flops_fp16", "kernels_without_op_counts")])))
        res = {r["class"]: r for r in evaluate(work, ["fp64", "fp32", "fp16", "tensor"])}
        expect("classes read", sorted(res), ["fp16", "fp32", "fp64"])
        bad = lambda c: [l for (l, ok, _) in res[c]["checks"] if not ok]
        expect("fp64 passes", bad("fp64"), [])
        expect("fp64 wall ratio", res["fp64"]["wall_ratio"], 2.5)
        expect("fp64 kernel ratio", res["fp64"]["kernel_ratio"], 3.0)
        expect("fp64 passes listed", res["fp64"]["passes"], [9])
        expect("fp32 fails", bad("fp32"), ["flops_fp32"])
        expect("fp16 fails", bad("fp16"), ["flops_fp16 meterable on GPU-x"])
        md = markdown(list(res.values()), ["gpu=test"])
        expect("table row", "| fp64 | flops_fp64 | 1280 | 1280 | PASS |" in md, True)
        expect("table fail row", "| fp32 | flops_fp32 | 1280 | 1281 | FAIL |" in md, True)
        expect("cost row", "| fp64 | 9 | 2.50 | 3.00 |" in md, True)
        expect("exit on fail", main([work, "--classes", "fp64 fp32"]), 1)
        expect("exit on pass", main([work, "--classes", "fp64"]), 0)
        expect("exit on nothing", main([work, "--classes", "tensor"]), 2)
    for f in fails:
        print("self-test FAIL:", f)
    print("self-test", "PASS" if not fails else "FAIL")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
