//! Terminal habits: `--color`, `--quiet`, coloured diagnostics on standard error and the
//! progress spinner (issue 14 item 3).
//!
//! - Colour: `--color auto|always|never` (global; default `auto`). `auto` colours a stream
//!   only when it is a terminal, `NO_COLOR` is unset or empty (<https://no-color.org>), and
//!   `TERM` is set and not `dumb` (anstream's rules, which also read `CLICOLOR=0` and
//!   `CLICOLOR_FORCE`); `always` and `never` override the environment. It applies to clap's own help and errors and to the
//!   `error:`, `warning:` and `notice:` prefixes of gpumeter's diagnostics; text from the
//!   inputs is escaped before it is written ([`printable`]), so the only escape sequences on
//!   the terminal are gpumeter's and clap's styles.
//! - `--quiet` (`-q`): standard error keeps only errors; warnings, notices, status lines and
//!   progress are not written. Standard output is unchanged.
//! - Progress ([`Progress`]): drawn on standard error after one second of work, only when
//!   standard error is a terminal and `--quiet` is not given ([`progress_shown`]); never on
//!   standard output, so `--json` output and pipes never carry it.

use std::io::{IsTerminal as _, Write as _};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::OnceLock;
use std::time::Duration;

use anstream::ColorChoice;
use anstyle::{AnsiColor, Style};
use gpumeter::core::text::printable;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The global flags as the run uses them.
#[derive(Debug, Clone, Copy)]
struct Settings {
    color: ColorChoice,
    quiet: bool,
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

fn settings() -> Settings {
    SETTINGS.get().copied().unwrap_or(Settings {
        color: ColorChoice::Auto,
        quiet: false,
    })
}

/// clap's `--color` value as anstream's choice.
pub(crate) fn choice(c: clap::ColorChoice) -> ColorChoice {
    match c {
        clap::ColorChoice::Auto => ColorChoice::Auto,
        clap::ColorChoice::Always => ColorChoice::Always,
        clap::ColorChoice::Never => ColorChoice::Never,
    }
}

/// Sets the global flags once, after the command line is parsed.
pub(crate) fn init(color: clap::ColorChoice, quiet: bool) {
    let _ = SETTINGS.set(Settings {
        color: choice(color),
        quiet,
    });
}

/// Whether `--quiet` was given.
pub(crate) fn quiet() -> bool {
    settings().quiet
}

/// The `--color` choice of a command line that clap refused or answered itself (`--help`):
/// the last `--color WHEN` / `--color=WHEN` before `--`, `auto` when there is none or its value
/// is not one of the three (clap names that fault itself).
pub(crate) fn color_from_args(args: &[std::ffi::OsString]) -> ColorChoice {
    use clap::ValueEnum as _;
    let mut found = clap::ColorChoice::Auto;
    let mut it = args.iter().skip(1).filter_map(|a| a.to_str());
    while let Some(a) = it.next() {
        if a == "--" {
            break;
        }
        let value = if a == "--color" {
            it.next()
        } else {
            a.strip_prefix("--color=")
        };
        if let Some(c) = value.and_then(|v| clap::ColorChoice::from_str(v, false).ok()) {
            found = c;
        }
    }
    choice(found)
}

/// The severity of a line on standard error, read from its prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Error,
    Warning,
    Notice,
    /// Status lines without a prefix (`recording written to …`).
    Info,
}

fn level_of(line: &str) -> (Level, usize) {
    for (prefix, level) in [
        ("error:", Level::Error),
        ("warning:", Level::Warning),
        ("notice:", Level::Notice),
    ] {
        if line.starts_with(prefix) {
            return (level, prefix.len());
        }
    }
    (Level::Info, 0)
}

fn style_of(level: Level) -> Style {
    match level {
        Level::Error => AnsiColor::Red.on_default().bold(),
        Level::Warning => AnsiColor::Yellow.on_default().bold(),
        Level::Notice => AnsiColor::Cyan.on_default().bold(),
        Level::Info => Style::new(),
    }
}

/// Writes one diagnostic line to standard error: its text escaped ([`printable`]: messages
/// carry file names, field values, device and kernel names from the inputs), its `error:`,
/// `warning:` or `notice:` prefix coloured as `--color` says; under `--quiet` only errors.
pub(crate) fn say(line: &str) {
    let s = settings();
    let (level, split) = level_of(line);
    if s.quiet && level != Level::Error {
        return;
    }
    let (prefix, rest) = line.split_at(split);
    let style = style_of(level);
    let mut err = anstream::AutoStream::new(std::io::stderr().lock(), s.color);
    let _ = writeln!(err, "{style}{prefix}{style:#}{}", printable(rest));
}

/// Writes clap's message (an error on standard error; help and version on standard output)
/// as `color` says for that stream: `text` may carry styles (SGR sequences), which anstream
/// strips when colour is off.
pub(crate) fn write_styled(text: &str, to_stderr: bool, color: ColorChoice) {
    if to_stderr {
        let mut w = anstream::AutoStream::new(std::io::stderr().lock(), color);
        let _ = w.write_all(text.as_bytes()).and_then(|()| w.flush());
    } else {
        let mut w = anstream::AutoStream::new(std::io::stdout().lock(), color);
        let _ = w.write_all(text.as_bytes()).and_then(|()| w.flush());
    }
}

/// The `error:` prefix in clap's style, for messages gpumeter writes in clap's place.
pub(crate) fn error_prefix() -> String {
    let style = style_of(Level::Error);
    format!("{style}error:{style:#}")
}

