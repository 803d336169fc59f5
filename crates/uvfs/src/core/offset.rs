//! A directory's readdir order: each positive child under a position that a `getdents`
//! cursor can resume from, however the directory changes meanwhile. Mirrors Linux's
//! directory offset map (`struct offset_ctx`, `simple_offset_add`/`_remove` in
//! `fs/libfs.c`, which tmpfs uses since 6.6), with a simpler shape than its maple tree:
//! a position is handed out once, in increasing order (`DirLocked::next_pos`), so the
//! entries are appended at the end of a sequence sorted by position, kept in chunks of at
//! most [`CHUNK`] (so that a huge directory never copies its whole order to grow it: one
//! deque of 512k entries doubling was an 8 MB copy, 3 ms for one create).
//!
//! - insert: a push at the back, no search (a position lower than the last is still
//!   placed in order, by a binary search and a shift in its chunk; nothing hands one out
//!   today);
//! - remove: a binary search, and the slot left empty; empty slots at either end go at
//!   once, which is every removal of `rm -rf` (it removes in readdir order), and the
//!   order is compacted when more than half of it is empty slots;
//! - a cursor: a binary search for the first position at or after it.
//!
//! 16 bytes a child, where a `BTreeMap` of the same took some 30 and a search of its nodes
//! at every create. Protected by the directory's lock (`DirLocked`), like the whole of it.

use std::collections::VecDeque;

/// Most entries a chunk is filled to by appends (16 KiB of them).
const CHUNK: usize = 1024;

/// A run of (position, child) in increasing position; `None`: removed, not yet compacted.
type Chunk<T> = VecDeque<(u64, Option<T>)>;

/// Children by readdir position. Protected by the directory lock.
pub(crate) struct OffsetMap<T> {
    /// The chunks, in increasing position; none is empty, and the first does not begin,
    /// nor the last end, with `None`.
    chunks: VecDeque<Chunk<T>>,
    /// The `None` slots.
    holes: usize,
}

impl<T> Default for OffsetMap<T> {
    fn default() -> Self {
        OffsetMap { chunks: VecDeque::new(), holes: 0 }
    }
}

/// Gives back what a chunk that shrank for good no longer needs.
fn shrink<T>(ch: &mut Chunk<T>) {
    if ch.capacity() > 64 && ch.capacity() > 4 * ch.len() {
        ch.shrink_to(2 * ch.len());
    }
}

impl<T> OffsetMap<T> {
    /// Where `pos` is, or would be inserted: (chunk, index in it); the chunk is the
    /// number of chunks when `pos` is after all of them.
    fn index(&self, pos: u64) -> (usize, usize) {
        let c = self.chunks.partition_point(|ch| ch.back().is_some_and(|&(p, _)| p < pos));
        let i = self.chunks.get(c).map_or(0, |ch| ch.partition_point(|&(p, _)| p < pos));
        (c, i)
    }

    /// All slots, empty ones included.
    fn slots(&self) -> usize {
        self.chunks.iter().map(VecDeque::len).sum()
    }

    /// Puts `v` at `pos`, which holds nothing.
    pub(crate) fn insert(&mut self, pos: u64, v: T) {
        let last = self.chunks.back().and_then(|ch| ch.back()).map(|&(p, _)| p);
        if last.is_none_or(|l| l < pos) {
            match self.chunks.back_mut() {
                Some(ch) if ch.len() < CHUNK => ch.push_back((pos, Some(v))),
                _ => {
                    let mut ch = VecDeque::new();
                    ch.push_back((pos, Some(v)));
                    self.chunks.push_back(ch);
                }
            }
            return;
        }
        let (c, i) = self.index(pos);
        let ch = &mut self.chunks[c];
        match ch.get_mut(i) {
            Some((p, slot)) if *p == pos => {
                debug_assert!(slot.is_none(), "position {pos} given twice");
                if slot.replace(v).is_none() {
                    self.holes -= 1;
                }
            }
            _ => ch.insert(i, (pos, Some(v))),
        }
    }

    /// Takes what is at `pos`.
    pub(crate) fn remove(&mut self, pos: u64) -> Option<T> {
        // `rm -rf` removes in readdir order: the first child, found without a search.
        let first = self.chunks.front().and_then(|ch| ch.front()).map(|&(p, _)| p);
        let (c, i) = if first == Some(pos) { (0, 0) } else { self.index(pos) };
        let v = match self.chunks.get_mut(c).and_then(|ch| ch.get_mut(i)) {
            Some((p, slot)) if *p == pos => slot.take()?,
            _ => return None,
        };
        self.holes += 1;
        while let Some(ch) = self.chunks.front_mut() {
            while ch.front().is_some_and(|s| s.1.is_none()) {
                ch.pop_front();
                self.holes -= 1;
            }
            if !ch.is_empty() {
                break;
            }
            self.chunks.pop_front();
        }
        while let Some(ch) = self.chunks.back_mut() {
            while ch.back().is_some_and(|s| s.1.is_none()) {
                ch.pop_back();
                self.holes -= 1;
            }
            if !ch.is_empty() {
                break;
            }
            self.chunks.pop_back();
        }
        if self.holes > 8 && self.holes * 2 > self.slots() {
            for ch in &mut self.chunks {
                ch.retain(|s| s.1.is_some());
                shrink(ch);
            }
            self.chunks.retain(|ch| !ch.is_empty());
            self.holes = 0;
        }
        // The end chunks are the ones the trims above shortened.
        if let Some(ch) = self.chunks.front_mut() {
            shrink(ch);
        }
        if let Some(ch) = self.chunks.back_mut() {
            shrink(ch);
        }
        Some(v)
    }

