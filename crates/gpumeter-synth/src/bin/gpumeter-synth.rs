//! `gpumeter-synth`: writes a synthetic CUPTI 12.8 workload (raw activity buffer or `.gmr`
//! recording) for gpumeter's benchmarks. See the library's documentation for the workload.
//!
//! ```text
//! gpumeter-synth --kernels 10000000 --format cupti -o /tmp/10m.cupti
//! gpumeter-synth --kernels 1000000 --format gmr -o /tmp/1m.gmr
//! ```

use std::io::BufWriter;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use gpumeter_synth::{write_gmr, write_raw, SynthConfig};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// One raw activity buffer (`gpumeter usage --format cupti`, CUPTI 12.8).
    Cupti,
    /// A `.gmr` recording (header, string table, buffer frames, end frame).
    Gmr,
}

/// Writes a deterministic synthetic CUPTI 12.8 workload: N kernel launches on several devices,
/// streams and tenants, with overlapping kernels.
#[derive(Debug, Parser)]
#[command(name = "gpumeter-synth", version)]
struct Args {
    /// Kernel launches (CONCURRENT_KERNEL records).
    #[arg(long, default_value_t = 1_000_000)]
    kernels: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Cupti)]
    format: Format,
    /// Output file.
    #[arg(short, long)]
    output: PathBuf,
    /// Devices (each with a DEVICE record).
    #[arg(long, default_value_t = 2)]
    devices: u32,
    /// Streams per device.
    #[arg(long, default_value_t = 4)]
    streams: u32,
    /// Tenants (external ids through EXTERNAL_CORRELATION records).
    #[arg(long, default_value_t = 8)]
    tenants: u32,
    /// Processes (process ids through RUNTIME records).
    #[arg(long, default_value_t = 4)]
    processes: u32,
    /// Mean launch rate, launches per second of record time.
    #[arg(long, default_value_t = 10_000)]
    kernels_per_second: u64,
    /// Launches per activity buffer (`.gmr` frame).
    #[arg(long, default_value_t = 30_000)]
    kernels_per_buffer: u64,
    /// Seed.
    #[arg(long, default_value_t = 13)]
    seed: u64,
    /// Kernel records only: no EXTERNAL_CORRELATION and no RUNTIME records.
    #[arg(long)]
    kernels_only: bool,
}

fn main() -> ExitCode {
    let a = Args::parse();
    let cfg = SynthConfig {
        kernels: a.kernels,
        devices: a.devices,
        streams: a.streams,
        tenants: a.tenants,
        processes: a.processes,
        kernels_per_second: a.kernels_per_second,
        kernels_per_buffer: a.kernels_per_buffer,
        seed: a.seed,
        external_correlation: !a.kernels_only,
        api_records: !a.kernels_only,
        ..SynthConfig::default()
    };
    let file = match std::fs::File::create(&a.output) {
        Ok(f) => BufWriter::with_capacity(1 << 20, f),
        Err(e) => {
            eprintln!("gpumeter-synth: cannot create {}: {e}", a.output.display());
            return ExitCode::from(2);
        }
    };
    let written = match a.format {
        Format::Cupti => write_raw(&cfg, file),
        Format::Gmr => write_gmr(&cfg, file),
    };
    match written {
        Ok(s) => {
            eprintln!(
                "gpumeter-synth: {} ({} records, {} kernels, {} bytes of records, {:.1} s of record time)",
                a.output.display(),
                s.records,
                s.kernels,
                s.record_bytes,
                s.last_end_ns.saturating_sub(s.first_start_ns) as f64 / 1e9
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpumeter-synth: {}: {e}", a.output.display());
            ExitCode::FAILURE
        }
    }
}
