//! The string cap: a reader of JSON text that cuts every string longer than
//! [`MAX_STRING_BYTES`] as it is read ([`StringCap`]), validating and digesting the part it
//! drops, so that a string of any length costs at most that much memory.

use std::io::Read;

use crate::cut::{CUT_MARK, MAX_STRING_BYTES};

/// Where [`StringCap`] is in the JSON text.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lex {
    /// Outside any string.
    Out,
    /// Inside a string, after `len` bytes of its text; `high` when the last thing read was the
    /// escape of a high surrogate (its low half must follow, uncut).
    In { len: usize, high: bool },
    /// After a `\` inside a string.
    Escape { len: usize },
    /// Inside a `\u` escape: `left` hex digits to come, `value` of those read.
    Unicode { len: usize, left: u8, value: u32 },
    /// Inside a string being cut: its bytes are dropped (validated and digested) up to its
    /// closing quote.
    Drop(Tail),
}

/// Where [`StringCap`] is in the dropped part of a string being cut. The bytes of an unsettled
/// character or escape are held in [`StringCap::pend`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tail {
    /// At a character boundary.
    Char,
    /// Inside a UTF-8 sequence: `need` more bytes, the next in `lo..=hi`, the rest in
    /// `0x80..=0xBF` (the ranges of `std::str::from_utf8`).
    Utf8 { need: u8, lo: u8, hi: u8 },
    /// After a `\` (held after a high surrogate's escape when `pend` holds 7 bytes).
    Escape,
    /// Inside a `\u` escape: `left` hex digits to come, `value` of those read; `pair` when it
    /// follows a high surrogate's escape.
    Hex { left: u8, value: u16, pair: bool },
    /// After a high surrogate's escape: only a low one's escape settles it.
    AfterHigh,
}

/// Faults of a dropped part passed on to the parser ([`StringCap::fault`]): invalid UTF-8, a
/// lone surrogate (each refused or not by serde_json depending on where the string lies), and
/// faults serde_json always refuses (a control character, a bad escape), after which nothing
/// more is passed on.
const FAULT_UTF8: u8 = 1;
const FAULT_SURROGATE: u8 = 2;
const FAULT_FATAL: u8 = 4;

/// Bytes [`StringCap::step`] hands out for one byte read: at most a fault (12 bytes), another
/// (3) and the closing mark, digest and quote.
struct Emit {
    pub(super) bytes: [u8; 80],
    pub(super) n: usize,
}

impl Emit {
    fn new() -> Self {
        Emit {
            bytes: [0; 80],
            n: 0,
        }
    }

    fn push(&mut self, b: &[u8]) {
        let end = (self.n + b.len()).min(self.bytes.len());
        let k = end - self.n;
        self.bytes[self.n..end].copy_from_slice(&b[..k]);
        self.n = end;
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.n]
    }
}

/// A reader of JSON text that cuts every string longer than [`MAX_STRING_BYTES`] (counted in
/// `cut`): only a lexer of strings (quotes, escapes and, past a cut, UTF-8), the JSON parser
/// above it validates everything else. serde_json reads a string whole before handing it over
/// (there is no streaming string API), so without this a 1 GB kernel name would cost its size
/// (three times, measured).
///
/// The dropped part of a cut string is lexed as serde_json lexes a string and its faults are
/// passed on to the parser, so that the text is refused (or not) as serde_json would refuse
/// the whole string, with serde_json's own error for the field: a control character, a bad
/// escape or `\u` escape, invalid UTF-8 and a lone surrogate escape are handed out in place of
/// the bytes dropped (the first of each kind; nothing more after a control character or a bad
/// escape, which serde_json always refuses), and an unterminated string stays unterminated.
/// Their line is the text's; their column counts the text as read, without the bytes dropped
/// before them on that line.
pub(super) struct StringCap<R> {
    inner: R,
    lex: Lex,
    /// Strings cut so far.
    pub(super) cut: u64,
    /// The digest of the dropped part of the string being cut.
    hasher: sha2::Sha256,
    /// The kinds of fault already passed on in the string being cut.
    faults: u8,
    /// The bytes of an unsettled character or escape of the dropped part.
    pend: [u8; 12],
    pend_n: usize,
    /// Bytes to hand out before any more is read (what did not fit in place).
    queue: Vec<u8>,
    queue_pos: usize,
}

