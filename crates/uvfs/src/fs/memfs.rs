//! `memfs`: tmpfs semantics in memory. Mirrors Linux's `mm/shmem.c` (and the `libfs`
//! helpers it uses).
//!
//! Directories are complete in the dentry cache, so memfs keeps no directory structure of
//! its own: the dcache *is* the tree (as with tmpfs), lookups of missing names never reach
//! it, and it only accounts link counts, sizes and times the way tmpfs reports them
//! (directory size 20 bytes per entry plus 40; symlinks of 128 bytes or more take a page).
//! File contents are sparse 4 KiB pages, so `truncate` to a huge size costs nothing and
//! `st_blocks` counts pages as tmpfs does. A page is shared copy-on-write: by
//! `copy_file_range` between files (so a copy costs no memory until written), and every
//! page of zeros a copy makes is one shared page. `fallocate` reserves pages that hold no
//! memory until written (they read as zeros and are holes to `SEEK_DATA`, as tmpfs's
//! not-uptodate folios); `PUNCH_HOLE` frees them. The bytes of the pages a big write
//! makes (16 pages or more) are pages of one shmem file of the process (`shmem`), written
//! with `pwritev`, which the kernel does not zero first as it does fresh heap memory;
//! smaller writes' pages are heap boxes, or pages of the file too with
//! [`SmallWritePages::Shmem`] (what a FUSE server asks for). Size and inode limits give
//! ENOSPC and are what `statfs` reports: by default tmpfs's (half of RAM, and as many
//! inodes as half of RAM has pages), 0 for unlimited, as tmpfs's `size=` and
//! `nr_inodes=`.
//!
//! Extended attributes (`user.`, `trusted.`, `security.`) live in the inode's private
//! data, in name order, under a leaf lock. As in tmpfs, their space comes out of the inode
//! limit's budget (`nr_inodes` x 1 KiB, each inode taking 1 KiB and each xattr 40 bytes
//! plus its name and value), so with an inode limit a full budget is ENOSPC. POSIX ACLs
//! are stored beside them (not charged, as tmpfs) and cached in the inode's slots.
//!
//! Inode flags (`chattr`): tmpfs's set on regular files and directories (immutable,
//! append-only, nodump, noatime; anything else EOPNOTSUPP), new entries taking nodump and
//! noatime from their directory; the ones the VFS enforces are mirrored in the inode.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::abi::config::SmallWritePages;
use crate::abi::errno::{Errno, Result};
use crate::abi::flags::{FallocFlags, FsFlags, Timespec};
use crate::abi::stat::{FileType, S_IFMT, StatFs, StatxAttrs};
use crate::core::acl::{Acl, AclInit, AclType};
use crate::core::inode::{AttrWriter, Inode, NewInode, current_time};
use crate::core::superblock::{CreateArgs, FileSystem, RenameReq, SuperBlock, TruncateBy, WriteAt};
use crate::core::xattr::XattrFlags;
use crate::sync::{Mutex, RwLock};

mod shmem;
use shmem::Page;

/// tmpfs's `BOGO_DIRENT_SIZE`: what each entry adds to a directory's size.
const DIRENT_SIZE: u64 = 20;
/// Page size of file contents.
const PAGE: u64 = shmem::PAGE as u64;
/// Zeros to write over a part of a page.
static ZEROS: [u8; shmem::PAGE] = [0; shmem::PAGE];
/// tmpfs stores symlink bodies shorter than this inline (no block).
const SHORT_SYMLINK_LEN: usize = 128;
use crate::abi::limits::MAX_LFS_FILESIZE as MAX_FILE_SIZE;
use crate::abi::stat::Ino;
/// tmpfs's `BOGO_INODE_SIZE`: what an inode takes of the inode budget.
const BOGO_INODE_SIZE: u64 = 1024;
/// `TMPFS_MAGIC`.
pub const TMPFS_MAGIC: u64 = 0x0102_1994;

/// Limits of a memfs instance, as tmpfs's `size=` and `nr_inodes=`.
#[derive(Clone, Copy, Debug, Default)]
pub struct MemFsLimits {
    /// Bytes of file contents, rounded to pages. `None`: tmpfs's default, half of RAM;
    /// `Some(0)`: unlimited.
    pub max_bytes: Option<u64>,
    /// Number of inodes. `None`: tmpfs's default, the number of pages in half of RAM;
    /// `Some(0)`: unlimited.
    pub max_inodes: Option<u64>,
}

/// The 512-byte blocks of a symlink with a `len`-byte target, as tmpfs counts them: a
/// body that fits inline (with its NUL) takes none, a longer one a page.
pub(crate) fn symlink_blocks(len: usize) -> u64 {
    if len + 1 > SHORT_SYMLINK_LEN { PAGE / 512 } else { 0 }
}

/// tmpfs's default size and inode count: the pages in half of RAM
/// (`shmem_default_max_blocks`).
pub(crate) fn half_ram_pages() -> u64 {
    let si = rustix::system::sysinfo();
    si.totalram.saturating_mul(u64::from(si.mem_unit)) / PAGE / 2
}

impl MemFsLimits {
    /// No limit at all (tmpfs `size=0,nr_inodes=0`).
    pub const UNLIMITED: MemFsLimits = MemFsLimits { max_bytes: Some(0), max_inodes: Some(0) };

    /// The limits in force (`None`: unlimited), with tmpfs's defaults filled in
    /// (`shmem_default_max_blocks`, `shmem_default_max_inodes`: half of RAM in pages).
    fn resolve(self) -> (Option<u64>, Option<u64>) {
        let bytes = match self.max_bytes {
            None => Some(half_ram_pages() * PAGE),
            Some(0) => None,
            Some(b) => Some(b),
        };
        let inodes = match self.max_inodes {
            None => Some(half_ram_pages()),
            Some(0) => None,
            Some(n) => Some(n),
        };
        (bytes, inodes)
    }
}

/// Inode numbers a thread takes from an instance at a time (Linux's `LAST_INO_BATCH`): one
/// atomic add a batch instead of one an inode, and no line every creating thread writes.
const INO_BATCH: u64 = 1024;

