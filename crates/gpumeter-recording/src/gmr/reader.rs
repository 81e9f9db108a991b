//! Reading a `.gmr`: cutting the bytes into frames, resynchronizing after a corrupt one, and
//! the damaged frames a reader could not use (torn, corrupt, malformed), kept so their records
//! count as loss.

use super::parse::Fields;
use super::*;

/// Why the last frame of a file was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TornReason {
    /// The file ends inside the frame (header, payload or checksum).
    ShortRead,
    /// The frame is complete but its checksum does not match.
    BadChecksum,
}

/// A torn last frame: the frames before it were kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornFrame {
    /// Byte offset where the torn frame starts.
    pub offset: u64,
    /// Bytes from there to the end of the file (dropped).
    pub bytes: u64,
    /// Why it was dropped.
    pub reason: TornReason,
}

impl std::fmt::Display for TornFrame {
    /// `torn last frame at byte N (12 bytes): the file ends inside it`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let why = match self.reason {
            TornReason::ShortRead => "the file ends inside it",
            TornReason::BadChecksum => "its checksum does not match",
        };
        write!(
            f,
            "torn last frame at byte {} ({} bytes dropped): {why}",
            self.offset, self.bytes
        )
    }
}

/// How a frame is damaged ([`DamagedFrame`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    /// The torn last frame ([`GmrFile::torn`]).
    Torn(TornReason),
    /// A frame whose checksum does not match, followed by a readable frame (or the end of the
    /// file): the bytes up to that frame are lost.
    Corrupt,
    /// A frame whose checksum does not match and after which no frame can be read: the
    /// framing is lost, and the frame and everything after it (`payload`) cannot be read.
    FramingLost,
    /// A frame whose checksum is right but whose payload does not parse ([`DamagedFrame::detail`]
    /// says why): written so by its producer; only it is lost.
    Malformed,
}

/// A frame the reader could not use, with what is left of it, so that its records can be
/// counted as loss (`torn_frame`, `corrupt_frame`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedFrame {
    /// Byte offset of the frame's type field.
    pub offset: u64,
    /// 0-based index among the file's frames (the header is #0).
    pub index: usize,
    /// The frame's type field as read, `None` when the file ends before it. Untrusted for a
    /// checksum mismatch.
    pub frame_type: Option<u32>,
    /// What is wrong.
    pub damage: Damage,
    /// The payload bytes that are in the file (for [`Damage::FramingLost`], every byte after
    /// the frame's 12-byte type and length). Untrusted: a reader may count what it holds, never
    /// meter it.
    pub payload: Vec<u8>,
    /// Whether `payload` holds as many bytes as the frame's length field says (a torn frame
    /// that lacks only its checksum, say).
    pub complete: bool,
    /// Why a malformed frame's payload does not parse; empty otherwise.
    pub detail: String,
}

impl DamagedFrame {
    /// Whether the type field says the frame held a raw activity buffer (untrusted for a
    /// checksum mismatch).
    pub fn is_activity_buffer(&self) -> bool {
        self.frame_type == Some(T_BUFFER)
    }

    /// Whether the frame's type field can be trusted: it was read from a frame cut short by
    /// the end of the file, or from one whose checksum is right (a malformed frame).
    pub fn type_trusted(&self) -> bool {
        matches!(
            self.damage,
            Damage::Torn(TornReason::ShortRead) | Damage::Malformed
        )
    }

    /// Whether the frame is known to hold no records: its type field can be trusted
    /// ([`DamagedFrame::type_trusted`]) and is one of the types that carry none (header, string
    /// table, attribution event, energy sample, end, instruction counts, PM samples, operation
    /// counters).
    pub fn holds_no_records(&self) -> bool {
        self.type_trusted()
            && matches!(
                self.frame_type,
                Some(
                    T_HEADER
                        | T_STRINGS
                        | T_ATTRIBUTION
                        | T_ENERGY
                        | T_END
                        | T_INSTRUCTIONS
                        | T_PM_SAMPLES
                        | T_OP_COUNTS
                )
            )
    }

