//! Synthetic `.gmr` recordings for the agent's tests and bench: a `gpumeter-synth` workload
//! written frame by frame as the injection library writes it (the header, a string table, one
//! frame per activity buffer, the end frame), with where each frame ends, so that a test can
//! put any prefix of it in a spool as a growing recording.
//!
//! Include it with `#[path = "support/recording.rs"] mod recording;`.
#![allow(dead_code)]

use gpumeter_recording::gmr::{read_gmr, GmrWriter, FRAME_OVERHEAD};
use gpumeter_synth::{Generator, SynthConfig};

/// A synthetic recording.
pub struct Synthetic {
    /// The whole file, end frame included.
    pub bytes: Vec<u8>,
    /// The end offset of each frame after the header: the string table, each activity
    /// buffer, then the end frame (the file's length).
    pub ends: Vec<usize>,
}

impl Synthetic {
    /// The workload of `cfg` recorded by process `pid`; `clock` (ns), when given, is the
    /// header's CUPTI clock reading (recordings of one process id with other clocks are other
    /// recordings).
    pub fn new(cfg: &SynthConfig, pid: u32, clock: Option<u64>) -> Synthetic {
        Synthetic::labelled(cfg, pid, clock, &[])
    }

    /// [`Synthetic::new`], with `labels` (key, value) in the header.
    pub fn labelled(
        cfg: &SynthConfig,
        pid: u32,
        clock: Option<u64>,
        labels: &[(&str, &str)],
    ) -> Synthetic {
        let mut g = Generator::new(cfg).expect("the workload generates");
        let mut header = g.gmr_header();
        header.process_id = pid;
        for (k, v) in labels {
            header.labels.insert(k.to_string(), v.to_string());
        }
        if let Some(c) = clock {
            header.clock.cupti_timestamp_ns = c;
        }
        let mut w = GmrWriter::new(Vec::new(), &header).expect("writer");
        w.write_strings(&g.string_table()).expect("strings");
        let mut buf = Vec::new();
        g.device_records(&mut buf);
        loop {
            g.next_launches(&mut buf, cfg.kernels_per_buffer);
            if !buf.is_empty() {
                w.write_buffer(&buf).expect("buffer");
            }
            buf.clear();
            if g.remaining() == 0 {
                break;
            }
        }
        let bytes = w.finish().expect("finish");
        let file = read_gmr(&bytes).expect("reads back");
        let mut ends: Vec<usize> = file
            .frames
            .iter()
            .skip(1)
            .map(|f| f.offset as usize)
            .collect();
        // The end frame (an empty payload) is not among the frames read.
        ends.push(bytes.len() - FRAME_OVERHEAD);
        ends.push(bytes.len());
        Synthetic { bytes, ends }
    }

    /// The bytes up to the end of frame `k` (at most every frame but the end frame): the
    /// recording while its process still writes it.
    pub fn open(&self, k: usize) -> &[u8] {
        &self.bytes[..self.ends[k.min(self.ends.len() - 2)]]
    }

    /// The recording's identity, as the agent names it.
    pub fn identity(&self) -> String {
        gpumeter_agent::spool::identity(&read_gmr(&self.bytes).expect("read").header)
    }
}
