//! `Accept` negotiation for `/metrics` ([`super::Format::from_accept`]).
//!
//! The rule is the one of Prometheus's Go client (`expfmt.NegotiateIncludingOpenMetrics`, which
//! sorts the media ranges with `goautoneg`): the media ranges are ordered by quality, highest
//! first; at equal quality a specific type comes before a wildcard (`text/*`, `*/*`), and
//! otherwise the order of the header is kept; the first one naming a format served wins.
//! A range with quality 0 is not acceptable. When none is acceptable, the Prometheus text format
//! is served anyway (as the Go client does) rather than `406`.
//!
//! A small parser of its own (RFC 9110 §12.5.1): items split on `,`, parameters on `;`, names
//! compared case-insensitively, spaces around `=` tolerated (`Q = 0` is quality 0), values
//! unquoted. A quality that is not a number in [0, 1] makes its item unacceptable. Commas
//! inside quoted parameter values are not supported (no scraper sends them).
//!
//! Why not a crate: `headers-accept` 0.3 (RFC 9110 negotiation over `mediatype`) was read, not
//! adopted. It refuses the whole header when one item does not parse, where the Go client
//! skips that item and negotiates with the rest; and the `version` rules above (OpenMetrics
//! `0.0.1` as `1.0.0`, a text format of another version not served) would still be ours around
//! it. Matching Prometheus's own negotiation is the point here.

use super::Format;

/// One media range of an `Accept` header.
#[derive(Debug, Clone, PartialEq)]
struct Range {
    /// `type/subtype`, lower case.
    media: String,
    /// The `version` parameter, if any.
    version: Option<String>,
    /// Its quality, 0 to 1 (1 when absent).
    q: f64,
    /// Its place in the header.
    index: usize,
}

impl Range {
    /// 2 for `type/subtype`, 1 for `type/*`, 0 for `*/*`.
    fn specificity(&self) -> u8 {
        match self.media.as_str() {
            "*/*" => 0,
            m if m.ends_with("/*") => 1,
            _ => 2,
        }
    }

    /// The format this range asks for, if it is one served.
    fn format(&self) -> Option<Format> {
        let version = self.version.as_deref();
        match self.media.as_str() {
            // 0.0.1 is the pre-1.0 name of the same text format; Prometheus offers it second.
            "application/openmetrics-text" if matches!(version, None | Some("1.0.0" | "0.0.1")) => {
                Some(Format::OpenMetrics)
            }
            "text/plain" if matches!(version, None | Some("0.0.4")) => Some(Format::Prometheus),
            "text/*" | "*/*" => Some(Format::Prometheus),
            _ => None,
        }
    }
}

/// The media ranges of `accept`; items whose quality is not a number in [0, 1] are left out.
fn ranges(accept: &str) -> Vec<Range> {
    let mut out = Vec::new();
    for (index, item) in accept.split(',').enumerate() {
        let mut parts = item.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        if media.is_empty() {
            continue;
        }
        let (mut q, mut version) = (Some(1.0), None);
        for p in parts {
            let (name, value) = p.split_once('=').unwrap_or((p, ""));
            let value = value.trim().trim_matches('"');
            match name.trim().to_ascii_lowercase().as_str() {
                "q" => {
                    q = value
                        .parse::<f64>()
                        .ok()
                        .filter(|q| (0.0..=1.0).contains(q))
                }
                "version" => version = Some(value.to_string()),
                _ => {}
            }
        }
        if let Some(q) = q {
            out.push(Range {
                media,
                version,
                q,
                index,
            });
        }
    }
    out
}

/// The format `accept` prefers (module docs).
pub(super) fn negotiate(accept: Option<&str>) -> Format {
    let mut ranges = ranges(accept.unwrap_or(""));
    ranges.retain(|r| r.q > 0.0);
    ranges.sort_by(|a, b| {
        b.q.total_cmp(&a.q)
            .then(b.specificity().cmp(&a.specificity()))
            .then(a.index.cmp(&b.index))
    });
    ranges
        .iter()
        .find_map(Range::format)
        .unwrap_or(Format::Prometheus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quality_order_wins_then_specificity_then_the_header_order() {
        let cases: &[(&str, Format)] = &[
            ("", Format::Prometheus),
            ("text/plain", Format::Prometheus),
            ("application/openmetrics-text", Format::OpenMetrics),
            // Prometheus 2's scrape header.
            ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1", Format::OpenMetrics),
            // Preference by quality, not by place.
            ("application/openmetrics-text;q=0.5, text/plain;q=1", Format::Prometheus),
            ("text/plain;q=0.4, application/openmetrics-text;q=0.5", Format::OpenMetrics),
            // Equal quality: the header's order.
            ("text/plain, application/openmetrics-text", Format::Prometheus),
            ("application/openmetrics-text, text/plain", Format::OpenMetrics),
            // Equal quality: a specific type before a wildcard listed first.
            ("*/*, application/openmetrics-text", Format::OpenMetrics),
            // Quality 0, however written, is not acceptable.
            ("Application/OpenMetrics-Text; q=0", Format::Prometheus),
            ("application/openmetrics-text;Q=0", Format::Prometheus),
            ("application/openmetrics-text; q = 0", Format::Prometheus),
            ("application/openmetrics-text;q=0.000, text/plain;q=0.1", Format::Prometheus),
            ("text/plain;q=0, application/openmetrics-text;q=0.2", Format::OpenMetrics),
            // A quality that is not one: the item is left out.
            ("application/openmetrics-text;q=high", Format::Prometheus),
            ("application/openmetrics-text;q=2", Format::Prometheus),
            // Versions not served are passed over.
            ("application/openmetrics-text;version=2.0.0, text/plain;q=0.1", Format::Prometheus),
            ("text/plain;version=1.0.0;q=1, application/openmetrics-text;q=0.5", Format::OpenMetrics),
            ("application/openmetrics-text;version=\"1.0.0\"", Format::OpenMetrics),
            // Nothing served is acceptable: the text format anyway.
            ("application/json", Format::Prometheus),
            (" , ;q=1", Format::Prometheus),
        ];
        for &(accept, want) in cases {
            assert_eq!(negotiate(Some(accept)), want, "Accept: {accept}");
        }
        assert_eq!(negotiate(None), Format::Prometheus);
    }
}