/// Ids of memfs instances ([`MemFs`]'s `id`).
static NEXT_MEMFS_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's batch of inode numbers: (instance id, next, end). Id 0 is no instance.
    static INO_BATCH_HELD: std::cell::Cell<(u64, u64, u64)> = const { std::cell::Cell::new((0, 0, 0)) };
}

/// Usage counters: what an inode takes, eviction or its freeing gives back.
#[derive(Default)]
struct Usage {
    /// Atomic: pages in use.
    pages: AtomicU64,
    /// Atomic: bytes of the inode budget in use (tmpfs's `max_inodes * BOGO_INODE_SIZE -
    /// free_ispace`): [`BOGO_INODE_SIZE`] per inode plus [`xattr_space`] per xattr.
    ispace: AtomicU64,
}

/// What an xattr takes of the inode budget (`simple_xattr_space`).
fn xattr_space(name: &[u8], value: &[u8]) -> u64 {
    40 + name.len() as u64 + value.len() as u64
}

impl Usage {
    /// Takes `n` bytes of the inode budget; ENOSPC when a limit is set and it would pass it.
    fn reserve_ispace(&self, limit: Option<u64>, n: u64) -> Result<()> {
        let cap = limit.map_or(u64::MAX, |m| m.saturating_mul(BOGO_INODE_SIZE));
        self.ispace
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| u.checked_add(n).filter(|&t| t <= cap))
            .map(|_| ())
            .map_err(|_| Errno::ENOSPC)
    }

    fn release_ispace(&self, n: u64) {
        self.ispace.fetch_sub(n, Ordering::Relaxed);
    }
}

/// The memfs filesystem type.
pub struct MemFs {
    /// Immutable: where a small write's new pages go.
    small_writes: SmallWritePages,
    /// Immutable: bytes of file contents allowed (`None`: unlimited).
    max_bytes: Option<u64>,
    /// Immutable: inodes allowed (`None`: unlimited).
    max_inodes: Option<u64>,
    /// Immutable: this instance among all memfs instances of the process, never reused
    /// (whose inode-number batch a thread holds: [`MemFs::alloc_ino`]).
    id: u64,
    /// Atomic: the next inode number no thread's batch holds.
    next_ino: AtomicU64,
    /// What the inodes use.
    usage: Usage,
}

/// The bytes of one page (`shmem::Page`: a slot of the process's shmem file, or a heap
/// box), shared copy-on-write between files: written in place only through
/// `Arc::get_mut`, else replaced by a patched copy (`MemFs::write_pages`).
type PageData = Arc<Page>;

/// A page of a file: `None` is reserved by `fallocate` and never written (no memory, reads
/// as zeros, a hole to `SEEK_DATA`).
type PageSlot = Option<PageData>;

/// A regular file's contents: page index -> page, behind a leaf lock, both made by the
/// first operation that writes the file (write, truncate, fallocate, a copy into it), so
/// that an empty file carries no map and no lock, and reading one makes none.
#[derive(Default)]
struct FilePages(
    /// Set once (an atomic pointer), by the first operation that writes; the map under its
    /// own leaf lock.
    once_cell::race::OnceBox<RwLock<BTreeMap<u64, PageSlot>, { crate::sync::rank::FILE_DATA }>>,
);

impl FilePages {
    fn lock(&self) -> &RwLock<BTreeMap<u64, PageSlot>, { crate::sync::rank::FILE_DATA }> {
        self.0.get_or_init(Box::default)
    }
    /// The pages for reading: a file never written has none, and reading it makes none.
    fn read(&self) -> PagesRead<'_> {
        match self.0.get() {
            Some(l) => PagesRead::Locked(l.read()),
            None => PagesRead::Never,
        }
    }
    fn write(&self) -> crate::sync::RwLockWriteGuard<'_, BTreeMap<u64, PageSlot>, { crate::sync::rank::FILE_DATA }> {
        self.lock().write()
    }
}

/// A regular file's pages, reached through its inode: reading a file never written finds
/// none and makes nothing; the first write makes the inode's node and the map.
#[derive(Clone, Copy)]
struct Pages<'a>(&'a Inode);

impl<'a> Pages<'a> {
    fn read(self) -> PagesRead<'a> {
        match MemFs::mem(self.0) {
            Some(m) => m.pages.read(),
            None => PagesRead::Never,
        }
    }
    fn write(self) -> crate::sync::RwLockWriteGuard<'a, BTreeMap<u64, PageSlot>, { crate::sync::rank::FILE_DATA }> {
        MemFs::mem_or_init(self.0).pages.write()
    }
}

/// A file's pages held for reading (see [`FilePages::read`]).
enum PagesRead<'a> {
    /// The file has had no data operation: no pages.
    Never,
    /// The file's map, its lock held shared.
    Locked(crate::sync::RwLockReadGuard<'a, BTreeMap<u64, PageSlot>, { crate::sync::rank::FILE_DATA }>),
}

impl PagesRead<'_> {
    /// The size of `inode` that goes with these pages. Every operation that sizes a file
    /// makes its map first and sets the size under its lock, so a file without one is
    /// empty: its size read now could be that of a first write running meanwhile, whose
    /// pages this reader does not see (it read zeros for them).
    fn size(&self, inode: &Inode) -> u64 {
        match self {
            PagesRead::Never => 0,
            PagesRead::Locked(_) => inode.size(),
        }
    }
}

impl std::ops::Deref for PagesRead<'_> {
    type Target = BTreeMap<u64, PageSlot>;
    fn deref(&self) -> &Self::Target {
        static NONE: BTreeMap<u64, PageSlot> = BTreeMap::new();
        match self {
            PagesRead::Never => &NONE,
            PagesRead::Locked(g) => g,
        }
    }
}

/// Extended attributes: full name -> value.
type Xattrs = BTreeMap<Box<[u8]>, Box<[u8]>>;

/// An inode's extended attributes and ACLs.
#[derive(Default)]
struct MemMeta {
    /// Extended attributes by full name, in name order. Leaf lock.
    xattrs: RwLock<Xattrs, { crate::sync::rank::FS_META }>,
    /// The access and default ACLs. Leaf lock; changed under the inode lock too.
    acls: Mutex<[Option<Arc<Acl>>; 2], { crate::sync::rank::FS_META }>,
}

