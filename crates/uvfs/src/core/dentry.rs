//! `Dentry`: a name in a directory. Mirrors Linux's `struct dentry`, but: a directory's
//! dentry owns the map of its children (there is no global hash), and a lookup of cached
//! names takes no reference count (`d_lockref`) at all.
//!
//! A dentry is positive (it has an inode, which never changes for its life) or negative
//! (it records that a name does not exist, for filesystems whose directories are not
//! complete in the cache). A directory's dentry owns the map of its children, which
//! lockless lookups probe; every change to the map happens under the directory's lock.
//!
//! Layout (seed 004): with its `Arc` counts a dentry is 96 bytes. The fields a lookup
//! reads ([`DentryHot`]) are its last 32, within one cache line wherever the block
//! starts (on a line or half-way into one) and never on the line of the `Arc` counts,
//! which every reference taken or dropped writes; the counts share theirs with the name
//! the dentry was made with (lookups compare names in the parent's table) and what only
//! links, renames and hostfs's revalidation write (a renamed name, the readdir position or
//! `d_time`). The checks at the end of this file assert it.

use std::borrow::Borrow;
use std::mem::MaybeUninit;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::core::inode::Inode;
use crate::sync::RwLock;
use crate::sync::rcu::{ArcBorrow, LocalGuard, Rcu, RcuOptArc, RcuOptBox};

/// A name in a directory: bytes, not UTF-8, at most 255 of them, in 16 bytes. A name of
/// at most [`Name::INLINE`] bytes is kept in the value itself (Linux's `d_iname`), so
/// it costs no allocation, and a children-map probe compares it inside the map's slot,
/// without a load from elsewhere; a longer one owns a heap copy.
pub type Name = InlineName<15>;

/// The name a dentry is made with: as [`Name`], in 32 bytes, so that names of up to 31
/// bytes (nearly all in a source tree) cost the dentry no allocation.
pub(crate) type DName = InlineName<31>;

/// A name of at most 255 bytes, the first `N` of them kept inline (`N + 1` bytes, 8-aligned,
/// `N >= 8`), a longer one in a heap copy it owns.
#[repr(C, align(8))]
pub struct InlineName<const N: usize> {
    /// Immutable. Inline (`len <= N`): the bytes. Heap: the first 8 bytes hold the
    /// pointer of the owned `[u8; len]` (as `MaybeUninit` bytes, which keep a pointer's
    /// provenance when copied).
    bytes: [MaybeUninit<u8>; N],
    /// Immutable: the length, which also says where the bytes are.
    len: u8,
}

// The layouts the names rely on: no padding, the pointer slot 8-aligned at offset 0.
const _: () = assert!(std::mem::size_of::<Name>() == 16 && std::mem::align_of::<Name>() == 8);
const _: () = assert!(std::mem::size_of::<DName>() == 32 && std::mem::align_of::<DName>() == 8);

impl<const N: usize> InlineName<N> {
    /// The longest name kept inline.
    pub const INLINE: usize = N;

    /// A name from bytes. Every name reaching a dentry passed a `NAME_MAX` (255) check
    /// (the walk's ENAMETOOLONG, or the filesystem's own), so its length fits the `u8`.
    pub fn new(b: &[u8]) -> InlineName<N> {
        let len = u8::try_from(b.len()).expect("a dentry name is at most NAME_MAX bytes");
        // The heap copy first: nothing may fail once a name claims to own one.
        let heap = (b.len() > N).then(|| Box::into_raw(Box::<[u8]>::from(b)).cast::<u8>());
        let mut name = InlineName { bytes: [MaybeUninit::uninit(); N], len };
        match heap {
            None => {
                for (d, s) in name.bytes.iter_mut().zip(b) {
                    d.write(*s);
                }
            }
            // SAFETY: `bytes` is 8-aligned in place (the first field of an `align(8)`
            // struct; not in a local array, which is 1-aligned) and at least 8 bytes
            // long (`N >= 8`, see the layout checks); writing a pointer into
            // `MaybeUninit` bytes is allowed.
            Some(p) => unsafe { name.bytes.as_mut_ptr().cast::<*mut u8>().write(p) },
        }
        name
    }

    /// The heap copy's pointer (`len > N` only).
    fn heap_ptr(&self) -> *mut u8 {
        debug_assert!(self.len as usize > N);
        // SAFETY: a heap name wrote its pointer at offset 0, which is 8-aligned (`new`).
        unsafe { self.bytes.as_ptr().cast::<*mut u8>().read() }
    }

    /// The bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        let len = self.len as usize;
        if len <= N {
            // SAFETY: `new` initialized the first `len` inline bytes.
            unsafe { std::slice::from_raw_parts(self.bytes.as_ptr().cast::<u8>(), len) }
        } else {
            // SAFETY: a heap name owns `len` bytes at its pointer until it is dropped,
            // which cannot happen while `self` is borrowed.
            unsafe { std::slice::from_raw_parts(self.heap_ptr(), len) }
        }
    }
}