    /// The PM samples a damaged frame whose type field says PM samples (type 9, trusted or
    /// not) held, as far as its bytes tell: `(device id, count, exact)`; `None` for a frame of
    /// another type, or when no count can be trusted (a payload shorter than its 8-byte
    /// header, or a header count of more samples than the bytes hold and no whole sample in
    /// them).
    ///
    /// The count is the header's when the bytes are the producer's as written (a frame cut
    /// short by the end of the file, or a malformed one) and agree with it: the payload is
    /// exactly `8 + 56 × count` bytes, or is cut short before that. Otherwise it is a lower
    /// bound: the header's count when those samples fit in the bytes
    /// (`count ≤ (len − 8) / 56`), else the count the bytes imply (`(len − 8) / 56`). The
    /// device id is untrusted after a checksum mismatch: the caller places it only on a device
    /// the recording knows.
    pub fn pm_sample_count(&self) -> Option<(u32, u64, bool)> {
        if self.frame_type != Some(T_PM_SAMPLES) {
            return None;
        }
        let header = self.payload.get(..8)?;
        let device = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let count = u64::from(u32::from_le_bytes([
            header[4], header[5], header[6], header[7],
        ]));
        let len = self.payload.len() as u64;
        let written = 8 + count * PM_SAMPLE_LEN as u64;
        if self.type_trusted() && (written == len || (!self.complete && written > len)) {
            return Some((device, count, true));
        }
        let fits = (len - 8) / PM_SAMPLE_LEN as u64;
        if count <= fits {
            Some((device, count, false))
        } else if fits > 0 {
            Some((device, fits, false))
        } else {
            None
        }
    }

    /// The frame as its type field and payload read, when the payload is complete and parses
    /// (the checksum is not checked: for counting what was lost, never for metering).
    pub fn parse(&self) -> Option<Frame> {
        if !self.complete || !self.type_trusted() {
            return None;
        }
        parse_payload(self.frame_type?, &self.payload)
            .ok()
            .flatten()
    }
}

impl std::fmt::Display for DamagedFrame {
    /// `frame #4 at byte 1234 (type 2): torn: the file ends inside it`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "frame #{} at byte {}", self.index, self.offset)?;
        if let Some(t) = self.frame_type {
            write!(f, " (type {t})")?;
        }
        let why = match self.damage {
            Damage::Torn(TornReason::ShortRead) => "torn last frame: the file ends inside it",
            Damage::Torn(TornReason::BadChecksum) => "torn last frame: its checksum does not match",
            Damage::Corrupt => "corrupt: its checksum does not match",
            Damage::FramingLost => {
                "corrupt: its checksum does not match and no readable frame follows, so it and \
                 the rest of the file cannot be read"
            }
            Damage::Malformed => "malformed: its checksum is right but its payload does not parse",
        };
        write!(f, ": {why}")?;
        if !self.detail.is_empty() {
            write!(f, " ({})", self.detail)?;
        }
        Ok(())
    }
}

/// A read recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GmrFile {
    /// The header.
    pub header: GmrHeader,
    /// The frames after the header, in file order (unknown types and the end frame excluded).
    pub frames: Vec<LocatedFrame>,
    /// Frames of unknown types skipped (their checksums were right).
    pub unknown_frames: u64,
    /// `true` when the file ends with an end frame (the producer closed it).
    pub finished: bool,
    /// The torn last frame, if any.
    pub torn: Option<TornFrame>,
    /// Every frame the reader could not use (the torn one included), in file order.
    pub damaged: Vec<DamagedFrame>,
}

impl GmrFile {
    /// The recording's GPUs and energy samples as a replayable [`gpumeter_nvml::Telemetry`]:
    /// the recorded implementation of the live NVML one. GPUs are indexed by CUDA ordinal
    /// (the header's inventory, plus any ordinal an energy frame names), and each GPU's
    /// [`Telemetry::energy`](gpumeter_nvml::Telemetry::energy) returns its energy frames in
    /// file order, then [`gpumeter_nvml::TelemetryError::Exhausted`].
    pub fn telemetry(&self) -> gpumeter_nvml::Recorded {
        let mut gpus: BTreeMap<u32, gpumeter_nvml::Gpu> = self
            .header
            .devices
            .iter()
            .map(|d| {
                (
                    d.id,
                    gpumeter_nvml::Gpu {
                        index: d.id,
                        name: d.name.clone(),
                        uuid: d.uuid.clone(),
                        mig: d.uuid.as_deref().is_some_and(|u| u.starts_with("MIG-")),
                    },
                )
            })
            .collect();
        let mut readings = Vec::new();
        for f in &self.frames {
            if let Frame::Energy(e) = &f.frame {
                gpus.entry(e.device_id)
                    .or_insert_with(|| gpumeter_nvml::Gpu {
                        index: e.device_id,
                        ..gpumeter_nvml::Gpu::default()
                    });
                readings.push(gpumeter_nvml::EnergyReading {
                    index: e.device_id,
                    timestamp_ns: e.timestamp_ns,
                    energy_mj: e.energy_mj,
                });
            }
        }
        let recorded = gpumeter_nvml::Recorded::new(gpus.into_values().collect());
        for r in readings {
            recorded.push(r);
        }
        recorded
    }
}

