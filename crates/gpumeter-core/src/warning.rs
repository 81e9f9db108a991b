//! Typed warnings of a usage report and of an invoice ([`Warning`]: a [`WarningCode`] and a message for people)
//! and typed reasons why a meter is not meterable on a device ([`NotMeterableCode`]), so that
//! a pipeline acts on a code instead of matching English text.
//!
//! In `gpumeter.usage/v1` JSON a warning is an object `{"code": "records_lost", "message":
//! "…"}` and a `not_meterable` entry carries its `code` beside `meter` and `reason`. Reports
//! written before codes existed (warnings as plain strings, `not_meterable` entries without a
//! `code`) are still read: such a warning has the code [`WarningCode::Uncoded`] and is written
//! back as the plain string it was, and such an entry has [`NotMeterableCode::Uncoded`] and is
//! written back without a `code`, so the report's `sha256` still verifies. A code this version
//! does not know (written by a newer one) is kept as read ([`WarningCode::Other`]).
//!
//! Each code enum has one registry, [`WarningCode::KNOWN`] / [`NotMeterableCode::KNOWN`], which
//! the usage JSON Schema's lists of codes are checked against.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Declares a code enum: its variants with their snake_case names, `Uncoded`, `Other`, the
/// registry `KNOWN`, `as_str`, `parse`, `Display` and serde as the name.
macro_rules! codes {
    (
        $(#[$meta:meta])*
        $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )*
            /// Read from a report written before codes existed: no code.
            Uncoded,
            /// A code this version does not know (written by a newer gpumeter), as read.
            Other(String),
        }

        impl $name {
            /// Every code this version writes, in declaration order: the registry the JSON
            /// Schema's list of codes is checked against.
            pub const KNOWN: &'static [$name] = &[ $( $name::$variant, )* ];

            /// The code's snake_case name in reports (`uncoded` for [`Self::Uncoded`], the
            /// text as read for [`Self::Other`]).
            pub fn as_str(&self) -> &str {
                match self {
                    $( $name::$variant => $text, )*
                    $name::Uncoded => "uncoded",
                    $name::Other(text) => text,
                }
            }

            /// The code named `text`; a name this version does not know is
            /// [`Self::Other`].
            pub fn parse(text: &str) -> Self {
                match text {
                    $( $text => $name::$variant, )*
                    "uncoded" => $name::Uncoded,
                    other => $name::Other(other.to_string()),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                Ok($name::parse(&text))
            }
        }
    };
}

