//! JSON on standard output that cannot drive a terminal: serde_json's pretty formatter with
//! control and bidirectional-control characters written as `\uXXXX` escapes.

use gpumeter::core::text::is_escaped;

use crate::Failure;

/// Pretty JSON whose strings also escape what [`printable`](gpumeter::core::text::printable)
/// escapes and JSON allows raw (DEL, C1 controls, bidirectional overrides, U+2028/U+2029), as
/// `\uXXXX`: the same document to a parser, and nothing that moves a terminal's cursor or
/// reorders its text.
pub(crate) fn to_json<T: serde::Serialize>(v: &T) -> Result<String, Failure> {
    let mut out = Vec::with_capacity(4096);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, TerminalSafe::default());
    v.serialize(&mut ser).map_err(|e| Failure {
        code: 1,
        message: format!("cannot write JSON: {e}"),
    })?;
    String::from_utf8(out).map_err(|e| Failure {
        code: 1,
        message: format!("cannot write JSON: {e}"),
    })
}

/// Writes a JSON string fragment with the characters [`is_escaped`] names (control and
/// bidirectional-control characters) as `\uXXXX` escapes (UTF-16 units), the rest as it is:
/// JSON output on a terminal cannot drive it. Shared by the pretty and the compact formatter.
pub(crate) fn write_terminal_safe_fragment<W: ?Sized + std::io::Write>(
    w: &mut W,
    fragment: &str,
) -> std::io::Result<()> {
    let mut rest = fragment;
    while let Some(i) = rest.find(is_escaped) {
        let (head, tail) = rest.split_at(i);
        w.write_all(head.as_bytes())?;
        let mut chars = tail.chars();
        if let Some(c) = chars.next() {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                write!(w, "\\u{u:04x}")?;
            }
        }
        rest = chars.as_str();
    }
    w.write_all(rest.as_bytes())
}

/// serde_json's pretty formatter with [`is_escaped`] characters written as `\uXXXX`.
#[derive(Default)]
struct TerminalSafe(serde_json::ser::PrettyFormatter<'static>);

impl serde_json::ser::Formatter for TerminalSafe {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        write_terminal_safe_fragment(w, fragment)
    }
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object_value(w)
    }
}

/// Writes `report` as [`to_json`] would, to `w`, then a newline.
pub(crate) fn write_report(
    w: &mut impl std::io::Write,
    report: &gpumeter::UsageReport,
) -> std::io::Result<()> {
    use serde::Serialize as _;
    let mut ser = serde_json::Serializer::with_formatter(&mut *w, TerminalSafe::default());
    report.serialize(&mut ser).map_err(std::io::Error::from)?;
    writeln!(w)
}