impl<const N: usize> Drop for InlineName<N> {
    fn drop(&mut self) {
        let len = self.len as usize;
        if len > N {
            // SAFETY: the pointer came from `Box::<[u8]>::into_raw` of `len` bytes in `new`
            // and is freed only here, once.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.heap_ptr(), len)) });
        }
    }
}

impl<const N: usize> Clone for InlineName<N> {
    fn clone(&self) -> Self {
        InlineName::new(self.as_bytes())
    }
}

impl<const N: usize> PartialEq for InlineName<N> {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl<const N: usize> Eq for InlineName<N> {}

/// Hashes as its bytes, as [`Borrow<[u8]>`] requires (map probes hash a `&[u8]`).
impl<const N: usize> std::hash::Hash for InlineName<N> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state)
    }
}

impl<const N: usize> std::fmt::Debug for InlineName<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Name({:?})", String::from_utf8_lossy(self.as_bytes()))
    }
}

impl<const N: usize> Borrow<[u8]> for InlineName<N> {
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
/// Flag (immutable): counted in its instance's evictable-dentry counts ([`DcacheCounts`]),
/// which its drop decrements.
const DENTRY_COUNTED: u32 = 1 << 5;

/// A dentry. Only ever constructed as `Arc<Dentry>` (the walk relies on it). With its
/// `Arc` counts, 96 bytes (the allocator's class of that size, whose blocks start on a
/// line or half-way into one): the counts, the name it was made with and what only links,
/// renames and revalidation write first, then, in the last 32 bytes (which never straddle
/// a line at either start, nor share one with the counts), what lockless lookups read.
/// See the layout checks at the end of this file.
#[repr(C)]
pub struct Dentry {
    /// Immutable: the name the dentry was made with, and its name until a rename gives it
    /// another (`renamed`). Inline up to 31 bytes. Lookups compare names in the parent's
    /// table, not here, so it shares the line of the `Arc`'s counts.
    iname: DName,
    /// The name since the last rename (empty: `iname`). Replaced by rename under the
    /// rename lock and both directories' locks, the old one retired through the collector.
    renamed: RcuOptBox<Name>,
    /// Atomic. In a dcache-complete instance (memfs): the position in the parent's readdir
    /// order, set under the parent's dir lock when the dentry is linked (create, rename),
    /// as `parent` and the name are. In any other (whose listings the filesystem makes, so
    /// that it keeps no order): the filesystem's to use (Linux's `d_time`, [`Dentry::d_time`]):
    /// hostfs keeps when the name was last checked against the host, written at most once
    /// per check interval.
    pos_or_time: AtomicU64,
    /// Read by lockless lookups; see the module docs.
    pub(crate) hot: DentryHot,
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
    pub(crate) parent: RcuOptArc<Dentry>,
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
        if *self.hot.flags.get_mut() & DENTRY_COUNTED != 0
            && let Some(c) = self.hot.parent.get_mut().and_then(Dentry::instance_counts)
        {
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

/// A child in its directory's readdir order: a pointer, not a count (Linux's offset map
/// holds no reference either). Every dentry in the order is in the directory's table too,
/// whose reference keeps it alive: it enters the order under the exclusive directory lock
/// with that reference held, and leaves it no later than it leaves the table, under the
/// same lock hold; the order is read only under the directory lock, and an `Ordered` taken
/// out of it is dropped where it is taken out, never followed. One atomic fewer at each
/// create and each unlink.
pub(crate) struct Ordered(std::ptr::NonNull<Dentry>);

// SAFETY: an `Ordered` is a shared reference to a `Dentry` (which is `Send` and `Sync`)
// that only the holder of the directory lock follows (see the type's docs).
unsafe impl Send for Ordered {}
// SAFETY: as for `Send`.
unsafe impl Sync for Ordered {}

impl Ordered {
    /// `d`, about to enter its directory's order, held by its table (see the type's docs).
    pub(crate) fn new(d: &Arc<Dentry>) -> Ordered {
        Ordered(std::ptr::NonNull::from(&**d))
    }
}

impl std::ops::Deref for Ordered {
    type Target = Dentry;

    fn deref(&self) -> &Dentry {
        // SAFETY: reached only through the directory's `DirLocked`, so under its lock, while
        // the dentry is in the order and so in the table, whose reference keeps it alive;
        // the borrow lasts no longer than that of the order (see the type's docs).
        unsafe { self.0.as_ref() }
    }
}

/// What the directory lock protects besides the map.
#[derive(Default)]
pub struct DirLocked {
    /// Positive children by readdir position (stable cursors for getdents), each also in
    /// the directory's table ([`Ordered`]).
    pub(crate) order: crate::core::offset::OffsetMap<Ordered>,
    /// Next position to hand out; 0 and 1 are "." and "..".
    pub(crate) next_pos: u64,
}

impl Dentry {
    fn alloc(inode: Option<Arc<Inode>>, parent: Option<Arc<Dentry>>, name: &[u8], counted: bool) -> Arc<Dentry> {
        // Counted in the counts of the parent's instance, which its drop finds the same way.
        let counted = counted
            && match parent.as_deref().and_then(Dentry::instance_counts) {
                Some(c) => {
                    c.slot(inode.is_some()).fetch_add(1, Ordering::Relaxed);
                    true
                }
                None => false,
            };
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
            iname: DName::new(name),
            renamed: RcuOptBox::empty(),
            pos_or_time: AtomicU64::new(0),
            hot: DentryHot {
                flags: AtomicU32::new(flags | if counted { DENTRY_COUNTED } else { 0 }),
                mounts: AtomicU32::new(0),
                inode,
                dir,
                parent: RcuOptArc::new(parent),
            },
        })
    }

