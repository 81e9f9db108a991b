//! The one code path from inputs to usage: [`meter_inputs`] reads the catalog, the tenant map
//! and the opening state, sorts inputs into traces and recordings, and meters them as one
//! stream in time order (or merges usage reports).

use std::path::{Path, PathBuf};

use gpumeter_core::{Meter, UsageReport};
use gpumeter_import::{DeviceCatalog, ImportError, ImportOptions, TenantMapFile as _};

use crate::detect::{format_enabled, inputs_are_reports, resolve};
#[cfg(feature = "cupti")]
use crate::options::cupti_api;
use crate::options::{Format, UsageOptions};
use crate::usage_report::{merge_usage_reports, parse_unchecked};
use crate::Error;

/// Reads an earlier usage report and continues it ([`Meter::continue_from`]): its
/// `open_allocations` are held on the devices of their `device_key` from that report's end on,
/// and what it billed (its sources, and its period on its devices) is not billed again.
fn apply_opening(meter: &mut Meter, path: &Path) -> Result<(), Error> {
    let fail = |reason: String| Error::Opening {
        path: path.to_path_buf(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|e| fail(format!("cannot read: {e}")))?;
    let report = match parse_unchecked(&bytes, path) {
        Ok(r) => r,
        Err(Error::Report { reason, .. }) => return Err(fail(reason)),
        Err(Error::NotAReport { format, .. }) => {
            return Err(fail(format!(
                "not a gpumeter.usage/v1 report: its bytes are a {format} input"
            )))
        }
        Err(e) => return Err(fail(e.to_string())),
    };
    // Checked as every reader checks a report (its digest first).
    gpumeter_core::check_report(&report).map_err(|e| fail(e.to_string()))?;
    meter.continue_from(&report).map_err(fail)
}

/// Refuses a tenant map that names a tenant which looks like `--tenant` but is another name
/// (the same UTS #39 skeleton, `TenantName::skeleton`): their usage would be two tenants that
/// read alike on an invoice. The map is the file at fault (exit 1).
fn look_alike_of_tenant(
    map: &gpumeter_core::TenantMap,
    path: &Path,
    tenant: &gpumeter_core::TenantName,
) -> Result<(), Error> {
    let skeleton = tenant.skeleton();
    let named = map.external.values().chain(map.pid.values());
    if let Some(other) = named
        .into_iter()
        .find(|t| *t != tenant && t.skeleton() == skeleton)
    {
        return Err(ImportError::TenantMap {
            path: path.to_path_buf(),
            reason: format!(
                "the tenant `{}` looks like --tenant `{}` but is another name: their usage \
                 would be two tenants that read alike on an invoice",
                other.escaped(),
                tenant.escaped()
            ),
        }
        .into());
    }
    Ok(())
}

/// Meters every input into one usage report (several inputs merge; a file given twice, or two
/// files with the same bytes, is metered once with a warning).
///
/// Usage reports (`Format::Usage`, or all inputs detected as reports) are not metered again:
/// they are merged ([`merge_usage_reports`]); `options.meter` and `options.cupti_api` are not
/// used then (a report keeps its window: callers that were given a window compare it with
/// `window_seconds`, re-windowing is not supported).
///
/// Every input is read and validated first (traces, then recordings and raw CUPTI buffers),
/// announced, and then all their records and memory events are metered as one stream in time
/// order ([`gpumeter_core::push_batches`]), so neither the order of the files nor a mix of
/// formats for one GPU makes records `late`. Raw buffers and recordings without traces are
/// not held whole: one is streamed (`cupti::meter_buffer_file`,
/// `cupti::meter_gmr_file`), several are streamed and merged in `push_batches`'
/// order (`cupti::meter_files`), with the same report. An opening state (`--opening`) is taken before
/// any input.
///
/// # Errors
/// [`Error::Import`] / `Error::Cupti` for an input (or the catalog, the tenant map or the
/// opening state) that cannot be read: a missing or truncated file, a file that is not a
/// trace, a buffer that does not decode. Traces are checked before recordings, each kind in
/// argument order, so with several bad inputs the first bad trace is named.
/// [`Error::CuptiApiVersion`] when `options.cupti_api` has no known layouts and a raw buffer
/// is tried or read. Record-level faults are loss, not errors. For reports: [`Error::MixedInputs`] when reports
/// and inputs to meter are mixed, [`Error::MeteringOption`] when `tenant`, `tenant_map`,
/// `devices` or `opening` is set, and the errors of [`merge_usage_reports`].
pub fn meter_inputs(inputs: &[PathBuf], options: &UsageOptions) -> Result<UsageReport, Error> {
    if inputs_are_reports(inputs, options)? {
        let given = [
            ("--tenant", options.meter.tenant.is_some()),
            ("--tenant-map", options.tenant_map.is_some()),
            ("--devices", options.devices.is_some()),
            ("--opening", options.opening.is_some()),
        ];
        if let Some((option, _)) = given.into_iter().find(|(_, set)| *set) {
            return Err(Error::MeteringOption { option });
        }
        return merge_usage_reports(inputs);
    }
    let catalog = match &options.devices {
        Some(p) => Some(DeviceCatalog::from_path(p)?),
        None => None,
    };
    let tenant_map = match &options.tenant_map {
        Some(p) => Some(gpumeter_core::TenantMap::from_path(p)?),
        None => None,
    };
    if let (Some(map), Some(path), Some(tenant)) =
        (&tenant_map, &options.tenant_map, &options.meter.tenant)
    {
        look_alike_of_tenant(map, path, tenant)?;
    }
    let mut traces = Vec::new();
    let mut recordings = Vec::new();
    for input in inputs {
        let format = resolve(input, options)?;
        // A format whose Cargo feature is off: a typed error, before anything is metered.
        format_enabled(input, format)?;
        match format {
            f @ (Format::Gmr | Format::Cupti) => recordings.push((input, f)),
            Format::Kineto | Format::Nsys | Format::Auto | Format::Usage => traces.push(input),
        }
    }
    let mut meter = Meter::new(options.meter.clone());
    if let Some(map) = tenant_map {
        meter.set_tenant_map(map);
    }
    if let Some(path) = &options.opening {
        apply_opening(&mut meter, path)?;
    }
    #[cfg(feature = "cupti")]
    let hook_catalog = catalog.clone();
    let opts = ImportOptions {
        format: match options.format {
            Format::Kineto => gpumeter_import::Format::Kineto,
            Format::Nsys => gpumeter_import::Format::Nsys,
            Format::Auto | Format::Gmr | Format::Cupti | Format::Usage => {
                gpumeter_import::Format::Auto
            }
        },
        catalog,
    };
    #[cfg_attr(not(feature = "cupti"), allow(unused_mut))]
    let (_, mut batches) = gpumeter_import::announce_paths(&mut meter, &traces, &opts)?;
    #[cfg(feature = "cupti")]
    if meter_recordings(
        &mut meter,
        options,
        hook_catalog,
        &traces,
        recordings,
        &mut batches,
    )? {
        return Ok(meter.finish()?);
    }
    #[cfg(not(feature = "cupti"))]
    debug_assert!(recordings.is_empty(), "format_enabled refuses recordings");
    gpumeter_core::push_batches(&mut meter, batches);
    Ok(meter.finish()?)
}

/// The recordings and raw CUPTI buffers of [`meter_inputs`]. When they are the only inputs
/// they are streamed into `meter` and the answer is `true` (finish the report; `batches`, the
/// traces', is empty). Else they are read, validated and announced, their batches added to
/// `batches`, and the answer is `false`.
#[cfg(feature = "cupti")]
fn meter_recordings(
    meter: &mut Meter,
    options: &UsageOptions,
    hook_catalog: Option<DeviceCatalog>,
    traces: &[&PathBuf],
    recordings: Vec<(&PathBuf, Format)>,
    batches: &mut Vec<gpumeter_core::Batch>,
) -> Result<bool, Error> {
    let hook = |m: &mut Meter, slot: gpumeter_core::DeviceSlot| {
        if let Some(c) = &hook_catalog {
            c.apply_to(m, slot);
        }
    };
    let copts = crate::cupti::CuptiOptions {
        api: cupti_api(options)?,
        strings: None,
        on_device: Some(&hook),
    };
    // One raw buffer or recording alone: streamed, read in chunks twice (validate, hash and
    // join; then push in order), never held whole (issue 13; `meter_buffer_file`,
    // `meter_gmr_file`).
    match (traces, recordings.as_slice()) {
        ([], [(input, Format::Cupti)]) => {
            crate::cupti::meter_buffer_file(meter, input, &copts)?;
            return Ok(true);
        }
        ([], [(input, Format::Gmr)]) => {
            crate::cupti::meter_gmr_file(meter, input, &copts)?;
            return Ok(true);
        }
        ([], [_, _, ..]) => {
            // Several: streamed too, merged in time order exactly as `push_batches` merges
            // them (`meter_files`), unless a file must be read whole or the files may repeat
            // one another's work; then, and with traces, as below.
            let paths: Vec<(&Path, crate::cupti::CuptiFormat)> = recordings
                .iter()
                .map(|(input, format)| (input.as_path(), cupti_format(*format)))
                .collect();
            if crate::cupti::meter_files(meter, &paths, &copts)?.is_some() {
                return Ok(true);
            }
        }
        _ => {}
    }
    // Recordings and raw buffers: all read and validated, then announced; their batches are
    // pushed with the traces' as one stream in time order, so no input, of any format, makes
    // another's records late.
    let mut files = Vec::with_capacity(recordings.len());
    for (input, format) in recordings {
        let (name, bytes) = crate::cupti::read_source(input)?;
        files.push((name, bytes, cupti_format(format)));
    }
    let sources: Vec<crate::cupti::CuptiInput<'_>> = files
        .iter()
        .map(|(name, bytes, format)| crate::cupti::CuptiInput {
            name,
            bytes,
            format: *format,
        })
        .collect();
    let (_, recorded) = crate::cupti::announce_sources(meter, &sources, &copts)?;
    // The batches own what they push: the recordings' bytes can go first.
    drop(sources);
    drop(files);
    batches.extend(recorded);
    Ok(false)
}

/// The CUPTI crate's format of a raw buffer or a recording.
#[cfg(feature = "cupti")]
fn cupti_format(format: Format) -> crate::cupti::CuptiFormat {
    match format {
        Format::Gmr => crate::cupti::CuptiFormat::Gmr,
        Format::Cupti | Format::Auto | Format::Kineto | Format::Nsys | Format::Usage => {
            crate::cupti::CuptiFormat::Cupti
        }
    }
}
