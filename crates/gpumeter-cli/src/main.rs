//! `gpumeter`: meter GPU activity and preview invoices from the command line.
//!
//! Exit codes: 0 ok (loss is not an error), 1 bad input file (an input, the price book, the
//! device catalog, the tenant map or the opening state, and anything derived from them, such
//! as usage reports that cannot be merged), 2 bad command line (clap's own errors,
//! `--from`/`--to` that do not parse or do not make a period on window edges, usage reports
//! mixed with inputs to meter, `--format usage` given another format, and metering options or
//! another `--window` given with usage reports).
//!
//! Text for people (tables, `error:` and `notice:` lines) goes through
//! [`gpumeter::core::text::printable`], so control characters and bidirectional overrides
//! from inputs never reach a terminal raw; JSON escapes them as `\uXXXX` ([`to_json`](json::to_json)).
//!
//! Where this crate sits in the flow from sources to the bank, what it owns and what it may
//! depend on: `docs/ARCHITECTURE.md` in the repository.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory as _, Parser, Subcommand};
use gpumeter::core::text::{is_escaped, printable};

mod agent;
mod bank;
mod bank_io;
mod events;
mod invoice;
mod json;
mod output;
mod record;
mod stdin;
mod table;
mod term;
mod usage;

/// Fine-grained GPU usage metering: usage reports and invoice previews from GPU activity.
#[derive(Debug, Parser)]
#[command(name = "gpumeter", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// When to colour help, errors and warnings: auto (on a terminal, unless NO_COLOR is set
    /// to a non-empty value), always or never.
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value_t = clap::ColorChoice::Auto)]
    color: clap::ColorChoice,
    /// Print only errors on standard error: no warnings, notices or progress.
    #[arg(long, short, global = true)]
    quiet: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Meter inputs into a usage report (gpumeter.usage/v1).
    Usage {
        #[command(flatten)]
        usage: usage::UsageArgs,
        /// Write the report as JSON instead of a text table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        events: events::EventsArgs,
        /// Text per window: a table of each UTC window's usage (its start and end, RFC 3339,
        /// end exclusive) before the totals. Not with --json, whose `usage` rows are per window
        /// already.
        #[arg(long, conflicts_with = "json")]
        by_window: bool,
    },
    /// Meter inputs and rate them with a price book: one invoice per tenant (gpumeter.invoice/v1).
    Preview {
        #[command(flatten)]
        usage: usage::UsageArgs,
        /// Price book (TOML, gpumeter.pricebook/v1).
        #[arg(long, value_name = "BOOK.toml")]
        prices: PathBuf,
        /// Period start, RFC 3339 (inclusive); needs --to. Without both: from the usage's first
        /// window.
        #[arg(long, value_name = "T", requires = "to")]
        from: Option<String>,
        /// Period end, RFC 3339 (exclusive); needs --from. Without both: to the end of the
        /// usage's last window.
        #[arg(long, value_name = "T", requires = "from")]
        to: Option<String>,
        /// Write the invoices as JSON instead of a text table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        render: invoice::RenderArgs,
        /// Credit bank, an existing one: the path of an SQLite file or a PostgreSQL URL
        /// (postgres://billing@db.example/ledger?sslmode=require). Shows the credits, carried
        /// fragments and reservations that would apply; the bank is only read (a read-only
        /// file or directory serves) and nothing is written, nor waited for.
        #[arg(long, value_name = "LOCATION", value_hint = clap::ValueHint::AnyPath)]
        bank: Option<String>,
    },
    /// Finalized invoices: rated against the credit bank, credits burned, each invoice applied
    /// once.
    Invoice {
        #[command(subcommand)]
        command: invoice::InvoiceCommand,
    },
    /// The credit bank (an SQLite file or a PostgreSQL database, `--bank LOCATION`): grants,
    /// reservations, balances, history, expiry, close, verify.
    Bank {
        #[command(subcommand)]
        command: bank::BankCommand,
    },
    /// Run a command with gpumeter's CUDA injection library and record its GPU activity into a
    /// .gmr; exits with the command's exit code.
    Record(record::RecordArgs),
    /// The node agent: meter a node's spool of recordings as it grows, close windows on the
    /// node's watermark and ship them to sinks (docs/AGENT.md).
    Agent(agent::AgentArgs),
    /// Inspect .gmr recordings.
    Recording {
        #[command(subcommand)]
        command: record::RecordingCommand,
    },
    /// Price-book commands.
    Prices {
        #[command(subcommand)]
        command: PricesCommand,
    },
    /// Print a shell completion script to standard output.
    ///
    /// Example (bash): gpumeter completions bash >
    /// ~/.local/share/bash-completion/completions/gpumeter
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) to standard output, or write one page per command into a
    /// directory.
    ///
    /// Example: gpumeter man | man -l -
    Man {
        /// Write gpumeter.1 and a page per subcommand (gpumeter-usage.1, …) into DIR (made
        /// when missing) instead, and list their paths.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum PricesCommand {
    /// Validate a price book (exit 1 on the first error, with its line and column) and show its
    /// SKUs, rates and bands; with --devices, which SKU each catalog device maps to, and a
    /// warning for each SKU no catalog device matches.
    Check {
        /// Price book (TOML).
        book: PathBuf,
        /// Device catalog (TOML `[[device]]` tables) to map to SKUs.
        #[arg(long, value_name = "FILE")]
        devices: Option<PathBuf>,
    },
}

