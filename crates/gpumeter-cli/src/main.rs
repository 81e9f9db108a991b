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
//! from inputs never reach a terminal raw; JSON escapes them as `\uXXXX` ([`to_json`]).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory as _, Parser, Subcommand, ValueEnum};
use gpumeter::core::text::{is_escaped, printable};
use gpumeter::core::TenantName;
use gpumeter::{Format, MeterConfig, UsageOptions, WindowSize};

mod bank;
mod bank_io;
mod events;
mod output;
mod record;
mod stdin;
mod table;
mod term;

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
        usage: UsageArgs,
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
        usage: UsageArgs,
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
        render: RenderArgs,
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
        command: InvoiceCommand,
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

/// `preview`'s file renderings, written besides the text or JSON on standard output.
#[derive(Debug, Args)]
struct RenderArgs {
    /// Also write the invoice lines as CSV (RFC 4180, one row per line of every invoice).
    /// Not `-`: standard output carries the invoices (exit 2; `./-` is a file so named).
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Also write the invoices as one self-contained HTML page with a utilization chart per
    /// device (inline CSS and SVG, no script, no external resource). Not `-`, as --csv.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
}

impl RenderArgs {
    /// `files` with the renderings as outputs.
    fn files(&self, files: output::Files) -> output::Files {
        files
            .output("--csv", self.csv.as_deref())
            .output("--html", self.html.as_deref())
    }

    /// Writes the files asked for, each whole or not at all ([`output::write_atomically`]); a
    /// file that cannot be written is exit 1 naming its path.
    fn write(
        &self,
        invoices: &gpumeter::InvoiceDocument,
        report: &gpumeter::core::UsageReport,
    ) -> Result<(), Failure> {
        use gpumeter::rating::render;
        if let Some(path) = &self.csv {
            let text = render::invoice_csv(invoices).map_err(|e| Failure {
                code: 1,
                message: e.to_string(),
            })?;
            write_file(path, &text)?;
        }
        if let Some(path) = &self.html {
            write_file(path, &render::invoice_html(invoices, report))?;
        }
        Ok(())
    }
}

fn write_file(path: &std::path::Path, text: &str) -> Result<(), Failure> {
    output::write_atomically(path, |w| {
        w.write_all(text.as_bytes())
            .map_err(output::cannot_write(path))
    })
}

