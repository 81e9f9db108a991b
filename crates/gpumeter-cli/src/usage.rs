//! The inputs and metering options every metering command takes ([`UsageArgs`]: `usage`,
//! `preview`, `invoice finalize`), and `usage`'s own output.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use gpumeter::core::TenantName;
use gpumeter::{Format, MeterConfig, UsageOptions, WindowSize};

use crate::{events, output, stdin, term, text_out, usage_error, Failure, Output};

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
pub(crate) struct UsageArgs {
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
    pub(crate) fn options(&self) -> Result<UsageOptions, Failure> {
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
    pub(crate) fn files(&self, files: output::Files) -> output::Files {
        files
            .inputs("the input", &self.inputs)
            .input("--tenant-map", self.tenant_map.as_deref())
            .input("--devices", self.devices.as_deref())
            .input("--opening", self.opening.as_deref())
    }

    /// The usage report of the inputs: metered, or, for usage reports, merged. With reports,
    /// the options that only metering uses are a bad command line (exit 2), and so is a
    /// `--window` other than the reports' own (checked once they are read).
    pub(crate) fn report(&self, options: &UsageOptions) -> Result<gpumeter::UsageReport, Failure> {
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

/// `usage`: the report as text or JSON, and the events (`--events`) to their file, or the
/// events alone on standard output (`--events -`).
pub(crate) fn usage_output(
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
