//! Hardware-measured meters from CUPTI PM sampling (`sm_active_ns`, `dram_bytes`): each sample
//! interval's measured quantity, split at window edges, apportioned to attribution keys by
//! their modelled `sm_ns` in that interval; [`IDLE`](crate::IDLE) when no kernel ran.

use super::*;

use crate::record::{DeviceSlot, PmSample};

impl Meter {
    /// Records one PM sample of a device ([`PmSample`]). Its `sm_active_ns` and `dram_bytes`
    /// are apportioned, per window the interval overlaps, to the attribution keys in
    /// proportion to their modelled `sm_ns` within the interval (largest remainder), or to
    /// [`IDLE`](crate::IDLE) when no kernel ran in it. A sample the sweep has already passed
    /// is loss (`late`); an overflow flag counts loss `pm_sample_overflow`. Unknown slots are
    /// ignored.
    pub fn push_pm_sample(&mut self, device: DeviceSlot, sample: &PmSample) {
        if let Some(d) = self.devices.get_mut(device.0 as usize) {
            d.pm_samples.push(*sample);
        }
    }
}