/// A failure and the exit code it maps to.
pub(crate) struct Failure {
    code: u8,
    message: String,
}

impl From<gpumeter::Error> for Failure {
    /// Library errors come from an input file, the price book, a catalog, a tenant map or an
    /// opening state: exit 1, except the mixes of usage reports and other inputs or options
    /// (exit 2). The one command-line fault the library reports (a
    /// `--from`/`--to` period off the window edges) is mapped where the period is passed.
    fn from(e: gpumeter::Error) -> Self {
        // A call that mixes usage reports with inputs to meter, or gives metering options to
        // reports, is the command line's fault: every file may be good (README.md, "Command line").
        let code = match e {
            gpumeter::Error::MixedInputs { .. }
            | gpumeter::Error::NotAReport { .. }
            | gpumeter::Error::MeteringOption { .. } => 2,
            _ => 1,
        };
        Failure {
            code,
            message: e.to_string(),
        }
    }
}

pub(crate) fn usage_error(message: String) -> Failure {
    Failure { code: 2, message }
}

/// Writes one line to standard error with its text escaped ([`printable`]): messages carry
/// file names, field values, device and kernel names from the inputs. Its `error:`,
/// `warning:` or `notice:` prefix is coloured as `--color` says; under `--quiet` only errors
/// are written ([`term::say`]).
pub(crate) fn say(line: &str) {
    term::say(line);
}

/// Text for people, line by line through [`printable`]: the renderings escape each cell
/// already (so widths are those of the escaped text); this keeps any raw control character
/// that a rendering missed off the terminal.
pub(crate) fn text_out(text: &str) -> String {
    let lines: Vec<std::borrow::Cow<'_, str>> = text.split('\n').map(printable).collect();
    lines.join("\n")
}

/// What a command prints on standard output.
enum Output {
    /// Text (a table, a message, a small JSON document), printed with a final newline.
    Text(String),
    /// A usage report as JSON (`usage --json`), serialized straight to standard output: the
    /// largest output there is (a row per tenant, device, window and meter) is never held
    /// as one string.
    Report(Box<gpumeter::UsageReport>),
    /// JSON Lines, printed as they are (each line ends with its newline; none for no lines):
    /// usage events (`usage --events -`), a bank's transactions (`bank export`).
    Events(String),
}

fn run(cli: Cli) -> Result<Output, Failure> {
    match cli.command {
        Command::Usage {
            usage,
            json,
            events,
            by_window,
        } => usage::usage_output(&usage, json, by_window, &events),
        Command::Bank {
            command: bank::BankCommand::Export(args),
        } => bank_io::export(args),
        command => run_text(command, cli.quiet).map(Output::Text),
    }
}