/// One frame as cut from the bytes, before its payload is parsed.
pub(crate) enum Cut<'a> {
    Whole {
        frame_type: u32,
        payload: &'a [u8],
        next: usize,
    },
    /// The torn last frame: its type when it is there, the payload bytes that are there, and
    /// whether they are all the length field says.
    Torn(TornFrame, Option<u32>, &'a [u8], bool),
    BadCrc {
        frame_type: u32,
    },
}

pub(crate) fn cut(bytes: &[u8], at: usize) -> Cut<'_> {
    let rest = bytes.get(at..).unwrap_or(&[]);
    let t = |reason| TornFrame {
        offset: at as u64,
        bytes: rest.len() as u64,
        reason,
    };
    fn torn(t: TornFrame, frame_type: Option<u32>, payload: &[u8], complete: bool) -> Cut<'_> {
        Cut::Torn(t, frame_type, payload, complete)
    }
    let mut f = Fields { b: rest, at: 0 };
    let frame_type = f.u32();
    let (Some(frame_type), Some(len)) = (frame_type, f.u64()) else {
        return torn(t(TornReason::ShortRead), frame_type, &[], false);
    };
    let there = rest.get(12..).unwrap_or(&[]);
    let Ok(len) = usize::try_from(len) else {
        return torn(t(TornReason::ShortRead), Some(frame_type), there, false);
    };
    let Some(payload) = f.take(len) else {
        return torn(t(TornReason::ShortRead), Some(frame_type), there, false);
    };
    let Some(crc) = f.u32() else {
        return torn(t(TornReason::ShortRead), Some(frame_type), payload, true);
    };
    if frame_crc(frame_type, payload) != crc {
        if f.done() {
            return torn(t(TornReason::BadChecksum), Some(frame_type), payload, true);
        }
        return Cut::BadCrc { frame_type };
    }
    Cut::Whole {
        frame_type,
        payload,
        next: at + f.at,
    }
}

/// The first offset after the corrupt frame at `at` where a frame reads whole (checksum right);
/// `None` when none does before the end of the file or within `budget` (bytes of checksums
/// computed, charged as it goes).
fn resync(bytes: &[u8], at: usize, budget: &mut u64) -> Option<usize> {
    let mut p = at + 1;
    while p < bytes.len() {
        let mut f = Fields {
            b: bytes.get(p..).unwrap_or(&[]),
            at: 0,
        };
        // A candidate: a known frame type (not the header) whose payload and checksum fit.
        if let (Some(t), Some(len)) = (f.u32(), f.u64()) {
            let fits = usize::try_from(len)
                .ok()
                .and_then(|l| l.checked_add(FRAME_OVERHEAD))
                .is_some_and(|n| n <= bytes.len() - p);
            if (T_BUFFER..=T_LAST).contains(&t) && fits {
                *budget = budget.saturating_sub(len.saturating_add(16));
                if *budget == 0 {
                    return None;
                }
                if matches!(cut(bytes, p), Cut::Whole { .. }) {
                    return Some(p);
                }
            }
        }
        *budget = budget.saturating_sub(1);
        if *budget == 0 {
            return None;
        }
        p += 1;
    }
    None
}

/// Reads the preamble (magic, format version) and the header frame of the `.gmr` in `bytes`:
/// the header and where the frame after it starts.
fn read_header(bytes: &[u8]) -> Result<(GmrHeader, usize), GmrError> {
    let (Some(magic), Some(version)) = (bytes.get(0..16), bytes.get(16..20)) else {
        return Err(GmrError::NotGmr);
    };
    if magic != GMR_MAGIC {
        return Err(GmrError::NotGmr);
    }
    let version = u32::from_le_bytes([version[0], version[1], version[2], version[3]]);
    if version != GMR_FORMAT_VERSION {
        return Err(GmrError::UnsupportedFormatVersion(version));
    }
    let bad_header = |reason: String| GmrError::BadHeader {
        offset: GMR_PREAMBLE_LEN as u64,
        reason,
    };
    match cut(bytes, GMR_PREAMBLE_LEN) {
        Cut::Whole {
            frame_type: T_HEADER,
            payload,
            next,
        } => {
            let h: GmrHeader = serde_json::from_slice(payload)
                .map_err(|e| bad_header(format!("not a valid header: {e}")))?;
            Ok((h, next))
        }
        Cut::Whole { frame_type, .. } => Err(bad_header(format!(
            "the first frame has type {frame_type}, not 1 (header)"
        ))),
        Cut::Torn(t, ..) => Err(bad_header(t.to_string())),
        Cut::BadCrc { .. } => Err(bad_header("checksum mismatch".to_string())),
    }
}

