#!/usr/bin/env python3
"""Checks deploy/prometheus/scrape.yaml against the DaemonSet and writes a copy promtool can read
(scripts/check-deploy).

    scripts/check-scrape.py OUT_FILE

- The job names are the ones the alert rules select (`gpumeter-agent`, `gpumeter-agent-hosts`).
- The Kubernetes job discovers pods (role pod) in the DaemonSet's namespace, keeps those with the
  label the DaemonSet puts on its pods, and the container port named as the DaemonSet names it.
- OUT_FILE: the file with each `kubernetes_sd_configs` replaced by a `static_configs` target, for
  `promtool check config`: Debian's Prometheus is built without Kubernetes service discovery
  (its promtool refuses the field), so everything else of the file is checked by promtool there,
  and the file as it is wherever promtool has it.

Prints what it checked; exits 1 with every failed assertion.
"""

import os
import sys

import yaml

from deploy_checks import check, failures

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SCRAPE = os.path.join(ROOT, "deploy/prometheus/scrape.yaml")
DAEMONSET = os.path.join(ROOT, "deploy/k8s/20-daemonset.yaml")
JOBS = {"gpumeter-agent", "gpumeter-agent-hosts"}


def daemonset():
    with open(DAEMONSET) as f:
        for doc in yaml.safe_load_all(f):
            if doc and doc["kind"] == "DaemonSet":
                return doc
    raise SystemExit(f"no DaemonSet in {DAEMONSET}")


def keeps(relabels, source, regex):
    return any(r.get("action") == "keep" and r.get("source_labels") == [source]
               and r.get("regex") == regex for r in relabels)


def main():
    out = sys.argv[1]
    with open(SCRAPE) as f:
        config = yaml.safe_load(f)
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    check(set(jobs) == JOBS, f"scrape.yaml has the jobs the rules select: {sorted(jobs)}")
    ds = daemonset()
    namespace = ds["metadata"]["namespace"]
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    ports = [p["name"] for c in ds["spec"]["template"]["spec"]["containers"]
             for p in c.get("ports", []) if "name" in p]
    k8s = jobs.get("gpumeter-agent", {})
    sd = k8s.get("kubernetes_sd_configs", [])
    check(len(sd) == 1 and sd[0].get("role") == "pod", "gpumeter-agent discovers pods")
    check(bool(sd) and sd[0].get("namespaces", {}).get("names") == [namespace],
          f"gpumeter-agent looks in the DaemonSet's namespace {namespace}")
    relabels = k8s.get("relabel_configs", [])
    name = pod_labels.get("app.kubernetes.io/name")
    check(name is not None and keeps(
        relabels, "__meta_kubernetes_pod_label_app_kubernetes_io_name", name),
        f"gpumeter-agent keeps pods labelled app.kubernetes.io/name={name} (the DaemonSet's)")
    check(any(keeps(relabels, "__meta_kubernetes_pod_container_port_name", p) for p in ports),
          f"gpumeter-agent keeps a container port the DaemonSet names ({ports})")
    for job in config["scrape_configs"]:
        if "kubernetes_sd_configs" in job:
            del job["kubernetes_sd_configs"]
            job["static_configs"] = [{"targets": ["kubernetes-sd-stand-in:9464"]}]
    with open(out, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
