//! The activity-buffer pool: pre-zeroed, 8-byte aligned buffers lent to CUPTI and taken back.
//!
//! Plain Rust, testable without CUPTI. A buffer is a `Box<[u64]>` (so its address is 8-byte
//! aligned and its bytes start zeroed); lending turns it into a raw pointer recorded in a
//! registry, and only a pointer found (and removed) there is ever turned back into a `Box`, so
//! a buffer is freed at most once and nothing the pool did not lend is ever freed. Every lock
//! tolerates poisoning: a panic elsewhere never stops the pool from lending.

use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard};

/// Locks `m`, taking the data of a poisoned mutex as it is (the pool's invariants hold between
/// statements: no panic can leave the registry half-updated).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A buffer handed to CUPTI: its first byte and its size in bytes. Never null.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lent {
    /// The buffer's first byte (8-byte aligned).
    pub(crate) ptr: NonNull<u8>,
    /// Its size in bytes (a multiple of 8).
    pub(crate) size: usize,
}

/// A buffer taken back from CUPTI, owned again.
#[derive(Debug)]
pub(crate) struct Owned {
    words: Box<[u64]>,
}

impl Owned {
    /// The buffer's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        let len = self.words.len() * 8;
        // SAFETY: `words` owns `len` initialised bytes (u64s viewed as bytes: every bit pattern
        // is a valid u8, alignment 1 ≤ 8); the returned slice borrows `self`, so the memory
        // stays alive and is not written while it is read.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), len) }
    }

    /// Size in bytes.
    pub(crate) fn len_bytes(&self) -> usize {
        self.words.len() * 8
    }
}

/// Counters of a pool (monotonic since its creation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PoolStats {
    /// Buffers lent.
    pub(crate) lent: u64,
    /// Buffers taken back (their pointers were in the registry).
    pub(crate) reclaimed: u64,
    /// Pointers handed back that the pool had not lent, or had already taken back.
    pub(crate) unknown: u64,
    /// Buffers allocated (the rest of the lent ones were reused).
    pub(crate) allocated: u64,
    /// Buffers lent and not yet taken back.
    pub(crate) outstanding: u64,
    /// Zeroed buffers kept for reuse.
    pub(crate) free: u64,
}

struct Inner {
    /// Zeroed buffers ready to lend, all of `words` length.
    free: Vec<Box<[u64]>>,
    /// Lent buffers: address → length in u64 words.
    lent: HashMap<usize, usize>,
    stats: PoolStats,
}

/// Pre-zeroed, 8-byte aligned activity buffers (see the module docs).
///
/// Dropping the pool frees its free buffers; lent buffers are leaked on purpose (CUPTI may
/// still write to them).
pub(crate) struct BufferPool {
    inner: Mutex<Inner>,
    /// Length of new buffers in u64 words; buffers of another length are dropped when they
    /// come back (the size may change between collection sessions).
    words: Mutex<usize>,
    /// At most this many zeroed buffers are kept for reuse.
    keep: usize,
}

impl BufferPool {
    /// A pool of buffers of `size_bytes` (rounded up to a multiple of 8, at least 8) that keeps
    /// at most `keep` free buffers.
    pub(crate) fn new(size_bytes: usize, keep: usize) -> BufferPool {
        BufferPool {
            inner: Mutex::new(Inner {
                free: Vec::new(),
                lent: HashMap::new(),
                stats: PoolStats::default(),
            }),
            words: Mutex::new(words_for(size_bytes)),
            keep,
        }
    }

    /// Changes the size of buffers lent from now on (free buffers of the old size are dropped).
    pub(crate) fn set_size(&self, size_bytes: usize) {
        let words = words_for(size_bytes);
        *lock(&self.words) = words;
        let mut inner = lock(&self.inner);
        inner.free.retain(|b| b.len() == words);
        inner.stats.free = inner.free.len() as u64;
    }

    /// The size of buffers lent now, in bytes.
    #[cfg(test)]
    pub(crate) fn size(&self) -> usize {
        *lock(&self.words) * 8
    }

    /// Lends a zeroed buffer: reused when one is free, else newly allocated (outside the lock).
    /// Never returns null; allocation failure aborts the process, as it does everywhere in
    /// Rust.
    pub(crate) fn lend(&self) -> Lent {
        let words = *lock(&self.words);
        let reused = {
            let mut inner = lock(&self.inner);
            let b = inner.free.pop();
            inner.stats.free = inner.free.len() as u64;
            b
        };
        let fresh = reused.is_none();
        let buf = reused.unwrap_or_else(|| vec![0u64; words].into_boxed_slice());
        let len = buf.len();
        let raw: *mut [u64] = Box::into_raw(buf);
        let ptr = raw.cast::<u8>();
        let mut inner = lock(&self.inner);
        inner.lent.insert(ptr as usize, len);
        inner.stats.lent += 1;
        inner.stats.outstanding = inner.lent.len() as u64;
        if fresh {
            inner.stats.allocated += 1;
        }
        drop(inner);
        // `Box::into_raw` never returns null; the fallback keeps this function total.
        let ptr = NonNull::new(ptr).unwrap_or(NonNull::dangling());
        Lent { ptr, size: len * 8 }
    }