impl<R: Read> StringCap<R> {
    pub(super) fn new(inner: R) -> Self {
        StringCap {
            inner,
            lex: Lex::Out,
            cut: 0,
            hasher: sha2::Sha256::default(),
            faults: 0,
            pend: [0; 12],
            pend_n: 0,
            queue: Vec::new(),
            queue_pos: 0,
        }
    }

    /// Reads `b` (the state moves on); what is handed out for it goes to `e`.
    fn step(&mut self, b: u8, e: &mut Emit) {
        let next = match self.lex {
            Lex::Out => {
                e.push(&[b]);
                if b == b'"' {
                    Lex::In {
                        len: 0,
                        high: false,
                    }
                } else {
                    Lex::Out
                }
            }
            Lex::In { len, high } => match b {
                b'"' => {
                    e.push(&[b]);
                    Lex::Out
                }
                // A continuation byte ends the character under way: never cut.
                0x80..=0xBF => {
                    e.push(&[b]);
                    Lex::In {
                        len: len + 1,
                        high: false,
                    }
                }
                // An escape counts as the bytes it stands for (added when it ends), so a
                // string is cut at the same place however it is escaped.
                b'\\' if high || len < MAX_STRING_BYTES => {
                    e.push(&[b]);
                    Lex::Escape { len }
                }
                _ if len < MAX_STRING_BYTES => {
                    e.push(&[b]);
                    Lex::In {
                        len: len + 1,
                        high: false,
                    }
                }
                _ => {
                    self.cut += 1;
                    self.faults = 0;
                    self.pend_n = 0;
                    self.lex = Lex::Drop(Tail::Char);
                    self.drop_step(b, e);
                    return;
                }
            },
            Lex::Escape { len } => {
                e.push(&[b]);
                if b == b'u' {
                    Lex::Unicode {
                        len,
                        left: 4,
                        value: 0,
                    }
                } else {
                    Lex::In {
                        len: len + 1,
                        high: false,
                    }
                }
            }
            Lex::Unicode { len, left, value } => {
                e.push(&[b]);
                let value = value * 16 + char::from(b).to_digit(16).unwrap_or(0);
                if left > 1 {
                    Lex::Unicode {
                        len,
                        left: left - 1,
                        value,
                    }
                } else {
                    // A surrogate pair stands for 4 bytes, 2 counted for each half.
                    let bytes = if (0xD800..0xE000).contains(&value) {
                        2
                    } else {
                        char::from_u32(value).map_or(3, char::len_utf8)
                    };
                    Lex::In {
                        len: len + bytes,
                        high: (0xD800..0xDC00).contains(&value),
                    }
                }
            }
            Lex::Drop(_) => {
                self.drop_step(b, e);
                return;
            }
        };
        self.lex = next;
    }

    /// Reads `b` of the dropped part of a string being cut: digested (unless it closes the
    /// string), lexed, and a fault found passed on to `e`.
    fn drop_step(&mut self, b: u8, e: &mut Emit) {
        let Lex::Drop(tail) = self.lex else {
            return;
        };
        // The digest is of the text the string stands for: plain bytes as they are, an
        // escape as what it decodes to (digested in `drop_lex` when it ends), so one string
        // escaped two ways has one digest.
        let plain = match tail {
            Tail::Char | Tail::AfterHigh => b != b'"' && b != b'\\',
            Tail::Utf8 { .. } => true,
            Tail::Escape | Tail::Hex { .. } => false,
        };
        if plain {
            sha2::Digest::update(&mut self.hasher, [b]);
        }
        self.drop_lex(tail, b, e);
    }

    fn hold(&mut self, b: u8) {
        if self.pend_n < self.pend.len() {
            self.pend[self.pend_n] = b;
            self.pend_n += 1;
        }
    }

