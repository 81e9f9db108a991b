//! Loading one input: read, hashed and parsed without touching any meter ([`Loaded`]). A
//! Kineto file is hashed, decompressed and parsed in one pass over it as a stream
//! ([`load_kineto`]); an Nsight export is hashed by streaming and opened in place.

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::error::ImportError;
use crate::hash::{HashWorker, Sink, Tally};
use crate::kineto::{self, Collector};
#[cfg(feature = "nsys")]
use crate::nsys;
use crate::parsed::{file_name, Parsed};
use crate::read_ahead::{read_ahead, ReadOutcome};
use crate::{detect_format, Format, ImportOptions, GZIP_MAGIC, MAX_DECOMPRESSED_BYTES};

fn resolve_format(path: &Path, head: &[u8], requested: Format) -> Result<Format, ImportError> {
    match requested {
        Format::Auto => detect_format(path, head).ok_or_else(|| ImportError::UnknownFormat {
            path: path.to_path_buf(),
        }),
        f => Ok(f),
    }
}

/// One input read, hashed, parsed and validated, not yet given to a meter.
pub(crate) struct Loaded {
    pub(crate) name: String,
    pub(crate) format: Format,
    /// The source's identity: SHA-256 of the content as parsed (of the decompressed text for a
    /// gzip file, else of the bytes). The same trace given gzipped and plain has one identity.
    pub(crate) sha256: String,
    /// SHA-256 of the file's bytes as stored: which of several files of one content names
    /// the source (the one whose bytes' SHA-256 sorts first).
    pub(crate) file_sha256: String,
    pub(crate) parsed: Parsed,
}

/// Reads, hashes and parses one file without touching any meter.
pub(crate) fn load_path(path: &Path, opts: &ImportOptions) -> Result<Loaded, ImportError> {
    let io_err = |source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io_err)?;
    let mut head = Vec::with_capacity(16);
    (&mut file)
        .take(16)
        .read_to_end(&mut head)
        .map_err(io_err)?;
    let format = resolve_format(path, &head, opts.format)?;
    let name = file_name(path);
    match format {
        #[cfg(not(feature = "nsys"))]
        Format::Nsys => Err(ImportError::FormatNotEnabled {
            path: path.to_path_buf(),
            format: "nsys",
            feature: "nsys",
        }),
        #[cfg(feature = "nsys")]
        Format::Nsys => {
            drop(file);
            let sha256 = sha256_of_file(path)?;
            // Read-only, immutable and guarded against hostile files (nsys module docs).
            let export = nsys::Export::open_path(path)?;
            let label = gpumeter_core::source_label(&sha256);
            let parsed = nsys::parse(path, &name, &label, &export)?;
            Ok(Loaded {
                name,
                format: Format::Nsys,
                file_sha256: sha256.clone(),
                sha256,
                parsed,
            })
        }
        // `Auto` is resolved above; every format is named, so a new one is a compile error here.
        Format::Kineto | Format::Auto => load_kineto(
            path,
            name,
            head.as_slice().chain(file),
            MAX_DECOMPRESSED_BYTES,
        ),
    }
}

/// As [`load_path`] for bytes in memory; `name` names the file in errors and reports.
pub(crate) fn load_bytes(
    name: &str,
    bytes: &[u8],
    opts: &ImportOptions,
) -> Result<Loaded, ImportError> {
    let path = Path::new(name);
    let format = resolve_format(path, bytes, opts.format)?;
    let name = file_name(path);
    match format {
        #[cfg(not(feature = "nsys"))]
        Format::Nsys => Err(ImportError::FormatNotEnabled {
            path: path.to_path_buf(),
            format: "nsys",
            feature: "nsys",
        }),
        #[cfg(feature = "nsys")]
        Format::Nsys => {
            let sha256 = hex::encode(Sha256::digest(bytes));
            let conn = nsys::Export::open_bytes(path, bytes)?;
            let label = gpumeter_core::source_label(&sha256);
            let parsed = nsys::parse(path, &name, &label, &conn)?;
            Ok(Loaded {
                name,
                format: Format::Nsys,
                file_sha256: sha256.clone(),
                sha256,
                parsed,
            })
        }
        Format::Kineto | Format::Auto => load_kineto(path, name, bytes, MAX_DECOMPRESSED_BYTES),
    }
}