/// `text`, line by line, with every character [`printable`] escapes written escaped, except
/// SGR sequences (`ESC [ … m`), which clap's styles are made of. clap strips other escape
/// sequences from the values it quotes but keeps SGR ones, so the caller uses this only when no
/// argument holds an escape (then every SGR is clap's own).
pub(crate) fn escape_keeping_styles(text: &str) -> String {
    let lines: Vec<String> = text.split('\n').map(escape_line).collect();
    lines.join("\n")
}

fn escape_line(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(i) = rest.find('\u{1b}') {
        let (head, tail) = rest.split_at(i);
        out.push_str(&printable(head));
        let sgr_len = tail
            .strip_prefix("\u{1b}[")
            .and_then(|t| {
                let params = t.find(|c: char| !(c.is_ascii_digit() || c == ';'))?;
                t[params..].starts_with('m').then_some(2 + params + 1)
            })
            .unwrap_or(0);
        if sgr_len > 0 {
            out.push_str(&tail[..sgr_len]);
            rest = &tail[sgr_len..];
        } else {
            out.push_str(&printable("\u{1b}"));
            rest = &tail[1..];
        }
    }
    out.push_str(&printable(rest));
    out
}

/// Whether progress is drawn: only on a terminal, never under `--quiet`.
pub(crate) fn progress_shown(quiet: bool, stderr_is_terminal: bool) -> bool {
    !quiet && stderr_is_terminal
}

/// How long work runs before its progress is drawn.
const PROGRESS_DELAY: Duration = Duration::from_secs(1);

/// A progress indicator on standard error: a spinner with a message, the elapsed time and,
/// for [`Progress::bytes`], the bytes counted so far. Nothing is drawn for work that ends
/// within [`PROGRESS_DELAY`], when standard error is not a terminal, or under `--quiet`;
/// dropping it clears what was drawn.
pub(crate) struct Progress {
    bar: ProgressBar,
    done: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    /// A spinner: `⠋ {message} {elapsed}`.
    pub(crate) fn spinner(message: String) -> Self {
        Self::start(message, "{spinner} {msg} {elapsed}")
    }

    /// A spinner that counts bytes ([`Progress::bar`]`.inc`): `⠋ {message} 12.3 MiB (4 MiB/s)
    /// {elapsed}`.
    pub(crate) fn bytes(message: String) -> Self {
        Self::start(
            message,
            "{spinner} {msg} {binary_bytes} ({binary_bytes_per_sec}) {elapsed}",
        )
    }

    /// The bar, to count progress on ([`ProgressBar::inc`], [`ProgressBar::wrap_read`]).
    pub(crate) fn bar(&self) -> &ProgressBar {
        &self.bar
    }

    fn start(message: String, template: &str) -> Self {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style);
        }
        bar.set_message(printable(&message).into_owned());
        if !progress_shown(quiet(), std::io::stderr().is_terminal()) {
            return Progress {
                bar,
                done: None,
                thread: None,
            };
        }
        let (tx, rx) = mpsc::channel::<()>();
        let shown = bar.clone();
        let thread = std::thread::spawn(move || {
            // Work that ends (the sender dropped) before the delay draws nothing.
            if rx.recv_timeout(PROGRESS_DELAY) != Err(RecvTimeoutError::Timeout) {
                return;
            }
            shown.set_draw_target(ProgressDrawTarget::stderr());
            shown.enable_steady_tick(Duration::from_millis(120));
            let _ = rx.recv();
            shown.finish_and_clear();
        });
        Progress {
            bar,
            done: Some(tx),
            thread: Some(thread),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_only_on_a_terminal_and_never_when_quiet() {
        assert!(progress_shown(false, true));
        assert!(!progress_shown(true, true));
        assert!(!progress_shown(false, false));
        assert!(!progress_shown(true, false));
    }

    #[test]
    fn the_last_color_before_a_double_dash_counts() {
        let args = |a: &[&str]| -> Vec<std::ffi::OsString> {
            std::iter::once("gpumeter")
                .chain(a.iter().copied())
                .map(Into::into)
                .collect()
        };
        assert_eq!(color_from_args(&args(&["usag"])), ColorChoice::Auto);
        assert_eq!(
            color_from_args(&args(&["--color", "always", "usag"])),
            ColorChoice::Always
        );
        assert_eq!(
            color_from_args(&args(&["--color=always", "x", "--color", "never"])),
            ColorChoice::Never
        );
        assert_eq!(
            color_from_args(&args(&["--color=never", "--", "--color=always"])),
            ColorChoice::Never
        );
        assert_eq!(
            color_from_args(&args(&["--color", "sometimes"])),
            ColorChoice::Auto
        );
    }

    #[test]
    fn styles_are_kept_and_everything_else_escaped() {
        let styled = "\u{1b}[1m\u{1b}[31merror:\u{1b}[0m 'a\u{1b}b\u{7}'\n\u{1b}[33mx\u{1b}[0m";
        assert_eq!(
            escape_keeping_styles(styled),
            "\u{1b}[1m\u{1b}[31merror:\u{1b}[0m 'a\\u{1b}b\\u{7}'\n\u{1b}[33mx\u{1b}[0m"
        );
        // An ESC that starts no SGR sequence (cursor movement) is escaped.
        assert_eq!(escape_keeping_styles("\u{1b}[2J"), "\\u{1b}[2J");
        assert_eq!(escape_keeping_styles("end\u{1b}"), "end\\u{1b}");
    }
}
