//! A priority queue for items that mostly arrive in order: the reorder buffer's pending
//! records and the duplicate table's times.
//!
//! Sources hand the meter their records sorted by start (a file's, or each buffer of a
//! stream's), so nearly every push is at or after the previous one. Such pushes go to the back
//! of a sorted ring buffer, and the front pops in O(1) without the O(log n) sift of a binary
//! heap over the hundreds of thousands of records a 60 s reordering horizon holds (each level
//! of which is a cache miss). The rare push that comes before the ring's last item goes to a
//! binary heap; a pop takes the greater of the two fronts. It pops exactly what a
//! [`BinaryHeap`] of the same pushes pops (equal items are indistinguishable), so it changes
//! no result.

use std::collections::{BinaryHeap, VecDeque};

/// A max-queue with [`BinaryHeap`]'s `push`/`peek`/`pop`: pushes in non-increasing order (for
/// `Reverse<T>` items: non-decreasing `T`) cost O(1) and so do their pops; other pushes cost
/// O(log n) in a heap beside the sorted ring.
#[derive(Debug, Clone)]
pub(super) struct MostlySorted<T> {
    /// Items in non-increasing order (front = greatest).
    sorted: VecDeque<T>,
    /// Items that came before the ring's last item when pushed.
    heap: BinaryHeap<T>,
}

impl<T: Ord> Default for MostlySorted<T> {
    fn default() -> Self {
        MostlySorted {
            sorted: VecDeque::new(),
            heap: BinaryHeap::new(),
        }
    }
}

impl<T: Ord> MostlySorted<T> {
    /// An empty queue.
    pub(super) fn new() -> Self {
        Self::default()
    }

    /// Adds an item.
    pub(super) fn push(&mut self, item: T) {
        match self.sorted.back() {
            Some(last) if *last < item => self.heap.push(item),
            _ => self.sorted.push_back(item),
        }
    }

    /// Whether the heap's front is the greater one (the one to pop).
    fn heap_first(&self) -> bool {
        match (self.sorted.front(), self.heap.peek()) {
            (Some(s), Some(h)) => h > s,
            (None, Some(_)) => true,
            _ => false,
        }
    }

    /// The greatest item.
    pub(super) fn peek(&self) -> Option<&T> {
        if self.heap_first() {
            self.heap.peek()
        } else {
            self.sorted.front()
        }
    }

    /// Removes and returns the greatest item.
    pub(super) fn pop(&mut self) -> Option<T> {
        if self.heap_first() {
            self.heap.pop()
        } else {
            self.sorted.pop_front()
        }
    }

    /// Items held.
    pub(super) fn len(&self) -> usize {
        self.sorted.len() + self.heap.len()
    }

    /// Every item, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        self.sorted.iter().chain(self.heap.iter())
    }

    /// Forgets every item (capacity is kept).
    pub(super) fn clear(&mut self) {
        self.sorted.clear();
        self.heap.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pops what a `BinaryHeap` of the same pushes pops, pushes and pops interleaved, for
    /// sequences in order, reversed and shuffled.
    #[test]
    fn pops_as_a_binary_heap() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for shape in 0..4 {
            let mut q = MostlySorted::new();
            let mut h = BinaryHeap::new();
            for i in 0..5000u64 {
                let v = match shape {
                    0 => std::cmp::Reverse(i / 3),
                    1 => std::cmp::Reverse(5000 - i),
                    2 => std::cmp::Reverse(next() % 100),
                    _ => std::cmp::Reverse(i + next() % 50),
                };
                q.push(v);
                h.push(v);
                if next() % 3 == 0 {
                    assert_eq!(q.pop(), h.pop());
                }
                assert_eq!(q.peek(), h.peek());
                assert_eq!(q.len(), h.len());
            }
            while let Some(v) = h.pop() {
                assert_eq!(q.pop(), Some(v));
            }
            assert_eq!(q.pop(), None);
            assert_eq!(q.len(), 0);
        }
    }
}
