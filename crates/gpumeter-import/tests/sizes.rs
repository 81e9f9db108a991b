//! Hostile input sizes: a gzip bomb of whitespace or of CPU-side events, a huge kernel name,
//! plain or gzipped, are read as a stream in bounded memory. Each case runs in a child process
//! (this test binary, re-executed with `GPUMETER_SIZE_CASE` naming the case) under
//! `ulimit -v`, so a reader that holds the document, the decompressed text or the whole name
//! fails to allocate and the child fails: the assertion is a memory ceiling, never a time.
//!
//! The inputs are generated here, never committed: a gzip file may hold many members
//! (`MultiGzDecoder` reads them all), so one compressed megabyte repeated makes a bomb of any
//! size from a few bytes of work.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use gpumeter_core::{Meter, MeterConfig};
use gpumeter_import::{import_path, ImportOptions, CUT_MARK, CUT_SUFFIX_BYTES, MAX_STRING_BYTES};

use super::ok;

/// What each case decompresses to: 64 MiB, twice the headroom a child is given.
const BIG_BYTES: usize = 64 << 20;

/// The headroom of a child, in KiB: its address space (`ulimit -v`) is the peak of a child
/// that reads an empty trace (the test binary, its libraries and thread stacks: about 150 MiB
/// of address space here, most of it never touched) plus 32 MiB, half what each case
/// decompresses to. Holding the decompressed text, or a whole name, cannot fit.
const HEADROOM_KIB: u64 = (BIG_BYTES as u64 / 2) >> 10;

fn gz(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    ok(e.write_all(data));
    ok(e.finish())
}

/// Writes `head`, then `fill` repeated to about `BIG_BYTES`, then `tail`, as gzip members (or as
/// plain text when `plain`) to `path`.
fn write_case(path: &Path, head: &str, fill: &[u8], tail: &str, plain: bool) {
    let mut f = std::io::BufWriter::new(ok(std::fs::File::create(path)));
    // About a MiB of whole copies of `fill`.
    let chunk: Vec<u8> = fill
        .iter()
        .copied()
        .cycle()
        .take((1 << 20) / fill.len() * fill.len())
        .collect();
    let chunk = if plain { chunk } else { gz(&chunk) };
    ok(f.write_all(&if plain {
        head.as_bytes().to_vec()
    } else {
        gz(head.as_bytes())
    }));
    for _ in 0..BIG_BYTES >> 20 {
        ok(f.write_all(&chunk));
    }
    ok(f.write_all(&if plain {
        tail.as_bytes().to_vec()
    } else {
        gz(tail.as_bytes())
    }));
    ok(f.flush());
}

/// An event of a category gpumeter ignores, ending with a comma (88 bytes).
const CPU_EVENT: &str =
    r#"{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 5, "dur": 1},"#;

const KERNEL_HEAD: &str = r#"{"traceEvents": [{"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": {"device": 0}, "name": ""#;

/// The cases: name, input file name, and how to write it.
const CASES: [&str; 6] = [
    "empty.json",
    "whitespace.json.gz",
    "cpu-events.json.gz",
    "long-event.json.gz",
    "kernel-name.json.gz",
    "kernel-name.json",
];

