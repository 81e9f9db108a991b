//! CUPTI activity buffers, `.gmr` recordings and live collection at one path: the items of
//! `gpumeter-cupti` (the decoder, record layouts, joins and the live buffer [`stream`]), of
//! `gpumeter-recording` (the [`gmr`] format and the sources that meter raw buffers and
//! recordings, in memory and from files) and, with the Cargo feature `collector`,
//! `gpumeter-collector` as `collector` (live collection in this process).

#[cfg(feature = "collector")]
pub use gpumeter_collector as collector;
#[cfg(feature = "collector")]
pub use gpumeter_collector::{Collector, CollectorConfig, CollectorError};
pub use gpumeter_cupti::*;
pub use gpumeter_recording::*;
