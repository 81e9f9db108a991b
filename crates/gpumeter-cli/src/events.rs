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
    /// Write the events of an incomplete report too (a snapshot, or a .gmr recording without
    /// its end frame): its last windows may still grow, and their events carry the ids of the
    /// complete windows, so a receiver that deduplicates keeps the partial quantities. Warned
    /// of on standard error. Needs --events.
    #[arg(long, requires = "events")]
    allow_incomplete: bool,
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

    /// `files` with the events file as an output and the mapping as an input.
    pub(crate) fn files(&self, files: crate::output::Files) -> crate::output::Files {
        files
            .input("--events-map", self.events_map.as_deref())
            .output_or_stdout("--events", self.events.as_deref())
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
            allow_incomplete: self.allow_incomplete,
        };
        let events = usage_events(report, &options).map_err(failed)?;
        // Allowed (--allow-incomplete): the last windows may still grow, and a receiver that
        // deduplicates will drop the complete windows when they are sent again.
        if let Some(why) = events.incomplete {
            say(&format!(
                "warning: the usage report is incomplete ({why}): its last windows may still \
                 grow, and a receiver that deduplicates will keep these partial quantities and \
                 drop the complete windows' events (same ids) when they are sent"
            ));
        }
        if events.unmapped_meter_rows > 0 {
            say(&format!(
                "notice: {} of meters the events mapping leaves out (only_mapped_meters) \
                 {} not written",
                if events.unmapped_meter_rows == 1 {
                    "1 usage row".to_string()
                } else {
                    format!("{} usage rows", events.unmapped_meter_rows)
                },
                if events.unmapped_meter_rows == 1 {
                    "was"
                } else {
                    "were"
                }
            ));
        }
        if events.events.is_empty() && events.unmapped_meter_rows == 0 {
            say("notice: the report has no usage row in a closed window: no events were written");
        }
        if format == EventFormat::Stripe {
            if let Some(w) = stripe_time_warning(&events.events, unix_now()) {
                say(&w);
            }
        }
        let lines = json_lines(&events.events)?;
        if self.to_stdout() {
            return Ok(Some(lines));
        }
        crate::output::write_atomically(path, |w| {
            w.write_all(lines.as_bytes())
                .map_err(crate::output::cannot_write(path))
        })?;
        Ok(None)
    }
}

/// How far back Stripe takes a meter event's `timestamp`: 35 days.
const STRIPE_PAST_S: u64 = 35 * 86_400;

/// How far ahead Stripe takes a meter event's `timestamp`: 5 minutes.
const STRIPE_FUTURE_S: u64 = 5 * 60;

/// The wall clock in Unix seconds (0 if it is before 1970).
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A warning when Stripe events have timestamps Stripe refuses at `now` (Unix seconds): more
/// than 35 days in the past or more than 5 minutes ahead. The events are still written (the
/// limit is Stripe's and depends on when they are sent), but a user sending a month-old trace
/// learns it before Stripe answers 400 to every event.
fn stripe_time_warning(events: &[UsageEvent], now: u64) -> Option<String> {
    let stamps: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            UsageEvent::Stripe(e) => Some(e.timestamp),
            _ => None,
        })
        .collect();
    let old = stamps
        .iter()
        .filter(|&&t| t < now.saturating_sub(STRIPE_PAST_S))
        .count();
    let ahead = stamps
        .iter()
        .filter(|&&t| t > now.saturating_add(STRIPE_FUTURE_S))
        .count();
    let n = stamps.len();
    let mut said = Vec::new();
    if old > 0 {
        let oldest = stamps.iter().min().copied().unwrap_or_default();
        said.push(format!(
            "{old} of {n} Stripe events have a timestamp more than 35 days ago (the oldest {})",
            gpumeter::core::time::rfc3339(oldest.saturating_mul(1_000_000_000))
        ));
    }
    if ahead > 0 {
        said.push(format!(
            "{ahead} of {n} Stripe events have a timestamp more than 5 minutes ahead"
        ));
    }
    if said.is_empty() {
        return None;
    }
    Some(format!(
        "warning: {}; Stripe refuses such events (docs/INTEGRATIONS.md)",
        said.join(", and ")
    ))
}

/// An events error as a failure: exit 1 (a bad mapping file or a refused row).
fn failed(e: gpumeter::events::EventsError) -> Failure {
    Failure {
        code: 1,
        message: e.to_string(),
    }
}

/// The events as JSON Lines, compact, with what [`is_escaped`](gpumeter::core::text::is_escaped) escapes (control and
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

/// serde_json's compact formatter with [`is_escaped`](gpumeter::core::text::is_escaped) characters as `\uXXXX`.
pub(crate) struct CompactTerminalSafe;

impl serde_json::ser::Formatter for CompactTerminalSafe {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        crate::json::write_terminal_safe_fragment(w, fragment)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumeter::events::{StripeMeterEvent, StripePayload};

    fn stripe(timestamp: u64) -> UsageEvent {
        UsageEvent::Stripe(StripeMeterEvent {
            event_name: "sm_ns".into(),
            payload: StripePayload {
                stripe_customer_id: "cus_1".into(),
                value: "1".into(),
            },
            identifier: "0".repeat(64),
            timestamp,
        })
    }

    #[test]
    fn stripe_timestamps_outside_its_window_are_warned_of_at_the_edges() {
        let now = 1_800_000_000;
        let edge_past = now - STRIPE_PAST_S;
        let edge_ahead = now + STRIPE_FUTURE_S;
        assert_eq!(
            stripe_time_warning(&[stripe(edge_past), stripe(now), stripe(edge_ahead)], now),
            None
        );
        let w = stripe_time_warning(
            &[stripe(edge_past - 1), stripe(now), stripe(edge_ahead + 1)],
            now,
        )
        .expect("a warning");
        assert!(
            w.starts_with("warning: 1 of 3 Stripe events have a timestamp more than 35 days ago"),
            "{w}"
        );
        assert!(
            w.contains(", and 1 of 3 Stripe events have a timestamp more than 5 minutes ahead;"),
            "{w}"
        );
        assert!(w.contains("(the oldest 2026-12-11T07:59:59Z)"), "{w}");
    }
}