/// Per-inode private data, made by the first operation that needs it (a write, truncate
/// or `fallocate` of a regular file, an xattr or ACL, an inode flag): an empty file
/// without those is its inode alone (`Inode::new_private_later`; the birth time is the
/// inode's). Its space goes back to the filesystem at eviction or when the inode is freed
/// (`FileSystem::free_inode`: the node keeps no pointer to the filesystem). A symlink's
/// body is the one the inode keeps (`Inode::cached_link`), not a second copy here.
#[derive(Default)]
struct MemNode {
    /// A regular file's contents (unused by anything else).
    pages: FilePages,
    /// Set once, by the first xattr or ACL the inode gets: an inode without either
    /// carries no empty map and no locks for them.
    meta: once_cell::race::OnceBox<MemMeta>,
    /// Atomic (changed under the inode lock): the inode flags, `FS_*_FL` (tmpfs's
    /// `fsflags`); the ones the VFS enforces are mirrored in the inode.
    fsflags: AtomicU32,
}

/// The inode flags tmpfs keeps (`SHMEM_FL_USER_MODIFIABLE`, without `FS_CASEFOLD_FL`:
/// memfs has no case-insensitive directories, as tmpfs mounted without `casefold`).
const MODIFIABLE_FLAGS: FsFlags =
    FsFlags::IMMUTABLE.union(FsFlags::APPEND).union(FsFlags::NODUMP).union(FsFlags::NOATIME);
/// The ones a new inode takes from its directory (`SHMEM_FL_INHERITED`).
const INHERITED_FLAGS: FsFlags = FsFlags::NODUMP.union(FsFlags::NOATIME);

impl MemNode {
    /// Gives the inode's pages and the inode itself back to the filesystem (once: at
    /// eviction, or when an inode that was not evicted is freed).
    fn release(node: Option<&MemNode>, usage: &Usage) {
        let Some(node) = node else {
            usage.release_ispace(BOGO_INODE_SIZE);
            return;
        };
        node.release_space(usage);
    }

    fn release_space(&self, usage: &Usage) {
        if let Some(pages) = self.pages.0.get() {
            let mut pages = pages.write();
            usage.pages.fetch_sub(pages.len() as u64, Ordering::Relaxed);
            pages.clear();
        }
        let space: u64 = self.meta.get().map_or(0, |m| {
            let mut xattrs = m.xattrs.write();
            let space = xattrs.iter().map(|(n, v)| xattr_space(n, v)).sum();
            xattrs.clear();
            space
        });
        usage.release_ispace(BOGO_INODE_SIZE + space);
    }

    /// The xattrs and ACLs, made now if the inode has none yet.
    fn meta(&self) -> &MemMeta {
        self.meta.get_or_init(Box::default)
    }
}

impl MemFs {
    /// A memfs with tmpfs's default limits.
    pub fn new() -> MemFs {
        MemFs::with_limits(MemFsLimits::default())
    }

    /// A memfs with limits.
    pub fn with_limits(limits: MemFsLimits) -> MemFs {
        let (max_bytes, max_inodes) = limits.resolve();
        MemFs {
            small_writes: SmallWritePages::Heap,
            max_bytes,
            max_inodes,
            id: NEXT_MEMFS_ID.fetch_add(1, Ordering::Relaxed),
            next_ino: AtomicU64::new(1),
            usage: Usage::default(),
        }
    }

    /// A new inode number: the next of this thread's batch, a new batch when it has none of
    /// this instance's left (Linux's `get_next_ino`, whose batches are per CPU). Numbers
    /// are unique in the instance; one thread's are consecutive, not those of several.
    fn alloc_ino(&self) -> Ino {
        INO_BATCH_HELD.with(|held| {
            let (id, next, end) = held.get();
            if id == self.id && next < end {
                held.set((id, next + 1, end));
                return Ino(next);
            }
            let start = self.next_ino.fetch_add(INO_BATCH, Ordering::Relaxed);
            held.set((self.id, start + 1, start + INO_BATCH));
            Ino(start)
        })
    }

    /// This memfs with small writes' pages kept as `pages` says.
    pub fn with_small_write_pages(mut self, pages: SmallWritePages) -> MemFs {
        self.small_writes = pages;
        self
    }

    /// The inode's node, if anything has made it yet.
    fn mem(inode: &Inode) -> Option<&MemNode> {
        inode.private::<MemNode>()
    }

    /// The inode's node, made now if it has none.
    fn mem_or_init(inode: &Inode) -> &MemNode {
        inode.private_or_init(MemNode::default)
    }

    /// The inode flags (`FS_*_FL`) kept for `inode`.
    fn fsflags(inode: &Inode) -> FsFlags {
        FsFlags::from_bits_retain(MemFs::mem(inode).map_or(0, |m| m.fsflags.load(Ordering::Relaxed)))
    }

    /// The inode's xattrs and ACLs, if it has any.
    fn meta(inode: &Inode) -> Option<&MemMeta> {
        MemFs::mem(inode)?.meta.get()
    }

