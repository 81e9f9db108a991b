//! Input detection: what each input is (`--format auto` reads its first bytes), whether this
//! build reads that format, and whether a call's inputs are usage reports to merge or inputs
//! to meter.

use std::path::{Path, PathBuf};

use gpumeter_import::ImportError;

#[cfg(feature = "cupti")]
use crate::options::cupti_api;
use crate::options::{Format, UsageOptions};
use crate::Error;

/// Whether a JSON file is a usage report: its top-level keys are read in order (values
/// skipped, nothing kept) until `schema`, whose value decides, or `traceEvents` (a Kineto
/// trace: no), so a trace is not read past its first keys and a report whose keys were
/// reordered (`jq -S`) is still recognised. Anything unreadable is "no" (the importer that
/// reads the file then names the fault).
fn is_usage_report_json(path: &Path) -> bool {
    use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};
    struct Sniff<'a>(&'a std::cell::Cell<bool>);
    impl<'de> Visitor<'de> for Sniff<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                match key.as_str() {
                    "schema" => {
                        let v: serde_json::Value = map.next_value()?;
                        self.0.set(v.as_str() == Some(gpumeter_core::USAGE_SCHEMA));
                        return Ok(());
                    }
                    "traceEvents" => return Ok(()),
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(())
        }
    }
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let found = std::cell::Cell::new(false);
    let mut reader = std::io::BufReader::new(file);
    // A gzipped report is read through the decompressor, as far as its `schema`.
    let gzip = {
        use std::io::BufRead as _;
        reader.fill_buf().is_ok_and(|b| b.starts_with(&GZIP_MAGIC))
    };
    let mut reader: Box<dyn std::io::BufRead> = if gzip {
        Box::new(std::io::BufReader::new(
            flate2::bufread::MultiGzDecoder::new(reader),
        ))
    } else {
        Box::new(reader)
    };
    let mut bom = [0u8; 3];
    {
        use std::io::{BufRead as _, Read as _};
        if reader
            .fill_buf()
            .is_ok_and(|b| b.starts_with(b"\xEF\xBB\xBF"))
        {
            let _ = reader.read_exact(&mut bom);
        }
    }
    let mut de = serde_json::Deserializer::from_reader(reader);
    // Returning early leaves the object unfinished, which serde_json reports as an error after
    // the visitor ran: the answer is in `found`, the error says nothing more.
    let _ = de.deserialize_map(Sniff(&found));
    found.get()
}

/// The first bytes of a gzip file (RFC 1952).
pub(crate) const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// The 16 bytes a `.gmr` recording starts with (`cupti::gmr::GMR_MAGIC`), so a
/// build without the Cargo feature `cupti` still tells a recording from an unknown file.
#[cfg_attr(feature = "cupti", allow(dead_code))]
pub(crate) const GMR_MAGIC: [u8; 16] = *b"GPUMETER-GMR\0\r\n\x1a";

/// Whether bytes start like a `.gmr` recording.
pub(crate) fn is_gmr(head: &[u8]) -> bool {
    #[cfg(feature = "cupti")]
    return crate::cupti::gmr::is_gmr(head);
    #[cfg(not(feature = "cupti"))]
    return head.starts_with(&GMR_MAGIC);
}

/// `Ok` when this build reads inputs of `format`; else [`Error::FormatNotEnabled`] naming the
/// Cargo feature that does.
pub(crate) fn format_enabled(path: &Path, format: Format) -> Result<(), Error> {
    let (name, feature, on) = match format {
        Format::Auto | Format::Usage => return Ok(()),
        Format::Kineto => ("kineto", "kineto", cfg!(feature = "kineto")),
        Format::Nsys => ("nsys", "nsys", cfg!(feature = "nsys")),
        Format::Gmr => ("gmr", "cupti", cfg!(feature = "cupti")),
        Format::Cupti => ("cupti", "cupti", cfg!(feature = "cupti")),
    };
    if on {
        Ok(())
    } else {
        Err(Error::FormatNotEnabled {
            path: path.to_path_buf(),
            format: name,
            feature,
        })
    }
}

