#!/usr/bin/env python3
"""Checks that deploy/k8s's manifests fit together and fit the agent (scripts/check-deploy).

    scripts/check-k8s.py GPUMETER OUT_DIR

kubernetes-validate checks each object against Kubernetes' schemas; this checks what a schema
cannot see, reading the manifests with PyYAML and the patch with jsonpatch (PyPI, pinned by
scripts/check-deploy):

- the ConfigMap's agent.toml passes `GPUMETER agent --check` (the real parser: written to
  OUT_DIR/configmap-agent.toml), and the folders it names are the DaemonSet's hostPath mounts
  (spool, state, every reports sink), its [metrics] listen port is the container's port, the
  probes' port (/healthz, /readyz) and the prometheus.io annotations', on all interfaces;
- the DaemonSet: the ConfigMap mounted where the image's ENTRYPOINT reads it, hostPID, GPU
  nodes selected and nvidia.com/gpu tolerated, requests and limits, DAC_READ_SEARCH and SYS_PTRACE only;
  its init container puts the image's injection library into a hostPath folder;
- webhook/patch.json applied (RFC 6902) to webhook/example-gpu-pod.yaml: the result, written
  to OUT_DIR/patched-gpu-pod.yaml for kubernetes-validate, loads the library from the folder
  the init container fills, writes GPUMETER_OUT into the agent's spool folder, sets the
  downward-API labels, flushes well within the agent's horizon and grace, and names only
  variables the injection library reads.

Prints what it checked; exits 1 with every failed assertion.
"""

import glob
import json
import os
import posixpath
import re
import subprocess
import sys
import tomllib

import jsonpatch
import yaml

from deploy_checks import check, failures

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
K8S = os.path.join(ROOT, "deploy/k8s")
CONFIG = "/etc/gpumeter/agent.toml"  # the image's ENTRYPOINT (deploy/Dockerfile)
IMAGE_LIB = "/opt/gpumeter/lib/libgpumeter_inject.so"  # where the image holds the library
LABEL_VARS = ["POD_NAMESPACE", "POD_NAME", "POD_UID"]
# hostPath `type`s (the schema has them as any string).
HOST_PATH_TYPES = {"", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket",
                   "CharDevice", "BlockDevice"}


def load_objects():
    objects = {}
    for path in sorted(glob.glob(os.path.join(K8S, "*.yaml"))):
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if doc:
                    objects[(doc["kind"], doc["metadata"]["name"])] = doc
    return objects


def agent_check(gpumeter, text, out_dir):
    """`gpumeter agent --check` of the ConfigMap's text: {spool, state, horizon_ns, grace_ns}."""
    path = os.path.join(out_dir, "configmap-agent.toml")
    with open(path, "w") as f:
        f.write(text)
    run = subprocess.run(
        [gpumeter, "agent", "--check", "--config", path], capture_output=True, text=True
    )
    print(run.stdout + run.stderr, end="")
    what = f"`gpumeter agent --check` of the ConfigMap's agent.toml ({path})"
    if not check(run.returncode == 0, what):
        return None
    got = {}
    for line in run.stdout.splitlines():
        key, _, value = line.partition(": ")
        if key in ("spool", "state"):
            got[key] = value
        m = re.match(r"windows: \d+ s, horizon (\d+) ns, grace (\d+) ns", line)
        if m:
            got["horizon_ns"], got["grace_ns"] = int(m[1]), int(m[2])
    return got


def under(path, folder):
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def host_mounts(spec, container):
    """[(mountPath, hostPath, readOnly)] of the container's hostPath volumes."""
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    out = []
    for m in container.get("volumeMounts", []):
        v = volumes.get(m["name"], {})
        if "hostPath" in v:
            out.append((m["mountPath"], v["hostPath"]["path"], m.get("readOnly", False)))
    return out


def check_host_path_types(what, spec):
    for v in spec.get("volumes", []):
        if "hostPath" in v:
            kind = v["hostPath"].get("type", "")
            check(kind in HOST_PATH_TYPES,
                  f"{what}: volume {v['name']}: hostPath type {kind!r} is one of Kubernetes'")


