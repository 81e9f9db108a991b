//! Time in gpumeter: integer nanoseconds since the Unix epoch, and the one place where such
//! an instant becomes a `chrono::DateTime<Utc>`.
//!
//! CUPTI's default clock on Linux is `CLOCK_REALTIME`, so CUPTI timestamps are already ns since
//! the Unix epoch (CUPTI header `cupti_activity.h`, `cuptiGetTimestamp`). Every importer
//! converts its source's clock to this one; nothing else in the workspace builds a
//! `DateTime` from a record time.

use chrono::{DateTime, TimeZone, Utc};

/// Nanoseconds in one second.
pub const NS_PER_SECOND: u64 = 1_000_000_000;
/// Nanoseconds in one day: window sizes must divide it.
pub const NS_PER_DAY: u64 = 86_400 * NS_PER_SECOND;
/// Seven days in ns: a record lasting longer is loss (`too_long`).
pub const MAX_RECORD_NS: u64 = 7 * NS_PER_DAY;

/// Converts ns since the Unix epoch (UTC) to a `DateTime<Utc>`.
///
/// This is the single documented conversion point from CUPTI's clock to calendar time.
/// Every `u64` is representable (the largest is in year 2554).
pub fn ns_to_utc(ns: u64) -> DateTime<Utc> {
    let secs = (ns / NS_PER_SECOND) as i64;
    let nanos = (ns % NS_PER_SECOND) as u32;
    // `timestamp_opt` is `Single` for every value below year 262143; u64 ns stays far below.
    Utc.timestamp_opt(secs, nanos)
        .single()
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// Converts a `DateTime<Utc>` to ns since the Unix epoch, or `None` when it lies before the
/// epoch or beyond `u64` ns (year 2554).
pub fn utc_to_ns(t: &DateTime<Utc>) -> Option<u64> {
    let secs = u64::try_from(t.timestamp()).ok()?;
    secs.checked_mul(NS_PER_SECOND)?
        .checked_add(u64::from(t.timestamp_subsec_nanos()))
}

/// Formats ns since the epoch as RFC 3339 UTC with a `Z` suffix, seconds precision when the
/// instant is on a whole second, else nanosecond precision (`2025-07-18T08:00:00Z`).
pub fn rfc3339(ns: u64) -> String {
    let t = ns_to_utc(ns);
    if ns.is_multiple_of(NS_PER_SECOND) {
        t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    } else {
        t.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
    }
}

/// Formats ns since the Unix epoch as RFC 3339 UTC with all nine fractional digits
/// (`2025-07-18T08:00:00.000000001Z`), so the text reads back to the same ns.
pub fn rfc3339_ns(ns: u64) -> String {
    ns_to_utc(ns).to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

/// Parses an RFC 3339 time (any offset) into ns since the Unix epoch.
///
/// # Errors
/// A message naming the text when it is not RFC 3339 or lies outside `u64` ns.
pub fn parse_rfc3339(text: &str) -> Result<u64, String> {
    let t = DateTime::parse_from_rfc3339(text)
        .map_err(|e| format!("`{text}` is not an RFC 3339 time: {e}"))?;
    utc_to_ns(&t.with_timezone(&Utc))
        .ok_or_else(|| format!("`{text}` lies before 1970 or after 2554"))
}

/// A window size: UTC windows aligned to multiples of their size from the Unix epoch.
/// The size divides one day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WindowSize {
    ns: u64,
}

impl WindowSize {
    /// One hour, the default.
    pub const HOUR: WindowSize = WindowSize {
        ns: 3600 * NS_PER_SECOND,
    };

    /// A window of `seconds` seconds.
    ///
    /// # Errors
    /// A message when `seconds` is zero or does not divide one day (86 400 s).
    pub fn from_seconds(seconds: u64) -> Result<Self, String> {
        if seconds == 0 {
            return Err("a window must be longer than 0 s".to_string());
        }
        if !86_400u64.is_multiple_of(seconds) {
            return Err(format!(
                "a window of {seconds} s does not divide one day (86400 s)"
            ));
        }
        Ok(WindowSize {
            ns: seconds * NS_PER_SECOND,
        })
    }

    /// Parses a window size: whole numbers each followed by a unit, `d`, `h`, `m` or `s`, from
    /// the largest unit down, each unit at most once: `60s`, `15m`, `1h`, `1h30m`, `2m30s`,
    /// `1d`. Spaces around the text are ignored. The size must be over 0 s and divide one day
    /// (86 400 s), so that windows align with UTC days.
    ///
    /// # Errors
    /// A message naming the text and what is wrong: no unit or an unknown one, a part that is
    /// not a whole number (`1.5h`: write `1h30m`), units out of order or repeated, a size of
    /// 0 s, one past 64 bits, or one that does not divide one day (with sizes that do).
    pub fn parse(text: &str) -> Result<Self, String> {
        const FORMS: &str = "whole numbers with units d, h, m or s, largest first (15m, 1h30m)";
        let text = text.trim();
        if text.is_empty() {
            return Err(format!("window ``: expected {FORMS}"));
        }
        let mut secs = 0u64;
        let mut rest = text;
        let mut last_rank = usize::MAX;
        while !rest.is_empty() {
            let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            let (num, after) = rest.split_at(digits);
            let Some(unit) = after.chars().next() else {
                return Err(format!(
                    "window `{text}`: `{num}` has no unit; expected {FORMS}"
                ));
            };
            let (rank, mult) = match unit {
                'd' => (0, 86_400u64),
                'h' => (1, 3600),
                'm' => (2, 60),
                's' => (3, 1),
                _ if num.is_empty() || unit == '.' || unit == ',' => {
                    let part: String = rest
                        .chars()
                        .take_while(|c| !matches!(c, 'd' | 'h' | 'm' | 's'))
                        .collect();
                    return Err(format!(
                        "window `{text}`: `{part}` is not a whole number; expected {FORMS}"
                    ));
                }
                other => {
                    return Err(format!(
                        "window `{text}`: unknown unit `{other}`; expected {FORMS}"
                    ))
                }
            };
            if num.is_empty() {
                return Err(format!(
                    "window `{text}`: the unit `{unit}` has no number before it; expected {FORMS}"
                ));
            }
            if last_rank != usize::MAX && rank <= last_rank {
                return Err(format!(
                    "window `{text}`: units go from the largest (d, h, m, s), each once"
                ));
            }
            last_rank = rank;
            let n: u64 = num
                .parse()
                .map_err(|_| format!("window `{text}` is too large"))?;
            secs = n
                .checked_mul(mult)
                .and_then(|v| secs.checked_add(v))
                .ok_or_else(|| format!("window `{text}` is too large"))?;
            rest = &after[unit.len_utf8()..];
        }
        if secs == 0 {
            return Err(format!("window `{text}`: a window must be longer than 0 s"));
        }
        Self::from_seconds(secs).map_err(|_| {
            format!(
                "window `{text}` ({secs} s) does not divide one day (86 400 s), so its windows \
                 would not align with UTC days; sizes that do include 1m, 5m, 15m, 30m, 1h, \
                 1h30m, 2h, 6h, 1d"
            )
        })
    }

    /// The size in ns.
    pub fn ns(self) -> u64 {
        self.ns
    }

    /// The size in whole seconds.
    pub fn seconds(self) -> u64 {
        self.ns / NS_PER_SECOND
    }

    /// The start (ns since the epoch) of the window holding instant `t_ns`.
    pub fn start_of(self, t_ns: u64) -> u64 {
        t_ns - t_ns % self.ns
    }
}

impl Default for WindowSize {
    fn default() -> Self {
        Self::HOUR
    }
}

/// A billing period: the half-open interval `[start, end)` of instants, in integer ns since the
/// Unix epoch (UTC): the clock of CUPTI's timestamps (`CLOCK_REALTIME`) and of every time in
/// gpumeter. The end is after the start. Built from RFC 3339 texts ([`Period::parse`], the
/// command line's `--from`/`--to`) or from ns ([`Period::from_ns`]).
///
/// Whether a period is on the edges of a report's windows is checked where it is rated (a
/// period must not cut a window; the rating's error names the edges around it), since the
/// window size belongs to the usage report, not to the period.
///
/// ```
/// use gpumeter_core::time::{Period, PeriodBound, PeriodError};
/// let p = Period::parse("2026-12-01T00:00:00Z", "2026-12-01T01:00:00+00:00")?;
/// assert_eq!(p.start_ns(), 1_796_083_200_000_000_000);
/// assert_eq!(p.duration_ns(), 3_600_000_000_000);
/// assert_eq!(p.to_string(), "2026-12-01T00:00:00Z to 2026-12-01T01:00:00Z");
/// assert!(matches!(
///     Period::parse("yesterday", "2026-12-01T01:00:00Z"),
///     Err(PeriodError::Unparsable { bound: PeriodBound::Start, .. })
/// ));
/// assert!(matches!(
///     Period::from_ns(5, 5),
///     Err(PeriodError::EndNotAfterStart { start: 5, end: 5 })
/// ));
/// # Ok::<(), PeriodError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Period {
    start: u64,
    end: u64,
}

