//! The path cache: a deep cached path answered by one probe instead of a step per
//! component. After Tsai et al., "How to Get More Value From Your File System Directory
//! Cache" (SOSP 2015), whose direct lookup table maps a whole path to its dentry and
//! whose prefix check caches that the prefix may be searched; Linux has no such table.
//!
//! # What is cached
//! A successful lockless walk ([`crate::walk::namei`]) of a path, with no flags but `FOLLOW`, `DIRECTORY` and `EMPTY`, that stayed in
//! one mount of a dcache-complete filesystem (memfs), from a start that is not a removed
//! directory, in an attached mount. Its answer then depends on nothing outside that
//! filesystem's tree but the credentials' search permission on its directories, so it
//! is keyed by the instance, the credentials (their install serial: installed credentials
//! never change), the start and root positions, the flags and the path bytes, and holds
//! the dentry the walk found. Credentials no task installed (`access(2)`'s) have serial 0:
//! their walks are learned only when every directory let everyone search it (the walk's
//! `may_lookup` shortcut), which makes the answer anyone's.
//!
//! A walk to a name to create (`MISSING_OK`: `open` with `O_CREAT`) asks for, and
//! learns, the directory its path's last name is in, under the key of a walk of the path
//! before that name with `FOLLOW | DIRECTORY` (what the walk of a path's inner components
//! is; the same entry answers both). On a hit the walk looks up the last name only, with
//! its own search and write checks; the prefix's checks are what the entry stands for.
//! Only for parents at least two components away and paths of 16 bytes or more
//! (`PARENT_PROBE_MIN`): a nearer parent is walked about as fast as the cache answers.
//!
//! # Why an answer stays exact
//! An entry holds the two stamps its walk started under: the instance's rename sequence
//! (every rename and mount change moves it) and the filesystem's names stamp
//! ([`SuperBlock::names_stamp`](crate::core::superblock::SuperBlock::names_stamp)), which
//! a change marks from before it begins until after it is done: a name leaving the tree
//! (unhash, replace, prune) and who may search a directory changing (the execute bits of
//! its mode, its owner or group, its access ACL). Creates mark nothing: a new name
//! changes no path that resolved. An entry answers only while both stamps are what they
//! were and no change is in progress, that is while the tree its walk saw, and the
//! permissions it relied on, are still there. The names stamp is 64 bits and counts from
//! a base of its own per filesystem instance, so it never comes round, and no other
//! instance's equals it should an address be reused; the rename sequence (32 bits) only
//! has to tell mount changes apart, together with it.
//!
//! # Why a hit may read the dentry (the reclamation rule)
//! The entry holds a plain pointer, no count. A hit pins the collector, then reads the
//! stamps (sequentially consistent). A stamp no change has begun since means every
//! change that could take the dentry out of the tree begins after that read, so after the
//! pin; what such a change retires is then freed only after the hit unpins. A change
//! marks itself before it retires anything (`d_unhash` before the map retires its node;
//! `d_prune` before it drains), and a mount or rename moves the rename sequence inside
//! its write section. The start and root positions are only compared, never read.
//!
//! # Where it lives
//! One table per thread, made by the thread's first fill: [`SLOTS`] entries, direct
//! mapped, paths of up to [`INLINE`] bytes inline, a longer one in a buffer the entry
//! keeps and grows (so the table allocates once per thread, and an entry once per length
//! it has not held before; nothing afterwards; all freed when the thread exits).
//! Nothing in it is shared, so a hit writes no memory another thread reads; a fill writes
//! only this thread's table. Entries of an instance that is gone are never matched again
//! (instance ids are not reused) and are overwritten in time.

use std::cell::Cell;
use std::hash::{BuildHasher, Hasher};

use crate::core::dentry::Dentry;
use crate::core::path::Pos;

/// Entries per thread.
pub(crate) const SLOTS: usize = 64;

/// Path bytes an entry holds inline; a longer path goes to the entry's own buffer.
pub(crate) const INLINE: usize = 128;

/// What identifies a cached walk besides its path bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key {
    /// The instance ([`crate::core::instance::VfsInner::id`]); 0 marks an empty entry.
    vfs: u64,
    /// The credentials' install serial (0: answers that are anyone's).
    creds: u64,
    /// Start and root positions, as addresses (compared, never read).
    start_mnt: usize,
    start: usize,
    root_mnt: usize,
    root: usize,
    /// The walk's flags (`LookupFlags` bits).
    flags: u32,
}

impl Key {
    pub(crate) fn new(vfs: u64, creds: u64, start: &Pos<'_>, root: &Pos<'_>, flags: u32) -> Key {
        Key {
            vfs,
            creds,
            start_mnt: start.mnt.as_ptr() as usize,
            start: start.dentry.as_ptr() as usize,
            root_mnt: root.mnt.as_ptr() as usize,
            root: root.dentry.as_ptr() as usize,
            flags,
        }
    }