fn run_text(command: Command, quiet: bool) -> Result<String, Failure> {
    match command {
        // `run` answers `usage` itself; this is the same command for a caller that wants text.
        Command::Usage {
            usage,
            json,
            events,
            by_window,
        } => match usage::usage_output(&usage, json, by_window, &events)? {
            Output::Text(text) | Output::Events(text) => Ok(text),
            Output::Report(report) => json::to_json(&report),
        },
        Command::Preview {
            usage,
            prices,
            from,
            to,
            json,
            render,
            bank,
        } => invoice::preview(&usage, &prices, from, to, json, &render, bank),
        Command::Invoice { command } => invoice::invoice(command),
        Command::Bank { command } => bank::run(command),
        Command::Record(args) => record::run(args),
        Command::Agent(args) => agent::run(args, quiet),
        Command::Recording { command } => record::recording(command),
        Command::Completions { shell } => completions(shell),
        Command::Man { dir } => man(dir),
        Command::Prices {
            command: PricesCommand::Check { book, devices },
        } => prices_check(&book, devices),
    }
}

/// `gpumeter completions SHELL`: the completion script.
fn completions(shell: clap_complete::Shell) -> Result<String, Failure> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "gpumeter", &mut out);
    String::from_utf8(out)
        .map(|t| t.trim_end().to_string())
        .map_err(|e| Failure {
            code: 1,
            message: format!("cannot write the completion script: {e}"),
        })
}

/// `gpumeter prices check BOOK [--devices FILE]`.
fn prices_check(book: &std::path::Path, devices: Option<PathBuf>) -> Result<String, Failure> {
    let book = gpumeter::load_price_book(book)?;
    let catalog = match devices {
        Some(p) => Some(gpumeter::DeviceCatalog::from_path(&p).map_err(gpumeter::Error::from)?),
        None => None,
    };
    let text = table::prices_check(&book, catalog.as_ref()).map_err(gpumeter::Error::from)?;
    Ok(text_out(&text))
}

/// `gpumeter man`: the man page of `gpumeter` on standard output, or, with `dir`, a page per
/// command written there and their paths on standard output (exit 1 when one cannot be
/// written).
fn man(dir: Option<PathBuf>) -> Result<String, Failure> {
    let cmd = Cli::command();
    let fail = |e: std::io::Error| Failure {
        code: 1,
        message: match &dir {
            Some(d) => format!("cannot write the man pages to {}: {e}", d.display()),
            None => format!("cannot write the man page: {e}"),
        },
    };
    match &dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(fail)?;
            // A page per command but `help` (as clap_mangen's `generate_to`), named by the
            // command's path, each written whole ([`output::write_atomically`]).
            fn pages(
                cmd: &clap::Command,
                dir: &std::path::Path,
                out: &mut Vec<String>,
            ) -> Result<(), Failure> {
                let man = clap_mangen::Man::new(cmd.clone());
                let path = dir.join(man.get_filename());
                output::write_atomically(&path, |w| {
                    man.render(w).map_err(output::cannot_write(&path))
                })?;
                out.push(path.display().to_string());
                for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
                    pages(sub, dir, out)?;
                }
                Ok(())
            }
            let mut cmd = cmd.disable_help_subcommand(true);
            cmd.build();
            let mut written = Vec::new();
            pages(&cmd, d, &mut written).map_err(|f| Failure {
                code: f.code,
                message: format!(
                    "cannot write the man pages to {}: {}",
                    d.display(),
                    f.message
                ),
            })?;
            Ok(text_out(&written.join("\n")))
        }
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut out).map_err(fail)?;
            String::from_utf8(out)
                .map(|t| t.trim_end().to_string())
                .map_err(|e| Failure {
                    code: 1,
                    message: format!("cannot write the man page: {e}"),
                })
        }
    }
}