/// Hashes, decompresses (at most `limit` bytes) and parses a Kineto file, all in one pass
/// over `input` as a stream: memory holds what the trace keeps (its GPU work events), not the
/// file nor its decompressed text, so a gzip bomb of whitespace or of CPU-side events streams
/// through in bounded memory. Reading, inflating and hashing run on a thread of their own
/// beside the parse ([`read_ahead`]); on this thread when none can be started.
fn load_kineto(
    path: &Path,
    name: String,
    mut input: impl Read + Send,
    limit: u64,
) -> Result<Loaded, ImportError> {
    match read_ahead(path, &mut input, limit) {
        Some((collected, read)) => loaded_read_ahead(path, name, collected, read, limit),
        None => load_kineto_inline(path, name, input, limit),
    }
}

/// The file [`read_ahead`] read: its faults in the order of [`load_kineto_inline`]'s (a read
/// error of the file, then a gzip fault, then the size limit, then the JSON's, then a read
/// error after the text), else its events turned into records.
fn loaded_read_ahead(
    path: &Path,
    name: String,
    collected: Result<Collector<'_>, ImportError>,
    read: ReadOutcome,
    limit: u64,
) -> Result<Loaded, ImportError> {
    let io_err = |source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(source) = read.file_error {
        return Err(io_err(source));
    }
    if let Some(source) = read.gzip_error {
        return Err(ImportError::Gzip {
            path: path.to_path_buf(),
            source,
        });
    }
    if read.over {
        return Err(ImportError::DecompressedTooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    let collected = collected?;
    if let Some(source) = read.tail_error {
        return Err(io_err(source));
    }
    let file_sha256 = hex::encode(read.file_sha256.finalize());
    // The source's identity is its content: a gzip file's decompressed text (docs/ARCHITECTURE.md, "Invariants").
    let sha256 = read
        .text_sha256
        .map_or_else(|| file_sha256.clone(), |h| hex::encode(h.finalize()));
    let label = gpumeter_core::source_label(&sha256);
    let parsed = kineto::finish(collected, &label)?;
    Ok(Loaded {
        name,
        format: Format::Kineto,
        sha256,
        file_sha256,
        parsed,
    })
}

/// [`load_kineto`] on this thread (inflate and parse), the digests on a worker thread when
/// one can be started.
fn load_kineto_inline(
    path: &Path,
    name: String,
    input: impl Read,
    limit: u64,
) -> Result<Loaded, ImportError> {
    let io_err = |source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    };
    // Both digests (of the file, and of the decompressed text) on one worker thread, off the
    // parse's path; inline when no thread can be started.
    let worker = HashWorker::start();
    let sink = |which| match &worker {
        Some(w) => Sink::Worker(w, which),
        None => Sink::Inline(Sha256::new()),
    };
    let mut file = Tally::new(input, u64::MAX, sink(0));
    let magic = read_magic(&mut file).map_err(io_err)?;
    let (collected, content_sink) = if magic == GZIP_MAGIC {
        let (collected, text_sink) = read_gzip(path, &magic, &mut file, limit, sink(1))?;
        (collected, Some(text_sink.detach()))
    } else {
        let result = kineto::read_events(path, magic.as_slice().chain(&mut file));
        if let Some(source) = file.error.take() {
            return Err(io_err(source));
        }
        (result?, None)
    };
    // Whatever follows the end of the JSON or of the last gzip member (nothing, in a file that
    // parsed), hashed too.
    std::io::copy(&mut file, &mut std::io::sink()).map_err(io_err)?;
    let file_sink = file.sink.detach();
    let (file_sha256, content_sha256) = digests(worker, file_sink, content_sink).map_err(io_err)?;
    // The source's identity is its content: a gzip file's decompressed text (docs/ARCHITECTURE.md, "Invariants").
    let sha256 = content_sha256.unwrap_or_else(|| file_sha256.clone());
    let label = gpumeter_core::source_label(&sha256);
    let parsed = kineto::finish(collected, &label)?;
    Ok(Loaded {
        name,
        format: Format::Kineto,
        sha256,
        file_sha256,
        parsed,
    })
}

/// The first bytes of `file`, up to the length of the gzip magic.
fn read_magic(file: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut magic = [0u8; 2];
    let mut got = 0;
    while got < magic.len() {
        match file.read(&mut magic[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(magic[..got].to_vec())
}

/// Reads the events of a gzip file (`magic`, its first bytes, then the rest of `file`)
/// from its decompressed text, at most `limit` bytes of it, hashed through `sink`; returns
/// them with the text's sink.
///
/// # Errors
/// As if the whole file had been decompressed first: a read error of `file`, then a gzip
/// fault, then the size limit, outrank a fault of the JSON.
fn read_gzip<'p, 'w, R: Read>(
    path: &'p Path,
    magic: &[u8],
    file: &mut Tally<'w, R>,
    limit: u64,
    sink: Sink<'w>,
) -> Result<(Collector<'p>, Sink<'w>), ImportError> {
    let (result, gzip_error, over, text_sink) = {
        let gz = flate2::read::MultiGzDecoder::new(magic.chain(&mut *file));
        let mut text = Tally::new(gz, limit, sink);
        let result = kineto::read_events(path, &mut text);
        if result.is_err() {
            // As if the whole file had been decompressed first: a gzip fault or the size
            // limit anywhere in it outranks a JSON fault (the rest is read, not kept).
            let _ = std::io::copy(&mut text, &mut std::io::sink());
        }
        (result, text.error, text.over, text.sink)
    };
    if let Some(source) = file.error.take() {
        return Err(ImportError::Io {
            path: path.to_path_buf(),
            source,
        });
    }
    if let Some(source) = gzip_error {
        return Err(ImportError::Gzip {
            path: path.to_path_buf(),
            source,
        });
    }
    if over {
        return Err(ImportError::DecompressedTooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    Ok((result?, text_sink))
}

/// The hex SHA-256 digests of a file's bytes and of its decompressed text (when it has one),
/// from their sinks: hashed inline, or by `worker`, which is finished here.
///
/// # Errors
/// When the worker thread failed.
fn digests(
    worker: Option<HashWorker>,
    file: Result<Sha256, usize>,
    content: Option<Result<Sha256, usize>>,
) -> std::io::Result<(String, Option<String>)> {
    let worker_digests = match worker {
        Some(w) => Some(
            w.finish()
                .ok_or_else(|| std::io::Error::other("the SHA-256 worker thread failed"))?,
        ),
        None => None,
    };
    let digest = |sink: Result<Sha256, usize>| match (sink, &worker_digests) {
        (Ok(h), _) => hex::encode(h.finalize()),
        (Err(which), Some(d)) => hex::encode(d[which % 2].clone().finalize()),
        // Not met: a worker sink exists only with a worker.
        (Err(_), None) => String::new(),
    };
    let content = content.map(digest);
    Ok((digest(file), content))
}

#[cfg(feature = "nsys")]
fn sha256_of_file(path: &Path) -> Result<String, ImportError> {
    let io_err = |source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io_err)?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(io_err)?;
    Ok(hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumeter_core::DeviceInfo;
    use std::io::Write;

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let _ = e.write_all(data);
        e.finish().unwrap_or_default()
    }

    #[test]
    fn decompressed_size_is_capped() {
        let text = br#"{"traceEvents": []}"#;
        let len = text.len() as u64;
        let path = Path::new("dir/bomb.json.gz");
        // Exactly at the limit: read whole.
        match load_kineto(path, "bomb.json.gz".into(), gz(text).as_slice(), len) {
            Ok(l) => assert_eq!(l.sha256, hex::encode(Sha256::digest(text))),
            Err(e) => panic!("unexpected error: {e}"),
        }
        // One byte over, also across gzip members: refused, naming the file and the limit.
        let mut two = gz(text);
        two.extend(gz(text));
        for (bytes, limit) in [(gz(text), len - 1), (two, 2 * len - 1)] {
            match load_kineto(path, "bomb.json.gz".into(), bytes.as_slice(), limit) {
                Err(e @ ImportError::DecompressedTooLarge { .. }) => {
                    let msg = e.to_string();
                    assert!(
                        msg.contains("dir/bomb.json.gz") && msg.contains(&limit.to_string()),
                        "{msg}"
                    );
                }
                Err(e) => panic!("expected DecompressedTooLarge, got {e}"),
                Ok(_) => panic!("expected DecompressedTooLarge, got a parse"),
            }
        }
        // A megabyte of zeros compresses to about a kilobyte.
        let zeros = gz(&vec![0u8; 1 << 20]);
        assert!(zeros.len() < 4096);
        assert!(matches!(
            load_kineto(path, "bomb.json.gz".into(), zeros.as_slice(), 1 << 16),
            Err(ImportError::DecompressedTooLarge { limit: 65_536, .. })
        ));
        assert_eq!(MAX_DECOMPRESSED_BYTES, 8 * 1024 * 1024 * 1024);
    }

    /// What a load gives, to compare two paths: the digests and what was parsed, or the
    /// error's kind and message.
    fn outcome(r: Result<Loaded, ImportError>) -> String {
        match r {
            Ok(l) => format!("{} {} {:?}", l.sha256, l.file_sha256, l.parsed),
            Err(e) => format!("{:?}: {e}", std::mem::discriminant(&e)),
        }
    }

    /// A reader of `data` that fails after `good` bytes.
    struct FailsAfter<'a> {
        data: &'a [u8],
        good: usize,
    }

    impl Read for FailsAfter<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.good == 0 {
                return Err(std::io::Error::other("the disk is on fire"));
            }
            let n = buf.len().min(self.good).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            self.good -= n;
            Ok(n)
        }
    }

    /// The read-ahead path (reading, inflating and hashing on a thread of their own) gives
    /// what the single-threaded path gives, on good files and on every fault of their text
    /// and of their reading, in the same order of precedence.
    #[test]
    fn read_ahead_gives_what_the_inline_path_gives() {
        let event = r#"{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
            "ts": 1700000000000000, "dur": 5, "args": {"device": 0, "stream": 7,
            "correlation": 1, "grid": [1, 1, 1], "block": [32, 1, 1]}}"#;
        let cpu = r#"{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
            "ts": 1700000000000000, "dur": 5, "args": {"External id": 2}}"#;
        let ok = format!(r#"{{"traceEvents": [{event}, {cpu}]}}"#).into_bytes();
        // Several chunks of the read-ahead's text.
        let many = vec![cpu; 6000].join(",\n");
        let big = format!(r#"{{"traceEvents": [{many}, {event}]}}"#).into_bytes();
        let bad_json = br#"{"traceEvents": [{"ph": "X", ]}"#.to_vec();
        let corrupt = |text: &[u8]| {
            let mut g = gz(text);
            let n = g.len();
            g[n - 6] ^= 0xff;
            g
        };
        let mut cut = gz(&big);
        cut.truncate(cut.len() / 2);
        let mut trailing = gz(&ok);
        trailing.extend(b"garbage");
        let cases: Vec<(&str, Vec<u8>, u64)> = vec![
            ("ok.json", ok.clone(), u64::MAX),
            ("ok.json.gz", gz(&ok), u64::MAX),
            ("big.json", big.clone(), u64::MAX),
            ("big.json.gz", gz(&big), u64::MAX),
            ("bad.json", bad_json.clone(), u64::MAX),
            ("bad.json.gz", gz(&bad_json), u64::MAX),
            ("crc.json.gz", corrupt(&ok), u64::MAX),
            ("bad-and-crc.json.gz", corrupt(&bad_json), u64::MAX),
            ("cut.json.gz", cut, u64::MAX),
            ("trailing.json.gz", trailing, u64::MAX),
            ("over.json.gz", gz(&big), 100_000),
            ("bad-and-over.json.gz", gz(&bad_json), 10),
            ("empty.json", Vec::new(), u64::MAX),
            ("one-byte.json", vec![0x1f], u64::MAX),
        ];
        for (name, bytes, limit) in &cases {
            let path = Path::new(name);
            let ahead = outcome(load_kineto(
                path,
                name.to_string(),
                bytes.as_slice(),
                *limit,
            ));
            let inline = outcome(load_kineto_inline(
                path,
                name.to_string(),
                bytes.as_slice(),
                *limit,
            ));
            assert_eq!(ahead, inline, "{name}");
        }
        assert!(outcome(load_kineto(
            Path::new("b"),
            "b".into(),
            gz(&big).as_slice(),
            u64::MAX
        ))
        .contains("records: [ActivityRecord"));
        // A read error of the file, anywhere in it (in the gzip header, its text, its trailer).
        for bytes in [big.clone(), gz(&big)] {
            for good in [0, 1, 2, 100, bytes.len() / 2, bytes.len() - 3] {
                let path = Path::new("f.json");
                let reader = || FailsAfter { data: &bytes, good };
                let ahead = outcome(load_kineto(path, "f".into(), reader(), u64::MAX));
                let inline = outcome(load_kineto_inline(path, "f".into(), reader(), u64::MAX));
                assert_eq!(ahead, inline, "failing after {good} bytes");
                assert!(ahead.contains("the disk is on fire"), "{ahead}");
            }
        }
    }

    /// Item 3 of issue 30: a trace gzipped, gunzipped or re-gzipped (another compression
    /// level, several members) is one source: one identity, the SHA-256 of the text, and one
    /// device key, which names no file. (Before, the identity and the key were the file's
    /// bytes' and name's: `t.json.gz@<8 hex>#0`.)
    #[test]
    fn recompressed_copies_are_one_source_with_one_device_key() {
        let text = br#"{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0,
            "tid": 7, "ts": 1700000000000000, "dur": 5, "args": {"device": 0, "stream": 7,
            "correlation": 1, "grid": [1, 1, 1], "block": [32, 1, 1]}}]}"#;
        let mut fast = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let _ = fast.write_all(text);
        let fast = fast.finish().unwrap_or_default();
        let mut members = gz(&text[..10]);
        members.extend(gz(&text[10..]));
        let want = hex::encode(Sha256::digest(text));
        let mut keys = Vec::new();
        for (name, bytes) in [
            ("t.json", text.to_vec()),
            ("t.json.gz", gz(text)),
            ("other-name.gz", fast),
            ("two-members.json.gz", members),
        ] {
            let l = load_bytes(name, &bytes, &ImportOptions::default()).expect("a trace");
            assert_eq!(l.sha256, want, "{name}: the identity is the content's");
            assert_eq!(
                l.file_sha256,
                hex::encode(Sha256::digest(&bytes)),
                "{name}: the bytes' digest is kept apart"
            );
            let key: Vec<String> = l.parsed.devices.iter().map(|d| d.key.clone()).collect();
            keys.push(key);
        }
        assert_eq!(keys[0], vec![format!("{}#0", &want[..16])]);
        assert!(keys.iter().all(|k| *k == keys[0]), "{keys:?}");
        assert_eq!(
            DeviceInfo::source_key(&gpumeter_core::source_label(&want), 0),
            keys[0][0]
        );
    }
}
