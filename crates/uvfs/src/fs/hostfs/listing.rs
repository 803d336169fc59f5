//! Host directory listings kept whole where nothing changes the host behind uvfs's back
//! (`HostChanges::Never`). The role of NFS's directory page cache (`nfs_readdir` keeps a
//! directory's entries, cookies included, in its page cache and drops them when the
//! directory changes).
//!
//! A listing read from the host from its start to its end is kept on its directory, with
//! the host's own cookies, and later listings (another reader, the same reader after a
//! `rewinddir`, the FUSE kernel asking again after it dropped its cached listing) are
//! served from it: no `openat`, `getdents64` or `close` of the host directory, and no
//! host filesystem building its hash-ordered view of the directory again (ext4's
//! `htree`). Served cursors are the host's cookies, so a listing may go on from the host
//! where the kept one was dropped, and the other way round.
//!
//! **Kept exact.** Every change of a directory's entries through uvfs (a create of any
//! type, link, unlink, rmdir, rename in or out, a whiteout) drops its listing after the
//! host call, and moves its generation on: a listing read from the host while such a
//! change was made is not kept, whichever finished first (the reader notes the generation
//! before it reads and keeps the listing only if it has not moved). A removed directory's
//! own listing is dropped too (the host lists it as empty from then on).
//!
//! **Bounded.** At most [`DIR_MAX`] entries a directory, and `HostFsOptions::listing_limit`
//! entries kept in all by an instance; a listing that would go past either is served from
//! the host as before. A kept listing lives as long as its directory's inode, or until
//! dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::core::superblock::DirEntry;
use crate::sync::Mutex;

/// Entries of one directory kept at most.
pub(super) const DIR_MAX: usize = 1 << 16;

/// One kept entry: the name is `names[start..end]` of its listing, `start` the previous
/// entry's `end` (`u32`: a `getdents64` record's length is 16 bits, so [`DIR_MAX`]
/// names take less than 2^32 bytes).
struct Ent {
    ino: u64,
    /// The host's cookie of the entry after this one (`d_off`).
    next: u64,
    end: u32,
    dtype: u8,
}

/// A whole listing of a directory, in the host's order.
pub(super) struct Listing {
    ents: Box<[Ent]>,
    names: Box<[u8]>,
    /// Whether the cookies never go down (so a cursor is found by binary search).
    sorted: bool,
    /// The instance's count of kept entries, given back when the listing goes.
    kept: Arc<AtomicUsize>,
}

impl Drop for Listing {
    fn drop(&mut self) {
        self.kept.fetch_sub(self.ents.len(), Ordering::Relaxed);
    }
}

/// A listing being read from the host, kept if it reaches the directory's end.
pub(super) struct Builder {
    ents: Vec<Ent>,
    names: Vec<u8>,
    /// Too big to keep (more than [`DIR_MAX`] entries).
    over: bool,
}

impl Builder {
    pub(super) fn new() -> Builder {
        Builder { ents: Vec::new(), names: Vec::new(), over: false }
    }

    /// Whether the listing is past what is kept.
    pub(super) fn over(&self) -> bool {
        self.over
    }

    /// Adds the next entry read from the host.
    pub(super) fn push(&mut self, e: &DirEntry) {
        if self.over {
            return;
        }
        if self.ents.len() >= DIR_MAX {
            self.over = true;
            self.ents = Vec::new();
            self.names = Vec::new();
            return;
        }
        self.names.extend_from_slice(&e.name);
        self.ents.push(Ent { ino: e.ino, next: e.next, end: self.names.len() as u32, dtype: e.dtype });
    }
}

/// A directory's kept listing and its generation. Leaf lock.
#[derive(Default)]
pub(super) struct DirListing(Mutex<State>);

#[derive(Default)]
struct State {
    /// Moves on with every change of the directory's entries.
    generation: u64,
    kept: Option<Arc<Listing>>,
}

impl DirListing {
    /// The kept listing, if any.
    pub(super) fn get(&self) -> Option<Arc<Listing>> {
        self.0.lock().kept.clone()
    }

    /// The generation a listing about to be read from the host is of.
    pub(super) fn generation(&self) -> u64 {
        self.0.lock().generation
    }

    /// Keeps `b`, read whole from the host since [`DirListing::generation`] gave `at`,
    /// unless the directory changed since, the listing is too big, or the instance's
    /// listings would then hold more than `limit` entries (`kept` counts them). Whether it
    /// was kept.
    pub(super) fn keep(&self, at: u64, b: Builder, kept: &Arc<AtomicUsize>, limit: usize) -> bool {
        if b.over {
            return false;
        }
        let n = b.ents.len();
        if kept.fetch_add(n, Ordering::Relaxed) + n > limit {
            kept.fetch_sub(n, Ordering::Relaxed);
            return false;
        }
        let sorted = b.ents.windows(2).all(|w| w[0].next <= w[1].next);
        let l = Arc::new(Listing {
            ents: b.ents.into_boxed_slice(),
            names: b.names.into_boxed_slice(),
            sorted,
            kept: kept.clone(),
        });
        let (old, is_kept) = {
            let mut s = self.0.lock();
            if s.generation != at { (None, false) } else { (s.kept.replace(l.clone()), true) }
        };
        // Dropped outside the lock (the one not kept, or the one replaced).
        drop((old, l));
        is_kept
    }

    /// The directory's entries changed (after the host call that changed them).
    pub(super) fn changed(&self) {
        let old = {
            let mut s = self.0.lock();
            s.generation += 1;
            s.kept.take()
        };
        drop(old);
    }
}

impl Listing {
    /// Gives the entries after cursor `at` to `out` until it refuses one or the listing
    /// ends. `false` if `at` is no cursor of this listing (the caller asks the host).
    pub(super) fn serve(&self, at: u64, out: &mut dyn FnMut(DirEntry) -> bool) -> bool {
        let from = if at == 0 {
            0
        } else if self.sorted {
            // After the first entry whose cookie is `at`: the host, seeked to `at`, gives
            // every entry at that position (entries whose hashes collide share one).
            let j = self.ents.partition_point(|e| e.next < at);
            if j == self.ents.len() || self.ents[j].next != at {
                return false;
            }
            j + 1
        } else {
            match self.ents.iter().position(|e| e.next == at) {
                Some(i) => i + 1,
                None => return false,
            }
        };
        let mut start = if from == 0 { 0 } else { self.ents[from - 1].end as usize };
        for e in &self.ents[from..] {
            let name = self.names[start..e.end as usize].to_vec();
            start = e.end as usize;
            if !out(DirEntry { ino: e.ino, next: e.next, dtype: e.dtype, name }) {
                break;
            }
        }
        true
    }
}