def host_path_of(mounts, path):
    """The host folder behind `path` in a container, and whether it is writable."""
    for mount_path, host, read_only in mounts:
        if under(path, mount_path):
            rest = posixpath.relpath(path, mount_path)
            return posixpath.normpath(posixpath.join(host, rest)), not read_only
    return None, False


def check_daemonset(ds, config_map, agent, conf):
    spec = ds["spec"]["template"]["spec"]
    containers = spec["containers"]
    c = next((c for c in containers if "command" not in c), containers[0])
    mounts = host_mounts(spec, c)
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    cm_mounts = [
        m["mountPath"] for m in c.get("volumeMounts", [])
        if volumes.get(m["name"], {}).get("configMap", {}).get("name") == config_map
    ]
    folder = posixpath.dirname(CONFIG)
    check(folder in cm_mounts,
          f"container `{c['name']}`: ConfigMap {config_map} at {folder} (mounted at {cm_mounts})")
    check("args" not in c,
          f"container `{c['name']}` runs the image's ENTRYPOINT (…--config {CONFIG})")
    hosts = {}
    if agent:
        for key in ("spool", "state"):
            host, writable = host_path_of(mounts, agent[key])
            check(host is not None and writable,
                  f"agent.toml's {key} {agent[key]} is on a writable hostPath (host: {host})")
            hosts[key] = host
    for s in conf.get("sink", []):
        if s.get("kind") == "reports":
            host, writable = host_path_of(mounts, s["dir"])
            check(host is not None and writable,
                  f"the reports sink's {s['dir']} is on a writable hostPath (host: {host})")
    check_host_path_types("DaemonSet", spec)
    check(spec.get("hostPID") is True, "hostPID: true (NVML's host pids, /proc/<pid>)")
    gpu_nodes = spec.get("nodeSelector", {}).get("nvidia.com/gpu.present") == "true"
    check(gpu_nodes or "affinity" in spec,
          "GPU nodes selected (nvidia.com/gpu.present or an affinity)")
    check(any(t.get("key") == "nvidia.com/gpu" for t in spec.get("tolerations", [])),
          "the nvidia.com/gpu taint tolerated")
    check(spec.get("terminationGracePeriodSeconds", 30) >= 30,
          "terminationGracePeriodSeconds ≥ 30")
    res = c.get("resources", {})
    check(all(k in res.get(kind, {}) for kind in ("requests", "limits") for k in ("cpu", "memory")),
          "cpu and memory requests and limits")
    caps = c.get("securityContext", {}).get("capabilities", {})
    check(caps.get("drop") == ["ALL"]
          and sorted(caps.get("add") or []) == ["DAC_READ_SEARCH", "SYS_PTRACE"],
          f"capabilities: drop ALL, add DAC_READ_SEARCH and SYS_PTRACE only ({caps})")
    return spec, c, hosts


def check_metrics(spec, ds, c, conf):
    listen = conf.get("metrics", {}).get("listen", "")
    host, _, port = listen.rpartition(":")
    check(host not in ("", "127.0.0.1", "[::1]", "localhost"),
          f"[metrics] listen {listen!r} is on all interfaces (probes and scrapes come from "
          "outside the pod)")
    ports = [p["containerPort"] for p in c.get("ports", [])]
    check(port.isdigit() and int(port) in ports,
          f"[metrics] port {port} is a containerPort {ports}")
    notes = ds["spec"]["template"]["metadata"].get("annotations", {})
    for key, want in (("scrape", "true"), ("port", port), ("path", "/metrics")):
        got = notes.get(f"prometheus.io/{key}")
        check(got == want, f"annotation prometheus.io/{key}: {want!r} ({got!r})")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = c.get(probe, {}).get("httpGet", {})
        check(get.get("path") == path and str(get.get("port")) == port,
              f"{probe}: GET {path} on {port} ({get})")


def check_init(spec):
    """The host folder the init container installs the injection library into."""
    for c in spec.get("initContainers", []):
        script = " ".join(c.get("command", []) + c.get("args", []))
        if IMAGE_LIB not in script:
            continue
        words = re.split(r"[\s;&|]+", script)
        for mount_path, host, _ in host_mounts(spec, c):
            if posixpath.join(mount_path, posixpath.basename(IMAGE_LIB)) in words:
                check(True,
                      f"init container `{c['name']}` installs {IMAGE_LIB} into the node's {host}")
                return host
    check(False, f"an init container copies the image's {IMAGE_LIB} into a hostPath folder")
    return None