/// Reads a whole `.gmr` from memory.
///
/// # Errors
/// [`GmrError::NotGmr`], [`GmrError::UnsupportedFormatVersion`], [`GmrError::BadHeader`];
/// [`GmrError::CorruptFrame`] for data after the end frame or a second header;
/// [`GmrError::BadPayload`] for a frame whose checksum is right but whose payload does not
/// parse. A torn last frame and frames whose checksum does not match are not errors: they are
/// listed in [`GmrFile::damaged`] (module docs, "Damage").
pub fn read_gmr(bytes: &[u8]) -> Result<GmrFile, GmrError> {
    let (header, mut at) = read_header(bytes)?;
    let mut file = GmrFile {
        header,
        frames: Vec::new(),
        unknown_frames: 0,
        finished: false,
        torn: None,
        damaged: Vec::new(),
    };
    let mut index = 0usize;
    // Resyncing after corruption checks candidate frames' checksums: bounded, so that a file
    // of many candidates costs at most a few passes over its bytes.
    let mut resync_budget = (bytes.len() as u64)
        .saturating_mul(4)
        .saturating_add(1 << 20);
    while at < bytes.len() {
        index += 1;
        let offset = at as u64;
        if file.finished {
            return Err(GmrError::CorruptFrame {
                offset,
                index,
                frame_type: 0,
                reason: "data after the end frame".to_string(),
            });
        }
        match cut(bytes, at) {
            Cut::Torn(t, frame_type, payload, complete) => {
                file.torn = Some(t);
                file.damaged.push(DamagedFrame {
                    offset,
                    index,
                    frame_type,
                    damage: Damage::Torn(t.reason),
                    payload: payload.to_vec(),
                    complete,
                    detail: String::new(),
                });
                break;
            }
            Cut::BadCrc { frame_type, .. } => {
                // Nothing of the frame can be trusted, its length included: resume at the
                // first frame after it that reads whole (or the end of the file), else the
                // framing is lost from here on.
                match resync(bytes, at, &mut resync_budget) {
                    Some(next) => {
                        file.damaged.push(DamagedFrame {
                            offset,
                            index,
                            frame_type: Some(frame_type),
                            damage: Damage::Corrupt,
                            payload: bytes.get(at + 12..next).unwrap_or(&[]).to_vec(),
                            complete: true,
                            detail: String::new(),
                        });
                        at = next;
                        continue;
                    }
                    None => {
                        file.damaged.push(DamagedFrame {
                            offset,
                            index,
                            frame_type: Some(frame_type),
                            damage: Damage::FramingLost,
                            payload: bytes.get(at + 12..).unwrap_or(&[]).to_vec(),
                            complete: false,
                            detail: String::new(),
                        });
                        break;
                    }
                }
            }
            Cut::Whole {
                frame_type,
                payload,
                next,
            } => {
                at = next;
                if frame_type == T_END {
                    file.finished = true;
                    continue;
                }
                if frame_type == T_HEADER {
                    return Err(GmrError::CorruptFrame {
                        offset,
                        index,
                        frame_type,
                        reason: "a second header frame".to_string(),
                    });
                }
                match parse_payload(frame_type, payload) {
                    Ok(Some(frame)) => file.frames.push(LocatedFrame {
                        offset,
                        index,
                        frame,
                    }),
                    Ok(None) => file.unknown_frames += 1,
                    Err(reason) => file.damaged.push(DamagedFrame {
                        offset,
                        index,
                        frame_type: Some(frame_type),
                        damage: Damage::Malformed,
                        payload: payload.to_vec(),
                        complete: true,
                        detail: reason,
                    }),
                }
            }
        }
    }
    Ok(file)
}

/// Reads a whole `.gmr` from a reader (into memory, then as [`read_gmr`]).
///
/// # Errors
/// [`GmrError::Io`] when reading fails; otherwise as [`read_gmr`].
pub fn read_gmr_from<R: Read>(mut r: R) -> Result<GmrFile, GmrError> {
    let mut bytes = Vec::new();
    r.read_to_end(&mut bytes)?;
    read_gmr(&bytes)
}
