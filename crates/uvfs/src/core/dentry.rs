//! `Dentry`: a name in a directory. Mirrors Linux's `struct dentry`, but: a directory's
//! dentry owns the map of its children (there is no global hash), and a lookup of cached
//! names takes no reference count (`d_lockref`) at all.
//!
//! A dentry is positive (it has an inode, which never changes for its life) or negative
//! (it records that a name does not exist, for filesystems whose directories are not
//! complete in the cache). A directory's dentry owns the map of its children, which
//! lockless lookups probe; every change to the map happens under the directory's lock.
//!
//! Layout (seed 004): a dentry is one cache line, the fields a lookup reads
//! ([`DentryHot`]) and the readdir position (written only when the dentry is linked, as
//! its name and parent are); what changes while others look up (the `Arc` strong count,
//! which `align(64)` places on the cache line *before* the dentry, and hostfs's `d_time`,
//! behind `cold`) never shares that line. The checks at the end of this file assert it.

use std::borrow::Borrow;
use std::mem::MaybeUninit;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::core::inode::Inode;
use crate::sync::RwLock;
use crate::sync::rcu::{ArcBorrow, LocalGuard, Rcu, RcuArc, RcuBox};

/// A name in a directory: bytes, not UTF-8, at most 255 of them, in 16 bytes. A name of
/// at most [`Name::INLINE`] bytes is kept in the value itself (Linux's `d_iname`), so
/// it costs no allocation, and a children-map probe compares it inside the map's slot,
/// without a load from elsewhere; a longer one owns a heap copy.
#[repr(C, align(8))]
pub struct Name {
    /// Immutable. Inline (`len <= INLINE`): the bytes. Heap: the first 8 bytes hold the
    /// pointer of the owned `[u8; len]` (as `MaybeUninit` bytes, which keep a pointer's
    /// provenance when copied).
    bytes: [MaybeUninit<u8>; Name::INLINE],
    /// Immutable: the length, which also says where the bytes are.
    len: u8,
}

// The layout `Name` relies on: 16 bytes, the pointer slot 8-aligned at offset 0.
const _: () = assert!(std::mem::size_of::<Name>() == 16 && std::mem::align_of::<Name>() == 8);

impl Name {
    /// The longest name kept inline.
    pub const INLINE: usize = 15;

    /// A name from bytes. Every name reaching a dentry passed a `NAME_MAX` (255) check
    /// (the walk's ENAMETOOLONG, or the filesystem's own), so its length fits the `u8`.
    pub fn new(b: &[u8]) -> Name {
        let len = u8::try_from(b.len()).expect("a dentry name is at most NAME_MAX bytes");
        // The heap copy first: nothing may fail once a `Name` claims to own one.
        let heap = (b.len() > Name::INLINE).then(|| Box::into_raw(Box::<[u8]>::from(b)).cast::<u8>());
        let mut name = Name { bytes: [MaybeUninit::uninit(); Name::INLINE], len };
        match heap {
            None => {
                for (d, s) in name.bytes.iter_mut().zip(b) {
                    d.write(*s);
                }
            }
            // SAFETY: `bytes` is 8-aligned in place (the first field of an `align(8)`
            // struct; not in a local array, which is 1-aligned) and at least 8 bytes
            // long; writing a pointer into `MaybeUninit` bytes is allowed.
            Some(p) => unsafe { name.bytes.as_mut_ptr().cast::<*mut u8>().write(p) },
        }
        name
    }

    /// The heap copy's pointer (`len > INLINE` only).
    fn heap_ptr(&self) -> *mut u8 {
        debug_assert!(self.len as usize > Name::INLINE);
        // SAFETY: a heap name wrote its pointer at offset 0, which is 8-aligned (`new`).
        unsafe { self.bytes.as_ptr().cast::<*mut u8>().read() }
    }

    /// The bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        let len = self.len as usize;
        if len <= Name::INLINE {
            // SAFETY: `new` initialized the first `len` inline bytes.
            unsafe { std::slice::from_raw_parts(self.bytes.as_ptr().cast::<u8>(), len) }
        } else {
            // SAFETY: a heap name owns `len` bytes at its pointer until it is dropped,
            // which cannot happen while `self` is borrowed.
            unsafe { std::slice::from_raw_parts(self.heap_ptr(), len) }
        }
    }
}

