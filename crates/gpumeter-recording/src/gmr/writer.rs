//! Writing a `.gmr`: the preamble and header, then checksummed frames, then the end frame.

use super::*;

/// Writes a `.gmr`: the preamble and header at construction, then frames, then
/// [`GmrWriter::finish`].
///
/// ```
/// use gpumeter_recording::gmr::{read_gmr, GmrHeader, GmrWriter};
/// let header = GmrHeader { cupti_api_version: 26, ..GmrHeader::default() };
/// let mut w = GmrWriter::new(Vec::<u8>::new(), &header)?;
/// w.write_buffer(&[0u8; 0])?;
/// let bytes = w.finish()?;
/// let file = read_gmr(&bytes)?;
/// assert!(file.finished && file.torn.is_none());
/// assert_eq!(file.header.cupti_api_version, 26);
/// # Ok::<(), gpumeter_recording::gmr::GmrError>(())
/// ```
///
/// Each `write_*` call writes one whole frame with one `write_all`; wrap a file in a
/// `BufWriter` only if losing the buffered frames on a crash is acceptable.
#[derive(Debug)]
pub struct GmrWriter<W: Write> {
    out: Option<W>,
}

impl<W: Write> GmrWriter<W> {
    /// Writes the preamble and the header frame.
    ///
    /// # Errors
    /// [`GmrError::Io`] when writing fails; [`GmrError::Write`] when the header cannot be
    /// serialized.
    pub fn new(mut out: W, header: &GmrHeader) -> Result<Self, GmrError> {
        let mut pre = Vec::with_capacity(GMR_PREAMBLE_LEN);
        pre.extend_from_slice(&GMR_MAGIC);
        pre.extend_from_slice(&GMR_FORMAT_VERSION.to_le_bytes());
        out.write_all(&pre)?;
        let json = serde_json::to_vec(header).map_err(|e| GmrError::Write(e.to_string()))?;
        let mut w = GmrWriter { out: Some(out) };
        w.frame(T_HEADER, &json)?;
        Ok(w)
    }

    fn frame(&mut self, frame_type: u32, payload: &[u8]) -> Result<(), GmrError> {
        let Some(out) = self.out.as_mut() else {
            return Err(GmrError::Write("the writer is finished".to_string()));
        };
        let mut f = Vec::with_capacity(payload.len() + FRAME_OVERHEAD);
        f.extend_from_slice(&frame_type.to_le_bytes());
        f.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        f.extend_from_slice(payload);
        f.extend_from_slice(&frame_crc(frame_type, payload).to_le_bytes());
        out.write_all(&f)?;
        Ok(())
    }

    /// Writes a raw activity buffer (the `validSize` bytes CUPTI handed over).
    ///
    /// # Errors
    /// [`GmrError::Io`].
    pub fn write_buffer(&mut self, bytes: &[u8]) -> Result<(), GmrError> {
        self.frame(T_BUFFER, bytes)
    }

    /// Writes a string table.
    ///
    /// # Errors
    /// As [`GmrWriter::write_buffer`]; [`GmrError::Write`] for a string over 4 GiB.
    pub fn write_strings(&mut self, table: &StringTable) -> Result<(), GmrError> {
        let mut p = Vec::new();
        for (ptr, text) in &table.entries {
            let len = u32::try_from(text.len())
                .map_err(|_| GmrError::Write(format!("string for {ptr:#x} is over 4 GiB")))?;
            p.extend_from_slice(&ptr.to_le_bytes());
            p.extend_from_slice(&len.to_le_bytes());
            p.extend_from_slice(text.as_bytes());
        }
        self.frame(T_STRINGS, &p)
    }

    /// Writes a dropped-records delta.
    ///
    /// # Errors
    /// As [`GmrWriter::write_buffer`].
    pub fn write_dropped(&mut self, d: &DroppedRecords) -> Result<(), GmrError> {
        let mut p = Vec::with_capacity(24);
        p.extend_from_slice(&d.device_id.unwrap_or(UNKNOWN_DEVICE).to_le_bytes());
        p.extend_from_slice(&d.context_id.to_le_bytes());
        p.extend_from_slice(&d.stream_id.to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&d.count.to_le_bytes());
        self.frame(T_DROPPED, &p)
    }

    /// Writes an attribution event.
    ///
    /// # Errors
    /// As [`GmrWriter::write_buffer`]; [`GmrError::Write`] for a label over 4 GiB.
    pub fn write_attribution(&mut self, e: &AttributionEvent) -> Result<(), GmrError> {
        let len = u32::try_from(e.label.len())
            .map_err(|_| GmrError::Write("attribution label is over 4 GiB".to_string()))?;
        let mut p = Vec::with_capacity(28 + e.label.len());
        p.extend_from_slice(&e.kind.raw().to_le_bytes());
        p.extend_from_slice(&e.process_id.to_le_bytes());
        p.extend_from_slice(&e.external_id.to_le_bytes());
        p.extend_from_slice(&e.timestamp_ns.to_le_bytes());
        p.extend_from_slice(&len.to_le_bytes());
        p.extend_from_slice(e.label.as_bytes());
        self.frame(T_ATTRIBUTION, &p)
    }

    /// Writes an energy sample.
    ///
    /// # Errors
    /// As [`GmrWriter::write_buffer`].
    pub fn write_energy(&mut self, s: &EnergySample) -> Result<(), GmrError> {
        let mut p = Vec::with_capacity(24);
        p.extend_from_slice(&s.device_id.to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&s.timestamp_ns.to_le_bytes());
        p.extend_from_slice(&s.energy_mj.to_le_bytes());
        self.frame(T_ENERGY, &p)
    }

