//! Where a collector's buffers go: the [`CompletionSink`] trait and the `.gmr` file sink.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use gpumeter_recording::gmr::{
    AttributionEvent, DroppedRecords, EnergySample, GmrError, GmrHeader, GmrWriter, StringTable,
    FRAME_OVERHEAD,
};

/// Receives what a [`Collector`](super::Collector) collects, in the order it happens.
///
/// Calls are serialized (never two at once) but may come from any thread: CUPTI's own worker
/// thread, the thread that stops the collector, or an application thread that flushes. A sink
/// must not call back into the collector. Errors are counted and reported in the
/// [`StopReport`](super::StopReport); they do not stop collection.
pub trait CompletionSink: Send {
    /// Called once before anything else, with the header known at the start (the producer's
    /// CUPTI API version, host, clock pair, process id, producer; devices possibly empty).
    ///
    /// # Errors
    /// When the sink cannot start; [`Collector::start`](super::Collector::start) then fails.
    fn begin(&mut self, header: &GmrHeader) -> Result<(), GmrError>;

    /// One completed activity buffer: `bytes` are its `validSize` bytes, laid out by the
    /// header's API version; `strings` holds the names its records point to that are new or
    /// changed since the previous call (empty when none), copied while CUPTI's buffer was
    /// live. A `.gmr` writes the string table before the buffer.
    ///
    /// # Errors
    /// Any; the buffer's records are then missing from the recording and counted as failed.
    fn buffer(&mut self, strings: &StringTable, bytes: &[u8]) -> Result<(), GmrError>;

    /// Records CUPTI dropped since the previous count (a delta, never a running total).
    ///
    /// # Errors
    /// Any; the count still appears in the stop report.
    fn dropped(&mut self, dropped: &DroppedRecords) -> Result<(), GmrError>;

    /// An attribution event (external correlation push or pop, tenant hint).
    ///
    /// # Errors
    /// Any.
    fn attribution(&mut self, event: &AttributionEvent) -> Result<(), GmrError>;

    /// A reading of a GPU's cumulative energy counter, under its CUDA ordinal and on CUPTI's
    /// clock ([`EnergySample`]; [`CollectorConfig::energy`](super::CollectorConfig::energy)).
    /// Comes from the collector's energy-sampler thread while collecting, and from the
    /// stopping thread before [`CompletionSink::finish`]. The default ignores it.
    ///
    /// # Errors
    /// Any; reported in the stop report.
    fn energy(&mut self, sample: &EnergySample) -> Result<(), GmrError> {
        let _ = sample;
        Ok(())
    }

    /// The instruction counts of one kernel-launch call (instrumented mode,
    /// [`CollectorConfig::instructions`](super::CollectorConfig::instructions)), from the
    /// launching thread right after the launch returned. The default ignores them.
    ///
    /// # Errors
    /// Any; reported in the stop report.
    fn instructions(
        &mut self,
        counts: &gpumeter_recording::gmr::InstructionCounts,
    ) -> Result<(), GmrError> {
        let _ = counts;
        Ok(())
    }

    /// PM samples of one device ([`gpumeter_recording::gmr::PmSamples`];
    /// [`CollectorConfig::pm_sampling`](super::CollectorConfig::pm_sampling)), from the
    /// collector's decode thread while collecting, from an application thread whose context is
    /// being destroyed, and from the stopping thread before [`CompletionSink::finish`]. The
    /// default ignores them.
    ///
    /// # Errors
    /// Any; the samples are then counted as unwritten in the stop report.
    fn pm_samples(&mut self, samples: &gpumeter_recording::gmr::PmSamples) -> Result<(), GmrError> {
        let _ = samples;
        Ok(())
    }

    /// The operation counters of one context's kernel launches
    /// ([`gpumeter_recording::gmr::OpCounters`]; [`CollectorConfig::flops`](super::CollectorConfig::flops)),
    /// from the launching application thread after a decode of the range profiler, from a
    /// thread whose context is being destroyed, and from the stopping thread before
    /// [`CompletionSink::finish`]. The default ignores them.
    ///
    /// # Errors
    /// Any; the launches are then counted as unwritten in the stop report.
    fn op_counts(
        &mut self,
        counters: &gpumeter_recording::gmr::OpCounters,
    ) -> Result<(), GmrError> {
        let _ = counters;
        Ok(())
    }

    /// Called once at stop, after the last buffer, with the final header (the start header
    /// plus the device inventory gathered while collecting).
    ///
    /// # Errors
    /// Any; reported in the stop report.
    fn finish(&mut self, header: &GmrHeader) -> Result<(), GmrError>;

    /// Called instead of [`CompletionSink::finish`] when the collector fails to start after
    /// [`CompletionSink::begin`] succeeded. The default does nothing.
    fn abort(&mut self) {}
}

/// A [`CompletionSink`] that streams a `.gmr` to a file as buffers complete.
///
/// The header is written at [`begin`](CompletionSink::begin), then one frame per call (a
/// string table before the buffer that needs it), each with a single `write` so a producer
/// killed mid-run leaves a file whose complete frames are readable (a torn last frame at
/// worst, [`gpumeter_recording::gmr`]). At [`finish`](CompletionSink::finish) the end frame is written and,
/// when the final header differs from the first (devices learned while collecting), the file
/// is rewritten with the final header through a temporary file in the same directory and an
/// atomic rename; if that fails the file keeps its first header and is still valid. After a
/// write error the sink writes nothing more, so a partial frame can only be the last.
#[derive(Debug)]
pub struct GmrFileSink {
    path: PathBuf,
    file: Option<File>,
    writer: Option<GmrWriter<File>>,
    /// Byte offset where the frames after the header start.
    header_end: u64,
    first_header: Option<GmrHeader>,
    failed: Option<String>,
}