impl Drop for Name {
    fn drop(&mut self) {
        let len = self.len as usize;
        if len > Name::INLINE {
            // SAFETY: the pointer came from `Box::<[u8]>::into_raw` of `len` bytes in `new`
            // and is freed only here, once.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.heap_ptr(), len)) });
        }
    }
}

impl Clone for Name {
    fn clone(&self) -> Name {
        Name::new(self.as_bytes())
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Name {}

/// Hashes as its bytes, as [`Borrow<[u8]>`] requires (map probes hash a `&[u8]`).
impl std::hash::Hash for Name {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state)
    }
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Name({:?})", String::from_utf8_lossy(self.as_bytes()))
    }
}

impl Borrow<[u8]> for Name {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// The children map of a directory.
pub(crate) type ChildMap = crate::core::dhash::DHash<Dentry>;

/// Flag: something is mounted on this dentry; the walk probes the mount table.
pub const DENTRY_MOUNTED: u32 = 1 << 0;
/// Flag: unhashed (unlinked or replaced); no longer reachable by name.
pub const DENTRY_DEAD: u32 = 1 << 1;
/// Flag: an unnamed `O_TMPFILE` inode that `linkat` may give a name.
pub const DENTRY_LINKABLE: u32 = 1 << 3;
/// Flag: the parent directory is watched (seed 000's per-dentry check).
pub const DENTRY_PARENT_WATCHED: u32 = 1 << 2;
/// Flag (immutable, inherited from the parent): the filesystem revalidates cached
/// dentries before use ([`FileSystem::revalidates`](crate::core::superblock::FileSystem::revalidates),
/// Linux's `DCACHE_OP_REVALIDATE`). Read with the other flags the walk loads anyway.
pub const DENTRY_OP_REVALIDATE: u32 = 1 << 4;

/// A dentry. Only ever constructed as `Arc<Dentry>` (the walk relies on it). One cache
/// line (`align(64)`), so that with its `Arc` counts on the line before it the whole
/// object is 128 bytes, a size the allocator hands out 64-aligned from its fast path.
#[repr(C, align(64))]
pub struct Dentry {
    /// Read by lockless lookups; see the module docs.
    pub(crate) hot: DentryHot,
    /// Position in the parent's readdir order; set under the parent's dir lock when the
    /// dentry is linked (create, rename), as `parent` and `name` are.
    pub(crate) pos: AtomicU64,
    /// What only some filesystems' dentries use, among it what lookups write (hostfs's
    /// `d_time`), in an allocation of its own; made once, at the dentry's creation for a
    /// counted one, else by the first `d_time`.
    pub(crate) cold: once_cell::race::OnceBox<DentryCold>,
}

/// The lookup-read part of a dentry.
#[repr(C)]
pub struct DentryHot {
    /// Atomic: `DENTRY_*` flags.
    pub(crate) flags: AtomicU32,
    /// Number of mounts on this dentry (in any parent mount); changed under the rename lock
    /// and the parent directory's lock (so rmdir/unlink, which hold the latter, see it).
    /// Beside the flags (its `DENTRY_MOUNTED` is what walks test), in their padding.
    pub(crate) mounts: AtomicU32,
    /// Immutable: the inode, `None` for a negative dentry.
    pub(crate) inode: Option<Arc<Inode>>,
    /// Immutable: the children of a directory (`None` for anything else).
    pub(crate) dir: Option<Box<Dir>>,
    /// The parent (`None` only for a filesystem root). Replaced by rename under the rename
    /// lock, the old value retired through the collector.
    pub(crate) parent: Option<RcuArc<Dentry>>,
    /// The name. Replaced by rename, like `parent`.
    pub(crate) name: RcuBox<Name>,
}

/// The part of a dentry that few use and lookups may write, off the dentry's line.
#[derive(Default)]
pub struct DentryCold {
    /// Immutable: the instance's evictable-dentry counts this dentry is counted in (a
    /// dentry a lookup cached for a filesystem that is not dcache-complete), `None`
    /// otherwise. Decremented when the dentry is freed.
    pub(crate) counted: Option<Arc<DcacheCounts>>,
    /// Atomic, the filesystem's to use (Linux's `d_time`): hostfs keeps when the name was
    /// last checked against the host.
    pub(crate) time: AtomicU64,
}

/// Dentries the instance may evict (cached lookups of filesystems that are not
/// dcache-complete), alive now: the bounded-cache counts.
#[derive(Default, Debug)]
pub struct DcacheCounts {
    /// Atomic: positive ones.
    pub positive: std::sync::atomic::AtomicUsize,
    /// Atomic: negative ones.
    pub negative: std::sync::atomic::AtomicUsize,
    /// Atomic: inodes of the filesystems these dentries belong to (those that are not
    /// dcache-complete), alive now; counted by [`Inode`]'s constructor and drop.
    pub inodes: std::sync::atomic::AtomicUsize,
}

impl DcacheCounts {
    fn slot(&self, positive: bool) -> &std::sync::atomic::AtomicUsize {
        if positive { &self.positive } else { &self.negative }
    }
}

impl Drop for Dentry {
    fn drop(&mut self) {
        if let Some(c) = self.cold.get().and_then(|c| c.counted.as_ref()) {
            c.slot(self.hot.inode.is_some()).fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The children of a directory. `repr(C)`: the map (read by lookups) first, the lock
/// (written by every locked lookup and change) after it.
#[repr(C)]
pub struct Dir {
    /// Probed without a lock (see [`crate::core::dhash`]); changed only under
    /// `lock`.
    pub(crate) children: ChildMap,
    /// The directory lock (Linux's `i_rwsem` of the directory): shared for locked lookups,
    /// exclusive for changes.
    pub(crate) lock: RwLock<DirLocked, { crate::sync::rank::DIR }>,
}

/// A directory's lock held shared.
pub(crate) type DirReadGuard<'g> = crate::sync::RwLockReadGuard<'g, DirLocked, { crate::sync::rank::DIR }>;

/// A directory's lock held exclusive.
pub(crate) type DirWriteGuard<'g> = crate::sync::RwLockWriteGuard<'g, DirLocked, { crate::sync::rank::DIR }>;

/// What the directory lock protects besides the map.
#[derive(Default)]
pub struct DirLocked {
    /// Positive children by readdir position (stable cursors for getdents).
    pub(crate) order: crate::core::offset::OffsetMap<Arc<Dentry>>,
    /// Next position to hand out; 0 and 1 are "." and "..".
    pub(crate) next_pos: u64,
}

impl Dentry {
    fn alloc(
        inode: Option<Arc<Inode>>,
        parent: Option<Arc<Dentry>>,
        name: &[u8],
        counted: Option<Arc<DcacheCounts>>,
    ) -> Arc<Dentry> {
        if let Some(c) = &counted {
            c.slot(inode.is_some()).fetch_add(1, Ordering::Relaxed);
        }
        let flags = match &parent {
            Some(p) => p.flags() & DENTRY_OP_REVALIDATE,
            None => match &inode {
                Some(i) if i.sb().fs().revalidates() => DENTRY_OP_REVALIDATE,
                _ => 0,
            },
        };
        let dir = match &inode {
            Some(i) if i.is_dir() => Some(Box::new(Dir {
                children: ChildMap::new(),
                lock: RwLock::new(DirLocked { next_pos: 2, ..Default::default() }),
            })),
            _ => None,
        };
        Arc::new(Dentry {
            hot: DentryHot {
                flags: AtomicU32::new(flags),
                mounts: AtomicU32::new(0),
                inode,
                dir,
                parent: parent.map(RcuArc::new),
                name: RcuBox::new(Name::new(name)),
            },
            pos: AtomicU64::new(0),
            cold: match counted {
                Some(c) => once_cell::race::OnceBox::with_value(Box::new(DentryCold {
                    counted: Some(c),
                    ..Default::default()
                })),
                None => once_cell::race::OnceBox::new(),
            },
        })
    }

    /// The root dentry of a filesystem.
    pub(crate) fn new_root(inode: Arc<Inode>, rcu: &Rcu) -> Arc<Dentry> {
        let _ = rcu;
        Dentry::alloc(Some(inode), None, b"/", None)
    }

    /// A dentry for `name` in `parent`, not yet in the parent's map.
    pub(crate) fn new_child(parent: &Arc<Dentry>, name: &[u8], inode: Option<Arc<Inode>>, rcu: &Rcu) -> Arc<Dentry> {
        let _ = rcu;
        Dentry::alloc(inode, Some(parent.clone()), name, None)
    }

    /// A dentry a lookup caches for a filesystem that is not dcache-complete: counted in
    /// `counts`, and evictable when unused.
    pub(crate) fn new_cached(
        parent: &Arc<Dentry>,
        name: &[u8],
        inode: Option<Arc<Inode>>,
        counts: &Arc<DcacheCounts>,
    ) -> Arc<Dentry> {
        Dentry::alloc(inode, Some(parent.clone()), name, Some(counts.clone()))
    }

    /// The inode (`None`: negative).
    #[inline]
    pub fn inode(&self) -> Option<&Arc<Inode>> {
        self.hot.inode.as_ref()
    }

    /// Flags.
    #[inline]
    pub fn flags(&self) -> u32 {
        self.hot.flags.load(Ordering::Acquire)
    }

    pub(crate) fn set_flag(&self, f: u32) {
        self.hot.flags.fetch_or(f, Ordering::AcqRel);
    }

    /// Clears `DENTRY_PARENT_WATCHED` (lazily, when the parent no longer wants child
    /// events, as Linux's `__fsnotify_update_child_dentry_flags`).
    pub(crate) fn clear_parent_watched(&self) {
        self.hot.flags.fetch_and(!DENTRY_PARENT_WATCHED, Ordering::AcqRel);
    }

    /// Clears `DENTRY_MOUNTED` when the last mount on this dentry goes (caller holds the
    /// rename lock, inside the rename sequence).
    pub(crate) fn clear_mounted(&self) {
        self.hot.flags.fetch_and(!DENTRY_MOUNTED, Ordering::AcqRel);
    }

    /// The filesystem's timestamp of this dentry (Linux's `d_time`), for
    /// [`FileSystem::d_revalidate`](crate::core::superblock::FileSystem::d_revalidate).
    #[inline]
    pub fn d_time(&self) -> &AtomicU64 {
        &self.cold.get_or_init(Box::default).time
    }

    /// Whether cached lookups of this dentry are revalidated by its filesystem.
    #[inline]
    pub fn needs_revalidate(&self) -> bool {
        self.flags() & DENTRY_OP_REVALIDATE != 0
    }

    /// Whether it was unlinked (or replaced).
    #[inline]
    pub fn is_dead(&self) -> bool {
        self.flags() & DENTRY_DEAD != 0
    }

    /// The directory part, for a directory.
    #[inline]
    pub(crate) fn dir(&self) -> Option<&Dir> {
        self.hot.dir.as_deref()
    }

    /// Whether this is a filesystem root.
    pub fn is_root(&self) -> bool {
        self.hot.parent.is_none()
    }

    /// The parent, read under a guard (`self` for a root).
    #[inline]
    pub(crate) fn parent<'g>(&'g self, guard: &'g LocalGuard<'_>) -> &'g Dentry {
        match &self.hot.parent {
            Some(p) => p.load(guard).get(),
            None => self,
        }
    }

    /// The parent as a borrow that can be counted (`None` for a root).
    #[inline]
    pub(crate) fn parent_borrow<'g>(&'g self, guard: &'g LocalGuard<'_>) -> Option<ArcBorrow<'g, Dentry>> {
        self.hot.parent.as_ref().map(|p| p.load(guard))
    }