fn write(dir: &Path, case: &str) -> std::path::PathBuf {
    let path = dir.join(case);
    match case {
        "empty.json" => ok(std::fs::write(&path, r#"{"traceEvents": []}"#)),
        "whitespace.json.gz" => write_case(&path, r#"{"traceEvents": ["#, b" \n", "]}", false),
        "cpu-events.json.gz" => write_case(
            &path,
            r#"{"traceEvents": ["#,
            CPU_EVENT.as_bytes(),
            r#"{"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": {"device": 0}}]}"#,
            false,
        ),
        // One element of 64 MiB (a CPU-side event's `args`), then a kernel: an element too
        // long to be held is read by the streaming parser.
        "long-event.json.gz" => write_case(
            &path,
            r#"{"traceEvents": [{"ph": "X", "cat": "cpu_op", "args": {"a": ["#,
            b"[1, \"s\"], ",
            r#"0]}}, {"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": {"device": 0}}]}"#,
            false,
        ),
        "kernel-name.json.gz" => write_case(&path, KERNEL_HEAD, b"x", r#""}]}"#, false),
        _ => write_case(&path, KERNEL_HEAD, "é".as_bytes(), r#""}]}"#, true),
    }
    path
}

/// The child: imports the case's file and checks its outcome.
fn run_child(case: &str, path: &Path) {
    let mut meter = Meter::new(MeterConfig::default());
    let summary = ok(import_path(&mut meter, path, &ImportOptions::default()));
    let report = ok(meter.finish());
    let cut: Vec<&gpumeter_core::Warning> = report
        .warnings
        .iter()
        .filter(|w| w.contains(&format!("longer than {MAX_STRING_BYTES} bytes")))
        .collect();
    match case {
        "empty.json" | "whitespace.json.gz" => {
            assert_eq!(summary.records, 0);
            assert!(cut.is_empty(), "{:?}", report.warnings);
        }
        "cpu-events.json.gz" | "long-event.json.gz" => {
            // The kernel at the end is metered; the CPU-side events are not.
            assert_eq!(summary.records, 1);
            assert!(cut.is_empty(), "{:?}", report.warnings);
        }
        _ => {
            assert_eq!(summary.records, 1);
            assert_eq!(cut.len(), 1, "{:?}", report.warnings);
            assert!(cut[0].contains(": 1 strings are longer"), "{}", cut[0]);
        }
    }
    let status = ok(std::fs::read_to_string("/proc/self/status"));
    let peak = status
        .lines()
        .find_map(|l| l.strip_prefix("VmPeak:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    println!("size case {case}: ok, VmPeak {peak} kB");
}

/// The child's entry point: does nothing unless `GPUMETER_SIZE_CASE` is set.
#[test]
fn child() {
    let (Ok(case), Ok(path)) = (
        std::env::var("GPUMETER_SIZE_CASE"),
        std::env::var("GPUMETER_SIZE_FILE"),
    ) else {
        return;
    };
    run_child(&case, Path::new(&path));
}

#[test]
fn hostile_sizes_stream_in_bounded_memory() {
    let dir = ok(tempfile::tempdir());
    let exe = ok(std::env::current_exe());
    let mut ceiling_kib = u64::MAX;
    for case in CASES {
        let path = write(dir.path(), case);
        let out = ok(Command::new("sh")
            .arg("-c")
            .arg(if ceiling_kib == u64::MAX {
                "exec \"$0\" \"$@\"".to_string()
            } else {
                format!("ulimit -v {ceiling_kib} && exec \"$0\" \"$@\"")
            })
            .arg(&exe)
            .args(["sizes::child", "--exact", "--nocapture", "--test-threads=1"])
            .env("GPUMETER_SIZE_CASE", case)
            .env("GPUMETER_SIZE_FILE", &path)
            .output());
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(&format!("size case {case}: ok")),
            "{case} under ulimit -v {ceiling_kib}: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        eprint!("{stdout}");
        if case == "empty.json" {
            let peak = stdout
                .split("VmPeak ")
                .nth(1)
                .and_then(|v| v.split(' ').next())
                .and_then(|v| v.parse::<u64>().ok());
            ceiling_kib = peak.filter(|&p| p > 0).expect("the child's VmPeak") + HEADROOM_KIB;
        }
        ok(std::fs::remove_file(&path));
    }
}

/// Names longer than [`MAX_STRING_BYTES`] are kept cut there, at a character boundary, with
/// one warning per source saying how many: a Kineto device name (cut as it is read) and an
/// Nsight device name (cut once read) of the same text end alike, in a digest of the part
/// dropped.
#[test]
fn long_names_are_cut_with_one_warning() {
    let dir = ok(tempfile::tempdir());
    let kineto = dir.path().join("long.json");
    ok(std::fs::write(
        &kineto,
        format!(
            r#"{{"deviceProperties": [{{"id": 0, "name": "{}"}}], "traceEvents": [
                {{"ph": "X", "cat": "kernel", "name": "{}", "pid": 0, "tid": 7, "ts": 10, "dur": 5}}]}}"#,
            "é".repeat(40_000),
            "k".repeat(MAX_STRING_BYTES + 1),
        ),
    ));
    let nsys = dir.path().join("long.sqlite");
    let conn = ok(rusqlite::Connection::open(&nsys));
    ok(conn.execute_batch(
        r#"CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, smCount INTEGER);
           INSERT INTO TARGET_INFO_GPU VALUES (0, replace(hex(zeroblob(40000)), '00', 'é'), 10);
           CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER, "end" INTEGER, deviceId INTEGER, bytes INTEGER);
           INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (1700000000000000000, 1700000000000000050, 0, 4);"#,
    ));
    drop(conn);
    let mut names = Vec::new();
    for (path, warning) in [
        (&kineto, ": 2 strings are longer than 65536 bytes"),
        (
            &nsys,
            ": 1 kernel or device names are longer than 65536 bytes",
        ),
    ] {
        let mut meter = Meter::new(MeterConfig::default());
        let s = ok(import_path(&mut meter, path, &ImportOptions::default()));
        assert_eq!(s.records, 1);
        let report = ok(meter.finish());
        let name = report.devices[0].name.as_deref().unwrap_or("");
        // The cut keeps a digest of the rest after the mark (`CUT_MARK`, 32 hex digits, `]`).
        let (kept, rest) = match name.find(CUT_MARK) {
            Some(at) => name.split_at(at),
            None => (name, ""),
        };
        assert_eq!(kept.len(), MAX_STRING_BYTES, "{}", path.display());
        assert!(kept.chars().all(|c| c == 'é'));
        assert_eq!(rest.len(), CUT_SUFFIX_BYTES, "{}", path.display());
        names.push(name.to_string());
        let w: Vec<&gpumeter_core::Warning> = report
            .warnings
            .iter()
            .filter(|w| w.contains(warning))
            .collect();
        assert_eq!(w.len(), 1, "{warning:?} in {:?}", report.warnings);
    }
    assert!(
        names[0] == names[1],
        "the same name cut alike by both importers"
    );
}

/// Review of the Nsight cut: for names around the limit (exactly at it, one byte past it, a
/// 2- or 4-byte character straddling it with or without text after it, quotes, backslashes
/// and control characters past the cut), the Nsight importer's device name equals the Kineto
/// importer's for the same text, written plainly and with every non-ASCII character escaped
/// (`\uXXXX`, surrogate pairs for the 4-byte ones).
#[test]
fn nsight_names_are_cut_as_kineto_cuts_them() {
    const M: usize = MAX_STRING_BYTES;
    let k = |n: usize| "k".repeat(n);
    let cases = [
        k(M),
        k(M + 1),
        format!("{}é", k(M - 1)),
        format!("{}éx", k(M - 1)),
        format!("{}é", k(M)),
        format!("{}😀", k(M - 3)),
        format!("{}😀", k(M - 2)),
        format!("{}😀yz", k(M - 2)),
        format!("{}😀yz", k(M - 1)),
        format!("{}\"q\\u\n\té😀", k(M)),
        format!("{}\"q\\u\n\té😀", k(M - 1)),
        "é".repeat(M / 2 + 1),
        "😀".repeat(M / 4 + 1),
        format!("x{}", "😀".repeat(M / 4)),
    ];
    // JSON text of `s`: plain (only what JSON requires escaped), or every non-ASCII character
    // escaped as UTF-16 code units.
    let json = |s: &str, ascii: bool| {
        let mut out = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c if ascii && !c.is_ascii() => {
                    for u in c.encode_utf16(&mut [0; 2]) {
                        out.push_str(&format!("\\u{u:04x}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
        out
    };
    let dir = ok(tempfile::tempdir());
    let device_name = |path: &Path| {
        let mut meter = Meter::new(MeterConfig::default());
        ok(import_path(&mut meter, path, &ImportOptions::default()));
        let report = ok(meter.finish());
        report.devices[0].name.clone().unwrap_or_default()
    };
    for (i, name) in cases.iter().enumerate() {
        let nsys = dir.path().join(format!("cut{i}.sqlite"));
        let conn = ok(rusqlite::Connection::open(&nsys));
        ok(conn.execute_batch(
            r#"CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, smCount INTEGER);
               CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER, "end" INTEGER, deviceId INTEGER, bytes INTEGER);
               INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (1700000000000000000, 1700000000000000050, 0, 4);"#,
        ));
        ok(conn.execute(
            "INSERT INTO TARGET_INFO_GPU VALUES (0, ?1, 10)",
            [name.as_str()],
        ));
        drop(conn);
        let from_nsys = device_name(&nsys);
        assert_eq!(
            from_nsys.contains(CUT_MARK),
            name.char_indices().any(|(at, _)| at >= M),
            "case {i}: cut exactly when a character starts at or past the limit"
        );
        for ascii in [false, true] {
            let kineto = dir.path().join(format!("cut{i}-{ascii}.json"));
            ok(std::fs::write(
                &kineto,
                format!(
                    r#"{{"deviceProperties": [{{"id": 0, "name": {}}}], "traceEvents": [
                    {{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5}}]}}"#,
                    json(name, ascii)
                ),
            ));
            let from_kineto = device_name(&kineto);
            let tail = |s: &str| s.chars().rev().take(60).collect::<String>();
            assert!(
                from_nsys == from_kineto,
                "case {i} (escaped: {ascii}): Nsight {:?} vs Kineto {:?} (tails, reversed)",
                tail(&from_nsys),
                tail(&from_kineto)
            );
        }
    }
}
