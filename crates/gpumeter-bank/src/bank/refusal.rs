//! Why a finalization is refused (issue 30: a period is one unit, a source is billed once,
//! as-of balances never fail): each names what is in the way.

/// A finalization the bank refuses: nothing of it is applied. In [`crate::BankError::Finalize`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FinalizeRefusal {
    /// A committed finalization of a report that names no source (`sources` empty: written
    /// by hand, or merged from reports without sources): the bank could not tell whether its
    /// usage was billed before. A preview of it works.
    #[error(
        "the usage report names no source (its `sources` is empty), so the bank cannot tell \
         whether its usage was billed before: it can be previewed, not finalized; finalize \
         the report that `gpumeter usage` wrote from the traces or recordings"
    )]
    NoSources,
    /// Usage of a source on a device in a time range that an earlier finalization billed
    /// (any tenant, window size or period).
    #[error(
        "source {source_name} (sha256 {source_sha256}) on device {device_key} from {from} to \
         {to} was billed before, by the invoice of tenant `{tenant}` for {period_from} to \
         {period_to} (finalization {finalization}): a source's usage is billed once, whatever \
         the tenant, window size or period"
    )]
    SourceBilled {
        /// The source's file name in this report.
        source_name: String,
        /// The source's SHA-256.
        source_sha256: String,
        /// The device's key (`*` for a finalization recorded before devices were kept).
        device_key: String,
        /// Start of the overlap, RFC 3339 UTC.
        from: String,
        /// End of the overlap (exclusive), RFC 3339 UTC.
        to: String,
        /// The tenant of the invoice that billed it.
        tenant: String,
        /// Its period's start.
        period_from: String,
        /// Its period's end.
        period_to: String,
        /// Its finalization key.
        finalization: String,
    },
    /// The period overlaps a finalized period of the tenant without being equal to it: a
    /// tenant's periods never overlap unless equal.
    #[error(
        "tenant `{tenant}`: the period {from} to {to} overlaps its period {other_from} to \
         {other_to}, finalized before (finalization {finalization}); a tenant's periods never \
         overlap unless equal: finalize this usage for that period (a supplement), or for a \
         period beside it"
    )]
    PeriodOverlap {
        /// The tenant.
        tenant: String,
        /// The period being finalized, start.
        from: String,
        /// Its end.
        to: String,
        /// The finalized period in the way, start.
        other_from: String,
        /// Its end.
        other_to: String,
        /// The finalization of that period.
        finalization: String,
    },
    /// A supplement rated with another price book than the period's first invoice.
    #[error(
        "tenant `{tenant}`, period {from} to {to}: the period was first invoiced with price book \
         {first_version} (sha256 {first_sha256}); a supplement is rated on the period's \
         cumulative usage with that same book, not {version} (sha256 {sha256})"
    )]
    OtherBook {
        /// The tenant.
        tenant: String,
        /// The period's start.
        from: String,
        /// Its end.
        to: String,
        /// The book of the period's first invoice: version.
        first_version: String,
        /// Its SHA-256.
        first_sha256: String,
        /// The book given now: version.
        version: String,
        /// Its SHA-256.
        sha256: String,
    },
    /// A supplement whose report's window size differs from the usage finalized before for
    /// the period: the period's cumulative usage is rated in one window size.
    #[error(
        "tenant `{tenant}`, period {from} to {to}: the usage finalized for the period before is \
         in {first_seconds} s windows, this report's in {seconds} s windows; a supplement is \
         rated on the period's cumulative usage in one window size: meter it with --window \
         {first_seconds}s"
    )]
    OtherWindow {
        /// The tenant.
        tenant: String,
        /// The period's start.
        from: String,
        /// Its end.
        to: String,
        /// The window size of the usage finalized before, seconds.
        first_seconds: u64,
        /// This report's, seconds.
        seconds: u64,
    },
    /// A device key described otherwise (name or SM count) than in the usage finalized before
    /// for the period, so the cumulative usage cannot be priced as one.
    #[error(
        "tenant `{tenant}`, period {from} to {to}: device {device_key} is `{name}` with {sm_count} \
         SMs in this report but `{first_name}` with {first_sm_count} SMs in the usage finalized \
         for the period before"
    )]
    DeviceDiffers {
        /// The tenant.
        tenant: String,
        /// The period's start.
        from: String,
        /// Its end.
        to: String,
        /// The device's key.
        device_key: String,
        /// Its name here (`unknown` when none).
        name: String,
        /// Its SM count here (`unknown` when none).
        sm_count: String,
        /// Its name before.
        first_name: String,
        /// Its SM count before.
        first_sm_count: String,
    },
    /// A supplement of a period whose earlier finalization did not keep its usage rows (made
    /// by a gpumeter before issue 30): the cumulative usage cannot be rated.
    #[error(
        "tenant `{tenant}`, period {from} to {to}: finalization {finalization} of the period was \
         recorded without its usage rows (by an older gpumeter), so a supplement cannot be rated \
         on the period's cumulative usage; finalize this usage for another period"
    )]
    NoRowsKept {
        /// The tenant.
        tenant: String,
        /// The period's start.
        from: String,
        /// Its end.
        to: String,
        /// The earlier finalization.
        finalization: String,
    },
    /// A committed finalization of a period that has not ended (the caller's clock, `now`).
    #[error(
        "the period {from} to {to} has not ended (it is {now}): usage may still arrive, so it is \
         not finalized; finalize it after its end, or pass --allow-open-period (the library: \
         `FinalizeOptions::now = None`) to finalize it now"
    )]
    OpenPeriod {
        /// The period's start.
        from: String,
        /// Its end.
        to: String,
        /// The caller's current time.
        now: String,
    },
    /// The finalization would make an as-of balance negative: a supplement takes back part of
    /// its period's fragment after a later finalization (or a close) drew it.
    #[error(
        "tenant `{tenant}`, period {from} to {to}: this finalization would leave {account} at \
         {balance} as of {at}: a later finalization or a close drew the fragment it takes \
         back, and a fragment's balance is never negative at any instant"
    )]
    NegativeBalance {
        /// The tenant.
        tenant: String,
        /// The period's start.
        from: String,
        /// Its end.
        to: String,
        /// The account.
        account: String,
        /// The balance it would have.
        balance: String,
        /// The instant, RFC 3339 UTC.
        at: String,
    },
}
