#!/usr/bin/env python3
"""Checks deploy/Dockerfile without docker (scripts/check-deploy runs it; deploy/README.md).

    scripts/check-dockerfile.py [DOCKERFILE]      default: deploy/Dockerfile

Debian bookworm has no hadolint, so the file is parsed with dockerfile-parse (PyPI, pinned by
scripts/check-deploy) and its stages and paths are checked against the workspace's manifests:

- two stages, `FROM ... AS NAME`: a builder on rust:<rust-version>-bookworm (the workspace's
  rust-version, Cargo.toml) and a last stage on debian:bookworm-slim;
- the builder runs `cargo build --release --locked` of gpumeter-cli and gpumeter-inject, and
  the release profile strips (Cargo.toml `[profile.release] strip`), or the outputs are
  `strip`ped in the builder;
- every `COPY --from=<builder>` of the last stage takes a file the builder made: a cargo output
  (target/release/<the CLI's [[bin]] name>, target/release/lib<the injection crate>.so, a
  cdylib) or a copy of one made by `install`/`cp` in a builder `RUN`; the binary lands in
  /usr/local/bin/gpumeter, the injection library in /opt/gpumeter/lib/;
- the last stage installs ca-certificates, copies a configuration to /etc/gpumeter/agent.toml
  from a file that exists, and its ENTRYPOINT (exec form) is
  `<the copied binary> agent --config /etc/gpumeter/agent.toml`;
- OCI labels (title, version, source), a USER, and .dockerignore keeps target/ out.

Prints what it checked; exits 1 with every failed assertion.
"""

import json
import os
import posixpath
import shlex
import sys
import tomllib

from dockerfile_parse import DockerfileParser

from deploy_checks import check, failures

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN_DEST = "/usr/local/bin/gpumeter"
LIB_DIR = "/opt/gpumeter/lib"
CONFIG = "/etc/gpumeter/agent.toml"
ENTRYPOINT_ARGS = ["agent", "--config", CONFIG]