/// Which end of a [`Period`] an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeriodBound {
    /// The start (inclusive; the command line's `--from`).
    Start,
    /// The end (exclusive; the command line's `--to`).
    End,
}

impl std::fmt::Display for PeriodBound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PeriodBound::Start => "start",
            PeriodBound::End => "end",
        })
    }
}

/// Why a [`Period`] cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PeriodError {
    /// A bound is not an RFC 3339 time, or lies before 1970 or after 2554 (outside `u64` ns).
    #[error("period {bound}: {reason}")]
    Unparsable {
        /// Which bound.
        bound: PeriodBound,
        /// The text given.
        text: String,
        /// What is wrong, quoting the text ([`parse_rfc3339`]'s message).
        reason: String,
    },
    /// The end is not after the start: the period would be empty.
    #[error(
        "the period's end ({}) is not after its start ({})",
        rfc3339(*end),
        rfc3339(*start)
    )]
    EndNotAfterStart {
        /// The start, ns since the Unix epoch.
        start: u64,
        /// The end, ns since the Unix epoch.
        end: u64,
    },
}

impl Period {
    /// The period `[start_ns, end_ns)`, ns since the Unix epoch.
    ///
    /// # Errors
    /// [`PeriodError::EndNotAfterStart`] when `end_ns <= start_ns`.
    pub fn from_ns(start_ns: u64, end_ns: u64) -> Result<Period, PeriodError> {
        if end_ns <= start_ns {
            return Err(PeriodError::EndNotAfterStart {
                start: start_ns,
                end: end_ns,
            });
        }
        Ok(Period {
            start: start_ns,
            end: end_ns,
        })
    }