def env_of(container):
    return {e["name"]: e for e in container.get("env", [])}


def check_webhook(out_dir, lib_host, hosts, agent):
    with open(os.path.join(K8S, "webhook/example-gpu-pod.yaml")) as f:
        pod = yaml.safe_load(f)
    with open(os.path.join(K8S, "webhook/patch.json")) as f:
        patch = jsonpatch.JsonPatch(json.load(f))
    patched = patch.apply(pod)
    path = os.path.join(out_dir, "patched-gpu-pod.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(patched, f, sort_keys=False)
    print(f"webhook/patch.json applied to webhook/example-gpu-pod.yaml: {path}")
    check_host_path_types("patched pod", patched["spec"])
    c = patched["spec"]["containers"][0]
    env = env_of(c)
    mounts = host_mounts(patched["spec"], c)
    lib = env.get("CUDA_INJECTION64_PATH", {}).get("value", "")
    lib_on_host, _ = host_path_of(mounts, lib)
    check(lib_on_host == posixpath.join(lib_host or "?", posixpath.basename(IMAGE_LIB)),
          f"CUDA_INJECTION64_PATH {lib} is the library the init container installs "
          f"(on the node: {lib_on_host})")
    out = env.get("GPUMETER_OUT", {}).get("value", "")
    out_dir_host, writable = host_path_of(mounts, posixpath.dirname(out))
    if "spool" in hosts:
        check(writable and out_dir_host == hosts["spool"],
              f"GPUMETER_OUT {out} is in the agent's spool (on the node: {out_dir_host}; the "
              f"agent's: {hosts['spool']})")
    check("%p" in out and "%h" in out,
          "GPUMETER_OUT names host and process (%h, %p): one file per process")
    for name in LABEL_VARS:
        check("fieldRef" in env.get(name, {}).get("valueFrom", {}), f"{name} from the downward API")
    flush = env.get("GPUMETER_FLUSH_PERIOD_MS", {}).get("value", "")
    if agent and "horizon_ns" in agent:
        bound = min(agent["horizon_ns"], agent["grace_ns"]) // 1_000_000
        check(flush.isdigit() and 0 < int(flush) * 2 <= bound,
              f"GPUMETER_FLUSH_PERIOD_MS {flush or None} is at most half the agent's horizon and "
              f"grace ({bound} ms)")
    sources = ""
    for crate in ("gpumeter-inject", "gpumeter-collector"):
        for f in glob.glob(os.path.join(ROOT, "crates", crate, "src/**/*.rs"), recursive=True):
            with open(f) as text:
                sources += text.read()
    for name in env:
        if name.startswith("GPUMETER_"):
            check(f'"{name}"' in sources, f"{name}: a variable the injection library reads")


def main():
    gpumeter, out_dir = sys.argv[1], sys.argv[2]
    objects = load_objects()
    ds = objects.get(("DaemonSet", "gpumeter-agent"))
    cm = objects.get(("ConfigMap", "gpumeter-agent"))
    has_config = cm is not None and "agent.toml" in cm.get("data", {})
    if not (check(ds is not None, "DaemonSet gpumeter-agent")
            and check(has_config, "ConfigMap gpumeter-agent with agent.toml")):
        return 1
    text = cm["data"]["agent.toml"]
    agent = agent_check(gpumeter, text, out_dir)
    try:
        conf = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        conf = {}  # agent_check has said why
    spec, container, hosts = check_daemonset(ds, cm["metadata"]["name"], agent, conf)
    check_metrics(spec, ds, container, conf)
    lib_host = check_init(spec)
    check_webhook(out_dir, lib_host, hosts, agent)
    if failures:
        print(f"deploy/k8s: {len(failures)} check(s) failed")
        return 1
    print("deploy/k8s: the ConfigMap, the DaemonSet and the webhook's patch fit together")
    return 0


if __name__ == "__main__":
    sys.exit(main())