    /// The children at `from` and after, with their positions, in order.
    pub(crate) fn range_from(&self, from: u64) -> impl Iterator<Item = (u64, &T)> {
        let (c, i) = self.index(from);
        self.chunks
            .range(c..)
            .enumerate()
            .flat_map(move |(k, ch)| ch.range(if k == 0 { i } else { 0 }..))
            .filter_map(|(p, v)| v.as_ref().map(|v| (*p, v)))
    }

    /// The children, in order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten().filter_map(|(_, v)| v.as_ref())
    }

    /// The number of children.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots() - self.holes
    }

    /// Whether there is no child (a directory `rmdir` may remove).
    pub(crate) fn is_empty(&self) -> bool {
        // Never chunks of empty slots only: those at either end go at once.
        self.chunks.is_empty()
    }

    /// Forgets every child.
    pub(crate) fn clear(&mut self) {
        self.chunks = VecDeque::new();
        self.holes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::OffsetMap;
    use std::collections::BTreeMap;

    /// Random inserts (mostly appends, as directories make them; sometimes below the last)
    /// and removes, checked after each step against a `BTreeMap`, the structure this
    /// replaces: the same children in the same order from every cursor, and the slots
    /// never more than about twice the children.
    #[test]
    fn behaves_as_an_ordered_map() {
        let mut x: u64 = 7;
        let mut rnd = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut m = OffsetMap::default();
        let mut want = BTreeMap::new();
        let mut next = 2u64;
        for step in 0..20_000u64 {
            match rnd(10) {
                0..=5 => {
                    let pos = if rnd(20) == 0 && next > 2 { rnd(next) } else { next };
                    if want.contains_key(&pos) {
                        continue;
                    }
                    next = next.max(pos + 1);
                    m.insert(pos, step);
                    want.insert(pos, step);
                }
                _ => {
                    let pos = rnd(next + 3);
                    assert_eq!(m.remove(pos), want.remove(&pos), "remove {pos}");
                }
            }
            assert_eq!(m.len(), want.len());
            assert!(m.slots() <= 2 * want.len() + 9, "slots {} for {} children", m.slots(), want.len());
            assert!(m.chunks.iter().all(|ch| !ch.is_empty()), "an empty chunk");
            if step % 97 == 0 {
                let from = rnd(next + 2);
                let got: Vec<(u64, u64)> = m.range_from(from).map(|(p, v)| (p, *v)).collect();
                let exp: Vec<(u64, u64)> = want.range(from..).map(|(p, v)| (*p, *v)).collect();
                assert_eq!(got, exp, "from {from}");
                assert!(m.values().copied().eq(want.values().copied()));
            }
        }
        m.clear();
        assert_eq!((m.len(), m.values().count()), (0, 0));
    }

    /// Removing in order (`rm -rf`) and in reverse leaves no empty slots behind, and a
    /// directory emptied after growing gives its memory back.
    #[test]
    fn removal_from_either_end_leaves_no_holes() {
        let mut m = OffsetMap::default();
        for p in 2..10_002u64 {
            m.insert(p, p);
        }
        assert_eq!(m.chunks.len(), 10_000usize.div_ceil(super::CHUNK), "appends fill chunks");
        assert!(m.chunks.iter().all(|ch| ch.capacity() <= 2 * super::CHUNK));
        for p in 2..5_002u64 {
            assert_eq!(m.remove(p), Some(p));
            assert_eq!(m.holes, 0);
        }
        for p in (5_002..10_002u64).rev() {
            assert_eq!(m.remove(p), Some(p));
            assert_eq!(m.holes, 0);
        }
        assert_eq!(m.len(), 0);
        assert!(m.is_empty() && m.chunks.capacity() <= 16, "chunks {} after emptying", m.chunks.capacity());
        assert_eq!(m.remove(3), None, "removed twice");
        // A full chunk thinned out from the middle is compacted and shrunk.
        for p in 0..super::CHUNK as u64 {
            m.insert(p, p);
        }
        for p in (1..super::CHUNK as u64 - 1).filter(|p| p % 100 != 0) {
            assert_eq!(m.remove(p), Some(p));
        }
        assert_eq!(m.values().count(), 12);
        assert!(m.chunks[0].capacity() <= 64, "capacity {} for 12 children", m.chunks[0].capacity());
    }
}