    /// Passes on the bytes held (a fault of kind `kind`), unless one of that kind was, or a
    /// fatal one; then forgets them.
    fn fault(&mut self, kind: u8, e: &mut Emit) {
        if self.faults & (kind | FAULT_FATAL) == 0 {
            e.push(&self.pend[..self.pend_n]);
            self.faults |= kind;
        }
        self.pend_n = 0;
    }

    /// Lexes `b` of the dropped part in state `tail`; a fault found goes to `e`.
    fn drop_lex(&mut self, tail: Tail, b: u8, e: &mut Emit) {
        match tail {
            Tail::Char => self.drop_char(b, e),
            Tail::Utf8 { need, lo, hi } => self.drop_utf8(need, lo, hi, b, e),
            Tail::Escape => self.drop_escape(b, e),
            Tail::Hex { left, value, pair } => self.drop_hex(left, value, pair, b, e),
            Tail::AfterHigh => self.drop_after_high(b, e),
        }
    }

    /// A character boundary of the dropped part.
    fn drop_char(&mut self, b: u8, e: &mut Emit) {
        self.pend_n = 0;
        match b {
            b'"' => {
                let digest = sha2::Digest::finalize_reset(&mut self.hasher);
                let mut hex = [0u8; 32];
                // 16 bytes make 32 digits: never fails.
                let _ = hex::encode_to_slice(&digest[..16], &mut hex);
                e.push(CUT_MARK.as_bytes());
                e.push(&hex);
                e.push(b"]\"");
                self.lex = Lex::Out;
            }
            b'\\' => {
                self.hold(b);
                self.to(Tail::Escape);
            }
            0..=0x1F => {
                self.hold(b);
                self.fault(FAULT_FATAL, e);
            }
            0x20..=0x7F => {}
            _ => {
                let (need, lo, hi) = match b {
                    0xC2..=0xDF => (1, 0x80, 0xBF),
                    0xE0 => (2, 0xA0, 0xBF),
                    0xE1..=0xEC | 0xEE | 0xEF => (2, 0x80, 0xBF),
                    0xED => (2, 0x80, 0x9F),
                    0xF0 => (3, 0x90, 0xBF),
                    0xF1..=0xF3 => (3, 0x80, 0xBF),
                    0xF4 => (3, 0x80, 0x8F),
                    _ => (0, 0, 0),
                };
                self.hold(b);
                if need == 0 {
                    self.fault(FAULT_UTF8, e);
                } else {
                    self.to(Tail::Utf8 { need, lo, hi });
                }
            }
        }
    }

    /// Inside a UTF-8 sequence of the dropped part ([`Tail::Utf8`]).
    fn drop_utf8(&mut self, need: u8, lo: u8, hi: u8, b: u8, e: &mut Emit) {
        if (lo..=hi).contains(&b) {
            self.hold(b);
            if need > 1 {
                self.to(Tail::Utf8 {
                    need: need - 1,
                    lo: 0x80,
                    hi: 0xBF,
                });
            } else {
                self.pend_n = 0;
                self.to(Tail::Char);
            }
        } else {
            self.fault(FAULT_UTF8, e);
            self.drop_lex(Tail::Char, b, e);
        }
    }

    /// After a `\` of the dropped part.
    fn drop_escape(&mut self, b: u8, e: &mut Emit) {
        let pair = self.pend_n == 7;
        self.hold(b);
        match b {
            b'u' => self.to(Tail::Hex {
                left: 4,
                value: 0,
                pair,
            }),
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {
                if pair {
                    self.fault(FAULT_SURROGATE, e);
                }
                let decoded = match b {
                    b'b' => 0x08,
                    b'f' => 0x0C,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    other => other,
                };
                sha2::Digest::update(&mut self.hasher, [decoded]);
                self.pend_n = 0;
                self.to(Tail::Char);
            }
            _ => {
                self.fault(FAULT_FATAL, e);
                self.to(Tail::Char);
            }
        }
    }