/// What a file that is not a usage report is, when its bytes tell it (`.gmr`, SQLite, gzip,
/// a JSON object with `traceEvents`), for [`Error::NotAReport`].
pub(crate) fn looks_like(bytes: &[u8]) -> Option<&'static str> {
    let head = &bytes[..bytes.len().min(256)];
    if is_gmr(head) {
        return Some("gmr");
    }
    if head.starts_with(b"SQLite format 3\0") {
        return Some("nsys");
    }
    if head.starts_with(&GZIP_MAGIC) {
        return Some("gzip file that is not a usage report");
    }
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(serde_json::Value::Object(m)) if m.contains_key("traceEvents") => Some("kineto"),
        _ => None,
    }
}

/// Whether `inputs` are usage reports to merge (`true`: every one, by `--format usage` or
/// detected by [`Format::Auto`]) or inputs to meter (`false`: none is a report). Reads the
/// first 256 bytes of each file under [`Format::Auto`].
///
/// # Errors
/// [`Error::MixedInputs`] naming a report and an input to meter when both are given;
/// [`Error::Import`] for a file that cannot be read, [`Error::UnknownFormat`] for one whose
/// format is unknown ([`Error::CuptiApiVersion`] when its bytes are tried as a raw buffer in
/// the layouts of an unsupported `options.cupti_api`).
pub fn inputs_are_reports(inputs: &[PathBuf], options: &UsageOptions) -> Result<bool, Error> {
    if options.format == Format::Usage {
        return Ok(true);
    }
    let mut report = None;
    let mut other = None;
    for input in inputs {
        match resolve(input, options)? {
            Format::Usage => report = report.or(Some(input)),
            f => other = other.or(Some((input, f))),
        }
    }
    match (report, other) {
        (Some(report), Some((input, f))) => Err(Error::MixedInputs {
            report: report.clone(),
            input: input.clone(),
            format: match f {
                Format::Gmr => "gmr",
                Format::Cupti => "cupti",
                Format::Nsys => "nsys",
                Format::Kineto | Format::Auto | Format::Usage => "kineto",
            },
        }),
        (Some(_), None) => Ok(true),
        _ => Ok(false),
    }
}

/// The format of one input, `Auto` resolved from its first bytes.
pub(crate) fn resolve(path: &Path, options: &UsageOptions) -> Result<Format, Error> {
    if options.format != Format::Auto {
        return Ok(options.format);
    }
    let mut head = Vec::with_capacity(256);
    let read = std::fs::File::open(path).and_then(|f| {
        use std::io::Read as _;
        f.take(256).read_to_end(&mut head)
    });
    if let Err(source) = read {
        return Err(ImportError::Io {
            path: path.to_path_buf(),
            source,
        }
        .into());
    }
    if is_gmr(&head) {
        return Ok(Format::Gmr);
    }
    match gpumeter_import::detect_format(path, &head) {
        Some(gpumeter_import::Format::Nsys) => return Ok(Format::Nsys),
        // A JSON object or a gzip file: a usage report when its `schema` says so (read
        // through the decompressor for gzip), else a Kineto trace.
        Some(_) if is_usage_report_json(path) => return Ok(Format::Usage),
        Some(_) => return Ok(Format::Kineto),
        None => {}
    }
    #[cfg(feature = "cupti")]
    {
        let first_kind = head
            .get(..4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_le_bytes);
        let api = cupti_api(options)?;
        match first_kind {
            Some(k) if api.record_size(crate::cupti::ActivityKind(k)).is_some() => {
                Ok(Format::Cupti)
            }
            _ => Err(Error::UnknownFormat {
                path: path.to_path_buf(),
                api,
            }),
        }
    }
    #[cfg(not(feature = "cupti"))]
    Err(Error::UnknownFormat {
        path: path.to_path_buf(),
    })
}