    /// A regular file's contents (`None`: not a regular file).
    fn file_pages(inode: &Inode) -> Option<Pages<'_>> {
        (inode.file_type() == FileType::Regular).then_some(Pages(inode))
    }

    /// `read` of `inode` whose pages are `pages`, held for reading.
    fn read_pages(pages: &PagesRead<'_>, inode: &Inode, off: u64, buf: &mut [u8]) -> Result<usize> {
        let size = pages.size(inode);
        if off >= size {
            return Ok(0);
        }
        let n = buf.len().min((size - off) as usize);
        let buf = &mut buf[..n];
        // Pages in consecutive slots of the shmem file are read with one `pread`: (first
        // slot, offset in it, start in `buf`, bytes, next slot).
        let mut run: Option<(u32, usize, usize, usize, u32)> = None;
        let flush = |run: &mut Option<(u32, usize, usize, usize, u32)>, buf: &mut [u8]| {
            if let Some((slot, at, from, len, _)) = run.take() {
                shmem::read_slots(slot, at, &mut buf[from..from + len]);
            }
        };
        let mut done = 0;
        while done < n {
            let pos = off + done as u64;
            let (idx, in_page) = (pos / PAGE, (pos % PAGE) as usize);
            let chunk = (n - done).min(PAGE as usize - in_page);
            match pages.get(&idx).and_then(Option::as_ref) {
                Some(p) => match (p.slot(), &mut run) {
                    (Some(slot), Some((_, _, _, len, next))) if slot == *next => {
                        *len += chunk;
                        *next += 1;
                    }
                    (Some(slot), _) => {
                        flush(&mut run, buf);
                        run = Some((slot, in_page, done, chunk, slot + 1));
                    }
                    (None, _) => {
                        flush(&mut run, buf);
                        p.read(in_page, &mut buf[done..done + chunk]);
                    }
                },
                None => {
                    flush(&mut run, buf);
                    buf[done..done + chunk].fill(0);
                }
            }
            done += chunk;
        }
        flush(&mut run, buf);
        Ok(n)
    }

    fn acl_index(ty: AclType) -> usize {
        match ty {
            AclType::Access => 0,
            AclType::Default => 1,
        }
    }

    fn new_inode(&self, sb: &Arc<SuperBlock>, args: &CreateArgs<'_>, nlink: u32) -> Result<Arc<Inode>> {
        let ftype = FileType::from_mode(args.mode).ok_or(Errno::EINVAL)?;
        self.usage.reserve_ispace(self.max_inodes, BOGO_INODE_SIZE)?;
        let now = current_time();
        let (size, blocks, link) = match ftype {
            FileType::Regular => (0, 0, None),
            FileType::Directory => (2 * DIRENT_SIZE, 0, None),
            FileType::Symlink => {
                let t = args.target.unwrap_or_default();
                let blocks = symlink_blocks(t.len());
                // The body lives in the inode (`Inode::cached_link`), memfs's only copy.
                (t.len() as u64, blocks, Some(t.into()))
            }
            _ => (0, 0, None),
        };
        let n = NewInode {
            ino: self.alloc_ino(),
            mode: args.mode,
            uid: args.uid,
            gid: args.gid,
            nlink,
            size,
            blocks,
            rdev: args.rdev,
            times: [now; 3],
            acl: AclInit::Known(args.acl.clone()),
            default_acl: AclInit::Known(args.default_acl.clone()),
            link,
            btime: Some(now),
        };
        let inode = Inode::new_private_later(sb, n);
        if args.acl.is_some() || args.default_acl.is_some() {
            let acls = Mutex::new([args.acl.clone(), args.default_acl.clone()]);
            let meta = MemFs::mem_or_init(&inode).meta.set(Box::new(MemMeta { acls, ..Default::default() }));
            debug_assert!(meta.is_ok(), "a new inode's node has no xattrs yet");
        }
        Ok(inode)
    }

    /// A new inode takes its directory's inheritable flags (`__shmem_get_inode`).
    fn inherit_flags(dir: &Inode, inode: &Inode) {
        let f = MemFs::fsflags(dir) & INHERITED_FLAGS;
        if !f.is_empty() {
            MemFs::mem_or_init(inode).fsflags.store(f.bits(), Ordering::Relaxed);
            inode.set_attr_flags(f);
        }
    }

    /// A directory gained (`added`) or lost an entry (of a directory: `subdir`), its times
    /// set by `stamp`.
    fn dir_changed(dir: &Inode, added: bool, subdir: bool, stamp: impl FnOnce(&mut AttrWriter<'_>)) {
        dir.update(|w| {
            let a = w.get();
            let (size, nlink) = match added {
                true => (a.size + DIRENT_SIZE, a.nlink + 1),
                false => (a.size.saturating_sub(DIRENT_SIZE), a.nlink.saturating_sub(1)),
            };
            w.set_size(size);
            if subdir {
                w.set_nlink(nlink);
            }
            stamp(w);
        });
    }

    /// A directory gained an entry, stamped now (the directory's own multigrain decision,
    /// as tmpfs's `shmem_mknod`).
    fn dir_added(dir: &Inode, now: Timespec, subdir: bool) {
        MemFs::dir_changed(dir, true, subdir, |w| {
            w.stamp_cmtime(now);
        });
    }

    /// A directory lost an entry, stamped now.
    fn dir_removed(dir: &Inode, now: Timespec, subdir: bool) {
        MemFs::dir_changed(dir, false, subdir, |w| {
            w.stamp_cmtime(now);
        });
    }

    /// A directory's entry of an inode whose change time just became `t` was added or
    /// removed: the directory takes `t` as its modification and change times, as tmpfs's
    /// `shmem_link`, `shmem_unlink` and `shmem_rmdir` give it the linked inode's, so
    /// whether the change shows after a `stat` of the directory is that inode's multigrain
    /// decision, not the directory's (never earlier than the time it replaces).
    fn dir_linked(dir: &Inode, t: Timespec, added: bool, subdir: bool) {
        MemFs::dir_changed(dir, added, subdir, |w| {
            let t = t.max(w.get().ctime);
            w.set_ctime(t);
            w.set_mtime(t);
        });
    }

    /// An inode lost `n` links; returns its new change time.
    fn drop_links(inode: &Inode, now: Timespec, n: u32) -> Timespec {
        inode.update(|w| {
            let a = w.get();
            w.set_nlink(a.nlink.saturating_sub(n));
            w.stamp_ctime(now)
        })
    }

    fn touch_ctime(inode: &Inode, now: Timespec) {
        inode.update(|w| w.stamp_ctime(now));
    }

    /// Charges the pages of `range` that `pages` does not have yet to the size limit:
    /// ENOSPC, with nothing charged, when they do not fit.
    fn reserve_pages(&self, pages: &BTreeMap<u64, PageSlot>, range: std::ops::Range<u64>) -> Result<u64> {
        let new = range.filter(|i| !pages.contains_key(i)).count() as u64;
        if new > 0 {
            let used = self.usage.pages.fetch_add(new, Ordering::Relaxed) + new;
            if self.max_bytes.is_some_and(|m| used > m / PAGE) {
                self.usage.pages.fetch_sub(new, Ordering::Relaxed);
                return Err(Errno::ENOSPC);
            }
        }
        Ok(new)
    }

    /// Writes `buf` at `off` into `pages`, whose new pages are reserved. Its new pages
    /// are made first, whole pages with one `pwrite` per run of them (see `shmem`), and
    /// the pages only replaced or written in place once every new one exists: on error
    /// (no memory) nothing was written.
    fn write_pages(&self, pages: &mut BTreeMap<u64, PageSlot>, off: u64, buf: &[u8]) -> Result<()> {
        let end = off + buf.len() as u64;
        let (head, tail) = ((off % PAGE) as usize, (end % PAGE) as usize);
        let (first, last) = (off / PAGE, (end - 1) / PAGE);
        // A write inside one page the file holds alone (a 1-byte `pwrite`): in place, with
        // one lookup.
        if first == last
            && let Some(page) = pages.get_mut(&first).and_then(Option::as_mut).and_then(Arc::get_mut)
        {
            page.write(head, buf);
            return Ok(());
        }
        // The partial pages at either end, as (page, offset, bytes): no allocation for a
        // write inside a page (a 1-byte `pwrite`).
        let mut partial: [Option<(u64, usize, &[u8])>; 2] = [None, None];
        if head != 0 || buf.len() < PAGE as usize {
            partial[0] = Some((first, head, &buf[..buf.len().min(PAGE as usize - head)]));
        }
        if tail != 0 && (last != first || partial[0].is_none()) {
            partial[1] = Some((last, 0, &buf[buf.len() - tail..]));
        }
        // The whole pages between them.
        let whole_first = if head == 0 { first } else { first + 1 };
        let whole_end = if tail == 0 { last + 1 } else { last };
        let whole = if whole_first < whole_end {
            let at = (whole_first * PAGE - off) as usize;
            &buf[at..at + ((whole_end - whole_first) * PAGE) as usize]
        } else {
            &[]
        };
        // A partial page that is shared or new becomes a new one too, from an image of
        // the old page (or zeros) with the bytes written: every new page is made by one
        // call (one `pwritev` where their slots follow each other).
        // (On the stack: a partial write allocates nothing but its new page.)
        let mut images: [Option<[u8; shmem::PAGE]>; 2] = [None, None];
        for (p, image) in partial.iter().zip(&mut images) {
            if let Some((idx, at, bytes)) = *p
                && pages.get_mut(&idx).and_then(Option::as_mut).and_then(Arc::get_mut).is_none()
            {
                *image = Some(Page::image(pages.get(&idx).and_then(Option::as_deref), at, bytes));
            }
        }
        let mut parts: [&[u8]; 3] = [&[]; 3];
        parts[0] = images[0].as_ref().map_or(&[][..], |i| &i[..]);
        parts[1] = whole;
        parts[2] = images[1].as_ref().map_or(&[][..], |i| &i[..]);
        let mut made = Page::new_pages(&parts, self.small_writes)?.into_iter().map(Arc::new);
        let mut copies: [Option<PageData>; 2] = [None, None];
        copies[0] = images[0].as_ref().and_then(|_| made.next());
        let run: Vec<PageData> = made.by_ref().take(whole.len() / shmem::PAGE).collect();
        copies[1] = images[1].as_ref().and_then(|_| made.next());
        // Nothing can fail from here on.
        for (p, copy) in partial.into_iter().zip(copies) {
            let Some((idx, at, bytes)) = p else { continue };
            match copy {
                Some(page) => {
                    pages.insert(idx, Some(page));
                }
                None => {
                    // Unshared when checked, under the file's write lock: nobody can have
                    // taken a reference since (a copy takes its under the source's lock).
                    let page = pages.get_mut(&idx).and_then(Option::as_mut).and_then(Arc::get_mut);
                    page.expect("a page the file holds alone").write(at, bytes);
                }
            }
        }
        for (idx, page) in (whole_first..).zip(run) {
            pages.insert(idx, Some(page));
        }
        Ok(())
    }

    /// Sets size (at least `end`, unless `keep_size`) and blocks after pages changed.
    fn set_extent(inode: &Inode, pages: &BTreeMap<u64, PageSlot>, end: Option<u64>) {
        let blocks = pages.len() as u64 * (PAGE / 512);
        inode.update(|w| {
            if let Some(end) = end
                && end > w.get().size
            {
                w.set_size(end);
            }
            w.set_blocks(blocks);
        });
    }
}