    /// Inside a `\u` escape of the dropped part ([`Tail::Hex`]).
    fn drop_hex(&mut self, left: u8, value: u16, pair: bool, b: u8, e: &mut Emit) {
        self.hold(b);
        let Some(d) = char::from(b).to_digit(16) else {
            self.fault(FAULT_FATAL, e);
            self.to(Tail::Char);
            return;
        };
        // At most 4 digits: no overflow.
        let value = value.wrapping_mul(16).wrapping_add(d as u16);
        if left > 1 {
            self.to(Tail::Hex {
                left: left - 1,
                value,
                pair,
            });
            return;
        }
        let high = (0xD800..0xDC00).contains(&value);
        let low = (0xDC00..0xE000).contains(&value);
        if pair != low {
            self.fault(FAULT_SURROGATE, e);
        } else if !pair && high {
            self.to(Tail::AfterHigh);
            return;
        } else {
            // The character: the pair's (its high half's digits are held at 2..6).
            let code = if pair {
                let hi = std::str::from_utf8(&self.pend[2..6])
                    .ok()
                    .and_then(|h| u32::from_str_radix(h, 16).ok())
                    .unwrap_or(0xD800);
                0x10000 + ((hi.saturating_sub(0xD800)) << 10) + (u32::from(value) - 0xDC00)
            } else {
                u32::from(value)
            };
            let mut utf8 = [0u8; 4];
            let c = char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER);
            sha2::Digest::update(&mut self.hasher, c.encode_utf8(&mut utf8).as_bytes());
        }
        self.pend_n = 0;
        self.to(Tail::Char);
    }

    /// After a high surrogate's escape of the dropped part.
    fn drop_after_high(&mut self, b: u8, e: &mut Emit) {
        if b == b'\\' {
            self.hold(b);
            self.to(Tail::Escape);
        } else {
            self.fault(FAULT_SURROGATE, e);
            self.drop_lex(Tail::Char, b, e);
        }
    }

    /// Moves to state `t` of the dropped part.
    fn to(&mut self, t: Tail) {
        self.lex = Lex::Drop(t);
    }

    /// The length of the run at the start of `data` (in the dropped part, at a character
    /// boundary) that is plain text: no quote, backslash or control character, whole UTF-8.
    fn plain_run(data: &[u8]) -> usize {
        let lim = memchr::memchr2(b'"', b'\\', data).unwrap_or(data.len());
        let seg = &data[..lim];
        let seg = &seg[..seg.iter().position(|&b| b < 0x20).unwrap_or(lim)];
        match std::str::from_utf8(seg) {
            Ok(_) => seg.len(),
            Err(err) => err.valid_up_to(),
        }
    }

    /// Hands out `bytes` after the `kept` bytes of `buf` (in place when they fit before
    /// `free`, the end of what was read, and nothing is queued; else queued).
    fn put(&mut self, buf: &mut [u8], kept: &mut usize, free: usize, bytes: &[u8]) {
        if self.queue_pos < self.queue.len() || *kept + bytes.len() > free {
            self.queue.extend_from_slice(bytes);
        } else {
            buf[*kept..*kept + bytes.len()].copy_from_slice(bytes);
            *kept += bytes.len();
        }
    }

    /// Bytes queued and not handed out yet.
    fn queued(&self) -> &[u8] {
        &self.queue[self.queue_pos..]
    }
}

