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
//! - remove: a binary search (none for the first child), and the slot left empty; empty
//!   slots at either end go at once, which is every removal of `rm -rf` (it removes in
//!   readdir order), and a chunk is compacted when more than half of it is empty slots
//!   (so a removal never passes over the whole order);
//! - a cursor: a binary search for the first position at or after it.
//!
//! 16 bytes a child, where a `BTreeMap` of the same took some 30 and a search of its nodes
//! at every create. Protected by the directory's lock (`DirLocked`), like the whole of it.

use std::collections::VecDeque;

/// Most entries a chunk is filled to by appends (16 KiB of them).
const CHUNK: usize = 1024;

/// A run of (position, child) in increasing position; `None`: removed, not yet compacted.
struct Chunk<T> {
    slots: VecDeque<(u64, Option<T>)>,
    /// The `None` slots.
    holes: usize,
}

impl<T> Chunk<T> {
    fn with(pos: u64, v: T) -> Chunk<T> {
        Chunk { slots: VecDeque::from([(pos, Some(v))]), holes: 0 }
    }

    /// Drops the empty slots at the front (`front`) or the back.
    fn trim(&mut self, front: bool) {
        loop {
            let end = if front { self.slots.front() } else { self.slots.back() };
            if end.is_none_or(|s| s.1.is_some()) {
                break;
            }
            if front {
                self.slots.pop_front()
            } else {
                self.slots.pop_back()
            };
            self.holes -= 1;
        }
    }

    /// Compacts the chunk once more than half of it is empty slots, and gives back the room
    /// it no longer needs: each removal costs a bounded share of its chunk, never a pass
    /// over the whole order.
    fn tidy(&mut self) {
        if self.holes > 8 && self.holes * 2 > self.slots.len() {
            self.slots.retain(|s| s.1.is_some());
            self.holes = 0;
        }
        if self.slots.capacity() > 64 && self.slots.capacity() > 4 * self.slots.len() {
            self.slots.shrink_to(2 * self.slots.len());
        }
    }
}

/// Children by readdir position. Protected by the directory lock.
pub(crate) struct OffsetMap<T> {
    /// The chunks, in increasing position; none is empty, and the first does not begin,
    /// nor the last end, with `None`.
    chunks: VecDeque<Chunk<T>>,
}

impl<T> Default for OffsetMap<T> {
    fn default() -> Self {
        OffsetMap { chunks: VecDeque::new() }
    }
}

impl<T> OffsetMap<T> {
    /// Where `pos` is, or would be inserted: (chunk, index in it); the chunk is the
    /// number of chunks when `pos` is after all of them.
    fn index(&self, pos: u64) -> (usize, usize) {
        let c = self.chunks.partition_point(|ch| ch.slots.back().is_some_and(|&(p, _)| p < pos));
        let i = self.chunks.get(c).map_or(0, |ch| ch.slots.partition_point(|&(p, _)| p < pos));
        (c, i)
    }

    /// Puts `v` at `pos`, which holds nothing. Inlined where called: a new name's
    /// position is past every other, which goes at the back; the rest is a call.
    #[inline]
    pub(crate) fn insert(&mut self, pos: u64, v: T) {
        let last = self.chunks.back().and_then(|ch| ch.slots.back()).map(|&(p, _)| p);
        if last.is_none_or(|l| l < pos) {
            match self.chunks.back_mut() {
                Some(ch) if ch.slots.len() < CHUNK => ch.slots.push_back((pos, Some(v))),
                _ => self.chunks.push_back(Chunk::with(pos, v)),
            }
            return;
        }
        self.insert_inside(pos, v);
    }

    /// [`OffsetMap::insert`] of a position before the last one.
    #[inline(never)]
    fn insert_inside(&mut self, pos: u64, v: T) {
        let (c, i) = self.index(pos);
        let ch = &mut self.chunks[c];
        match ch.slots.get_mut(i) {
            Some((p, slot)) if *p == pos => {
                debug_assert!(slot.is_none(), "position {pos} given twice");
                if slot.replace(v).is_none() {
                    ch.holes -= 1;
                }
            }
            _ => ch.slots.insert(i, (pos, Some(v))),
        }
    }