#[derive(Debug, Subcommand)]
enum InvoiceCommand {
    /// Rate the inputs against the bank and commit: credits burn, fragments carry, each
    /// invoice is applied once (a retry changes nothing and says so).
    ///
    /// Example: gpumeter invoice finalize trace.json.gz --prices pricebook.toml --bank bank.db
    /// --from 2026-12-01T00:00:00Z --to 2027-01-01T00:00:00Z
    Finalize {
        #[command(flatten)]
        usage: UsageArgs,
        /// Price book (TOML, gpumeter.pricebook/v1).
        #[arg(long, value_name = "BOOK.toml")]
        prices: PathBuf,
        /// Credit bank: the path of an SQLite file or a PostgreSQL URL
        /// (postgres://billing@db.example/ledger?sslmode=require); created when there is none.
        #[arg(long, value_name = "LOCATION", value_hint = clap::ValueHint::AnyPath)]
        bank: String,
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
        /// Finalize an incomplete usage report too (a snapshot, or a .gmr recording without
        /// its end frame, whose last windows may still grow): each invoice then carries the
        /// warning incomplete_usage. Without it such a report is refused (exit 1).
        #[arg(long)]
        allow_incomplete: bool,
        /// Finalize a period that has not ended yet (by this machine's clock); without it such
        /// a period is refused (exit 1), since its usage may still arrive.
        #[arg(long)]
        allow_open_period: bool,
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

#[derive(Debug, Clone, Copy, ValueEnum)]
enum FormatArg {
    /// Detect per file (.gmr magic → gmr; SQLite → nsys; `{"schema": "gpumeter.usage/v1"`
    /// first → usage; gzip or `{` → kineto; a first 4-byte word that is a CUPTI activity kind
    /// → cupti).
    Auto,
    /// PyTorch profiler / Kineto trace JSON, plain or .gz.
    Kineto,
    /// Nsight Systems SQLite export.
    Nsys,
    /// gpumeter `.gmr` recording (`gpumeter record`, the injection library).
    Gmr,
    /// One raw CUPTI activity buffer, laid out by `--cupti-api-version`.
    Cupti,
    /// gpumeter.usage/v1 reports (`usage --json` of node agents): merged, not metered again.
    /// Not with inputs to meter, --tenant, --tenant-map, --devices, --cupti-api-version or
    /// --opening; --window, if given, must be the reports' own.
    Usage,
}

#[derive(Debug, Args)]
struct UsageArgs {
    /// Input files (.gmr recordings, raw CUPTI buffers, Kineto JSON or .json.gz, Nsight Systems
    /// .sqlite), or usage reports to merge; several merge into one report. `-` reads standard
    /// input (once), named <stdin> in the report.
    #[arg(required = true, value_name = "INPUT")]
    inputs: Vec<PathBuf>,
    /// Input format.
    #[arg(long, value_enum, default_value = "auto")]
    format: FormatArg,
    /// Window size: whole numbers with units d, h, m or s, largest first (60s, 15m, 1h, 1h30m,
    /// 1d); over 0 s and dividing one day, so windows align with UTC days. Default: 1h; usage
    /// reports keep their own (a different --window is refused: re-windowing is not
    /// supported).
    #[arg(long, value_parser = parse_window)]
    window: Option<WindowSize>,
    /// Tenant the inputs' usage is attributed to (default: unattributed): 1 to 256 visible
    /// characters (spaces only between them), in Unicode NFC, not `unattributed` or `idle` nor
    /// a name that looks like them.
    // Checked after parsing (`UsageArgs::options`), so that the message names the rule, never
    // the raw character (clap would quote the value as given).
    #[arg(long, value_name = "NAME")]
    tenant: Option<String>,
    /// Tenant map (TOML: `[external]` correlation ids and `[pid]` process ids → tenant); its
    /// rules take precedence over --tenant.
    #[arg(long, value_name = "FILE")]
    tenant_map: Option<PathBuf>,
    /// Device catalog (TOML `[[device]]`: id, name, sm_count, compute_capability, uuid).
    #[arg(long, value_name = "FILE")]
    devices: Option<PathBuf>,
    /// CUPTI API version of the library that produced raw CUPTI buffers (`CUPTI_API_VERSION`:
    /// 26 for CUDA 12.8, 130000/130001 for CUDA 13.0, 130401 for CUDA 13.4); a .gmr records
    /// its own. Default: 26.
    #[arg(long, value_name = "N", value_parser = parse_api_version)]
    cupti_api_version: Option<gpumeter::ApiVersion>,
    /// Opening state: an earlier usage report (--json output) whose open_allocations are
    /// still held; memory_byte_ns bills them on from that report's end.
    #[arg(long, value_name = "FILE")]
    opening: Option<PathBuf>,
}

fn parse_api_version(s: &str) -> Result<gpumeter::ApiVersion, String> {
    let n: u32 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a CUPTI_API_VERSION number"))?;
    gpumeter::ApiVersion::from_cupti(n).map_err(|e| e.to_string())
}

fn parse_window(s: &str) -> Result<WindowSize, String> {
    WindowSize::parse(s)
}

impl UsageArgs {
    /// The library's options. `--tenant` must be a tenant name ([`TenantName::parse`]:
    /// trimmed, printable, NFC, at most 256 bytes, not a reserved name in any case); a bad one
    /// is a bad command line (exit 2), and the message names the rule and the character's code
    /// point, not the character.
    fn options(&self) -> Result<UsageOptions, Failure> {
        stdin::check(&self.inputs)?;
        let tenant = match &self.tenant {
            Some(t) => {
                Some(TenantName::parse(t).map_err(|e| usage_error(format!("--tenant: {e}")))?)
            }
            None => None,
        };
        Ok(UsageOptions {
            format: match self.format {
                FormatArg::Auto => Format::Auto,
                FormatArg::Kineto => Format::Kineto,
                FormatArg::Nsys => Format::Nsys,
                FormatArg::Gmr => Format::Gmr,
                FormatArg::Cupti => Format::Cupti,
                FormatArg::Usage => Format::Usage,
            },
            meter: MeterConfig {
                window: self.window.unwrap_or_default(),
                tenant,
                ..MeterConfig::default()
            },
            devices: self.devices.clone(),
            tenant_map: self.tenant_map.clone(),
            cupti_api: self
                .cupti_api_version
                .map(gpumeter::ApiVersion::cupti_api_version),
            opening: self.opening.clone(),
        })
    }

    /// `files` with the inputs and the files the options name, as inputs.
    fn files(&self, files: output::Files) -> output::Files {
        files
            .inputs("the input", &self.inputs)
            .input("--tenant-map", self.tenant_map.as_deref())
            .input("--devices", self.devices.as_deref())
            .input("--opening", self.opening.as_deref())
    }

    /// The usage report of the inputs: metered, or, for usage reports, merged. With reports,
    /// the options that only metering uses are a bad command line (exit 2), and so is a
    /// `--window` other than the reports' own (checked once they are read).
    fn report(&self, options: &UsageOptions) -> Result<gpumeter::UsageReport, Failure> {
        let inputs = stdin::Inputs::resolve(&self.inputs)?;
        let _progress = term::Progress::spinner(format!("metering {}", describe(inputs.paths())));
        self.report_of(inputs.paths(), options)
            .map_err(|f| inputs.rename(f))
    }

    fn report_of(
        &self,
        inputs: &[PathBuf],
        options: &UsageOptions,
    ) -> Result<gpumeter::UsageReport, Failure> {
        let reports = gpumeter::inputs_are_reports(inputs, options)?;
        if reports {
            let given = [
                ("--tenant", self.tenant.is_some()),
                ("--tenant-map", self.tenant_map.is_some()),
                ("--devices", self.devices.is_some()),
                ("--cupti-api-version", self.cupti_api_version.is_some()),
                ("--opening", self.opening.is_some()),
            ];
            if let Some((option, _)) = given.into_iter().find(|(_, set)| *set) {
                return Err(Failure::from(gpumeter::Error::MeteringOption { option }));
            }
        }
        let report = gpumeter::meter_inputs(inputs, options)?;
        if let Some(w) = self.window.filter(|_| reports) {
            if w.seconds() != report.window_seconds {
                return Err(usage_error(format!(
                    "--window is {} s but the usage reports have window_seconds {}: \
                     re-windowing is not supported (omit --window)",
                    w.seconds(),
                    report.window_seconds
                )));
            }
        }
        Ok(report)
    }
}

/// The inputs as a progress message names them, with their size: `a.json.gz (1.2 GiB)`,
/// `a.gmr and b.gmr (…)`, `a.gmr and 2 more (…)` (standard input is the file it was copied
/// to, named `<stdin>`).
fn describe(inputs: &[PathBuf]) -> String {
    let name = |p: &PathBuf| {
        p.file_name().map_or_else(
            || p.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
    };
    let names = match inputs {
        [] => String::new(),
        [one] => name(one),
        [a, b] => format!("{} and {}", name(a), name(b)),
        [a, rest @ ..] => format!("{} and {} more", name(a), rest.len()),
    };
    let bytes: u64 = inputs
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    format!("{names} ({})", indicatif::BinaryBytes(bytes))
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
        // reports, is the command line's fault: every file may be good (DESIGN §8).
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

/// Pretty JSON whose strings also escape what [`printable`] escapes and JSON allows raw
/// (DEL, C1 controls, bidirectional overrides, U+2028/U+2029), as `\uXXXX`: the same
/// document to a parser, and nothing that moves a terminal's cursor or reorders its text.
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
        } => usage_output(&usage, json, by_window, &events),
        Command::Bank {
            command: bank::BankCommand::Export(args),
        } => bank_io::export(args),
        command => run_text(command).map(Output::Text),
    }
}

/// `usage`: the report as text or JSON, and the events (`--events`) to their file, or the
/// events alone on standard output (`--events -`).
fn usage_output(
    usage: &UsageArgs,
    json: bool,
    by_window: bool,
    events: &events::EventsArgs,
) -> Result<Output, Failure> {
    events.check(json, by_window)?;
    events.files(usage.files(output::Files::new())).check()?;
    let options = usage.options()?;
    let map = events.map()?;
    let report = usage.report(&options)?;
    if let Some(lines) = events.write(&report, map.as_ref())? {
        return Ok(Output::Events(lines));
    }
    if json {
        Ok(Output::Report(Box::new(report)))
    } else {
        Ok(Output::Text(text_out(&gpumeter::render::usage_text(
            &report,
            &gpumeter::render::UsageTextOptions::default().by_window(by_window),
        ))))
    }
}

/// Writes `report` as [`to_json`] would, to `w`, then a newline.
fn write_report(
    w: &mut impl std::io::Write,
    report: &gpumeter::UsageReport,
) -> std::io::Result<()> {
    use serde::Serialize as _;
    let mut ser = serde_json::Serializer::with_formatter(&mut *w, TerminalSafe::default());
    report.serialize(&mut ser).map_err(std::io::Error::from)?;
    writeln!(w)
}

fn run_text(command: Command) -> Result<String, Failure> {
    match command {
        // `run` answers `usage` itself; this is the same command for a caller that wants text.
        Command::Usage {
            usage,
            json,
            events,
            by_window,
        } => match usage_output(&usage, json, by_window, &events)? {
            Output::Text(text) | Output::Events(text) => Ok(text),
            Output::Report(report) => to_json(&report),
        },
        Command::Preview {
            usage,
            prices,
            from,
            to,
            json,
            render,
            bank,
        } => {
            render
                .files(usage.files(output::Files::new()))
                .input("--prices", Some(&prices))
                .bank(bank.as_deref(), false)
                .check()?;
            let (period, book, report) = rating_inputs(&usage, &prices, from, to)?;
            let invoices = match bank {
                None => gpumeter::preview(&report, &book, period),
                Some(location) => {
                    let mut ledger = bank::open_read_only(&location)?;
                    gpumeter::bill(&mut ledger, &report, &book, period, false).map(|f| f.document)
                }
            }
            .map_err(|e| period_failure(e, period))?;
            say_idle(&invoices);
            if invoices.invoices.is_empty() {
                // Nothing to bill: say why on stderr, so loss or an empty period is not silent.
                say("notice: no usage to invoice in the period");
                for w in &report.warnings {
                    say(&format!("notice: usage report: {w}"));
                }
            }
            render.write(&invoices, &report)?;
            if json {
                to_json(&invoices)
            } else {
                Ok(text_out(&gpumeter::render::invoice_text(&invoices)))
            }
        }
        Command::Invoice {
            command:
                InvoiceCommand::Finalize {
                    usage,
                    prices,
                    bank,
                    from,
                    to,
                    json,
                    allow_incomplete,
                    allow_open_period,
                },
        } => {
            usage
                .files(output::Files::new())
                .input("--prices", Some(&prices))
                .bank(Some(&bank), true)
                .check()?;
            let (period, book, report) = rating_inputs(&usage, &prices, from, to)?;
            let mut ledger = bank::open(&bank)?;
            let options = gpumeter::BillOptions::new(true)
                .allow_incomplete(allow_incomplete)
                .allow_open_period(allow_open_period);
            let done = gpumeter::bill_with(&mut ledger, &report, &book, period, &options)
                .map_err(|e| period_failure(e, period))?;
            if let Some(why) = report.incomplete_because() {
                say(&format!(
                    "warning: the usage report is incomplete ({why}): these invoices bill its \
                     last windows as they are now (--allow-incomplete)"
                ));
            }
            say_idle(&done.document);
            if done.document.invoices.is_empty() {
                say("notice: no usage to invoice in the period");
            }
            for (inv, outcome) in done.document.invoices.iter().zip(&done.outcomes) {
                if *outcome == gpumeter::bank::Outcome::AlreadyFinalized {
                    say(&format!(
                        "notice: the invoice of tenant {} for {} to {} was finalized before \
                         (same tenant, period, usage and price book): nothing changed",
                        inv.tenant, inv.period.from, inv.period.to
                    ));
                } else if let Some(kind) = inv.extensions.kind {
                    say(&format!(
                        "notice: tenant {}'s period {} to {} was invoiced before: this is a {} \
                         of subtotal {} {}, billing what this usage adds to the period",
                        inv.tenant,
                        inv.period.from,
                        inv.period.to,
                        kind.label(),
                        inv.subtotal,
                        inv.currency
                    ));
                }
            }
            if json {
                to_json(&done.document)
            } else {
                Ok(text_out(&gpumeter::render::invoice_text(&done.document)))
            }
        }
        Command::Bank { command } => bank::run(command),
        Command::Record(args) => record::run(args),
        Command::Recording { command } => record::recording(command),
        Command::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "gpumeter", &mut out);
            String::from_utf8(out)
                .map(|t| t.trim_end().to_string())
                .map_err(|e| Failure {
                    code: 1,
                    message: format!("cannot write the completion script: {e}"),
                })
        }
        Command::Man { dir } => man(dir),
        Command::Prices {
            command: PricesCommand::Check { book, devices },
        } => {
            let book = gpumeter::load_price_book(&book)?;
            let catalog = match devices {
                Some(p) => {
                    Some(gpumeter::DeviceCatalog::from_path(&p).map_err(gpumeter::Error::from)?)
                }
                None => None,
            };
            let text =
                table::prices_check(&book, catalog.as_ref()).map_err(gpumeter::Error::from)?;
            Ok(text_out(&text))
        }
    }
}