codes! {
    /// What a usage report's warning is about (its `code` in JSON). Several sources may give
    /// one code; the message says which source, device and record.
    WarningCode {
        /// A source with the same SHA-256 (or the same content once decompressed) as one
        /// already metered, in this call or by an earlier report of the chain (`--opening`):
        /// metered once.
        DuplicateSource = "duplicate_source",
        /// A source repeats the GPU work of another (every field the GPU gives equal): metered
        /// once, from the other.
        RepeatedWork = "repeated_work",
        /// Two devices of different sources share records but nothing joins them: if they are
        /// one GPU, those records are billed twice.
        SharedRecords = "shared_records",
        /// Too many devices to compare for repeated work: some were not compared.
        RepeatCheckIncomplete = "repeat_check_incomplete",
        /// A device described twice with different facts (name, SM count).
        DeviceDescribedTwice = "device_described_twice",
        /// A meter is not meterable on a device (the device's `not_meterable` entry gives the
        /// typed reason).
        NotMeterable = "not_meterable",
        /// Records were lost (see the report's `loss`).
        RecordsLost = "records_lost",
        /// Records lost to a field that cannot be represented (`invalid_field`): the first
        /// record's file, record, field and value.
        InvalidField = "invalid_field",
        /// Records CUPTI dropped on a device the recording does not tell: booked as loss on
        /// the source.
        DroppedWithoutDevice = "dropped_without_device",
        /// A damaged `.gmr` frame (torn, corrupt, framing lost): its records lost.
        DamagedFrame = "damaged_frame",
        /// An activity buffer stops decoding: what follows is lost.
        UndecodableBuffer = "undecodable_buffer",
        /// A `.gmr` recording without its end frame.
        UnfinishedRecording = "unfinished_recording",
        /// Frames of unknown types were skipped.
        UnknownFrames = "unknown_frames",
        /// An instrumented run (instruction-level collection): the time meters overstate the
        /// work.
        InstrumentedRun = "instrumented_run",
        /// Instruction counts that came after their kernels: not metered.
        LateInstructionCounts = "late_instruction_counts",
        /// Instruction counts past 64 bits: their kernels have no count.
        InstructionCountOverflow = "instruction_count_overflow",
        /// CUPTI-profiler ranges whose counters matched no kernel (by device, name and launch
        /// order): their counts are not metered.
        UnmatchedProfilerRanges = "unmatched_profiler_ranges",
        /// Profiler ranges that record some but not all of a FLOP meter's counters (add, mul,
        /// fma): their kernels have no count of that meter.
        PartialOpCounters = "partial_op_counters",
        /// The CPU side launched kernels while nothing GPU-side was recorded: that GPU work is
        /// not metered.
        LaunchesWithoutGpuEvents = "launches_without_gpu_events",
        /// Energy samples of a device the recording does not describe: not metered.
        UnplacedEnergySamples = "unplaced_energy_samples",
        /// A device's energy counter went down: the energy between those samples is unknown.
        EnergyCounterReset = "energy_counter_reset",
        /// Stretches between energy samples that no recording observed: not billed.
        EnergyUnobserved = "energy_unobserved",
        /// Energy samples too far apart or rising too fast: the energy between them is not
        /// billed.
        EnergyGap = "energy_gap",
        /// CUPTI PM sampling's hardware buffer overflowed on a device: `sm_active_ns` and
        /// `dram_bytes` miss what the overwritten samples measured (loss
        /// `pm_sample_overflow`).
        PmSampleOverflow = "pm_sample_overflow",
        /// PM samples of a device the recording does not describe: not metered
        /// (`sm_active_ns`, `dram_bytes`).
        UnplacedPmSamples = "unplaced_pm_samples",
        /// Allocations made at an address still held: the earlier one was closed there.
        Reallocation = "reallocation",
        /// Allocations still held at the report's end (`open_allocations`).
        OpenAllocations = "open_allocations",
        /// Work an earlier report of the chain (`--opening`) metered: not metered again.
        BilledByOpeningReport = "billed_by_opening_report",
        /// CPU-side CUDA API events without a readable correlation id (Kineto): their kernels
        /// get no process id.
        UncorrelatedApiEvents = "uncorrelated_api_events",
        /// Kernel names that are not valid Unicode: metered without a name.
        InvalidNames = "invalid_names",
        /// Elements of `traceEvents` that are not JSON objects (Kineto).
        NotEventObjects = "not_event_objects",
        /// Strings or names longer than the limit: kept cut.
        StringsCut = "strings_cut",
        /// Events with a device but no category (Kineto): not known to be GPU work, not
        /// metered.
        UncategorizedDeviceEvents = "uncategorized_device_events",
        /// An Nsight Systems export without its session start: times taken as absolute.
        NoSessionStart = "no_session_start",
        /// A usage report given twice to a merge: counted once.
        DuplicateReport = "duplicate_report",
        /// A device with different device ids in the merged reports.
        DeviceIdsDiffer = "device_ids_differ",
        /// Windows with usage in more than one merged report: their sm_ns, warp_ns and
        /// gpu_busy_ns may exceed what one report of all the inputs would give.
        SharedWindows = "shared_windows",
        /// An `extensions` key gpumeter does not know how to merge.
        ExtensionNotMerged = "extension_not_merged",
        /// Node agent: a process held a GPU (NVML's list of compute processes) for longer than
        /// the grace period with no recording in the spool: its work is not metered. The
        /// message gives its pid, the device (NVML index and UUID), when it was first and last
        /// seen (RFC 3339, UTC) and the most GPU memory it used (bytes).
        UnmeteredProcess = "unmetered_process",
        /// Invoice: the rated usage report has loss; lost records count in no meter, so the
        /// invoice may bill less than was used.
        UsageLoss = "usage_loss",
        /// Invoice: usage rows of the usage report lie outside the invoice period and are on
        /// no invoice of this period.
        UsageOutsidePeriod = "usage_outside_period",
        /// Invoice: a carried-in billing-increment fragment is carried on whole: no rate of
        /// its SKU for its meter is in force in the period.
        FragmentNotRated = "fragment_not_rated",
        /// Invoice: usage on a device is not priced (listed under `unpriced`, not billed).
        UsageNotPriced = "usage_not_priced",
        /// Invoice: the rated usage report is incomplete (`"complete": false`: a snapshot, or
        /// a `.gmr` recording without its end frame): its last windows may still grow, so the
        /// invoice may bill less than will have been used.
        IncompleteUsage = "incomplete_usage",
        /// Invoice: the invoice minimum does not apply (no priced usage).
        MinimumNotApplied = "minimum_not_applied",
        /// Invoice document (`extensions.idle`): the usage of `idle` is listed apart and not
        /// invoiced (a report tenant, not a customer).
        IdleNotInvoiced = "idle_not_invoiced",
        /// Invoice (bank): usage of a source in a window was billed before and is not billed
        /// again.
        UsageBilledBefore = "usage_billed_before",
        /// Invoice (bank): a reservation covers only part of the period: not billed here.
        ReservationPartOfPeriod = "reservation_part_of_period",
        /// Invoice (bank): a reservation was billed already for an overlapping period: its fee
        /// is not billed again.
        ReservationBilledBefore = "reservation_billed_before",
        /// Invoice (bank): a reservation's fee is finer than the currency's minor unit: not
        /// billed (a fee is never rounded).
        ReservationFeeTooFine = "reservation_fee_too_fine",
        /// Invoice (bank): a reservation's fee is not positive (made before `reserve` refused
        /// one): unpaid capacity never converts, so it bills and converts nothing.
        ReservationUnpaid = "reservation_unpaid",
        /// Invoice (bank): a reservation's fee is billed per invoice period, and the period is
        /// the usage's span, not one given with `--from`/`--to`.
        ReservationDefaultPeriod = "reservation_default_period",
        /// Invoice (bank): the period is the usage's span, not one given with `--from`/`--to`,
        /// and the invoice bills per period (a minimum, a flat fee, tiers or packages): a later
        /// report of other days is another period, which bills them again.
        PeriodFromUsage = "period_from_usage",
        /// Invoice (bank): a grant with credits left is not in force at the period's end and
        /// pays nothing on the invoice.
        GrantNotInForce = "grant_not_in_force",
        /// Invoice (bank): credits converted from a reservation are taken back from a grant.
        CreditsTakenBack = "credits_taken_back",
        /// Invoice (bank): credits converted from a reservation cannot be taken back (used or
        /// expired).
        CreditsNotTakenBack = "credits_not_taken_back",
        /// Price-book check (`prices check --devices`): a SKU names a device the catalog does
        /// not have.
        SkuDeviceUnknown = "sku_device_unknown",
    }
}