    /// The parent as a counted reference (`None` for a root).
    pub(crate) fn parent_arc(&self, guard: &LocalGuard<'_>) -> Option<Arc<Dentry>> {
        self.hot.parent.as_ref().map(|p| p.get(guard))
    }

    /// Whether `self` is `ancestor` or below it in their filesystem (Linux's `is_subdir`).
    /// The caller holds the rename lock, so the shape cannot change meanwhile.
    pub(crate) fn is_subdir(&self, ancestor: &Dentry, guard: &LocalGuard<'_>) -> bool {
        let mut d = self;
        loop {
            if std::ptr::eq(ancestor, d) {
                return true;
            }
            if d.is_root() {
                return false;
            }
            d = d.parent(guard);
        }
    }

    /// The name, read under a guard.
    pub(crate) fn name<'g>(&'g self, guard: &'g LocalGuard<'_>) -> &'g [u8] {
        self.hot.name.load(guard).as_bytes()
    }

    /// Lockless lookup of a child (positive or negative) in this directory:
    /// `Some(Some(child))`, `Some(None)` for a certain miss, `None` when a miss overlapped
    /// the map being rebuilt (see [`crate::core::dhash`]) and the caller must look again locked.
    #[inline]
    pub(crate) fn lookup_rcu<'g>(&'g self, name: &[u8], guard: &'g LocalGuard<'_>) -> Option<Option<&'g Arc<Dentry>>> {
        match self.dir() {
            Some(d) => d.children.get_sure(name, guard),
            None => Some(None),
        }
    }

    /// Moves this dentry to `parent` under `name` (rename).
    ///
    /// # Preconditions
    /// The caller holds the rename lock and both directories' locks, inside the rename
    /// sequence.
    pub(crate) fn set_parent_and_name(&self, parent: &Arc<Dentry>, name: &[u8], rcu: &Rcu) {
        debug_assert!(parent.dir().is_some_and(|d| d.lock.is_locked_exclusive()), "new parent not locked");
        if let Some(p) = &self.hot.parent {
            p.replace(parent.clone(), rcu);
        }
        self.hot.name.replace(Name::new(name), rcu);
    }
}

