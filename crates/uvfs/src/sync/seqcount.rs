//! A sequence count: lockless readers detect a concurrent writer and retry.
//!
//! Mirrors Linux's `seqcount_t`. Writers are serialized by a lock of their own (the
//! count does not lock); every datum read inside a read section must itself be an atomic
//! (so a torn read is merely a stale value, never undefined behaviour), and the reader
//! decides nothing from it until [`SeqCount::read_retry`] says no writer intervened.
//!
//! Memory ordering, as in crossbeam's `seq_lock.rs`: the writer makes the count odd, issues
//! a release fence, writes the data, then publishes the even count with release; the reader
//! loads the count with acquire, reads the data, issues an acquire fence and reloads the
//! count. Loom models of this handoff are in `tests` below (`RUSTFLAGS="--cfg loom"`).

#[cfg(loom)]
use loom::sync::atomic::{AtomicU32, Ordering, fence};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU32, Ordering, fence};

/// Bit of a poisoned count: a writer panicked inside a section whose data it may have
/// left half-changed ([`SeqCount::write_poisoning`]). Set with the odd bit, for good.
const POISON: u32 = 1 << 31;

/// A writer panicked inside a poisoning section: the protected data cannot be trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Poisoned;

/// A sequence count. Even: stable; odd: a writer is inside (or, with `POISON`, it
/// panicked there).
#[derive(Debug, Default)]
pub struct SeqCount {
    /// Atomic; written only by the holder of the owner's write lock. Counts in the low 31
    /// bits; bit 31 is [`POISON`].
    seq: AtomicU32,
}

impl SeqCount {
    /// A count with no writer inside.
    #[cfg(not(loom))]
    pub const fn new() -> SeqCount {
        SeqCount { seq: AtomicU32::new(0) }
    }

    /// A count with no writer inside.
    #[cfg(loom)]
    pub fn new() -> SeqCount {
        SeqCount { seq: AtomicU32::new(0) }
    }

    /// Starts a read section, or `None` while a writer is inside or the count is poisoned
    /// (the caller falls back rather than spinning, so a stalled writer can never stall
    /// readers, and a lockless reader never answers from poisoned data).
    #[inline]
    pub fn try_read_begin(&self) -> Option<u32> {
        let s = self.seq.load(Ordering::Acquire);
        if s & 1 == 0 { Some(s) } else { None }
    }

    /// Starts a read section, spinning while a writer is inside; `Poisoned` if a writer
    /// panicked inside a poisoning section.
    #[inline]
    pub fn read_begin(&self) -> Result<u32, Poisoned> {
        loop {
            let s = self.seq.load(Ordering::Acquire);
            if s & 1 == 0 {
                return Ok(s);
            }
            if s & POISON != 0 {
                return Err(Poisoned);
            }
            std::hint::spin_loop();
            #[cfg(loom)]
            loom::thread::yield_now();
        }
    }

    /// Whether a writer is inside (for `debug_assert!`s of preconditions).
    #[inline]
    pub fn in_write_section(&self) -> bool {
        self.seq.load(Ordering::Relaxed) & (1 | POISON) == 1
    }

    /// Whether a writer entered since `start`: if so, what was read must be discarded.
    #[inline]
    pub fn read_retry(&self, start: u32) -> bool {
        fence(Ordering::Acquire);
        self.seq.load(Ordering::Relaxed) != start
    }

    /// Enters a write section. The caller holds the owner's write lock.
    #[inline]
    fn write_begin(&self) {
        let s = self.seq.load(Ordering::Relaxed);
        debug_assert!(s & 1 == 0, "nested seqcount writer");
        self.seq.store(s.wrapping_add(1) & !POISON, Ordering::Relaxed);
        fence(Ordering::Release);
    }

    /// Leaves a write section.
    #[inline]
    fn write_end(&self) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1) & !POISON, Ordering::Release);
    }

    /// Enters a write section (the caller holds the owner's write lock) until the guard
    /// goes. A panic inside leaves the count even like a normal end: for data each of
    /// whose fields is an atomic that is valid on its own (an inode's attributes), so
    /// readers see old or new values, never stall.
    #[inline]
    pub fn write(&self) -> SeqWriteGuard<'_> {
        self.write_begin();
        SeqWriteGuard { seq: self, poison_on_unwind: false }
    }

    /// As [`SeqCount::write`], for data a panic could leave half-changed (the dcache in a
    /// rename): a panic inside poisons the count for good, so that lockless readers fall
    /// back and [`SeqCount::read_begin`] answers `Poisoned` instead of spinning forever.
    /// `Poisoned` if it already is.
    #[inline]
    pub fn write_poisoning(&self) -> Result<SeqWriteGuard<'_>, Poisoned> {
        if self.seq.load(Ordering::Relaxed) & POISON != 0 {
            return Err(Poisoned);
        }
        self.write_begin();
        Ok(SeqWriteGuard { seq: self, poison_on_unwind: true })
    }
}

/// A write section of a [`SeqCount`]; ends when dropped, also on unwind.
pub struct SeqWriteGuard<'a> {
    seq: &'a SeqCount,
    poison_on_unwind: bool,
}

impl Drop for SeqWriteGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.poison_on_unwind && std::thread::panicking() {
            self.seq.seq.store(POISON | 1, Ordering::Release);
        } else {
            self.seq.write_end();
        }
    }
}