impl WarningCode {
    /// The codes only an invoice (`gpumeter.invoice/v1`) or a price-book check gives, in
    /// [`WarningCode::KNOWN`]'s order: a usage report never carries them. An invoice carries
    /// these and, for the usage report's own warnings it copies (message prefixed
    /// `usage report: `), the usage codes.
    pub const INVOICE: &'static [WarningCode] = &[
        WarningCode::UsageLoss,
        WarningCode::UsageOutsidePeriod,
        WarningCode::FragmentNotRated,
        WarningCode::UsageNotPriced,
        WarningCode::IncompleteUsage,
        WarningCode::MinimumNotApplied,
        WarningCode::IdleNotInvoiced,
        WarningCode::UsageBilledBefore,
        WarningCode::ReservationPartOfPeriod,
        WarningCode::ReservationBilledBefore,
        WarningCode::ReservationFeeTooFine,
        WarningCode::ReservationUnpaid,
        WarningCode::ReservationDefaultPeriod,
        WarningCode::PeriodFromUsage,
        WarningCode::GrantNotInForce,
        WarningCode::CreditsTakenBack,
        WarningCode::CreditsNotTakenBack,
    ];

    /// The codes a usage report (`gpumeter.usage/v1`) gives: [`WarningCode::KNOWN`] without
    /// [`WarningCode::INVOICE`] and the price-book check's [`WarningCode::SkuDeviceUnknown`],
    /// in order.
    pub fn usage() -> impl Iterator<Item = &'static WarningCode> {
        WarningCode::KNOWN
            .iter()
            .filter(|c| !WarningCode::INVOICE.contains(c) && **c != WarningCode::SkuDeviceUnknown)
    }
}