    /// The period from `from` (inclusive) to `to` (exclusive), each an RFC 3339 time with any
    /// offset (`2026-12-01T00:00:00Z`, `2026-11-30T19:00:00-05:00`), fractions of a second to
    /// the ns (digits past the ninth are dropped, never rounded up). A leap second
    /// (`2016-12-31T23:59:60Z`) is the instant the next second starts, as on the POSIX clock
    /// of CUPTI's timestamps, which has no leap seconds.
    ///
    /// # Errors
    /// [`PeriodError::Unparsable`] naming the bound (the start first) when a text is not
    /// RFC 3339 or lies outside 1970–2554; [`PeriodError::EndNotAfterStart`].
    pub fn parse(from: &str, to: &str) -> Result<Period, PeriodError> {
        let bound = |bound: PeriodBound, text: &str| {
            parse_rfc3339(text).map_err(|reason| PeriodError::Unparsable {
                bound,
                text: text.to_string(),
                reason,
            })
        };
        let start = bound(PeriodBound::Start, from)?;
        let end = bound(PeriodBound::End, to)?;
        Period::from_ns(start, end)
    }

    /// The start, inclusive, ns since the Unix epoch.
    pub fn start_ns(self) -> u64 {
        self.start
    }

    /// The end, exclusive, ns since the Unix epoch.
    pub fn end_ns(self) -> u64 {
        self.end
    }

    /// `(start, end)` in ns, the form the rating and the bank take.
    pub fn as_ns(self) -> (u64, u64) {
        (self.start, self.end)
    }

    /// The length in ns (over 0).
    pub fn duration_ns(self) -> u64 {
        self.end - self.start
    }

    /// Whether instant `t_ns` lies in the period (`start <= t < end`).
    pub fn contains(self, t_ns: u64) -> bool {
        self.start <= t_ns && t_ns < self.end
    }

    /// Whether both ends are window edges of `window` (multiples of its size from the epoch),
    /// as the rating requires of a given period.
    pub fn is_on_window_edges(self, window: WindowSize) -> bool {
        window.start_of(self.start) == self.start && window.start_of(self.end) == self.end
    }
}