impl GmrFileSink {
    /// A sink that creates (or truncates) `path` when collection begins.
    pub fn create(path: impl Into<PathBuf>) -> GmrFileSink {
        GmrFileSink {
            path: path.into(),
            file: None,
            writer: None,
            header_end: 0,
            first_header: None,
            failed: None,
        }
    }

    /// A sink writing to `file`, already open for writing and empty, whose path is `path`
    /// (used for the final rename and in messages). For callers that create the file
    /// themselves, e.g. with `create_new` to avoid clobbering another process's recording.
    pub fn from_file(file: File, path: impl Into<PathBuf>) -> GmrFileSink {
        GmrFileSink {
            file: Some(file),
            ..GmrFileSink::create(path)
        }
    }

    /// The recording's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn writer(&mut self) -> Result<&mut GmrWriter<File>, GmrError> {
        if let Some(f) = &self.failed {
            return Err(GmrError::Write(format!(
                "{}: an earlier write failed ({f}); nothing more is written",
                self.path.display()
            )));
        }
        self.writer.as_mut().ok_or_else(|| {
            GmrError::Write(format!(
                "{}: the recording is not open",
                self.path.display()
            ))
        })
    }

    /// Remembers the first failure: a partial frame may have been written.
    fn check<T>(&mut self, r: Result<T, GmrError>) -> Result<T, GmrError> {
        if let Err(e) = &r {
            if self.failed.is_none() {
                self.failed = Some(e.to_string());
            }
        }
        r
    }

    /// Rewrites the finished file with `header` in place of the first one.
    fn reheader(&self, header: &GmrHeader) -> Result<(), GmrError> {
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "recording.gmr".to_string());
        let tmp = self
            .path
            .with_file_name(format!(".{name}.{}.tmp", std::process::id()));
        let result = (|| -> Result<(), GmrError> {
            // The preamble and header frame, exactly as `GmrWriter` writes them: a writer
            // finished at once adds only the end frame (`FRAME_OVERHEAD` bytes, no payload).
            let mut head = GmrWriter::new(Vec::new(), header)?.finish()?;
            head.truncate(head.len().saturating_sub(FRAME_OVERHEAD));
            let mut out = File::create(&tmp)?;
            out.write_all(&head)?;
            let mut old = File::open(&self.path)?;
            old.seek(SeekFrom::Start(self.header_end))?;
            std::io::copy(&mut old, &mut out)?;
            out.sync_all()?;
            std::fs::rename(&tmp, &self.path)?;
            Ok(())
        })();
        if result.is_err() {
            // Best effort: the original file is intact; only the temporary one may remain.
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }
}

impl CompletionSink for GmrFileSink {
    fn begin(&mut self, header: &GmrHeader) -> Result<(), GmrError> {
        let file = match self.file.take() {
            Some(f) => f,
            None => File::create(&self.path)?,
        };
        // A second handle shares the file offset: it tells where the header ends.
        let mut probe = file.try_clone()?;
        let w = GmrWriter::new(file, header)?;
        self.header_end = probe.stream_position()?;
        self.writer = Some(w);
        self.first_header = Some(header.clone());
        Ok(())
    }

    fn buffer(&mut self, strings: &StringTable, bytes: &[u8]) -> Result<(), GmrError> {
        let w = self.writer()?;
        let mut r = Ok(());
        if !strings.is_empty() {
            r = w.write_strings(strings);
        }
        if r.is_ok() {
            r = w.write_buffer(bytes);
        }
        self.check(r)
    }

    fn dropped(&mut self, dropped: &DroppedRecords) -> Result<(), GmrError> {
        let r = self.writer()?.write_dropped(dropped);
        self.check(r)
    }

    fn attribution(&mut self, event: &AttributionEvent) -> Result<(), GmrError> {
        let r = self.writer()?.write_attribution(event);
        self.check(r)
    }

    fn energy(&mut self, sample: &EnergySample) -> Result<(), GmrError> {
        let r = self.writer()?.write_energy(sample);
        self.check(r)
    }

    fn instructions(
        &mut self,
        counts: &gpumeter_recording::gmr::InstructionCounts,
    ) -> Result<(), GmrError> {
        let r = self.writer()?.write_instructions(counts);
        self.check(r)
    }

    fn pm_samples(&mut self, samples: &gpumeter_recording::gmr::PmSamples) -> Result<(), GmrError> {
        let r = self.writer()?.write_pm_samples(samples);
        self.check(r)
    }

    fn op_counts(
        &mut self,
        counters: &gpumeter_recording::gmr::OpCounters,
    ) -> Result<(), GmrError> {
        let r = self.writer()?.write_op_counts(counters);
        self.check(r)
    }

    fn finish(&mut self, header: &GmrHeader) -> Result<(), GmrError> {
        self.writer()?;
        let Some(w) = self.writer.take() else {
            return Err(GmrError::Write("the recording is not open".to_string()));
        };
        let r = w
            .finish()
            .and_then(|f| f.sync_all().map_err(GmrError::from));
        self.check(r)?;
        if self.first_header.as_ref() != Some(header) {
            self.reheader(header)?;
        }
        Ok(())
    }

    fn abort(&mut self) {
        self.writer = None;
        // Best effort: a header-only file would read as an empty recording.
        let _ = std::fs::remove_file(&self.path);
    }
}
