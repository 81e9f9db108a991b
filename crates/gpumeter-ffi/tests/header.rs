//! The committed header, `bindings/c/gpumeter.h`, is what the pinned cbindgen makes of this
//! crate now (docs/C_ABI.md: generated, committed, checked in CI). With `GPUMETER_BLESS=1` the
//! test rewrites the header instead of failing.

use std::collections::BTreeSet;
use std::path::PathBuf;

#[test]
fn header_is_current() -> Result<(), Box<dyn std::error::Error>> {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root = crate_dir.join("../..");
    let config = cbindgen::Config::from_file(root.join("bindings/c/cbindgen.toml"))?;
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()?
        .write(&mut generated);
    let path = root.join("bindings/c/gpumeter.h");
    if std::env::var_os("GPUMETER_BLESS").is_some() {
        std::fs::write(&path, &generated)?;
        return Ok(());
    }
    let committed = std::fs::read(&path)?;
    assert!(
        committed == generated,
        "bindings/c/gpumeter.h is stale: regenerate it with \
         `GPUMETER_BLESS=1 cargo test -p gpumeter-ffi --test header` and commit it"
    );
    Ok(())
}

/// A function of the header: its doc comment, return type and parameters.
struct Function {
    name: String,
    doc: String,
    returns: String,
    params: Vec<String>,
}

/// The functions `gpumeter.h` declares, with the doc comment above each.
fn functions(header: &str) -> Vec<Function> {
    let mut out = Vec::new();
    let mut doc = String::new();
    let mut decl = String::new();
    for line in header.lines() {
        if let Some(c) = line.strip_prefix("//") {
            doc.push_str(c.trim());
            doc.push('\n');
            continue;
        }
        if decl.is_empty() && !(line.contains("gm_") && line.contains('(')) {
            if !line.trim().is_empty() && !line.starts_with(' ') {
                doc.clear();
            }
            continue;
        }
        decl.push_str(line.trim());
        decl.push(' ');
        if !line.trim_end().ends_with(';') {
            continue;
        }
        let d = std::mem::take(&mut decl);
        let open = d.find('(').expect("a parameter list");
        let head = d[..open].trim();
        let (returns, name) = head.rsplit_once(' ').expect("a return type and a name");
        let close = d.rfind(')').expect("a parameter list");
        let params = d[open + 1..close]
            .split(',')
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty() && p != "void")
            .collect();
        out.push(Function {
            name: name.trim_start_matches('*').to_string(),
            doc: std::mem::take(&mut doc),
            returns: returns.to_string(),
            params,
        });
    }
    out
}

/// The `GM_ERR_*` names a text mentions.
fn codes(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("GM_ERR_") {
        let tail = &rest[at..];
        let len = tail
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..len].to_string());
        rest = &tail[len..];
    }
    names
}

/// Issue 30 item 19: every status a function can return is listed in its doc comment (which
/// is the header's). What a function's parameters let it return is checked here: every
/// function returning `gm_status` can return `GM_ERR_PANIC`; one with a pointer
/// `GM_ERR_NULL_ARGUMENT`; one with a string `GM_ERR_INVALID_UTF8`; one with a meter or bank
/// `GM_ERR_FORKED` and `GM_ERR_POISONED`, with a recording `GM_ERR_FORKED`; one with a sized
/// struct or a buffer `GM_ERR_INVALID_ARGUMENT`. The codes that depend on what a function does
/// (decoding, rating, the bank) are in its doc by hand, and each named code exists.
#[test]
fn every_function_lists_the_statuses_it_can_return() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let header = std::fs::read_to_string(root.join("bindings/c/gpumeter.h")).expect("header");
    let all: BTreeSet<String> = header
        .lines()
        .filter_map(|l| l.trim().strip_prefix("GM_ERR_"))
        .filter_map(|l| l.split_whitespace().next())
        .map(|n| format!("GM_ERR_{n}"))
        .collect();
    assert!(all.contains("GM_ERR_FORKED") && all.len() >= 14, "{all:?}");
    let fs = functions(&header);
    assert!(fs.len() > 20, "{} functions", fs.len());
    for f in &fs {
        let errors = f
            .doc
            .split_once("# Errors")
            .map(|(_, e)| e.split("\n#").next().expect("the section").to_string());
        if f.returns != "gm_status" {
            assert!(
                errors.is_none(),
                "{}: returns {}, no status",
                f.name,
                f.returns
            );
            continue;
        }
        let errors = errors.unwrap_or_else(|| panic!("{}: no # Errors section", f.name));
        let documented = codes(&errors);
        let unknown: Vec<&String> = documented.difference(&all).collect();
        assert!(unknown.is_empty(), "{}: {unknown:?} are not codes", f.name);
        let mut need = vec!["GM_ERR_PANIC"];
        for p in &f.params {
            // A handle is `struct gm_meter *meter`; `struct gm_meter **out` is an output.
            let handle = |t: &str| p.contains(t) && !p.contains("**");
            if p.contains('*') {
                need.push("GM_ERR_NULL_ARGUMENT");
            }
            if p.starts_with("const char *") {
                need.push("GM_ERR_INVALID_UTF8");
            }
            if handle("struct gm_meter *") || handle("struct gm_bank *") {
                need.extend(["GM_ERR_FORKED", "GM_ERR_POISONED"]);
            }
            if handle("struct gm_recording *") {
                need.push("GM_ERR_FORKED");
            }
            if p.contains("gm_device_info *")
                || p.contains("gm_recording_item *")
                || p.starts_with("const uint8_t *")
            {
                need.push("GM_ERR_INVALID_ARGUMENT");
            }
        }
        for code in need {
            assert!(
                documented.contains(code),
                "{}: its # Errors do not list {code}: {errors}",
                f.name
            );
        }
    }
}