    /// Takes back a buffer CUPTI returned: `Some` exactly once for each pointer [`lend`]
    /// returned; `None` (counted as unknown) for any other pointer, including one already
    /// taken back. A `None` pointer is neither read nor freed.
    ///
    /// [`lend`]: BufferPool::lend
    pub(crate) fn reclaim(&self, ptr: *mut u8) -> Option<Owned> {
        let mut inner = lock(&self.inner);
        let Some(len) = inner.lent.remove(&(ptr as usize)) else {
            inner.stats.unknown += 1;
            return None;
        };
        inner.stats.reclaimed += 1;
        inner.stats.outstanding = inner.lent.len() as u64;
        drop(inner);
        let raw = std::ptr::slice_from_raw_parts_mut(ptr.cast::<u64>(), len);
        // SAFETY: `ptr` was in the registry, so it came from `Box::into_raw` of a
        // `Box<[u64]>` of `len` words in `lend`; it has just been removed under the lock, so
        // this is the only place that turns it back into a `Box` (at most once).
        let words = unsafe { Box::from_raw(raw) };
        Some(Owned { words })
    }

    /// Zeroes a taken-back buffer and keeps it for reuse, or frees it when enough are kept or
    /// its size is no longer current.
    pub(crate) fn recycle(&self, buf: Owned) {
        let words = *lock(&self.words);
        let mut b = buf.words;
        if b.len() != words || lock(&self.inner).free.len() >= self.keep {
            return;
        }
        b.fill(0);
        let mut inner = lock(&self.inner);
        if inner.free.len() < self.keep {
            inner.free.push(b);
        }
        inner.stats.free = inner.free.len() as u64;
    }

    /// The pool's counters.
    pub(crate) fn stats(&self) -> PoolStats {
        lock(&self.inner).stats
    }
}

fn words_for(size_bytes: usize) -> usize {
    size_bytes.div_ceil(8).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lent_buffers_are_aligned_zeroed_and_come_back_once() {
        let pool = BufferPool::new(1001, 2);
        assert_eq!(pool.size(), 1008);
        let a = pool.lend();
        assert_eq!(a.size, 1008);
        assert_eq!(a.ptr.as_ptr() as usize % 8, 0);
        let owned = pool.reclaim(a.ptr.as_ptr()).expect("lent by the pool");
        assert!(owned.bytes().iter().all(|&b| b == 0));
        assert!(pool.reclaim(a.ptr.as_ptr()).is_none(), "second reclaim");
        let mut x = 7u64;
        assert!(pool.reclaim((&mut x as *mut u64).cast()).is_none());
        assert!(pool.reclaim(std::ptr::null_mut()).is_none());
        pool.recycle(owned);
        let s = pool.stats();
        assert_eq!(
            (s.lent, s.reclaimed, s.unknown, s.outstanding),
            (1, 1, 3, 0)
        );
        assert_eq!((s.allocated, s.free), (1, 1));
    }

    #[test]
    fn recycled_buffers_are_zeroed_again() {
        let pool = BufferPool::new(64, 1);
        let a = pool.lend();
        // SAFETY: `a` is a live lent buffer of 64 bytes that nothing else touches.
        unsafe { std::ptr::write_bytes(a.ptr.as_ptr(), 0xAB, a.size) };
        let owned = pool.reclaim(a.ptr.as_ptr()).expect("lent");
        assert!(owned.bytes().iter().all(|&b| b == 0xAB));
        pool.recycle(owned);
        let b = pool.lend();
        assert_eq!(b.ptr, a.ptr, "the free buffer is reused");
        let owned = pool.reclaim(b.ptr.as_ptr()).expect("lent");
        assert!(owned.bytes().iter().all(|&b| b == 0));
        assert_eq!(pool.stats().allocated, 1);
    }

    #[test]
    fn size_changes_drop_old_buffers() {
        let pool = BufferPool::new(64, 4);
        let a = pool.lend();
        pool.set_size(128);
        let owned = pool.reclaim(a.ptr.as_ptr()).expect("lent");
        assert_eq!(owned.len_bytes(), 64);
        pool.recycle(owned);
        assert_eq!(pool.stats().free, 0);
        assert_eq!(pool.lend().size, 128);
    }
}