impl Default for MemFs {
    fn default() -> Self {
        MemFs::new()
    }
}

impl FileSystem for MemFs {
    fn fs_type(&self) -> &'static str {
        "tmpfs"
    }

    fn dcache_complete(&self) -> bool {
        true
    }

    fn root_inode(&self, sb: &Arc<SuperBlock>) -> Result<Arc<Inode>> {
        let args = CreateArgs { mode: FileType::Directory.mode_bits() | 0o1777, ..Default::default() };
        self.new_inode(sb, &args, 2)
    }

    fn statfs(&self, _sb: &SuperBlock) -> StatFs {
        let pages = self.usage.pages.load(Ordering::Relaxed);
        let ispace = self.usage.ispace.load(Ordering::Relaxed);
        // An unlimited tmpfs reports zeros (`shmem_statfs`).
        let blocks = self.max_bytes.map(|b| b / PAGE).unwrap_or(0);
        let files = self.max_inodes.unwrap_or(0);
        StatFs {
            fs_type: TMPFS_MAGIC,
            bsize: PAGE,
            blocks,
            bfree: blocks.saturating_sub(pages),
            bavail: blocks.saturating_sub(pages),
            files,
            ffree: files.saturating_mul(BOGO_INODE_SIZE).saturating_sub(ispace) / BOGO_INODE_SIZE,
            namelen: 255,
            ..StatFs::default()
        }
    }

    fn create(&self, sb: &Arc<SuperBlock>, dir: &Inode, _name: &[u8], args: &CreateArgs<'_>) -> Result<Arc<Inode>> {
        let is_dir = args.mode & S_IFMT == FileType::Directory.mode_bits();
        let inode = self.new_inode(sb, args, if is_dir { 2 } else { 1 })?;
        MemFs::inherit_flags(dir, &inode);
        MemFs::dir_added(dir, inode.attrs().ctime, is_dir);
        Ok(inode)
    }

    fn tmpfile(&self, sb: &Arc<SuperBlock>, dir: &Inode, args: &CreateArgs<'_>) -> Result<Arc<Inode>> {
        let inode = self.new_inode(sb, args, 0)?;
        MemFs::inherit_flags(dir, &inode);
        Ok(inode)
    }

    fn link(&self, dir: &Inode, _name: &[u8], inode: &Arc<Inode>) -> Result<()> {
        let now = current_time();
        let t = inode.update(|w| {
            let a = w.get();
            w.set_nlink(a.nlink + 1);
            w.stamp_ctime(now)
        });
        MemFs::dir_linked(dir, t, true, false);
        Ok(())
    }

    fn unlink(&self, dir: &Inode, _name: &[u8], inode: &Inode) -> Result<()> {
        let t = MemFs::drop_links(inode, current_time(), 1);
        MemFs::dir_linked(dir, t, false, false);
        Ok(())
    }

    fn rmdir(&self, dir: &Inode, _name: &[u8], inode: &Inode) -> Result<()> {
        let t = MemFs::drop_links(inode, current_time(), 2);
        MemFs::dir_linked(dir, t, false, true);
        Ok(())
    }

    fn rename(&self, r: &RenameReq<'_>) -> Result<()> {
        let now = current_time();
        let moving_dir = r.inode.is_dir();
        let same_dir = std::ptr::eq(r.old_dir, r.new_dir);
        if r.flags.contains(crate::abi::flags::RenameFlags::EXCHANGE) {
            let target = r.target.ok_or(Errno::ENOENT)?;
            if !same_dir && moving_dir != target.is_dir() {
                let (lose, gain) = if moving_dir { (r.old_dir, r.new_dir) } else { (r.new_dir, r.old_dir) };
                lose.update(|w| w.set_nlink(w.get().nlink.saturating_sub(1)));
                gain.update(|w| w.set_nlink(w.get().nlink + 1));
            }
            MemFs::touch_ctime(target, now);
        } else {
            if let Some(t) = r.target {
                MemFs::drop_links(t, now, if t.is_dir() { 2 } else { 1 });
                // The target's entry goes away: the new directory loses it.
                MemFs::dir_removed(r.new_dir, now, t.is_dir());
            }
            MemFs::dir_removed(r.old_dir, now, moving_dir);
            MemFs::dir_added(r.new_dir, now, moving_dir);
        }
        for d in [r.old_dir, r.new_dir] {
            d.update(|w| {
                w.stamp_cmtime(now);
            });
        }
        MemFs::touch_ctime(r.inode, now);
        Ok(())
    }

    fn readlink(&self, inode: &Inode) -> Result<Vec<u8>> {
        match inode.file_type() {
            FileType::Symlink => inode.cached_link().map(<[u8]>::to_vec).ok_or(Errno::EIO),
            _ => Err(Errno::EINVAL),
        }
    }

    fn truncate(&self, inode: &Inode, size: u64, _by: TruncateBy) -> Result<()> {
        let Some(pages) = MemFs::file_pages(inode) else { return Err(Errno::EINVAL) };
        if size > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        let mut pages = pages.write();
        let old = inode.size();
        if size < old {
            // The tail of the last page kept is zeroed first: that may need a new page
            // (a shared one is copied), and a failure leaves the file as it was.
            if !size.is_multiple_of(PAGE) && matches!(pages.get(&(size / PAGE)), Some(Some(_))) {
                let at = (size % PAGE) as usize;
                self.write_pages(&mut pages, size, &ZEROS[at..])?;
            }
            let dropped = pages.split_off(&size.div_ceil(PAGE));
            self.usage.pages.fetch_sub(dropped.len() as u64, Ordering::Relaxed);
        }
        let blocks = pages.len() as u64 * (PAGE / 512);
        inode.update(|w| {
            w.set_size(size);
            w.set_blocks(blocks);
        });
        Ok(())
    }

    fn read(&self, inode: &Inode, off: u64, buf: &mut [u8]) -> Result<usize> {
        let Some(pages) = MemFs::file_pages(inode) else { return Err(Errno::EINVAL) };
        MemFs::read_pages(&pages.read(), inode, off, buf)
    }

    fn write(&self, inode: &Inode, at: WriteAt, buf: &[u8]) -> Result<(u64, usize)> {
        let Some(pages) = MemFs::file_pages(inode) else { return Err(Errno::EINVAL) };
        // Every write and truncate of the file holds this lock, so the size an append
        // resolves against is the one it extends.
        let mut pages = pages.write();
        let (off, len) = at.resolve(inode.size(), buf.len())?;
        let buf = &buf[..len];
        if buf.is_empty() {
            return Ok((off, 0));
        }
        let end = off.checked_add(buf.len() as u64).filter(|&e| e <= MAX_FILE_SIZE).ok_or(Errno::EFBIG)?;
        // Reserve the new pages first so a full filesystem fails before anything changes.
        let reserved = self.reserve_pages(&pages, off / PAGE..end.div_ceil(PAGE))?;
        if let Err(e) = self.write_pages(&mut pages, off, buf) {
            // Nothing was written (see `write_pages`): give the reservation back.
            self.usage.pages.fetch_sub(reserved, Ordering::Relaxed);
            return Err(e);
        }
        let blocks = pages.len() as u64 * (PAGE / 512);
        inode.update(|w| {
            let a = w.get();
            if end > a.size {
                w.set_size(end);
            }
            w.set_blocks(blocks);
        });
        Ok((off, buf.len()))
    }

    fn fallocate(&self, inode: &Inode, mode: FallocFlags, off: u64, len: u64) -> Result<()> {
        let Some(pages) = MemFs::file_pages(inode) else { return Err(Errno::ENODEV) };
        let end = off + len;
        let mut pages = pages.write();
        if mode == FallocFlags::PUNCH_HOLE | FallocFlags::KEEP_SIZE {
            // `shmem_truncate_range`: whole pages are freed, the edges zeroed in place.
            let (first, last) = (off.div_ceil(PAGE), end / PAGE);
            for (edge, from, to) in [(off / PAGE, off, end.min((off / PAGE + 1) * PAGE)), (last, last * PAGE, end)] {
                let whole = from == edge * PAGE && to == (edge + 1) * PAGE;
                if from < to && !whole && matches!(pages.get(&edge), Some(Some(_))) {
                    let (a, b) = ((from - edge * PAGE) as usize, (to - edge * PAGE) as usize);
                    self.write_pages(&mut pages, from, &ZEROS[a..b])?;
                }
            }
            if first < last {
                let tail = pages.split_off(&last);
                let freed = pages.split_off(&first).len() as u64;
                pages.extend(tail);
                self.usage.pages.fetch_sub(freed, Ordering::Relaxed);
            }
            MemFs::set_extent(inode, &pages, None);
            return Ok(());
        }
        if !(FallocFlags::KEEP_SIZE).contains(mode) {
            // tmpfs has no ZERO_RANGE, COLLAPSE_RANGE, INSERT_RANGE, UNSHARE_RANGE or
            // WRITE_ZEROES.
            return Err(Errno::EOPNOTSUPP);
        }
        let range = off / PAGE..end.div_ceil(PAGE);
        self.reserve_pages(&pages, range.clone())?;
        for idx in range {
            // A page reserved by an earlier call is zeroed and holds data from now on
            // (tmpfs: `shmem_get_folio` with `SGP_FALLOC` on a folio fallocated before
            // marks it uptodate, "lest undo on failure cancel our earlier guarantee"); one
            // reserved now is a hole until written.
            match pages.entry(idx) {
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(None);
                }
                std::collections::btree_map::Entry::Occupied(mut o) => {
                    if o.get().is_none() {
                        o.insert(Some(Page::zeros().clone()));
                    }
                }
            }
        }
        MemFs::set_extent(inode, &pages, (!mode.contains(FallocFlags::KEEP_SIZE)).then_some(end));
        Ok(())
    }

    fn seek_hole_data(&self, inode: &Inode, off: u64, hole: bool) -> Result<u64> {
        let Some(pages) = MemFs::file_pages(inode) else { return Ok(if hole { inode.size() } else { off }) };
        let pages = pages.read();
        let size = pages.size(inode);
        // Reserved pages never written are holes, as tmpfs's folios that are not uptodate.
        let at = if hole {
            let mut idx = off / PAGE;
            while matches!(pages.get(&idx), Some(Some(_))) {
                idx += 1;
            }
            (idx * PAGE).max(off).min(size)
        } else {
            let data = pages.range(off / PAGE..).find(|(_, p)| p.is_some()).map(|(&i, _)| (i * PAGE).max(off));
            data.filter(|&d| d < size).ok_or(Errno::ENXIO)?
        };
        Ok(at)
    }

    fn copy_range(&self, src: &Inode, src_off: u64, dst: &Inode, dst_off: u64, len: u64) -> Result<u64> {
        // Whole pages are shared when both offsets are page-aligned; anything else is
        // copied through a buffer by the VFS.
        let (Some(from), Some(to)) = (MemFs::file_pages(src), MemFs::file_pages(dst)) else {
            return Err(Errno::EINVAL);
        };
        if !src_off.is_multiple_of(PAGE) || !dst_off.is_multiple_of(PAGE) || len < PAGE {
            return Err(Errno::EOPNOTSUPP);
        }
        let whole = len / PAGE;
        let (first_src, first_dst) = (src_off / PAGE, dst_off / PAGE);
        // The source's pages, by reference (a hole or a reserved page copies as zeros:
        // the copy holds data there, as a copy through the page cache would).
        let shared: Vec<PageData> = {
            let from = from.read();
            (first_src..first_src + whole)
                .map(|i| from.get(&i).cloned().flatten().unwrap_or_else(|| Page::zeros().clone()))
                .collect()
        };
        let mut to = to.write();
        self.reserve_pages(&to, first_dst..first_dst + whole)?;
        for (i, page) in shared.into_iter().enumerate() {
            to.insert(first_dst + i as u64, Some(page));
        }
        MemFs::set_extent(dst, &to, Some(dst_off + whole * PAGE));
        Ok(whole * PAGE)
    }

    fn statx_attributes(&self, inode: &Inode) -> (StatxAttrs, StatxAttrs) {
        // tmpfs reports these three file flags (`shmem_getattr`), of every inode.
        let f = MemFs::fsflags(inode);
        let mut a = StatxAttrs::empty();
        for (fl, at) in [
            (FsFlags::IMMUTABLE, StatxAttrs::IMMUTABLE),
            (FsFlags::APPEND, StatxAttrs::APPEND),
            (FsFlags::NODUMP, StatxAttrs::NODUMP),
        ] {
            if f.contains(fl) {
                a |= at;
            }
        }
        (a, StatxAttrs::IMMUTABLE | StatxAttrs::APPEND | StatxAttrs::NODUMP)
    }

    fn btime(&self, inode: &Inode) -> Option<Timespec> {
        inode.btime()
    }

    fn posix_acl(&self) -> bool {
        true
    }

    fn get_acl(&self, inode: &Inode, ty: AclType) -> Result<Option<Arc<Acl>>> {
        let Some(meta) = MemFs::meta(inode) else { return Ok(None) };
        Ok(meta.acls.lock()[MemFs::acl_index(ty)].clone())
    }

    fn set_acl(&self, inode: &Inode, ty: AclType, acl: Option<&Arc<Acl>>) -> Result<()> {
        if acl.is_none() && MemFs::meta(inode).is_none() {
            return Ok(());
        }
        MemFs::mem_or_init(inode).meta().acls.lock()[MemFs::acl_index(ty)] = acl.cloned();
        Ok(())
    }

    /// tmpfs keeps flags on regular files and directories only (its other inode
    /// operations have no `fileattr_get`).
    fn fileattr_get(&self, inode: &Inode) -> Result<FsFlags> {
        if !matches!(inode.file_type(), FileType::Regular | FileType::Directory) {
            return Err(Errno::ENOTTY);
        }
        Ok(MemFs::fsflags(inode))
    }

    fn fileattr_set(&self, inode: &Inode, flags: FsFlags) -> Result<()> {
        self.fileattr_get(inode)?;
        if !MODIFIABLE_FLAGS.contains(flags) {
            return Err(Errno::EOPNOTSUPP);
        }
        if !flags.is_empty() || MemFs::mem(inode).is_some() {
            MemFs::mem_or_init(inode).fsflags.store(flags.bits(), Ordering::Relaxed);
        }
        inode.set_attr_flags(flags);
        Ok(())
    }

    fn getxattr(&self, inode: &Inode, name: &[u8], buf: &mut [u8]) -> Result<usize> {
        let meta = MemFs::meta(inode).ok_or(Errno::ENODATA)?;
        let xattrs = meta.xattrs.read();
        let v = xattrs.get(name).ok_or(Errno::ENODATA)?;
        if buf.is_empty() {
            return Ok(v.len());
        }
        let out = buf.get_mut(..v.len()).ok_or(Errno::ERANGE)?;
        out.copy_from_slice(v);
        Ok(v.len())
    }

    fn setxattr(&self, inode: &Inode, name: &[u8], value: &[u8], flags: XattrFlags) -> Result<()> {
        let mem = MemFs::mem_or_init(inode);
        // tmpfs charges the new value before it looks for the old one.
        let need = xattr_space(name, value);
        self.usage.reserve_ispace(self.max_inodes, need)?;
        let mut xattrs = mem.meta().xattrs.write();
        let give_back = match xattrs.get_mut(name) {
            Some(_) if flags.contains(XattrFlags::CREATE) => Err(Errno::EEXIST),
            Some(old) => Ok(xattr_space(name, &std::mem::replace(old, value.into()))),
            None if flags.contains(XattrFlags::REPLACE) => Err(Errno::ENODATA),
            None => {
                xattrs.insert(name.into(), value.into());
                Ok(0)
            }
        };
        drop(xattrs);
        self.usage.release_ispace(*give_back.as_ref().unwrap_or(&need));
        give_back.map(|_| ())
    }

    fn removexattr(&self, inode: &Inode, name: &[u8]) -> Result<()> {
        let meta = MemFs::meta(inode).ok_or(Errno::ENODATA)?;
        let old = meta.xattrs.write().remove(name).ok_or(Errno::ENODATA)?;
        self.usage.release_ispace(xattr_space(name, &old));
        Ok(())
    }

    fn listxattr(&self, inode: &Inode, out: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        let Some(meta) = MemFs::meta(inode) else { return Ok(()) };
        meta.xattrs.read().keys().try_for_each(|n| out(n))
    }

    fn evict(&self, inode: &Inode) {
        MemNode::release(MemFs::mem(inode), &self.usage);
    }

    fn free_inode(&self, inode: &Inode) {
        // The release eviction makes, if eviction did not (the VFS evicts at most once,
        // and marks the inode first).
        if !inode.evicted() {
            MemNode::release(MemFs::mem(inode), &self.usage);
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DirFd, OpenFlags, Vfs, VfsConfig};

    /// A read racing a file's first write, with the interleaving made by hand: the reader
    /// finds no page map, then the write makes one, writes and sets the size, then the
    /// reader goes on. It must read the file as it was (empty), not the new size with
    /// zeros for the data it cannot see (which `tests/concurrency.rs` caught once).
    #[test]
    fn a_reader_that_found_no_pages_reads_the_file_empty() {
        let vfs = Vfs::new(VfsConfig::default());
        let t = vfs.root_task();
        let f = t.openat_file(DirFd::Cwd, b"/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
        let inode = f.inode();
        let held = MemFs::file_pages(inode).unwrap().read();
        assert!(matches!(held, PagesRead::Never));
        assert_eq!(t.pwrite(&f, b"first data", 0).unwrap(), 10);
        let mut buf = [7u8; 16];
        assert_eq!(MemFs::read_pages(&held, inode, 0, &mut buf).unwrap(), 0);
        drop(held);
        let now = MemFs::file_pages(inode).unwrap().read();
        assert_eq!(MemFs::read_pages(&now, inode, 0, &mut buf).unwrap(), 10);
        assert_eq!(&buf[..10], b"first data");
    }

    /// An inode's space goes back once: at eviction (the last name and open gone), or when
    /// the inode is freed without one (an inode that never got a name; a tree torn down),
    /// though the node keeps no pointer to the filesystem.
    #[test]
    fn an_inode_gives_its_space_back_once() {
        let vfs = Vfs::new(VfsConfig::default());
        let t = vfs.root_task();
        let root = t.openat_file(DirFd::Cwd, b"/", OpenFlags::RDONLY, 0).unwrap();
        let sb = root.inode().sb().clone();
        let fs = sb.fs().as_any().downcast_ref::<MemFs>().unwrap();
        let used = || (fs.usage.ispace.load(Ordering::Relaxed), fs.usage.pages.load(Ordering::Relaxed));
        let before = used();
        let args = CreateArgs { mode: 0o100644, uid: 0, gid: 0, rdev: 0, target: None, acl: None, default_acl: None };
        let inode = fs.new_inode(&sb, &args, 0).unwrap();
        assert_eq!(used().0, before.0 + BOGO_INODE_SIZE);
        drop(inode);
        assert_eq!(used(), before, "freed without eviction");
        // Evicted (unlinked while open, then closed), then freed: given back once.
        let fd = t.open(b"/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
        t.write(fd, &[1; 10000]).unwrap();
        assert_eq!(used(), (before.0 + BOGO_INODE_SIZE, before.1 + 3));
        t.unlink(b"/f").unwrap();
        t.close(fd).unwrap();
        assert_eq!(used(), before, "evicted at the last close");
        // The deferred drops run, the inode among them: nothing is given back twice.
        vfs.inner.rcu.flush();
        assert_eq!(used(), before, "freed after its eviction");
    }
}