    fn hash(&self, path: &[u8]) -> u64 {
        let mut h = foldhash::fast::FixedState::with_seed(0x7061_7468_6361_6368).build_hasher();
        h.write(path);
        let h = h.finish();
        // Positions are 64-byte aligned allocations: drop the low bits before mixing.
        let k = (self.start as u64 >> 6)
            ^ (self.root as u64 >> 6).rotate_left(17)
            ^ self.creds.rotate_left(29)
            ^ (self.flags as u64).rotate_left(41)
            ^ self.vfs.rotate_left(53);
        (h ^ k).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
}

/// The stamps a walk started under (see the module docs).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamps {
    /// The instance's rename sequence (even).
    pub(crate) rename: u32,
    /// The filesystem's names stamp.
    pub(crate) names: u64,
}

struct Entry {
    key: Key,
    stamps: Stamps,
    /// The dentry the walk found.
    found: *const Dentry,
    /// The path's length (under `PATH_MAX`).
    len: u16,
    /// The path, if it is at most `INLINE` bytes.
    inline: [u8; INLINE],
    /// The path, if it is longer: a buffer kept for the next long path too.
    spill: Vec<u8>,
}

impl Entry {
    fn path(&self) -> &[u8] {
        let n = self.len as usize;
        if n <= INLINE { &self.inline[..n] } else { &self.spill[..n] }
    }

    fn set_path(&mut self, p: &[u8]) {
        self.len = p.len() as u16;
        if p.len() <= INLINE {
            self.inline[..p.len()].copy_from_slice(p);
        } else {
            self.spill.clear();
            self.spill.extend_from_slice(p);
        }
    }
}

const EMPTY: Entry = Entry {
    key: Key { vfs: 0, creds: 0, start_mnt: 0, start: 0, root_mnt: 0, root: 0, flags: 0 },
    stamps: Stamps { rename: 0, names: 0 },
    found: std::ptr::null(),
    len: 0,
    inline: [0; INLINE],
    spill: Vec::new(),
};

type Table = [Entry; SLOTS];

/// This thread's table: null until the first fill, then a `Box` it owns.
struct Holder(Cell<*mut Table>);

impl Drop for Holder {
    fn drop(&mut self) {
        let p = self.0.get();
        if !p.is_null() {
            // SAFETY: `p` came from `Box::into_raw` in `fill` and nothing else frees it.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

thread_local! {
    static TABLE: Holder = const { Holder(Cell::new(std::ptr::null_mut())) };
}

/// A cacheable walk's key and path, and the slot its hash picks.
pub(crate) struct Probe<'p> {
    key: Key,
    path: &'p [u8],
    slot: usize,
}

impl<'p> Probe<'p> {
    /// `path` is under `PATH_MAX` bytes (the walk checked).
    #[inline]
    pub(crate) fn new(key: Key, path: &'p [u8]) -> Probe<'p> {
        debug_assert!(path.len() < crate::abi::limits::PATH_MAX);
        let slot = (key.hash(path) >> 58) as usize % SLOTS;
        Probe { key, path, slot }
    }

    /// The dentry cached for this walk under exactly these stamps. The caller must be
    /// pinned since before it read `stamps` (see the module docs): the dentry is then
    /// alive for as long as it stays pinned. (Inlined whole, the thread's table found by a
    /// closure that only reads its pointer: it is a cached stat's whole cost, and the walk
    /// asks from two places.)
    #[inline(always)]
    pub(crate) fn lookup(&self, stamps: Stamps) -> Option<*const Dentry> {
        let t = TABLE.try_with(|h| h.0.get()).ok()?;
        if t.is_null() {
            return None;
        }
        // SAFETY: this thread's table, which its holder frees only when the thread's
        // locals are destroyed (`try_with` above then fails); the only other reference to
        // it is `fill`'s, on this thread and never held across calls.
        let e = unsafe { &(*t)[self.slot] };
        (e.key == self.key && e.stamps == stamps && e.path() == self.path).then_some(e.found)
    }

    /// Learns that this walk, started under `stamps`, found `found`.
    pub(crate) fn fill(&self, stamps: Stamps, found: *const Dentry) {
        let _ = TABLE.try_with(|h| {
            let mut t = h.0.get();
            if t.is_null() {
                t = Box::into_raw(Box::new([EMPTY; SLOTS]));
                h.0.set(t);
            }
            // SAFETY: as in `lookup`; no other reference to the table exists meanwhile.
            let e = unsafe { &mut (*t)[self.slot] };
            e.key = self.key;
            e.stamps = stamps;
            e.found = found;
            e.set_path(self.path);
        });
    }
}