codes! {
    /// Why a meter is not meterable on a device (the `code` of a `not_meterable` entry).
    NotMeterableCode {
        /// The source gives no SM count for the device (no device table): `sm_ns`, and
        /// `warp_ns` which builds on it, are not meterable.
        SmCountUnknown = "sm_count_unknown",
        /// Kernels without a grid (launch configuration): the SMs they held are unknown.
        KernelsWithoutGrid = "kernels_without_grid",
        /// The device's compute capability is unknown: the occupancy calculator cannot run.
        ComputeCapabilityUnknown = "compute_capability_unknown",
        /// A compute capability the occupancy calculator does not know.
        ComputeCapabilityUnsupported = "compute_capability_unsupported",
        /// Kernels whose launch configuration the occupancy calculator does not accept.
        KernelsWithoutOccupancy = "kernels_without_occupancy",
        /// Some kernels of the device have no instruction count.
        KernelsWithoutInstructions = "kernels_without_instructions",
        /// Some kernels of the device have no count of the operation meter (`flops_fp64`,
        /// `flops_fp32`, `flops_fp16`, `tensor_ops`).
        KernelsWithoutOpCounts = "kernels_without_op_counts",
        /// A meter apportioned by `sm_ns` (`energy_mj`, `sm_active_ns`, `dram_bytes`), which is
        /// not meterable on the device.
        SmNsNotMeterable = "sm_ns_not_meterable",
        /// The device's PM samples do not carry the meter's counters (`sm_active_ns`: active
        /// and elapsed SM cycles; `dram_bytes`: DRAM bytes read and written).
        NotSampled = "not_sampled",
    }
}

impl NotMeterableCode {
    /// Whether this is [`NotMeterableCode::Uncoded`] (an entry of a report written before
    /// codes; written back without a `code`).
    pub fn is_uncoded(&self) -> bool {
        *self == NotMeterableCode::Uncoded
    }
}

impl Default for NotMeterableCode {
    /// [`NotMeterableCode::Uncoded`]: what an entry without a `code` reads as.
    fn default() -> Self {
        NotMeterableCode::Uncoded
    }
}

/// A warning of a usage report: a code to act on and a message for people (which names the
/// source, device or record). A warning reads as its message (`Deref<Target = str>`,
/// `Display`), so text tools keep working.
///
/// ```
/// use gpumeter_core::{Warning, WarningCode};
/// let w = Warning::new(WarningCode::RecordsLost, "3 records lost on device 0 (x#0); see `loss`");
/// assert_eq!(w.code(), &WarningCode::RecordsLost);
/// assert_eq!(
///     serde_json::to_string(&w)?,
///     r#"{"code":"records_lost","message":"3 records lost on device 0 (x#0); see `loss`"}"#
/// );
/// // A report written before codes: a plain string, read and written back as it was.
/// let old: Warning = serde_json::from_str(r#""something happened""#)?;
/// assert_eq!(old.code(), &WarningCode::Uncoded);
/// assert_eq!(serde_json::to_string(&old)?, r#""something happened""#);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Warning {
    code: WarningCode,
    message: String,
}

