//! `usage --events FILE [--events-format F] [--events-map FILE]`: the report's usage rows as
//! JSON Lines events for OpenMeter (CloudEvents), Stripe or Lago ([`gpumeter::events`]).
//!
//! Every event is built before anything is written, so a refused row (a Stripe value past 15
//! digits, a tenant the mapping refuses) leaves no partial file: exit 1 naming the row. `-`
//! writes the events to standard output instead of the report, so it cannot be combined with
//! `--json` or `--by-window` (exit 2); `--events FILE --json` writes the events to FILE and the JSON report to
//! standard output.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use gpumeter::core::text::is_escaped;
use gpumeter::events::{usage_events, EventFormat, EventMap, EventOptions, UsageEvent};

use crate::{say, usage_error, Failure};

/// The events options of `usage`.
#[derive(Debug, Args)]
pub(crate) struct EventsArgs {
    /// Also write usage events as JSON Lines, one per usage row (tenant, device, window,
    /// meter), each with an idempotency key so a re-sent window is deduplicated by the
    /// receiver; `-` writes them to standard output instead of the report (not with --json or
    /// --by-window).
    #[arg(long, value_name = "FILE")]
    events: Option<PathBuf>,
    /// The events' shape [default: cloudevents]: cloudevents (CloudEvents 1.0, as OpenMeter
    /// ingests), stripe (Stripe billing meter events) or lago (Lago events); needs --events.
    #[arg(long, value_enum, value_name = "FORMAT", requires = "events")]
    events_format: Option<EventsFormatArg>,
    /// Events mapping (TOML): tenants → each system's customer or subscription ids, meters →
    /// event names or codes (examples/events-map.toml); without it, gpumeter's own tenant and
    /// meter names are sent. Needs --events.
    #[arg(long, value_name = "FILE", requires = "events")]
    events_map: Option<PathBuf>,
}

/// `--events-format`.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum EventsFormatArg {
    /// CloudEvents 1.0 JSON in the shape OpenMeter ingests (POST /api/v1/events).
    Cloudevents,
    /// Stripe billing meter events (POST /v1/billing/meter_events); a quantity of more than
    /// 15 digits is refused.
    Stripe,
    /// Lago events (POST /api/v1/events, the `event` object).
    Lago,
}

impl EventsArgs {
    /// Whether the events go to standard output (`--events -`).
    pub(crate) fn to_stdout(&self) -> bool {
        self.events.as_deref() == Some(Path::new("-"))
    }

    /// The command line alone, before any file is read: `--events -` with `--json` is exit 2
    /// (both would be standard output), and so is `--events -` with `--by-window` (the text
    /// report it shapes is not written).
    pub(crate) fn check(&self, json: bool, by_window: bool) -> Result<(), Failure> {
        if json && self.to_stdout() {
            return Err(usage_error(
                "--events - writes the events to standard output, where --json writes the \
                 report: give --events a file, or drop --json"
                    .into(),
            ));
        }
        if by_window && self.to_stdout() {
            return Err(usage_error(
                "--events - writes the events to standard output instead of the report, so \
                 --by-window would shape nothing: give --events a file, or drop --by-window"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The mapping (`--events-map`), read before any input is metered, as the price book is,
    /// so a bad one is told at once rather than after a long metering run; `None` without it.
    pub(crate) fn map(&self) -> Result<Option<EventMap>, Failure> {
        match &self.events_map {
            Some(p) => EventMap::from_path(p).map(Some).map_err(failed),
            None => Ok(None),
        }
    }

    /// Builds the events of `report` with `map` ([`EventsArgs::map`]) and writes them to the
    /// file given, or returns them for standard output (`-`); `None` without `--events`. Rows
    /// of meters the mapping leaves out are told on standard error.
    pub(crate) fn write(
        &self,
        report: &gpumeter::UsageReport,
        map: Option<&EventMap>,
    ) -> Result<Option<String>, Failure> {
        let Some(path) = &self.events else {
            return Ok(None);
        };
        let format = match self.events_format {
            None | Some(EventsFormatArg::Cloudevents) => EventFormat::CloudEvents,
            Some(EventsFormatArg::Stripe) => EventFormat::Stripe,
            Some(EventsFormatArg::Lago) => EventFormat::Lago,
        };
        let options = EventOptions {
            format,
            map,
            closed_before_ns: None,
        };
        let events = usage_events(report, &options).map_err(failed)?;
        if events.unmapped_meter_rows > 0 {
            say(&format!(
                "notice: {} usage rows of meters the events mapping leaves out \
                 (only_mapped_meters) were not written",
                events.unmapped_meter_rows
            ));
        }
        let lines = json_lines(&events.events)?;
        if self.to_stdout() {
            return Ok(Some(lines));
        }
        std::fs::write(path, &lines).map_err(|e| Failure {
            code: 1,
            message: format!("cannot write {}: {e}", path.display()),
        })?;
        Ok(None)
    }
}

/// An events error as a failure: exit 1 (a bad mapping file or a refused row).
fn failed(e: gpumeter::events::EventsError) -> Failure {
    Failure {
        code: 1,
        message: e.to_string(),
    }
}

/// The events as JSON Lines, compact, with what [`is_escaped`] escapes (control and
/// bidirectional characters, which file names in device keys may hold) written as `\uXXXX`:
/// the same JSON to a parser, nothing that moves a terminal's cursor. The file and standard
/// output get the same bytes.
fn json_lines(events: &[UsageEvent]) -> Result<String, Failure> {
    use serde::Serialize as _;
    let mut out = Vec::with_capacity(events.len() * 400);
    for e in events {
        let mut ser = serde_json::Serializer::with_formatter(&mut out, CompactTerminalSafe);
        e.serialize(&mut ser).map_err(|e| Failure {
            code: 1,
            message: format!("cannot write the events: {e}"),
        })?;
        out.push(b'\n');
    }
    String::from_utf8(out).map_err(|e| Failure {
        code: 1,
        message: format!("cannot write the events: {e}"),
    })
}

/// serde_json's compact formatter with [`is_escaped`] characters as `\uXXXX`.
struct CompactTerminalSafe;

impl serde_json::ser::Formatter for CompactTerminalSafe {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
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
}