impl std::fmt::Debug for Dentry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dentry").field("inode", &self.hot.inode).field("flags", &self.flags()).finish()
    }
}

// Seed 004, checked at compile time: the lookup-read fields share no cache line with
// anything written during a lookup or by reference counting. `align(64)` makes the dentry
// start a cache line, so an `Arc`'s counts (strong, weak) sit on the line before it, and
// the dentry is that one line: what lookups may write (`d_time`) is behind `cold`.
const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(align_of::<Dentry>() == 64);
    assert!(size_of::<Dentry>() == 64);
    assert!(offset_of!(Dentry, hot) == 0);
    assert!(offset_of!(DentryHot, flags) < 64);
    assert!(offset_of!(DentryHot, inode) < 64);
    assert!(offset_of!(DentryHot, dir) < 64);
    assert!(offset_of!(DentryHot, parent) < 64);
    assert!(offset_of!(DentryHot, name) < 64);
    // The directory lock (written by every locked lookup) lives in the directory's own
    // allocation, after its map.
    assert!(offset_of!(Dir, lock) >= size_of::<ChildMap>());
    // And that allocation is in the allocator's 128-byte class, whose blocks start on a
    // line (see `uvfs-alloc`'s tests): what lookups read of the map, at its start, is on
    // the first (see `dhash.rs`).
    assert!(size_of::<Dir>() > 112 && size_of::<Dir>() <= 128);
    assert!(offset_of!(Dir, children) == 0);
};

#[cfg(test)]
mod tests {
    use super::Name;
    use std::hash::BuildHasher;

    /// Inline up to 15 bytes, on the heap beyond, the same bytes either way: empty, the
    /// boundary, the longest name, clones (which own their copy), equality and hashing as
    /// the bytes (the children map probes with a `&[u8]`).
    #[test]
    fn names_inline_and_on_the_heap() {
        let h = std::hash::RandomState::new();
        for len in [0usize, 1, 14, 15, 16, 17, 100, 255] {
            let b: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            let n = Name::new(&b);
            assert_eq!(n.as_bytes(), &b[..]);
            let c = n.clone();
            drop(n);
            assert_eq!(c.as_bytes(), &b[..], "a clone outlives its original");
            assert_eq!(c, Name::new(&b));
            assert_ne!(c, Name::new(b"x"));
            assert_eq!(h.hash_one(&c), h.hash_one(&b[..]), "hash of a {len}-byte name");
        }
        assert!(format!("{:?}", Name::new(b"readme.txt")).contains("readme.txt"));
    }
}