impl std::str::FromStr for Period {
    type Err = PeriodError;

    /// An ISO 8601 time interval of two RFC 3339 times, `START/END`
    /// (`2026-12-01T00:00:00Z/2027-01-01T00:00:00Z`), as [`Period::parse`] takes them; text
    /// without a `/` is an unparsable end whose `text` is the whole text given.
    fn from_str(text: &str) -> Result<Period, PeriodError> {
        match text.split_once('/') {
            Some((from, to)) => Period::parse(from, to),
            None => Err(PeriodError::Unparsable {
                bound: PeriodBound::End,
                text: text.to_string(),
                reason: format!("`{text}` is not START/END (two RFC 3339 times and a `/`)"),
            }),
        }
    }
}

impl From<Period> for (u64, u64) {
    fn from(p: Period) -> (u64, u64) {
        p.as_ns()
    }
}

impl std::fmt::Display for Period {
    /// `START to END`, RFC 3339 UTC ([`rfc3339`]).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} to {}", rfc3339(self.start), rfc3339(self.end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn period_parse_and_errors() {
        let p =
            Period::parse("2026-11-30T19:00:00-05:00", "2026-12-01T00:00:00.5Z").expect("period");
        assert_eq!(p.start_ns(), 1_796_083_200_000_000_000);
        assert_eq!(p.end_ns(), 1_796_083_200_500_000_000);
        assert!(p.contains(p.start_ns()) && !p.contains(p.end_ns()));
        assert!(!p.is_on_window_edges(WindowSize::HOUR));
        let on = Period::from_ns(3600 * NS_PER_SECOND, 7200 * NS_PER_SECOND).expect("period");
        assert!(on.is_on_window_edges(WindowSize::HOUR));
        assert_eq!(
            <(u64, u64)>::from(on),
            (3600 * NS_PER_SECOND, 7200 * NS_PER_SECOND)
        );
        match Period::parse("2026-12-01T00:00:00Z", "soon") {
            Err(PeriodError::Unparsable {
                bound,
                text,
                reason,
            }) => {
                assert_eq!(bound, PeriodBound::End);
                assert_eq!(text, "soon");
                assert!(
                    reason.contains("`soon` is not an RFC 3339 time"),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            Period::parse("2026-12-01T01:00:00Z", "2026-12-01T00:00:00Z"),
            Err(PeriodError::EndNotAfterStart {
                start: 1_796_086_800_000_000_000,
                end: 1_796_083_200_000_000_000
            })
        );
        assert!(Period::parse("1969-12-31T00:00:00Z", "2026-12-01T00:00:00Z").is_err());
        let p: Period = "2026-12-01T00:00:00Z/2026-12-01T01:00:00Z"
            .parse()
            .expect("interval");
        assert_eq!(
            p.as_ns(),
            (1_796_083_200 * NS_PER_SECOND, 1_796_086_800 * NS_PER_SECOND)
        );
        assert!("2026-12-01T00:00:00Z".parse::<Period>().is_err());
    }

    #[test]
    fn period_edge_cases() {
        // Without a `/`, the error quotes the whole text (as `text` and in the message).
        match "2026-12-01T00:00:00Z".parse::<Period>() {
            Err(PeriodError::Unparsable {
                bound,
                text,
                reason,
            }) => {
                assert_eq!(bound, PeriodBound::End);
                assert_eq!(text, "2026-12-01T00:00:00Z");
                assert!(
                    reason.contains("`2026-12-01T00:00:00Z` is not START/END"),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
        // A second `/` belongs to the end, which then does not parse.
        assert!(matches!(
            "2026-12-01T00:00:00Z/2026-12-01T01:00:00Z/x".parse::<Period>(),
            Err(PeriodError::Unparsable {
                bound: PeriodBound::End,
                ..
            })
        ));
        // A leap second is the instant the next second starts.
        let leap = Period::parse("2016-12-31T23:59:60Z", "2017-01-01T01:00:00Z").expect("leap");
        assert_eq!(leap.start_ns(), 1_483_228_800 * NS_PER_SECOND);
        assert_eq!(
            Period::parse("2016-12-31T23:59:60Z", "2017-01-01T00:00:00Z"),
            Err(PeriodError::EndNotAfterStart {
                start: 1_483_228_800 * NS_PER_SECOND,
                end: 1_483_228_800 * NS_PER_SECOND
            })
        );
        // Digits past the ns are dropped.
        let p = Period::parse("2026-12-01T00:00:00.1234567899Z", "2026-12-01T01:00:00Z")
            .expect("fraction");
        assert_eq!(p.start_ns() % NS_PER_SECOND, 123_456_789);
        // u64 ns reach 2554-07-21T23:34:33.709551615Z; past i64 ns (2262) is fine, past u64
        // is an error naming the bound, as is a time before 1970.
        let late =
            Period::parse("2262-04-12T00:00:00Z", "2554-07-21T23:34:33.709551615Z").expect("late");
        assert_eq!(late.end_ns(), u64::MAX);
        assert_eq!(rfc3339(late.end_ns()), "2554-07-21T23:34:33.709551615Z");
        for (from, to, bound) in [
            (
                "2026-01-01T00:00:00Z",
                "2554-07-21T23:34:33.709551616Z",
                PeriodBound::End,
            ),
            (
                "1969-12-31T23:59:59.999999999Z",
                "2026-01-01T00:00:00Z",
                PeriodBound::Start,
            ),
            (
                "1970-01-01T00:59:59+01:00",
                "2026-01-01T00:00:00Z",
                PeriodBound::Start,
            ),
        ] {
            match Period::parse(from, to) {
                Err(PeriodError::Unparsable {
                    bound: b, reason, ..
                }) => {
                    assert_eq!(b, bound, "{from} {to}");
                    assert!(reason.contains("before 1970 or after 2554"), "{reason}");
                }
                other => panic!("{from} {to}: {other:?}"),
            }
        }
        // The epoch itself, through an offset.
        let epoch =
            Period::parse("1970-01-01T01:00:00+01:00", "1970-01-01T01:00:00Z").expect("epoch");
        assert_eq!(epoch.as_ns(), (0, 3600 * NS_PER_SECOND));
    }

    #[test]
    fn window_parse() {
        assert_eq!(WindowSize::parse("1h").map(|w| w.seconds()), Ok(3600));
        assert_eq!(WindowSize::parse("15m").map(|w| w.seconds()), Ok(900));
        assert_eq!(WindowSize::parse("60s").map(|w| w.seconds()), Ok(60));
        assert_eq!(WindowSize::parse("1d").map(|w| w.seconds()), Ok(86_400));
        assert!(WindowSize::parse("7m").is_err());
        assert!(WindowSize::parse("2d").is_err());
        assert!(WindowSize::parse("0s").is_err());
        assert!(WindowSize::parse("h").is_err());
        assert!(WindowSize::parse("1w").is_err());
    }

    #[test]
    fn window_parse_takes_compound_sizes_and_says_what_is_wrong() {
        let secs = |t: &str| WindowSize::parse(t).map(|w| w.seconds());
        assert_eq!(secs("1h30m"), Ok(5400));
        assert_eq!(secs("2m30s"), Ok(150));
        assert_eq!(secs(" 1d "), Ok(86_400));
        assert_eq!(secs("0h15m"), Ok(900));
        let err = |t: &str| WindowSize::parse(t).err().unwrap_or_default();
        for (text, says) in [
            ("0s", "must be longer than 0 s"),
            ("0h0m", "must be longer than 0 s"),
            ("7m", "(420 s) does not divide one day"),
            ("7m", "1h30m"),
            ("1.5h", "`1.5` is not a whole number"),
            ("30m1h", "largest (d, h, m, s), each once"),
            ("1h1h", "each once"),
            ("1w", "unknown unit `w`"),
            ("h", "`h` has no number"),
            ("15", "`15` has no unit"),
            ("", "expected whole numbers"),
            ("99999999999999999999s", "too large"),
            ("999999999999999d", "too large"),
            ("1d18446744073709551615s", "too large"),
        ] {
            let e = err(text);
            assert!(e.contains(says), "{text:?}: {e:?} lacks {says:?}");
            assert!(e.contains(&format!("`{}`", text.trim())), "{text:?}: {e:?}");
        }
    }

    #[test]
    fn rfc3339_round_trip() {
        let ns = 1_752_826_085_123_456_789;
        assert_eq!(parse_rfc3339(&rfc3339(ns)), Ok(ns));
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            parse_rfc3339("2025-07-18T10:00:00+02:00").map(rfc3339),
            Ok("2025-07-18T08:00:00Z".into())
        );
    }
}