impl Warning {
    /// A warning with `code` and `message`.
    pub fn new(code: WarningCode, message: impl Into<String>) -> Self {
        Warning {
            code,
            message: message.into(),
        }
    }

    /// The code.
    pub fn code(&self) -> &WarningCode {
        &self.code
    }

    /// The message for people.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same warning with `prefix` before its message (`"{prefix}{message}"`), as a merge
    /// names the report a warning came from.
    pub fn prefixed(&self, prefix: &str) -> Warning {
        Warning {
            code: self.code.clone(),
            message: format!("{prefix}{}", self.message),
        }
    }
}

impl std::ops::Deref for Warning {
    type Target = str;
    fn deref(&self) -> &str {
        &self.message
    }
}

impl PartialEq<str> for Warning {
    /// Whether the message is `other` (whatever the code).
    fn eq(&self, other: &str) -> bool {
        self.message == other
    }
}

impl PartialEq<&str> for Warning {
    /// Whether the message is `other` (whatever the code).
    fn eq(&self, other: &&str) -> bool {
        self.message == *other
    }
}

impl AsRef<str> for Warning {
    fn as_ref(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for Warning {
    /// The message.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The object form of a warning in JSON, written.
#[derive(Serialize)]
struct Coded<'a> {
    code: &'a WarningCode,
    message: &'a str,
}

/// The object form of a warning in JSON, read: exactly `code` and `message` (another key
/// would be lost when the report is written back).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CodedOwned {
    code: WarningCode,
    message: String,
}

impl Serialize for Warning {
    /// `{"code": …, "message": …}`; a [`WarningCode::Uncoded`] warning as its message alone.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.code == WarningCode::Uncoded {
            return s.serialize_str(&self.message);
        }
        Coded {
            code: &self.code,
            message: &self.message,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Warning {
    /// An object `{"code", "message"}`, or a plain string (a report written before codes:
    /// [`WarningCode::Uncoded`]).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Text(String),
            Coded(CodedOwned),
        }
        Ok(match Form::deserialize(d)? {
            Form::Text(message) => Warning {
                code: WarningCode::Uncoded,
                message,
            },
            Form::Coded(CodedOwned { code, message }) => Warning { code, message },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_by_name_and_are_distinct() {
        let mut seen = std::collections::BTreeSet::new();
        for c in WarningCode::KNOWN {
            assert_eq!(&WarningCode::parse(c.as_str()), c);
            assert!(seen.insert(c.as_str()), "{c} twice");
        }
        for c in NotMeterableCode::KNOWN {
            assert_eq!(&NotMeterableCode::parse(c.as_str()), c);
        }
        assert_eq!(
            WarningCode::parse("from_the_future"),
            WarningCode::Other("from_the_future".into())
        );
    }

    #[test]
    fn warnings_read_both_forms_and_write_them_back_as_read() {
        for text in [
            r#""a plain warning""#,
            r#"{"code":"records_lost","message":"m"}"#,
            r#"{"code":"from_the_future","message":"m"}"#,
        ] {
            let w: Warning = serde_json::from_str(text).expect("warning");
            assert_eq!(serde_json::to_string(&w).expect("json"), text);
        }
        assert!(serde_json::from_str::<Warning>(r#"{"code":"x"}"#).is_err());
        assert!(serde_json::from_str::<Warning>(r#"{"code":"x","message":"m","more":1}"#).is_err());
        assert!(serde_json::from_str::<Warning>("3").is_err());
    }
}
