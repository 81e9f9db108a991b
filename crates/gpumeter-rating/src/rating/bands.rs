//! Time-of-use bands against the usage's windows: which band holds over a window, checked
//! to hold for the whole window, cached per (band, window start).

use std::collections::HashMap;

use gpumeter_core::time::rfc3339;
use gpumeter_core::{MeterKind, WindowSize};

use crate::book::{Band, PriceBook};
use crate::error::{BandEdge, RatingError};

/// Which bands hold in which windows, checked to hold for whole windows (band
/// edges fall on window edges), cached per (band, window start).
pub(super) struct BandCache<'a> {
    book: &'a PriceBook,
    pub(super) window: WindowSize,
    held: HashMap<(usize, u64), bool>,
}

/// Nanoseconds in one minute: band hours are whole local minutes.
const NS_PER_MINUTE: u64 = 60_000_000_000;

impl<'a> BandCache<'a> {
    pub(super) fn new(book: &'a PriceBook, window: WindowSize) -> Self {
        BandCache {
            book,
            window,
            held: HashMap::new(),
        }
    }

    /// Whether `band` holds at instant `t` (ns since the epoch): the local weekday at `t` is
    /// one of its days (or it has none) and the local time of day is in its end-exclusive
    /// hours, which may wrap midnight. `None` when the zone's offset at `t` is not a whole
    /// number of minutes (local-mean-time offsets before standard time), where band edges
    /// fall between minutes.
    fn holds_at(band: &Band, t: u64) -> Option<bool> {
        use chrono::{Datelike, Offset, TimeZone, Timelike};
        let utc = gpumeter_core::time::ns_to_utc(t);
        let offset = band.tz.offset_from_utc_datetime(&utc.naive_utc()).fix();
        if offset.local_minus_utc() % 60 != 0 {
            return None;
        }
        let local = utc.with_timezone(&band.tz);
        let minute = local.hour() * 60 + local.minute();
        Some(band.holds_at(local.weekday(), minute))
    }

    /// Whether band `b` holds over the window starting `ws`; an error when it begins or ends
    /// inside the window. The band can only change at a local minute boundary, which (with
    /// whole-minute offsets) is a UTC minute boundary: each one inside the window is checked.
    fn holds(&mut self, b: usize, ws: u64) -> Result<bool, RatingError> {
        if let Some(&h) = self.held.get(&(b, ws)) {
            return Ok(h);
        }
        let Some(band) = self.book.bands().get(b) else {
            return Ok(false);
        };
        let (line, column) = self
            .book
            .place_of(&format!("band[{b}]"), "hours")
            .unwrap_or((1, 1));
        let edge_err = |edge: u64| {
            RatingError::BandEdgeNotOnWindow(Box::new(BandEdge {
                book: self.book.name().to_string(),
                line,
                column,
                band: b,
                name: band.name.clone(),
                tz: band.tz.name().to_string(),
                edge: rfc3339(edge),
                window_start: rfc3339(ws),
                window_seconds: self.window.seconds(),
            }))
        };
        let at_start = Self::holds_at(band, ws).ok_or_else(|| edge_err(ws))?;
        let end = ws.saturating_add(self.window.ns());
        let mut m = (ws / NS_PER_MINUTE + 1).saturating_mul(NS_PER_MINUTE);
        while m < end {
            if Self::holds_at(band, m) != Some(at_start) {
                return Err(edge_err(m));
            }
            m = m.saturating_add(NS_PER_MINUTE);
        }
        self.held.insert((b, ws), at_start);
        Ok(at_start)
    }

    /// The band that prices `sku`'s `meter` in the window starting `ws`, `None` outside
    /// every band.
    pub(super) fn band_for(
        &mut self,
        sku: &str,
        meter: MeterKind,
        ws: u64,
    ) -> Result<Option<usize>, RatingError> {
        let mut found: Option<usize> = None;
        for b in 0..self.book.bands().len() {
            let Some(band) = self.book.bands().get(b) else {
                continue;
            };
            let applies = (band.meters.is_empty() || band.meters.contains(&meter))
                && (band.skus.is_empty() || band.skus.iter().any(|s| s == sku));
            if !applies || !self.holds(b, ws)? {
                continue;
            }
            if let Some(first) = found {
                return Err(RatingError::BandOverlap {
                    book: self.book.name().to_string(),
                    first,
                    second: b,
                    sku: sku.to_string(),
                    meter,
                    window_start: rfc3339(ws),
                });
            }
            found = Some(b);
        }
        Ok(found)
    }
}