    /// Writes the instruction counts of one launch.
    ///
    /// # Errors
    /// As [`GmrWriter::write_buffer`]; [`GmrError::Write`] for more than `u32::MAX` functions
    /// or a name over 4 GiB.
    pub fn write_instructions(&mut self, c: &InstructionCounts) -> Result<(), GmrError> {
        let count = u32::try_from(c.functions.len())
            .map_err(|_| GmrError::Write("more than u32::MAX functions".to_string()))?;
        let mut p =
            Vec::with_capacity(16 + c.functions.iter().map(|f| 12 + f.name.len()).sum::<usize>());
        p.extend_from_slice(&c.correlation_id.to_le_bytes());
        p.extend_from_slice(&c.device_id.to_le_bytes());
        p.extend_from_slice(&c.context_id.to_le_bytes());
        p.extend_from_slice(&count.to_le_bytes());
        for f in &c.functions {
            let len = u32::try_from(f.name.len())
                .map_err(|_| GmrError::Write("function name is over 4 GiB".to_string()))?;
            p.extend_from_slice(&f.warp_instructions.to_le_bytes());
            p.extend_from_slice(&len.to_le_bytes());
            p.extend_from_slice(f.name.as_bytes());
        }
        self.frame(T_INSTRUCTIONS, &p)
    }

    /// Writes a batch of PM samples of one device (frame type 9).
    ///
    /// # Errors
    /// As [`GmrWriter::write_buffer`]; [`GmrError::Write`] for more than `u32::MAX` samples.
    pub fn write_pm_samples(&mut self, s: &PmSamples) -> Result<(), GmrError> {
        let count = u32::try_from(s.samples.len())
            .map_err(|_| GmrError::Write("more than u32::MAX PM samples in a frame".to_string()))?;
        let mut p = Vec::with_capacity(8 + PM_SAMPLE_LEN * s.samples.len());
        p.extend_from_slice(&s.device_id.to_le_bytes());
        p.extend_from_slice(&count.to_le_bytes());
        for x in &s.samples {
            let mut flags = 0u32;
            if x.overflow {
                flags |= PM_FLAG_OVERFLOW;
            }
            let counters = [
                (x.sm_active_cycles, PM_FLAG_SM_ACTIVE),
                (x.sm_elapsed_cycles, PM_FLAG_SM_ELAPSED),
                (x.dram_read_bytes, PM_FLAG_DRAM_READ),
                (x.dram_write_bytes, PM_FLAG_DRAM_WRITE),
            ];
            for (v, bit) in counters {
                if v.is_some() {
                    flags |= bit;
                }
            }
            p.extend_from_slice(&flags.to_le_bytes());
            p.extend_from_slice(&0u32.to_le_bytes());
            p.extend_from_slice(&x.start_ns.to_le_bytes());
            p.extend_from_slice(&x.end_ns.to_le_bytes());
            for (v, _) in counters {
                p.extend_from_slice(&v.unwrap_or(0).to_le_bytes());
            }
        }
        self.frame(T_PM_SAMPLES, &p)
    }

    /// Writes the operation counters of one context's kernel launches (frame type 10).
    ///
    /// # Errors
    /// As [`GmrWriter::write_buffer`]; [`GmrError::Write`] for more than `u32::MAX` kernels or
    /// metrics, or a metric name over 4 GiB. The writer does not check what the reader
    /// refuses (a zero or repeated correlation id, an empty or repeated metric name): such a
    /// frame reads as malformed.
    pub fn write_op_counts(&mut self, c: &OpCounters) -> Result<(), GmrError> {
        let too_many = |what: &str| GmrError::Write(format!("more than u32::MAX {what}"));
        let count = u32::try_from(c.kernels.len()).map_err(|_| too_many("kernels"))?;
        let mut p = Vec::with_capacity(16);
        p.extend_from_slice(&c.device_id.to_le_bytes());
        p.extend_from_slice(&c.context_id.to_le_bytes());
        p.extend_from_slice(&c.passes.to_le_bytes());
        p.extend_from_slice(&count.to_le_bytes());
        for k in &c.kernels {
            let metrics = u32::try_from(k.counters.len()).map_err(|_| too_many("metrics"))?;
            p.extend_from_slice(&k.correlation_id.to_le_bytes());
            p.extend_from_slice(&metrics.to_le_bytes());
            for m in &k.counters {
                let len = u32::try_from(m.metric.len())
                    .map_err(|_| GmrError::Write("metric name is over 4 GiB".to_string()))?;
                p.extend_from_slice(&m.value.to_le_bytes());
                p.extend_from_slice(&len.to_le_bytes());
                p.extend_from_slice(m.metric.as_bytes());
            }
        }
        self.frame(T_OP_COUNTS, &p)
    }

    /// Writes any [`Frame`].
    ///
    /// # Errors
    /// As the specific `write_*` method.
    pub fn write_frame(&mut self, frame: &Frame) -> Result<(), GmrError> {
        match frame {
            Frame::ActivityBuffer(b) => self.write_buffer(b),
            Frame::StringTable(t) => self.write_strings(t),
            Frame::Dropped(d) => self.write_dropped(d),
            Frame::Attribution(a) => self.write_attribution(a),
            Frame::Energy(e) => self.write_energy(e),
            Frame::Instructions(c) => self.write_instructions(c),
            Frame::PmSamples(s) => self.write_pm_samples(s),
            Frame::OpCounts(c) => self.write_op_counts(c),
        }
    }

    /// Writes the end frame, flushes, and returns the output.
    ///
    /// # Errors
    /// [`GmrError::Io`].
    pub fn finish(mut self) -> Result<W, GmrError> {
        self.frame(T_END, &[])?;
        let Some(mut out) = self.out.take() else {
            return Err(GmrError::Write("the writer is finished".to_string()));
        };
        out.flush()?;
        Ok(out)
    }
}