/// The command line, or clap's message (escaped: it quotes the values given) and exit code.
/// clap's help and errors are coloured as `--color` says (read from the arguments, since clap
/// did not accept them: [`term::color_from_args`]).
fn parse_cli() -> Result<Cli, ExitCode> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match Cli::try_parse_from(&args) {
        Ok(cli) => {
            term::init(cli.color, cli.quiet);
            Ok(cli)
        }
        Err(e) => {
            let code = u8::try_from(e.exit_code()).unwrap_or(2);
            let color = term::color_from_args(&args);
            if e.use_stderr() {
                // clap keeps the SGR sequences of the values it quotes (an unknown subcommand
                // `\e[8m…` would hide text), and its own styles are SGR too.
                let quoted_escape = args.iter().any(|a| a.as_encoded_bytes().contains(&0x1b));
                let message = hide_passwords(&clap_message(&e, quoted_escape), &args);
                term::write_styled(&message, true, color);
            } else {
                // --help, --version: clap's own text, to stdout.
                term::write_styled(&e.render().ansi().to_string(), false, color);
            }
            Err(ExitCode::from(code))
        }
    }
}

/// `message` with the password of every PostgreSQL URL among the arguments masked as the
/// bank's messages mask it ([`gpumeter::bank::redact`]): clap quotes a refused argument as
/// given, and a `--bank` URL typed without `--bank` is one.
fn hide_passwords(message: &str, args: &[std::ffi::OsString]) -> String {
    let mut out = message.to_string();
    for arg in args.iter().filter_map(|a| a.to_str()) {
        if gpumeter::bank::is_postgres(arg) {
            let shown = gpumeter::bank::redact(arg);
            if shown != arg {
                out = out.replace(arg, &shown);
            }
        }
    }
    out
}

/// clap's message with its styles, escaped line by line ([`term::escape_keeping_styles`]).
/// clap quotes a refused value as given (stripping ANSI sequences other than SGR), so a value with a
/// character [`printable`] escapes (a newline, a bidirectional override) is quoted escaped instead,
/// with the reason its parser gave.
///
/// When an argument holds an escape (`quoted_escape`), clap's styles cannot be told from the
/// argument's, so the message is clap's plain text (which drops every escape sequence),
/// escaped, without styles.
fn clap_message(e: &clap::Error, quoted_escape: bool) -> String {
    use clap::error::{ContextKind, ContextValue};
    if let (Some(ContextValue::String(value)), Some(ContextValue::String(arg))) = (
        e.get(ContextKind::InvalidValue),
        e.get(ContextKind::InvalidArg),
    ) {
        if value.chars().any(is_escaped) {
            let reason = std::error::Error::source(e)
                .map(|s| format!(": {}", printable(&s.to_string())))
                .unwrap_or_default();
            return format!(
                "{} invalid value '{}' for '{arg}'{reason}\n\nFor more information, try \
                 '--help'.\n",
                term::error_prefix(),
                printable(value)
            );
        }
    }
    if quoted_escape {
        let plain = e.render().to_string();
        let lines: Vec<_> = plain.split('\n').map(printable).collect();
        return lines.join("\n");
    }
    term::escape_keeping_styles(&e.render().ansi().to_string())
}

fn main() -> ExitCode {
    let cli = match parse_cli() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    if !matches!(cli.command, Command::Record(_)) {
        output::ignore_file_size_signal();
    }
    match run(cli) {
        Ok(out) => {
            use std::io::Write as _;
            let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
            let written = match out {
                Output::Text(text) => writeln!(stdout, "{text}"),
                Output::Report(report) => json::write_report(&mut stdout, &report),
                Output::Events(lines) => write!(stdout, "{lines}"),
            };
            match written.and_then(|()| stdout.flush()) {
                Ok(()) => ExitCode::SUCCESS,
                // A reader that stopped early (`| head`) is not our failure.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                Err(e) => {
                    say(&format!("error: cannot write the output: {e}"));
                    ExitCode::from(1)
                }
            }
        }
        Err(f) => {
            say(&format!("error: {}", f.message));
            ExitCode::from(f.code)
        }
    }
}