    /// The root dentry of a filesystem.
    pub(crate) fn new_root(inode: Arc<Inode>, rcu: &Rcu) -> Arc<Dentry> {
        let _ = rcu;
        Dentry::alloc(Some(inode), None, b"/", false)
    }

    /// A dentry for `name` in `parent`, not yet in the parent's map.
    pub(crate) fn new_child(
        parent: ArcBorrow<'_, Dentry>,
        name: &[u8],
        inode: Option<Arc<Inode>>,
        rcu: &Rcu,
    ) -> Arc<Dentry> {
        let _ = rcu;
        Dentry::alloc(inode, Some(parent.to_arc()), name, false)
    }

    /// A dentry a lookup caches for a filesystem that is not dcache-complete: counted in
    /// its instance's evictable-dentry counts ([`SuperBlock::count_inodes_in`]), and
    /// evictable when unused.
    ///
    /// [`SuperBlock::count_inodes_in`]: crate::core::superblock::SuperBlock::count_inodes_in
    pub(crate) fn new_cached(parent: &Arc<Dentry>, name: &[u8], inode: Option<Arc<Inode>>) -> Arc<Dentry> {
        Dentry::alloc(inode, Some(parent.clone()), name, true)
    }

    /// The evictable-dentry counts of this directory's instance (set for instances that
    /// are not dcache-complete), in which its cached children are counted.
    fn instance_counts(&self) -> Option<&DcacheCounts> {
        self.inode()?.sb().counts.get().map(|c| &**c)
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
        debug_assert!(!self.inode().is_some_and(|i| i.sb().dcache_complete()), "d_time of a complete instance");
        &self.pos_or_time
    }

    /// The position in the parent's readdir order (a dcache-complete instance's dentry).
    #[inline]
    pub(crate) fn pos(&self) -> &AtomicU64 {
        &self.pos_or_time
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
        match self.hot.parent.load(guard) {
            Some(p) => p.get(),
            None => self,
        }
    }

    /// The parent as a borrow that can be counted (`None` for a root).
    #[inline]
    pub(crate) fn parent_borrow<'g>(&'g self, guard: &'g LocalGuard<'_>) -> Option<ArcBorrow<'g, Dentry>> {
        self.hot.parent.load(guard)
    }

    /// The parent as a counted reference (`None` for a root).
    pub(crate) fn parent_arc(&self, guard: &LocalGuard<'_>) -> Option<Arc<Dentry>> {
        self.hot.parent.load(guard).map(ArcBorrow::to_arc)
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
        match self.renamed.load(guard) {
            Some(n) => n.as_bytes(),
            None => self.iname.as_bytes(),
        }
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
        if !self.hot.parent.is_none() {
            self.hot.parent.replace(parent.clone(), rcu);
        }
        self.renamed.replace(Name::new(name), rcu);
    }
}

impl std::fmt::Debug for Dentry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dentry").field("inode", &self.hot.inode).field("flags", &self.flags()).finish()
    }
}

// Seed 004, checked at compile time: the lookup-read fields share no cache line with
// anything written by reference counting, nor straddle one. The `Arc`'s counts (strong,
// weak: 16 bytes) come first in its allocation, which is 96 bytes, a block of the
// allocator's 96-byte class, which starts on a line or half-way into one (mimalloc's do;
// `uvfs-alloc`'s tests check it). The counts, the first name, a renamed name and the
// position or check time fill the first 64 bytes; the lookup-read fields the last 32,
// which lie within one line at either start, never the counts' line.
const _: () = {
    use crate::sync::rcu::ARC_COUNTS as COUNTS;
    use std::mem::{align_of, offset_of, size_of};
    assert!(align_of::<Dentry>() == 8);
    assert!(size_of::<DName>() == 32 && size_of::<RcuOptBox<Name>>() == 8);
    assert!(COUNTS + size_of::<Dentry>() == 96);
    assert!(offset_of!(Dentry, iname) == 0);
    assert!(COUNTS + offset_of!(Dentry, hot) == 64 && size_of::<DentryHot>() == 32);
    assert!(offset_of!(DentryHot, flags) == 0 && offset_of!(DentryHot, parent) + 8 <= size_of::<DentryHot>());
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
    use super::{DName, Name};
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
        // A dentry's own copy keeps up to 31 bytes inline, the same bytes either way.
        for len in [0usize, 15, 16, 31, 32, 39, 40, 255] {
            let b: Vec<u8> = (0..len).map(|i| b'A' + (i % 26) as u8).collect();
            let n = DName::new(&b);
            assert_eq!((n.as_bytes(), n.len as usize > DName::INLINE), (&b[..], len > 31));
            assert_eq!(n.clone().as_bytes(), &b[..]);
        }
    }
}