    /// Takes what is at `pos`.
    pub(crate) fn remove(&mut self, pos: u64) -> Option<T> {
        // `rm -rf` removes in readdir order: the first child, found without a search, and
        // taken off the front (the first chunk begins with a child) with the empty slots
        // right behind it.
        if let Some(ch) = self.chunks.front_mut()
            && ch.slots.front().is_some_and(|&(p, _)| p == pos)
        {
            let v = ch.slots.pop_front().and_then(|(_, v)| v);
            ch.trim(true);
            if ch.slots.is_empty() {
                // The next chunk, now the first, may begin with empty slots.
                self.chunks.pop_front();
                self.trim_ends();
            } else {
                ch.tidy();
            }
            return v;
        }
        let (c, i) = self.index(pos);
        let ch = self.chunks.get_mut(c)?;
        let v = match ch.slots.get_mut(i) {
            Some((p, slot)) if *p == pos => slot.take()?,
            _ => return None,
        };
        ch.holes += 1;
        if c == 0 {
            ch.trim(true);
        }
        if c + 1 == self.chunks.len() {
            self.chunks[c].trim(false);
        }
        let ch = &mut self.chunks[c];
        ch.tidy();
        if ch.slots.is_empty() {
            // Once per chunk's worth of removals: a shift of the chunks' headers. The
            // chunks that became the ends may begin or end with empty slots.
            self.chunks.remove(c);
            self.trim_ends();
        }
        Some(v)
    }

    /// Drops the empty slots at both ends of the order, and the chunks that leaves empty.
    fn trim_ends(&mut self) {
        for front in [true, false] {
            loop {
                let end = if front { self.chunks.front_mut() } else { self.chunks.back_mut() };
                let Some(ch) = end else { return };
                ch.trim(front);
                if !ch.slots.is_empty() {
                    break;
                }
                if front {
                    self.chunks.pop_front()
                } else {
                    self.chunks.pop_back()
                };
            }
        }
    }

    /// The children at `from` and after, with their positions, in order.
    pub(crate) fn range_from(&self, from: u64) -> impl Iterator<Item = (u64, &T)> {
        let (c, i) = self.index(from);
        self.chunks
            .range(c..)
            .enumerate()
            .flat_map(move |(k, ch)| ch.slots.range(if k == 0 { i } else { 0 }..))
            .filter_map(|(p, v)| v.as_ref().map(|v| (*p, v)))
    }

    /// The children, in order.
    #[cfg(test)]
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flat_map(|ch| &ch.slots).filter_map(|(_, v)| v.as_ref())
    }

    /// All slots, empty ones included.
    #[cfg(test)]
    fn slots(&self) -> usize {
        self.chunks.iter().map(|ch| ch.slots.len()).sum()
    }

    /// The number of children.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.chunks.iter().map(|ch| ch.slots.len() - ch.holes).sum()
    }

    /// Whether there is no child (a directory `rmdir` may remove).
    pub(crate) fn is_empty(&self) -> bool {
        // Never chunks of empty slots only: an emptied chunk goes at once.
        self.chunks.is_empty()
    }

    /// Forgets every child.
    pub(crate) fn clear(&mut self) {
        self.chunks = VecDeque::new();
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
                // The first child, as `rm -rf` removes (its own path in `remove`).
                6 => {
                    let Some(&pos) = want.keys().next() else { continue };
                    assert_eq!(m.remove(pos), want.remove(&pos), "remove the first, {pos}");
                }
                _ => {
                    let pos = rnd(next + 3);
                    assert_eq!(m.remove(pos), want.remove(&pos), "remove {pos}");
                }
            }
            assert_eq!(m.len(), want.len());
            let ends = (m.chunks.front().map(|ch| ch.slots.front()), m.chunks.back().map(|ch| ch.slots.back()));
            assert!(
                matches!(ends, (None, None) | (Some(Some((_, Some(_)))), Some(Some((_, Some(_)))))),
                "the order begins or ends with an empty slot"
            );
            assert!(m.slots() <= 2 * want.len() + 9, "slots {} for {} children", m.slots(), want.len());
            assert!(m.chunks.iter().all(|ch| !ch.slots.is_empty()), "an empty chunk");
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
        assert!(m.chunks.iter().all(|ch| ch.slots.capacity() <= 2 * super::CHUNK));
        for p in 2..5_002u64 {
            assert_eq!(m.remove(p), Some(p));
            assert_eq!(m.chunks.iter().map(|ch| ch.holes).sum::<usize>(), 0);
        }
        for p in (5_002..10_002u64).rev() {
            assert_eq!(m.remove(p), Some(p));
            assert_eq!(m.chunks.iter().map(|ch| ch.holes).sum::<usize>(), 0);
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
        assert!(m.chunks[0].slots.capacity() <= 64, "capacity {} for 12 children", m.chunks[0].slots.capacity());
    }
}