/// Says on standard error that `idle`'s usage is listed apart and not invoiced (the
/// document's `extensions.idle` warning), so an invoice run over idle rows is not silent.
fn say_idle(doc: &gpumeter::InvoiceDocument) {
    for w in doc.extensions.idle.iter().flat_map(|i| &i.warnings) {
        say(&format!("notice: {w}"));
    }
}

/// The period (`None`: the usage's span), the price book and the usage report.
type RatingInputs = (
    Option<gpumeter::Period>,
    gpumeter::PriceBook,
    gpumeter::UsageReport,
);

/// What `preview` and `invoice finalize` rate: the period, the price book and the usage
/// report. The command line is checked whole before any file is read: a bad one is exit 2
/// whatever the files hold.
fn rating_inputs(
    usage: &UsageArgs,
    prices: &std::path::Path,
    from: Option<String>,
    to: Option<String>,
) -> Result<RatingInputs, Failure> {
    let period = period(from, to)?;
    let options = usage.options()?;
    let book = gpumeter::load_price_book(prices)?;
    let report = usage.report(&options)?;
    Ok((period, book, report))
}

/// `--from`/`--to` as a period ([`gpumeter::Period::parse`]), both or neither (clap requires
/// the pair); a bad time or an empty period is a bad command line.
fn period(from: Option<String>, to: Option<String>) -> Result<Option<gpumeter::Period>, Failure> {
    use gpumeter::{PeriodBound, PeriodError};
    let (Some(f), Some(t)) = (from, to) else {
        return Ok(None);
    };
    gpumeter::Period::parse(&f, &t)
        .map(Some)
        .map_err(|e| match e {
            PeriodError::Unparsable {
                bound: PeriodBound::Start,
                reason,
                ..
            } => usage_error(format!("--from: {reason}")),
            PeriodError::Unparsable { reason, .. } => usage_error(format!("--to: {reason}")),
            PeriodError::EndNotAfterStart { .. } => usage_error("--to must be after --from".into()),
            e => usage_error(format!("--from/--to: {e}")),
        })
}

/// A rating failure: a given period off the window edges is the command line's fault (exit
/// 2); a default period that cannot be formed, and everything else, is the files' (exit 1).
fn period_failure(e: gpumeter::Error, period: Option<gpumeter::Period>) -> Failure {
    match e {
        gpumeter::Error::Rating(gpumeter::RatingError::Period { .. }) if period.is_some() => {
            usage_error(format!("--from/--to: {e}"))
        }
        e => Failure::from(e),
    }
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
                Output::Report(report) => write_report(&mut stdout, &report),
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
