//! The text of a trace as read: decompressed text with its strings cut ([`StringCap`]), read
//! in chunks into one reused buffer ([`Source`]), with positions counted as serde_json counts
//! them ([`Pos`], [`Remap`]) so that faults are reported where a parse of the whole text
//! reports them.

use std::cell::RefCell;
use std::io::Read;

use serde::de;

use super::string_cap::StringCap;

/// A position in the JSON text as serde_json counts it: the 1-based line, and how many bytes
/// of that line were read.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Pos {
    pub(super) line: usize,
    pub(super) col: usize,
}

impl Pos {
    /// The position after `bytes` more.
    pub(super) fn advance(&mut self, bytes: &[u8]) {
        match memchr::memrchr(b'\n', bytes) {
            None => self.col += bytes.len(),
            Some(last) => {
                self.line += memchr::memchr_iter(b'\n', bytes).count();
                self.col = bytes.len() - 1 - last;
            }
        }
    }
}

/// Where serde_json's count of lines and columns parted from the text's: at `serde` (its
/// count) the text was at `real`. Positions before are the same in both.
#[derive(Clone, Copy)]
pub(super) struct Remap {
    pub(super) serde: Pos,
    pub(super) real: Pos,
}

impl Remap {
    pub(super) fn map(&self, line: usize, col: usize) -> (usize, usize) {
        let s = self.serde;
        if line < s.line || (line == s.line && col < s.col) {
            (line, col)
        } else if line == s.line {
            (self.real.line, self.real.col + (col - s.col))
        } else {
            (line - s.line + self.real.line, col)
        }
    }
}

/// serde_json's error `e`, reported at `line`/`col` instead of where it says: the same message
/// with another position (its category is then `Data`; callers classify the original).
pub(super) fn relocated(e: &serde_json::Error, line: usize, col: usize) -> serde_json::Error {
    let text = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let msg = text.strip_suffix(&suffix).unwrap_or(&text);
    de::Error::custom(format_args!("{msg} at line {line} column {col}"))
}

/// Bytes of text read at a time (the buffer grows past it only for an element longer). Tiny
/// in unit tests, so that elements cross chunks everywhere.
const CHUNK_BYTES: usize = if cfg!(test) { 64 } else { 1 << 20 };

/// The decompressed text with strings cut ([`StringCap`]), read in chunks into one reused
/// buffer; `buf[pos..end]` is read and not consumed yet. Consumed by the deserializer through
/// [`SerdeSide`] (the top-level object) and by `array::read_array` (the `traceEvents` array).
pub(super) struct Source<'r> {
    pub(super) cap: StringCap<Box<dyn Read + 'r>>,
    pub(super) buf: Vec<u8>,
    pub(super) pos: usize,
    pub(super) end: usize,
    pub(super) eof: bool,
    /// The position of `buf[mark]` in the text as serde_json counts positions (positions are
    /// counted a chunk at a time, when the buffer is refilled, or when asked).
    pub(super) mark: usize,
    pub(super) at_mark: Pos,
    /// Bytes handed to the deserializer before the text's (the stand-in for `traceEvents`).
    pub(super) inject: &'static [u8],
    /// Set once the deserializer's positions part from the text's.
    pub(super) remap: Option<Remap>,
}

impl<'r> Source<'r> {
    pub(super) fn new(inner: Box<dyn Read + 'r>) -> Self {
        Source {
            cap: StringCap::new(inner),
            buf: vec![0; CHUNK_BYTES],
            pos: 0,
            end: 0,
            eof: false,
            mark: 0,
            at_mark: Pos { line: 1, col: 0 },
            inject: b"",
            remap: None,
        }
    }

    /// Consumes `n` bytes of what is held.
    pub(super) fn consume(&mut self, n: usize) {
        self.pos += n;
    }

    /// The position of the next byte to consume.
    pub(super) fn at(&self) -> Pos {
        let mut p = self.at_mark;
        p.advance(&self.buf[self.mark..self.pos]);
        p
    }

    /// Reads more text after what is held (moving what is held to the buffer's start, or
    /// growing the buffer when it is full); `false` at the end of the text.
    pub(super) fn fill(&mut self) -> std::io::Result<bool> {
        if self.eof {
            return Ok(false);
        }
        if self.pos == self.end || (self.end == self.buf.len() && self.pos > 0) {
            self.at_mark = self.at();
            self.mark = 0;
            self.buf.copy_within(self.pos..self.end, 0);
            self.end -= self.pos;
            self.pos = 0;
        }
        if self.end == self.buf.len() {
            self.buf.resize(self.buf.len() * 2, 0);
        }
        loop {
            match self.cap.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Consumes whitespace; the next byte (not consumed), `None` at the end of the text.
    pub(super) fn skip_ws(&mut self) -> std::io::Result<Option<u8>> {
        loop {
            let data = &self.buf[self.pos..self.end];
            match data
                .iter()
                .position(|b| !matches!(b, b' ' | b'\n' | b'\t' | b'\r'))
            {
                Some(k) => {
                    self.consume(k);
                    return Ok(Some(self.buf[self.pos]));
                }
                None => {
                    self.consume(data.len());
                    if !self.fill()? {
                        return Ok(None);
                    }
                }
            }
        }
    }
}

/// The [`Source`] as the deserializer reads it (a byte at a time: only the top-level object
/// outside `traceEvents` is read so).
pub(super) struct SerdeSide<'s, 'r>(pub(super) &'s RefCell<Source<'r>>);

impl Read for SerdeSide<'_, '_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        SourceReader(&mut self.0.borrow_mut()).read(out)
    }
}

/// Reads a [`Source`], consuming what it hands out.
pub(super) struct SourceReader<'a, 'r>(pub(super) &'a mut Source<'r>);

impl Read for SourceReader<'_, '_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let s = &mut *self.0;
        if !s.inject.is_empty() {
            let n = out.len().min(s.inject.len());
            out[..n].copy_from_slice(&s.inject[..n]);
            s.inject = &s.inject[n..];
            return Ok(n);
        }
        if s.pos == s.end && !s.fill()? {
            return Ok(0);
        }
        let n = out.len().min(s.end - s.pos);
        out[..n].copy_from_slice(&s.buf[s.pos..s.pos + n]);
        s.consume(n);
        Ok(n)
    }
}