def toml(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return tomllib.load(f)


def cargo_outputs():
    """The file names `cargo build --release` leaves in target/release/ for the two crates."""
    cli = toml("crates/gpumeter-cli/Cargo.toml")
    bins = [b["name"] for b in cli.get("bin", [])] or [cli["package"]["name"]]
    inject = toml("crates/gpumeter-inject/Cargo.toml")
    lib = inject.get("lib", {})
    check("cdylib" in lib.get("crate-type", []), "gpumeter-inject builds a cdylib")
    lib_name = lib.get("name", inject["package"]["name"].replace("-", "_"))
    return {"gpumeter": bins[0], "inject": f"lib{lib_name}.so"}


def stages(parser):
    """[(name, image, [instructions])] from the parsed structure."""
    out = []
    for ins in parser.structure:
        if ins["instruction"] == "FROM":
            words = ins["value"].split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            check(name is not None, f"`FROM {ins['value']}` names its stage (FROM IMAGE AS NAME)")
            out.append((name, words[0], []))
        elif out and ins["instruction"] != "COMMENT":
            out[-1][2].append(ins)
    return out


def run_commands(instructions):
    """Every simple command of the RUN instructions, as argument lists (options of RUN itself,
    `--mount=...`, dropped)."""
    cmds = []
    for ins in instructions:
        if ins["instruction"] != "RUN":
            continue
        words = [w for w in shlex.split(ins["value"]) if not w.startswith("--mount=")]
        cmd = []
        for w in words + ["&&"]:
            if w in ("&&", "||", ";"):
                if cmd:
                    cmds.append(cmd)
                cmd = []
            else:
                cmd.append(w)
    return cmds


def workdir(instructions):
    wd = "/"
    for ins in instructions:
        if ins["instruction"] == "WORKDIR":
            wd = posixpath.join(wd, ins["value"].strip())
    return wd


def check_builder(name, image, instructions, outputs):
    """Returns {absolute path in the builder: cargo output name} of what it makes."""
    manifest = toml("Cargo.toml")
    rust_version = manifest["workspace"]["package"]["rust-version"]
    repo, _, tag = image.partition(":")
    check(
        repo in ("rust", "docker.io/library/rust")
        and tag.endswith("-bookworm")
        and (tag[: -len("-bookworm")] + ".").startswith(rust_version + "."),
        f"builder `{name}` is rust:{rust_version}[.patch]-bookworm (Cargo.toml rust-version "
        f"{rust_version}): {image}",
    )
    cmds = run_commands(instructions)
    build = [c for c in cmds if c[:2] == ["cargo", "build"]]
    packages = set()
    for c in build:
        packages |= {c[i + 1] for i, w in enumerate(c[:-1]) if w in ("-p", "--package")}
    check(
        any("--release" in c and "--locked" in c for c in build),
        "the builder runs `cargo build --release --locked`",
    )
    check(
        {"gpumeter-cli", "gpumeter-inject"} <= packages,
        f"the builder builds gpumeter-cli and gpumeter-inject (built: {sorted(packages)})",
    )
    strip = manifest.get("profile", {}).get("release", {}).get("strip")
    stripped_by_cmd = any(c[0] == "strip" for c in cmds)
    overridden = any(
        ins["instruction"] in ("ENV", "ARG") and "CARGO_PROFILE_RELEASE_STRIP" in ins["value"]
        for ins in instructions
    )
    check(
        (strip in (True, "symbols") and not overridden) or stripped_by_cmd,
        f"the outputs are stripped (Cargo.toml [profile.release] strip = {strip!r}"
        f"{', overridden' if overridden else ''}; a `strip` command: {stripped_by_cmd})",
    )
    wd = workdir(instructions)
    made = {posixpath.join(wd, "target/release", f): f for f in outputs.values()}
    for c in cmds:
        if c[0] in ("install", "cp") and len(c) >= 3:
            args = [w for w in c[1:] if not w.startswith("-")]
            if c[0] == "install" and "-m" in c:
                mode = c[c.index("-m") + 1]
                args = [a for a in args if a != mode]
            src, dst = (posixpath.join(wd, a) for a in args[-2:])
            if src in made:
                made[dst] = made[src]
    return made


def check_runtime(name, image, instructions, made, outputs, builder):
    check(image == "debian:bookworm-slim",
          f"the last stage `{name}` is debian:bookworm-slim: {image}")
    cmds = run_commands(instructions)
    check(
        any(c[:2] == ["apt-get", "install"] and "ca-certificates" in c for c in cmds),
        "the runtime installs ca-certificates (HTTPS to the events sinks)",
    )
    landed = {}
    for ins in instructions:
        if ins["instruction"] != "COPY":
            continue
        words = shlex.split(ins["value"])
        opts = [w for w in words if w.startswith("--")]
        src, dst = [w for w in words if not w.startswith("--")][-2:]
        if f"--from={builder}" in opts:
            output = made.get(src)
            check(output is not None, f"COPY --from={builder} {src}: a file the builder makes")
            if output is not None:
                dest = posixpath.join(dst, posixpath.basename(src)) if dst.endswith("/") else dst
                landed[output] = dest
        elif not any(o.startswith("--from=") for o in opts):
            check(os.path.exists(os.path.join(ROOT, src)), f"COPY {src}: in the build context")
            landed[src] = dst
    check(
        landed.get(outputs["gpumeter"]) == BIN_DEST,
        f"target/release/{outputs['gpumeter']} lands in {BIN_DEST} "
        f"(in: {landed.get(outputs['gpumeter'])})",
    )
    lib = landed.get(outputs["inject"], "")
    check(
        posixpath.dirname(lib) == LIB_DIR and posixpath.basename(lib) == outputs["inject"],
        f"target/release/{outputs['inject']} lands in {LIB_DIR}/ (in: {lib or None})",
    )
    check(CONFIG in landed.values(), f"a configuration is copied to {CONFIG}")
    entry = [i["value"] for i in instructions if i["instruction"] == "ENTRYPOINT"]
    try:
        argv = json.loads(entry[-1]) if entry else None
    except json.JSONDecodeError:
        argv = None
    check(
        argv == [BIN_DEST] + ENTRYPOINT_ARGS,
        f"ENTRYPOINT (exec form) runs `{BIN_DEST} {' '.join(ENTRYPOINT_ARGS)}`: "
        f"{entry[-1] if entry else None}",
    )
    users = [i["value"] for i in instructions if i["instruction"] == "USER"]
    check(bool(users), f"the runtime names its USER: {users[-1] if users else None}")


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "deploy/Dockerfile")
    print(f"{path}:")
    parser = DockerfileParser(path=path)
    outputs = cargo_outputs()
    found = stages(parser)
    if not check(len(found) >= 2, f"two stages or more: {[(n, i) for n, i, _ in found]}"):
        return 1
    builder = next(((n, i, ins) for n, i, ins in found if i.split(":")[0].endswith("rust")), None)
    if check(builder is not None, "a builder stage on the rust image"):
        made = check_builder(*builder, outputs)
        check_runtime(*found[-1], made, outputs, builder[0])
    labels = parser.labels
    for key in ("title", "version", "source"):
        check(f"org.opencontainers.image.{key}" in labels, f"label org.opencontainers.image.{key}")
    ignore_path = os.path.join(ROOT, ".dockerignore")
    lines = open(ignore_path).read().splitlines() if os.path.exists(ignore_path) else []
    patterns = {line.strip().rstrip("/") for line in lines if not line.strip().startswith("#")}
    check(bool(patterns & {"target", "/target", "**/target"}), ".dockerignore keeps target/ out")
    if failures:
        print(f"{path}: {len(failures)} check(s) failed")
        return 1
    print(f"{path}: stages, paths and entry point as deploy/README.md says")
    return 0


if __name__ == "__main__":
    sys.exit(main())