#[cfg(all(test, loom))]
mod tests {
    use super::*;
    use loom::sync::Arc;
    use loom::sync::atomic::AtomicU64;

    /// Two data words written together must never be observed half-updated by a reader
    /// whose section validates.
    #[test]
    fn loom_reader_never_sees_torn_pair() {
        loom::model(|| {
            let s = Arc::new((SeqCount::new(), AtomicU64::new(0), AtomicU64::new(0)));
            let w = s.clone();
            let writer = loom::thread::spawn(move || {
                for v in 1..=2u64 {
                    let _w = w.0.write();
                    w.1.store(v, Ordering::Relaxed);
                    w.2.store(v, Ordering::Relaxed);
                }
            });
            if let Some(start) = s.0.try_read_begin() {
                let a = s.1.load(Ordering::Relaxed);
                let b = s.2.load(Ordering::Relaxed);
                if !s.0.read_retry(start) {
                    assert_eq!(a, b, "validated read section saw a torn pair");
                }
            }
            writer.join().unwrap();
        });
    }

    /// The walk's handoff with a rename (`Task::walk` against `renameat2`): the writer, in
    /// one write section, removes a name from directory A's map and inserts it in B's (two
    /// atomics: "present in A", "present in B"), then moves it back in a second section. The
    /// reader does what the walk does: up to two lockless attempts (`try_read_begin`, read,
    /// `read_retry`), then the locked tier (the writer's lock). Every answer it keeps must
    /// see the name in exactly one directory: never in neither (a spurious ENOENT), never in
    /// both.
    #[test]
    fn loom_walk_sees_renamed_name_in_exactly_one_dir() {
        use loom::sync::Mutex;
        use loom::sync::atomic::AtomicBool;
        loom::model(|| {
            let s = Arc::new((SeqCount::new(), AtomicBool::new(true), AtomicBool::new(false), Mutex::new(())));
            let w = s.clone();
            let writer = loom::thread::spawn(move || {
                for to_b in [true, false] {
                    let _rename_lock = w.3.lock().unwrap();
                    let _w = w.0.write_poisoning().unwrap();
                    // d_unhash from the old directory, then d_insert in the new one.
                    let (from, to) = if to_b { (&w.1, &w.2) } else { (&w.2, &w.1) };
                    from.store(false, Ordering::Relaxed);
                    to.store(true, Ordering::Relaxed);
                }
            });
            let mut answer = None;
            for _ in 0..2 {
                let Some(start) = s.0.try_read_begin() else { break };
                let (a, b) = (s.1.load(Ordering::Relaxed), s.2.load(Ordering::Relaxed));
                if !s.0.read_retry(start) {
                    answer = Some((a, b));
                    break;
                }
            }
            let (a, b) = answer.unwrap_or_else(|| {
                let _locked = s.3.lock().unwrap();
                (s.1.load(Ordering::Relaxed), s.2.load(Ordering::Relaxed))
            });
            assert!(a != b, "validated walk saw the name in A: {a}, in B: {b}");
            writer.join().unwrap();
        });
    }

    /// A reader that validates after the writer finished sees the new values.
    #[test]
    fn loom_validated_read_after_write_is_current() {
        loom::model(|| {
            let s = Arc::new((SeqCount::new(), AtomicU64::new(0)));
            let w = s.clone();
            let writer = loom::thread::spawn(move || {
                let _w = w.0.write();
                w.1.store(7, Ordering::Relaxed);
            });
            writer.join().unwrap();
            let start = s.0.read_begin().unwrap();
            let v = s.1.load(Ordering::Relaxed);
            assert!(!s.0.read_retry(start));
            assert_eq!(v, 7);
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn writer_makes_readers_retry() {
        let s = SeqCount::new();
        let start = s.try_read_begin().unwrap();
        let w = s.write();
        assert!(s.try_read_begin().is_none(), "odd count must refuse a reader");
        drop(w);
        assert!(s.read_retry(start));
        let again = s.read_begin().unwrap();
        assert!(!s.read_retry(again));
    }

    /// A panic inside a write section never leaves readers spinning: a plain section
    /// ends as usual, a poisoning one poisons the count for good.
    #[test]
    fn a_panicking_writer_never_stalls_readers() {
        let s = SeqCount::new();
        let before = s.read_begin().unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _w = s.write();
            panic!("inside a write section");
        }));
        assert!(r.is_err());
        let after = s.try_read_begin().expect("count left even");
        assert!(s.read_retry(before) && !s.read_retry(after));

        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _w = s.write_poisoning().unwrap();
            panic!("inside a poisoning section");
        }));
        assert!(r.is_err());
        assert_eq!(s.try_read_begin(), None, "lockless readers fall back");
        assert_eq!(s.read_begin(), Err(Poisoned), "locked readers are told, not stalled");
        assert!(s.read_retry(after));
        assert!(s.write_poisoning().is_err(), "no writer proceeds on poisoned data");
    }

    /// Counts wrap within 31 bits and never set the poison bit.
    #[test]
    fn counts_wrap_without_poisoning() {
        let s = SeqCount { seq: AtomicU32::new(!POISON - 1) };
        drop(s.write());
        assert_eq!(s.read_begin(), Ok(0));
    }
}