impl<R: Read> StringCap<R> {
    /// Filters `buf` in place; returns how many bytes are handed out at its start (what does
    /// not fit there, at most the few bytes a cut string gains and what follows them in
    /// `buf`, is queued: [`StringCap::queued`]). Runs of bytes that change nothing but a
    /// string's length, or that are plain text dropped, are passed over whole; the rest goes
    /// through [`StringCap::step`] byte by byte.
    fn filter(&mut self, buf: &mut [u8]) -> usize {
        if self.queue_pos == self.queue.len() {
            if let Some(next) = self.uncut(buf) {
                self.lex = next;
                return buf.len();
            }
        }
        let n = buf.len();
        let (mut i, mut kept) = (0, 0);
        while i < n {
            let run = match self.lex {
                Lex::Out => memchr::memchr(b'"', &buf[i..]).unwrap_or(n - i),
                Lex::In { len, .. } if len < MAX_STRING_BYTES => {
                    let lim = (n - i).min(MAX_STRING_BYTES - len);
                    let run = memchr::memchr2(b'"', b'\\', &buf[i..i + lim]).unwrap_or(lim);
                    if run > 0 {
                        self.lex = Lex::In {
                            len: len + run,
                            high: false,
                        };
                    }
                    run
                }
                Lex::Drop(Tail::Char) => {
                    let run = Self::plain_run(&buf[i..]);
                    sha2::Digest::update(&mut self.hasher, &buf[i..i + run]);
                    i += run;
                    if run > 0 {
                        continue;
                    }
                    0
                }
                _ => 0,
            };
            if run > 0 {
                if self.queue_pos < self.queue.len() {
                    self.queue.extend_from_slice(&buf[i..i + run]);
                } else if kept != i {
                    buf.copy_within(i..i + run, kept);
                    kept += run;
                } else {
                    kept += run;
                }
                i += run;
                continue;
            }
            let b = buf[i];
            i += 1;
            let mut e = Emit::new();
            self.step(b, &mut e);
            if e.n == 1 && self.queue_pos == self.queue.len() {
                buf[kept] = e.bytes[0];
                kept += 1;
            } else if e.n > 0 {
                self.put(buf, &mut kept, i, e.as_slice());
            }
        }
        kept
    }
}

impl<R: Read> StringCap<R> {
    /// The state after `buf` when no string in it can be cut, told without lexing it byte by
    /// byte (`None`: it must be): `buf` has no `\` (so each `"` opens or closes a string: real
    /// traces have none), the state before it is outside a string or inside one short of the
    /// cap by more than its bytes up to the first `"`, and each aligned block of
    /// `MAX_STRING_BYTES / 2` bytes of it holds a `"` (so no run of `MAX_STRING_BYTES - 1` bytes
    /// without one: a run that long holds a whole block). A few SIMD searches per chunk instead
    /// of two per string.
    fn uncut(&self, buf: &[u8]) -> Option<Lex> {
        const BLOCK: usize = MAX_STRING_BYTES / 2;
        let carried = match self.lex {
            Lex::Out => None,
            Lex::In { len, .. } => Some(len),
            _ => return None,
        };
        if memchr::memchr(b'\\', buf).is_some() {
            return None;
        }
        let blocks = buf.chunks_exact(BLOCK);
        if !blocks
            .into_iter()
            .all(|b| memchr::memchr(b'"', b).is_some())
        {
            return None;
        }
        if let Some(len) = carried {
            let run = memchr::memchr(b'"', buf).unwrap_or(buf.len());
            if len + run >= MAX_STRING_BYTES - 1 {
                return None;
            }
        }
        let Some(last) = memchr::memrchr(b'"', buf) else {
            return Some(match carried {
                None => Lex::Out,
                Some(len) => Lex::In {
                    len: len + buf.len(),
                    high: false,
                },
            });
        };
        let odd = memchr::memchr_iter(b'"', buf).count() % 2 == 1;
        Some(if carried.is_some() != odd {
            Lex::In {
                len: buf.len() - 1 - last,
                high: false,
            }
        } else {
            Lex::Out
        })
    }
}

impl<R: Read> Read for StringCap<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let queued = self.queued();
            if !queued.is_empty() {
                let n = queued.len().min(buf.len());
                buf[..n].copy_from_slice(&queued[..n]);
                self.queue_pos += n;
                if self.queue_pos == self.queue.len() {
                    self.queue.clear();
                    self.queue_pos = 0;
                }
                return Ok(n);
            }
            let n = self.inner.read(buf)?;
            if n == 0 {
                return Ok(0);
            }
            // All dropped (inside a string being cut): read on rather than report the end.
            let kept = self.filter(&mut buf[..n]);
            if kept > 0 {
                return Ok(kept);
            }
        }
    }
}

#[cfg(test)]
mod tests;
