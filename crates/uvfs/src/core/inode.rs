//! `Inode`: one file object of a filesystem. Mirrors Linux's `struct inode`, but: no page
//! cache or address space (the filesystem holds the data), and the attributes are atomics
//! read without a lock under a sequence count.
//!
//! The attribute group (mode, ids, nlink, size, times) is a set of atomics under the
//! inode's `SeqCount`: `stat` reads it locklessly and retries if a writer intervened;
//! writers hold `Inode::lock` and bump the count. The fields a walk reads (mode with the
//! type, ids, flags, ACL slot) are 32 bytes within one cache line, not the one of the
//! `Arc`'s counts, the lock and the open count (see the checks at the end of this file).
//!
//! Times are multigrain, as tmpfs's since Linux 6.13: changes take the coarse clock
//! ([`current_time`]) unless a `stat` has reported the change time since it was last
//! set, in which case [`AttrWriter::stamp_ctime`] takes a fine-grained stamp, so that the
//! change shows (see `I_CTIME_QUERIED` and `MG_FLOOR`). Accesses move the access time
//! (`Inode::touch_atime`, Linux's `touch_atime`, with the mount's `relatime` rules): the
//! check is lockless, three time loads and a coarse clock read; only a move locks.

use std::any::Any;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use once_cell::race::OnceBox;

use crate::abi::flags::{FsFlags, Timespec};
use crate::abi::stat::Ino;
use crate::abi::stat::{FileType, S_IFMT, Stat};
use crate::core::acl::posix_acl_create;
use crate::core::acl::{AclInit, AclSlot};
use crate::core::fsnotify::{EventMask, Mark};
use crate::core::mount::{Mount, MountFlags};
use crate::core::permission::init_owner;
use crate::core::superblock::CreateArgs;
use crate::core::superblock::SuperBlock;
use crate::sync::Mutex;
use crate::sync::seqcount::SeqCount;

/// An inode. Only ever constructed as `Arc<Inode>` (the walk relies on it).
///
/// Laid out for the `Arc` around it, in 160 bytes with its counts (see the checks at the
/// end of this file): what opens, closes and reference counting write first (the counts,
/// `opens`, the lock), then what stat does not read, then the 32 bytes lookups and
/// permission checks read, which lie within one cache line that the counts are not on,
/// whether the block starts on a line or half-way into one; the rest of what stat reads
/// after them.
#[repr(C)]
pub struct Inode {
    // ---- with the `Arc` counts: what opens and closes write ----
    /// Atomic: open file descriptions of this inode, and [`OPENS_EVICTED`]; with `nlink`,
    /// decides eviction.
    opens: AtomicU32,
    /// The inode lock (Linux's `i_rwsem` for attribute changes): serializes attribute
    /// writers, ACL and xattr changes, and the slow-path ACL load.
    pub(crate) lock: Mutex<(), { crate::sync::rank::INODE }>,
    // ---- what stat does not read ----
    /// The filesystem's private data (memfs: the file contents): given when the inode is
    /// made, or set once by [`Inode::private_or_init`] (Linux's `i_private`); an inode
    /// that never needs any (memfs: an empty file without xattrs or flags) carries no
    /// allocation for it.
    private: OnceBox<Box<dyn Any + Send + Sync>>,
    /// Set once, by the first inotify mark or file lock on the inode: what few inodes use.
    extra: OnceBox<InodeExtra>,
    /// What the type alone has (see [`ByType`]): immutable, or as its field says.
    by_type: ByType,
    /// Immutable: inode number.
    ino: Ino,
    /// Attribute group: size in bytes.
    size: AtomicU64,
    // ---- read by lookups and permission checks (and stat) ----
    /// Guards the attribute group (mode, ids, link count, size, blocks, times) against torn
    /// reads.
    attr_seq: SeqCount,
    /// Attribute group (atomic; written under `lock` inside `attr_seq`): type and mode
    /// bits. The type bits never change (what [`Inode::file_type`] reads).
    mode: AtomicU32,
    /// Attribute group: owner.
    uid: AtomicU32,
    /// Attribute group: group.
    gid: AtomicU32,
    /// Atomic: `I_*` flags (Linux's `i_flags`): [`I_NOSEC`], and the inode flags the VFS
    /// enforces ([`I_IMMUTABLE`], [`I_APPEND`], [`I_NOATIME`]), which the filesystem sets
    /// under `lock` ([`Inode::set_attr_flags`]).
    iflags: AtomicU32,
    /// Atomic: the union of the event bits of the inode's inotify marks (Linux's
    /// `i_fsnotify_mask`), read by the notify fast path; recomputed under the lock that
    /// serializes changes of the marks (`InodeExtra::marks`).
    mark_mask: AtomicU32,
    /// The access ACL slot (atomic; filled under `lock`). See [`crate::core::acl`].
    pub(crate) acl_access: AclSlot,
    // ---- the rest of what stat reads ----
    /// Attribute group: 512-byte blocks.
    blocks: AtomicU64,
    /// Immutable: the birth time the filesystem gave ([`NewInode::btime`]), nanoseconds
    /// since the epoch (saturated), or [`NO_BTIME`].
    btime: i64,
    /// Immutable: the filesystem instance.
    sb: Arc<SuperBlock>,
    /// Attribute group: link count.
    nlink: AtomicU32,
    atime: AtomicTime,
    mtime: AtomicTime,
    ctime: AtomicTime,
}

/// What only inodes of some types have, in one slot, told apart by the type (which never
/// changes): a directory's default ACL, a symlink's cached body, a device node's number.
/// Linux gives each its own field (`i_default_acl`, `i_link`, `i_rdev`); no inode uses
/// two of them.
union ByType {
    /// A directory: the default ACL slot (atomic, changed under `lock`). Read by creates
    /// in the directory, not by lookups or stat.
    acl_default: std::mem::ManuallyDrop<AclSlot>,
    /// A symlink: the body, cached for the readlink fast path (seed 002); immutable once set.
    link: std::mem::ManuallyDrop<OnceBox<Box<[u8]>>>,
    /// Any other type: immutable, the device number (0 but for a device node).
    rdev: u64,
}

/// The type by the mode's type bits (`mode >> 12 & 0xf`); an inode's are always valid
/// (`Inode::make` checks them, and mode changes keep them).
const TYPES: [FileType; 16] = {
    let mut t = [FileType::Regular; 16];
    let all = [
        FileType::Regular,
        FileType::Directory,
        FileType::Symlink,
        FileType::Fifo,
        FileType::CharDevice,
        FileType::BlockDevice,
        FileType::Socket,
    ];
    let mut i = 0;
    while i < all.len() {
        t[(all[i].mode_bits() >> 12) as usize] = all[i];
        i += 1;
    }
    t
};

/// The type bits of a directory and of a symlink, the types `ByType` keeps no device
/// number for.
const S_IFDIR: u32 = FileType::Directory.mode_bits();
const S_IFLNK: u32 = FileType::Symlink.mode_bits();

/// `Inode::btime` of an inode whose filesystem gave none.
const NO_BTIME: i64 = i64::MIN;

impl Drop for Inode {
    fn drop(&mut self) {
        self.sb.fs().free_inode(self);
        if let Some(c) = self.sb.counts.get() {
            c.inodes.fetch_sub(1, Ordering::Relaxed);
        }
        match self.file_type() {
            // SAFETY: the type says which field `make` wrote, and it is dropped once, here.
            FileType::Directory => unsafe { std::mem::ManuallyDrop::drop(&mut self.by_type.acl_default) },
            // SAFETY: as above.
            FileType::Symlink => unsafe { std::mem::ManuallyDrop::drop(&mut self.by_type.link) },
            _ => {}
        }
    }
}

/// Inode flag (Linux's `S_NOSEC`): known to carry nothing a write must remove (no set-id
/// bit a write clears, no `security.capability`), so `file_remove_privs` is one flag test.
/// Set by the first write that finds nothing; cleared by a mode change and by setting a
/// `security.*` xattr.
pub(crate) const I_NOSEC: u32 = 1 << 0;

/// Inode flag (Linux's `S_IMMUTABLE`, from `FS_IMMUTABLE_FL`): nothing may change the
/// inode, name it anew or (a directory) add or remove entries: EPERM.
pub(crate) const I_IMMUTABLE: u32 = 1 << 1;
/// Inode flag (Linux's `S_APPEND`, from `FS_APPEND_FL`): written only by appends; no
/// truncate, attribute change, removal, rename or new name: EPERM.
pub(crate) const I_APPEND: u32 = 1 << 2;
/// Inode flag (Linux's `S_NOATIME`, from `FS_NOATIME_FL`): no access-time updates.
pub(crate) const I_NOATIME: u32 = 1 << 3;
/// Inode flag: `stat` asks the filesystem first, as Linux's `->getattr` of a filesystem
/// whose attributes change elsewhere: it re-reads what it caches
/// ([`crate::core::superblock::FileSystem::host_changed`]: a host file the kernel writes
/// through FUSE passthrough, marked by the FUSE server while such an open lasts) and may
/// report another link count ([`crate::core::superblock::FileSystem::stat_nlink`]: a
/// lower object overlay removed without copying it up, marked for good).
pub(crate) const I_STAT_BY_FS: u32 = 1 << 4;
/// The `I_*` flags that mirror a filesystem's inode flags.
const I_ATTR_FLAGS: u32 = I_IMMUTABLE | I_APPEND | I_NOATIME;
/// Each of them with its `FS_*_FL`.
const ATTR_FLAGS: [(u32, FsFlags); 3] =
    [(I_IMMUTABLE, FsFlags::IMMUTABLE), (I_APPEND, FsFlags::APPEND), (I_NOATIME, FsFlags::NOATIME)];

/// Bit of `Inode::opens`: the contents were evicted; no open may register any more.
const OPENS_EVICTED: u32 = 1 << 31;

/// A timestamp as three 32-bit atomics (the seconds' halves and the nanoseconds): 12
/// bytes where an `AtomicI64` and an `AtomicU32` take 16, which keeps an inode in 160
/// bytes. Read under the inode's sequence count, which makes the halves agree (a read
/// that overlapped a write is retried), and written under its lock.
#[derive(Default)]
struct AtomicTime {
    sec_hi: AtomicU32,
    sec_lo: AtomicU32,
    nsec: AtomicU32,
}

impl AtomicTime {
    fn new(t: Timespec) -> Self {
        let a = AtomicTime::default();
        a.store(t);
        a
    }
    fn load(&self) -> Timespec {
        let hi = u64::from(self.sec_hi.load(Ordering::Relaxed));
        let lo = u64::from(self.sec_lo.load(Ordering::Relaxed));
        Timespec { sec: (hi << 32 | lo) as i64, nsec: self.nsec.load(Ordering::Relaxed) & !I_CTIME_QUERIED }
    }
    fn store(&self, t: Timespec) {
        let s = t.sec as u64;
        self.sec_hi.store((s >> 32) as u32, Ordering::Relaxed);
        self.sec_lo.store(s as u32, Ordering::Relaxed);
        self.nsec.store(t.nsec, Ordering::Relaxed);
    }
}

/// Set in the change time's nanoseconds (which stay below 2^30) once a `stat` has reported
/// it: the next change must then show, so it gets a fine-grained stamp unless the coarse
/// clock has moved past it (Linux's `I_CTIME_QUERIED`). Cleared by every store of a time.
const I_CTIME_QUERIED: u32 = 1 << 31;

/// Multigrain timestamps (Linux 6.13, tmpfs's and ext4's; `fs/inode.c` and
/// `kernel/time/timekeeping.c`). A change is stamped with the coarse clock (the kernel's
/// tick: a read of a shared page, no `rdtsc`), so that a burst of creates, writes and
/// unlinks costs one cheap clock read each. A change that must be told apart from what a
/// `stat` already saw (`I_CTIME_QUERIED`) takes the fine clock instead, and that fine stamp
/// raises a floor under every later coarse one, so that no file changed after another gets
/// an earlier time (what `make` relies on). Nanoseconds since the epoch; atomic, the one
/// shared write is a fine stamp's.
static MG_FLOOR: AtomicU64 = AtomicU64::new(0);

fn clock(id: libc::clockid_t) -> Timespec {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable `timespec`, and the clocks asked for exist on every
    // Linux uvfs runs on (the coarse one since 2.6.32), so the call fills it. (glibc's
    // vDSO call, not rustix's: valgrind, which runs the concurrency tests, maps no vDSO
    // that rustix's own parser can read.)
    unsafe { libc::clock_gettime(id, &mut ts) };
    Timespec { sec: ts.tv_sec, nsec: ts.tv_nsec as u32 }
}

fn to_ns(t: Timespec) -> u64 {
    (t.sec as u64).wrapping_mul(1_000_000_000).wrapping_add(u64::from(t.nsec))
}

fn from_ns(n: u64) -> Timespec {
    Timespec { sec: (n / 1_000_000_000) as i64, nsec: (n % 1_000_000_000) as u32 }
}

/// Linux's `current_time` on a multigrain filesystem: the coarse clock, or the latest
/// fine-grained stamp if that is later. What a new inode is stamped with, and the `now`
/// an operation passes to [`AttrWriter::stamp_ctime`].
pub fn current_time() -> Timespec {
    let coarse = clock(libc::CLOCK_REALTIME_COARSE);
    let floor = MG_FLOOR.load(Ordering::Relaxed);
    if floor > to_ns(coarse) { from_ns(floor) } else { coarse }
}

/// A fine-grained stamp (`ktime_get_real_ts64_mg`), which becomes the coarse stamps' floor.
fn fine_time() -> Timespec {
    crate::sync::counters::bump(|c| c.fine_stamps += 1);
    let fine = clock(libc::CLOCK_REALTIME);
    let n = to_ns(fine);
    // A later stamp already made the floor: use it (it is fine-grained too, and newer).
    let prev = MG_FLOOR.load(Ordering::Relaxed);
    if prev >= n {
        return from_ns(prev);
    }
    let prev = MG_FLOOR.fetch_max(n, Ordering::Relaxed);
    if prev > n { from_ns(prev) } else { fine }
}

/// What few inodes use, made by the first that needs it; Linux keeps the same two behind
/// pointers of the inode (`i_fsnotify_marks`, `i_flctx`).
#[derive(Default)]
struct InodeExtra {
    /// The inotify marks on the inode; their union is also kept in `Inode::mark_mask`.
    marks: crate::core::fsnotify::Marks,
    /// Set once, by the first lock taken on the inode (Linux's `i_flctx`): its file locks.
    flctx: OnceLock<Box<crate::core::locks::FileLockContext>>,
}

/// What a filesystem gives to make a new inode.
pub struct NewInode {
    /// Inode number.
    pub ino: Ino,
    /// Type and permission bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Link count.
    pub nlink: u32,
    /// Size.
    pub size: u64,
    /// Blocks.
    pub blocks: u64,
    /// Device number.
    pub rdev: u64,
    /// Access, modification and change times.
    pub times: [Timespec; 3],
    /// What the access ACL slot starts as (memfs: known, none or inherited).
    pub acl: AclInit,
    /// What the default ACL slot starts as.
    pub default_acl: AclInit,
    /// The symlink body, if the filesystem has it at hand.
    pub link: Option<Box<[u8]>>,
    /// The birth time, if the filesystem keeps it in the inode ([`Inode::btime`]; others
    /// answer [`crate::core::superblock::FileSystem::btime`] themselves).
    pub btime: Option<Timespec>,
}

/// A consistent copy of the attribute group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attrs {
    /// Type and permission bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Link count.
    pub nlink: u32,
    /// Size.
    pub size: u64,
    /// Blocks.
    pub blocks: u64,
    /// Access time.
    pub atime: Timespec,
    /// Modification time.
    pub mtime: Timespec,
    /// Change time.
    pub ctime: Timespec,
}

impl Inode {
    /// Makes an inode of `sb` with the filesystem's private data.
    pub fn new(sb: &Arc<SuperBlock>, n: NewInode, private: Box<dyn Any + Send + Sync>) -> Arc<Inode> {
        Inode::make(sb, n, OnceBox::with_value(Box::new(private)))
    }

    /// Makes an inode of `sb` whose private data the filesystem makes when it first needs
    /// it ([`Inode::private_or_init`]).
    pub fn new_private_later(sb: &Arc<SuperBlock>, n: NewInode) -> Arc<Inode> {
        Inode::make(sb, n, OnceBox::new())
    }

    fn make(sb: &Arc<SuperBlock>, n: NewInode, private: OnceBox<Box<dyn Any + Send + Sync>>) -> Arc<Inode> {
        let ftype = FileType::from_mode(n.mode).expect("filesystem gave an inode without a valid type");
        if let Some(c) = sb.counts.get() {
            c.inodes.fetch_add(1, Ordering::Relaxed);
        }
        use std::mem::ManuallyDrop;
        let by_type = match ftype {
            FileType::Directory => ByType { acl_default: ManuallyDrop::new(AclSlot::new(n.default_acl)) },
            FileType::Symlink => ByType {
                link: ManuallyDrop::new(match n.link {
                    Some(l) => OnceBox::with_value(Box::new(l)),
                    None => OnceBox::new(),
                }),
            },
            FileType::CharDevice | FileType::BlockDevice => ByType { rdev: n.rdev },
            // Linux's `init_special_inode` keeps a device number for device nodes only.
            _ => ByType { rdev: 0 },
        };
        Arc::new(Inode {
            opens: AtomicU32::new(0),
            lock: Mutex::new(()),
            private,
            extra: OnceBox::new(),
            by_type,
            ino: n.ino,
            size: AtomicU64::new(n.size),
            attr_seq: SeqCount::new(),
            mode: AtomicU32::new(n.mode),
            uid: AtomicU32::new(n.uid),
            gid: AtomicU32::new(n.gid),
            iflags: AtomicU32::new(0),
            mark_mask: AtomicU32::new(0),
            acl_access: AclSlot::new(n.acl),
            blocks: AtomicU64::new(n.blocks),
            btime: n.btime.map_or(NO_BTIME, |t| {
                t.sec.saturating_mul(1_000_000_000).saturating_add(i64::from(t.nsec)).max(NO_BTIME + 1)
            }),
            sb: sb.clone(),
            nlink: AtomicU32::new(n.nlink),
            atime: AtomicTime::new(n.times[0]),
            mtime: AtomicTime::new(n.times[1]),
            ctime: AtomicTime::new(n.times[2]),
        })
    }

    /// The default ACL slot: a directory's (`None` for any other type, which never has a
    /// default ACL).
    #[inline]
    pub(crate) fn acl_default(&self) -> Option<&AclSlot> {
        // SAFETY: a directory's `by_type` holds its default ACL slot (`make`).
        self.is_dir().then(|| unsafe { &*self.by_type.acl_default })
    }

    /// Forgets the cached ACLs (the storage changed them behind the VFS's back): the next
    /// permission check loads them again.
    pub fn forget_cached_acls(&self) {
        let _g = self.lock.lock();
        // A directory no longer known to have no ACL: see `SuperBlock::names_change`.
        let _change = self.is_dir().then(|| self.sb.names_change());
        self.acl_access.forget(&self.sb.rcu());
        if let Some(d) = self.acl_default() {
            d.forget(&self.sb.rcu());
        }
    }

    /// Inode number.
    #[inline]
    pub fn ino(&self) -> Ino {
        self.ino
    }

    /// Whether [`I_NOSEC`] is set.
    #[inline]
    pub(crate) fn is_nosec(&self) -> bool {
        self.iflags.load(Ordering::Acquire) & I_NOSEC != 0
    }

    /// Marks the inode (`on`) or clears the mark (`I_STAT_BY_FS`): while marked, `stat`
    /// asks the filesystem first ([`crate::core::superblock::FileSystem::host_changed`],
    /// then [`crate::core::superblock::FileSystem::stat_nlink`]).
    pub fn set_stat_by_fs(&self, on: bool) {
        if on {
            self.iflags.fetch_or(I_STAT_BY_FS, Ordering::Release);
        } else {
            self.iflags.fetch_and(!I_STAT_BY_FS, Ordering::Release);
        }
    }

    /// Sets (`true`) or clears [`I_NOSEC`].
    pub(crate) fn set_nosec(&self, on: bool) {
        if on {
            self.iflags.fetch_or(I_NOSEC, Ordering::AcqRel);
        } else if self.is_nosec() {
            self.iflags.fetch_and(!I_NOSEC, Ordering::AcqRel);
        }
    }

    /// The inode flags the VFS enforces, as `FS_*_FL` (`IMMUTABLE`, `APPEND`, `NOATIME`):
    /// one atomic load. The filesystem keeps the whole set (`FileSystem::fileattr_get`).
    #[inline]
    pub fn attr_flags(&self) -> FsFlags {
        let f = self.iflags.load(Ordering::Relaxed);
        let mut out = FsFlags::empty();
        for (i, fl) in ATTR_FLAGS {
            if f & i != 0 {
                out |= fl;
            }
        }
        out
    }

    /// Sets the inode flags the VFS enforces from a filesystem's `FS_*_FL` (Linux's
    /// `inode_set_flags` with `S_IMMUTABLE | S_APPEND | S_NOATIME`): what a filesystem's
    /// [`FileSystem::fileattr_set`](crate::FileSystem::fileattr_set) calls, with the inode
    /// lock held, and what it calls on an inode it makes with inherited flags. The other
    /// `I_*` bits are kept (one atomic update: no moment without either flag when one
    /// replaces the other).
    pub fn set_attr_flags(&self, flags: FsFlags) {
        let mut set = 0;
        for (i, fl) in ATTR_FLAGS {
            if flags.contains(fl) {
                set |= i;
            }
        }
        // Nothing is published with these flags: a relaxed update, read by relaxed loads
        // (Linux reads `i_flags` with plain loads too).
        let _ = self.iflags.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| Some((f & !I_ATTR_FLAGS) | set));
    }

    /// `IS_IMMUTABLE`: one atomic load.
    #[inline]
    pub(crate) fn is_immutable(&self) -> bool {
        self.iflags.load(Ordering::Relaxed) & I_IMMUTABLE != 0
    }

    /// `IS_APPEND`: one atomic load.
    #[inline]
    pub(crate) fn is_append(&self) -> bool {
        self.iflags.load(Ordering::Relaxed) & I_APPEND != 0
    }

    /// `IS_IMMUTABLE || IS_APPEND`: one atomic load.
    #[inline]
    pub(crate) fn is_immutable_or_append(&self) -> bool {
        self.iflags.load(Ordering::Relaxed) & (I_IMMUTABLE | I_APPEND) != 0
    }

    /// The type: the mode's type bits, which never change.
    #[inline]
    pub fn file_type(&self) -> FileType {
        TYPES[(self.mode.load(Ordering::Relaxed) >> 12) as usize & 0xf]
    }

    /// Whether it is a directory.
    #[inline]
    pub fn is_dir(&self) -> bool {
        self.mode.load(Ordering::Relaxed) & S_IFMT == S_IFDIR
    }

    /// The filesystem instance.
    #[inline]
    pub fn sb(&self) -> &Arc<SuperBlock> {
        &self.sb
    }

    /// Device number of a device node (0 for any other type).
    pub fn rdev(&self) -> u64 {
        self.rdev_of(self.mode.load(Ordering::Relaxed))
    }

    /// [`Inode::rdev`] by the mode a caller already read (the type bits never change).
    #[inline]
    fn rdev_of(&self, mode: u32) -> u64 {
        match mode & S_IFMT {
            S_IFDIR | S_IFLNK => 0,
            // SAFETY: every other type's `by_type` holds a device number (`make`).
            _ => unsafe { self.by_type.rdev },
        }
    }

    /// The filesystem's private data (`None`: of another type, or not made yet).
    pub fn private<T: 'static>(&self) -> Option<&T> {
        self.private.get()?.downcast_ref()
    }

    /// The filesystem's private data, made by `init` if the inode was made with
    /// [`Inode::new_private_later`] and has none yet. Racing callers may each run `init`;
    /// one result is kept and the others dropped. Panics if the data is of another type
    /// (a filesystem asks for its own).
    pub fn private_or_init<T: Any + Send + Sync>(&self, init: impl FnOnce() -> T) -> &T {
        let p: &(dyn Any + Send + Sync) = &**self.private.get_or_init(|| Box::new(Box::new(init())));
        p.downcast_ref().expect("inode private data of another type")
    }

    /// The birth time the filesystem gave when it made the inode ([`NewInode::btime`]).
    pub fn btime(&self) -> Option<Timespec> {
        (self.btime != NO_BTIME).then(|| Timespec {
            sec: self.btime.div_euclid(1_000_000_000),
            nsec: self.btime.rem_euclid(1_000_000_000) as u32,
        })
    }

    /// Whether the contents were evicted ([`crate::core::superblock::FileSystem::evict`]
    /// was called, or is being called): set once, before the call.
    pub fn evicted(&self) -> bool {
        self.opens.load(Ordering::Acquire) & OPENS_EVICTED != 0
    }

    /// Mode bits, read without a lock (a single atomic; Linux reads `i_mode` the same way).
    #[inline]
    pub fn mode(&self) -> u32 {
        self.mode.load(Ordering::Relaxed)
    }

    /// Owner, read without a lock.
    #[inline]
    pub fn uid(&self) -> u32 {
        self.uid.load(Ordering::Relaxed)
    }

    /// Group, read without a lock.
    #[inline]
    pub fn gid(&self) -> u32 {
        self.gid.load(Ordering::Relaxed)
    }

    /// Link count.
    #[inline]
    pub fn nlink(&self) -> u32 {
        self.nlink.load(Ordering::Relaxed)
    }

    /// Size.
    #[inline]
    pub fn size(&self) -> u64 {
        self.size.load(Ordering::Relaxed)
    }

    /// Blocks allocated, in 512-byte units (`st_blocks`).
    #[inline]
    pub fn blocks(&self) -> u64 {
        self.blocks.load(Ordering::Relaxed)
    }

    /// The attributes' generation: it moves with every update ([`Inode::update`]), so a
    /// filesystem that reads attributes from elsewhere (hostfs: the host's `stat`) can tell
    /// whether a change through uvfs was applied since it read them.
    pub(crate) fn attr_generation(&self) -> u32 {
        loop {
            // Never poisoned (see `attrs`): None means a writer is inside, for a moment.
            if let Some(s) = self.attr_seq.try_read_begin() {
                return s;
            }
            std::hint::spin_loop();
        }
    }

    /// A consistent copy of the attributes: lockless, retried while a writer is inside.
    #[inline]
    pub fn attrs(&self) -> Attrs {
        loop {
            // An inode's count is never poisoned (`SeqCount::write`): None means a writer
            // is inside, for a moment.
            let Some(start) = self.attr_seq.try_read_begin() else {
                std::hint::spin_loop();
                continue;
            };
            let a = Attrs {
                mode: self.mode.load(Ordering::Relaxed),
                uid: self.uid.load(Ordering::Relaxed),
                gid: self.gid.load(Ordering::Relaxed),
                nlink: self.nlink.load(Ordering::Relaxed),
                size: self.size.load(Ordering::Relaxed),
                blocks: self.blocks.load(Ordering::Relaxed),
                atime: self.atime.load(),
                mtime: self.mtime.load(),
                ctime: self.ctime.load(),
            };
            if !self.attr_seq.read_retry(start) {
                return a;
            }
        }
    }

    /// Fills a `stat` for a caller who will see it: lockless, no allocation; it marks the
    /// change time reported as seen (one shared write after each change: see
    /// `I_CTIME_QUERIED`), so that the next change shows.
    #[inline]
    pub fn stat(&self) -> Stat {
        let s = self.stat_unseen();
        self.ctime_seen(s.ctime);
        s
    }

    /// Marks `seen`, a change time just read, as reported (`fill_mg_cmtime`). The mark is
    /// set only on the value read: if a change came in between, this reader's `stat` is
    /// ordered before it, and nothing needs marking.
    #[inline]
    fn ctime_seen(&self, seen: Timespec) {
        let n = self.ctime.nsec.load(Ordering::Relaxed);
        if n == seen.nsec {
            let _ = self.ctime.nsec.compare_exchange(n, n | I_CTIME_QUERIED, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Whether a `stat` reported the change time since the last change (`I_CTIME_QUERIED`):
    /// the next change must show, however soon it comes. hostfs passes that on to the host,
    /// whose own multigrain clock decides its stamps.
    #[inline]
    pub(crate) fn ctime_reported(&self) -> bool {
        self.ctime.nsec.load(Ordering::Relaxed) & I_CTIME_QUERIED != 0
    }

    /// [`Inode::stat`] without marking the change time as seen: for the kernel's own use of
    /// the attributes and for a `statx` that does not ask for `mtime` or `ctime`.
    #[inline]
    pub(crate) fn stat_unseen(&self) -> Stat {
        // One flag test: only inodes a filesystem or the FUSE server marked ask it.
        let a = match self.iflags.load(Ordering::Relaxed) & I_STAT_BY_FS {
            0 => self.attrs(),
            _ => self.attrs_by_fs(),
        };
        Stat {
            dev: self.sb.dev(),
            ino: self.ino.0,
            mode: a.mode,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            rdev: self.rdev_of(a.mode),
            size: a.size,
            blksize: 4096,
            blocks: a.blocks,
            atime: a.atime,
            mtime: a.mtime,
            ctime: a.ctime,
        }
    }

    /// The attributes of a marked inode (`I_STAT_BY_FS`), read after the filesystem
    /// re-read what it caches, with the link count it reports.
    #[cold]
    fn attrs_by_fs(&self) -> Attrs {
        let fs = self.sb.fs();
        fs.host_changed(self);
        let mut a = self.attrs();
        if let Some(n) = fs.stat_nlink(self) {
            a.nlink = n;
        }
        a
    }

    /// `touch_atime`: an access through `mnt` (a read, a listing, a symlink read or
    /// followed) moves the access time, as `atime_needs_update` says: not for an inode
    /// flagged `FS_NOATIME_FL`, on a `noatime` mount, or for a directory on a
    /// `nodiratime` one; on a `relatime` mount (the default) only while the access time
    /// is not after the modification or change time, or is a day old; never to the time
    /// it already has; not on a read-only mount or instance. No event: Linux reports the
    /// access, not the time's change.
    ///
    /// Decided without a lock, as Linux's: three time loads, not under the sequence count
    /// (a torn value only sends the call to the locked path, which looks again), and the
    /// clock. Only a move locks the inode.
    #[inline]
    pub(crate) fn touch_atime(&self, mnt: &Mount) {
        if let Some(strict) = self.atime_mode(mnt) {
            self.touch_atime_due(strict);
        }
    }

    /// [`Inode::touch_atime`] for a caller that has its [`Inode::atime_mode`]: the
    /// times' part.
    #[inline]
    pub(crate) fn touch_atime_due(&self, strict: bool) {
        if self.atime_due(strict, self.atime.load(), self.mtime.load(), self.ctime.load()).is_some() {
            self.touch_atime_slow(strict);
        }
    }

    /// How accesses through `mnt` move the access time: `None` if never, whatever the
    /// times are (`FS_NOATIME_FL`, a `noatime` mount, a directory on a `nodiratime` one,
    /// a read-only mount or instance); else whether on every access (`strictatime`)
    /// rather than `relatime`'s.
    #[inline]
    pub(crate) fn atime_mode(&self, mnt: &Mount) -> Option<bool> {
        let mf = mnt.flags();
        let frozen = self.iflags.load(Ordering::Relaxed) & I_NOATIME != 0
            || mf.contains(MountFlags::NOATIME)
            || (mf.contains(MountFlags::NODIRATIME) && self.is_dir())
            || mnt.want_write().is_err();
        (!frozen).then_some(mf.contains(MountFlags::STRICTATIME))
    }

    /// [`Inode::touch_atime`] as a call of its own: for the walk's symlink step, so that
    /// the walk's loop keeps its inlining (inlined there, it cost a cached `stat` 11
    /// instructions elsewhere in the walk).
    #[inline(never)]
    pub(crate) fn touch_atime_outlined(&self, mnt: &Mount) {
        self.touch_atime(mnt);
    }

    /// `relatime_need_update` and the time to move to (`atime_needs_update` past its
    /// flags): `None` if the access time `a` is after the modification time `m` and the
    /// change time `c` and less than a day old (unless `strict`), or is now already.
    #[inline]
    fn atime_due(&self, strict: bool, a: Timespec, m: Timespec, c: Timespec) -> Option<Timespec> {
        let now = current_time();
        let fresh = m < a && c < a && now.sec.wrapping_sub(a.sec) < 24 * 60 * 60;
        ((strict || !fresh) && a != now).then_some(now)
    }

    /// [`Inode::touch_atime`] once a move is due: under the inode lock, with the times
    /// read again, the move and the filesystem told (`FileSystem::update_atime`).
    #[cold]
    fn touch_atime_slow(&self, strict: bool) {
        let _g = self.lock.lock();
        let Some(now) = self.atime_due(strict, self.atime.load(), self.mtime.load(), self.ctime.load()) else {
            return;
        };
        self.update_locked(|w| w.set_atime(now));
        self.sb.fs().update_atime(self, now);
    }

    /// Changes attributes: takes the inode lock and runs `f` inside the sequence count.
    /// `f` gets a writer over the attribute group.
    pub fn update<R>(&self, f: impl FnOnce(&mut AttrWriter<'_>) -> R) -> R {
        let _g = self.lock.lock();
        self.update_locked(f)
    }

    /// As [`Inode::update`], for a caller that already holds `lock`.
    ///
    /// # Preconditions
    /// The caller holds `self.lock`.
    pub(crate) fn update_locked<R>(&self, f: impl FnOnce(&mut AttrWriter<'_>) -> R) -> R {
        debug_assert!(self.lock.is_locked(), "update_locked without the inode lock");
        // Each attribute is an atomic valid on its own: a writer that panics leaves a mix
        // of old and new values, and the count even.
        let _w = self.attr_seq.write();
        f(&mut AttrWriter { inode: self })
    }

    /// Registers an open file description. `ESTALE` if the contents were already evicted:
    /// the open found the inode through a name that was unlinked (or renamed over) after
    /// the walk, and must walk again. The count and the evicted bit share one word, so an
    /// open and the eviction decision cannot both succeed.
    pub(crate) fn opened(&self) -> crate::abi::errno::Result<()> {
        self.opens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n & OPENS_EVICTED == 0).then_some(n + 1))
            .map(|_| ())
            .map_err(|_| crate::abi::errno::Errno::ESTALE)
    }

    /// Registers a holder that reaches the inode without a name: a mount whose root it
    /// is, a task's root or working directory (Linux: the dentry reference each holds,
    /// which keeps the inode from `evict`). Counted as an open, so that the contents
    /// outlive the last name while held: a file bind-mounted and then replaced at its
    /// source reads as it was; `open(".")` in a removed working directory opens it.
    /// Given back with [`Inode::closed`]. True if the contents were evicted already (the
    /// name the holder was found by went meanwhile): the caller gives the hold back.
    pub(crate) fn hold(&self) -> bool {
        self.opens.fetch_add(1, Ordering::AcqRel) & OPENS_EVICTED != 0
    }

    /// Unregisters an open file description; true if that evicted the inode.
    pub(crate) fn closed(&self) -> bool {
        self.opens.fetch_sub(1, Ordering::AcqRel) == 1 && self.evict_if_unused()
    }

    /// Frees the contents once the inode has neither links nor open files (Linux's
    /// `iput_final` -> `evict`), without waiting for the memory to be reclaimed. At most
    /// once, and never while (or after) an open registers.
    /// True if it evicted now.
    pub(crate) fn evict_if_unused(&self) -> bool {
        if self.nlink() == 0
            && self.opens.compare_exchange(0, OPENS_EVICTED, Ordering::AcqRel, Ordering::Acquire).is_ok()
        {
            self.sb.fs().evict(self);
            return true;
        }
        false
    }

    /// The lock context, if anything ever locked the inode (two atomic loads: no lock).
    #[inline]
    pub(crate) fn flctx(&self) -> Option<&crate::core::locks::FileLockContext> {
        self.extra.get()?.flctx.get().map(|b| &**b)
    }

    /// The lock context, made now if this is the inode's first lock.
    pub(crate) fn flctx_or_init(&self) -> &crate::core::locks::FileLockContext {
        self.extra.get_or_init(Box::default).flctx.get_or_init(Box::default)
    }

    /// The union of the event bits of the inode's inotify marks (one load).
    #[inline]
    pub(crate) fn mark_mask(&self) -> EventMask {
        EventMask::from_bits_retain(self.mark_mask.load(Ordering::Relaxed))
    }

    /// The inode's marks, read under `guard` (no lock, no copy): none, with one load, for
    /// an inode never watched.
    #[inline]
    pub(crate) fn marks<'g>(&'g self, guard: &'g crate::sync::rcu::LocalGuard<'_>) -> &'g [Arc<Mark>] {
        self.extra.get().map_or(&[], |e| e.marks.read(guard))
    }

    /// A copy of the inode's marks, for a caller that removes them as it goes.
    pub(crate) fn marks_snapshot(&self) -> Vec<Arc<Mark>> {
        self.marks(&self.sb().rcu().pin()).to_vec()
    }

    /// Adds an inotify mark.
    pub(crate) fn add_mark(&self, m: Arc<Mark>) {
        self.extra.get_or_init(Box::default).marks.add(m, &self.sb().rcu(), Some(&self.mark_mask));
    }

    /// Removes an inotify mark; whether it was there.
    pub(crate) fn remove_mark(&self, m: &Arc<Mark>) -> bool {
        let Some(e) = self.extra.get() else { return false };
        e.marks.remove(m, &self.sb().rcu(), Some(&self.mark_mask))
    }

    /// Recomputes the mask after a mark's own mask changed.
    pub(crate) fn recalc_marks(&self) {
        if let Some(e) = self.extra.get() {
            e.marks.recalc(&self.sb().rcu(), Some(&self.mark_mask));
        }
    }

    /// The file locks on the inode, held and waited for (what Linux's `/proc/locks` lists
    /// for it): `flock` locks, then POSIX and OFD locks in list order, then the waiting
    /// requests. Empty, without allocating anything, for a file nobody locked.
    pub fn file_locks(&self) -> Vec<crate::core::locks::LockInfo> {
        self.flctx().map(crate::core::locks::list).unwrap_or_default()
    }

    /// The cached symlink body, if cached.
    #[inline]
    pub fn cached_link(&self) -> Option<&[u8]> {
        // SAFETY: a symlink's `by_type` holds its body's cell (`make`).
        (self.mode.load(Ordering::Relaxed) & S_IFMT == S_IFLNK)
            .then(|| unsafe { &*self.by_type.link })
            .and_then(|l| l.get())
            .map(|b| &b[..])
    }

    /// Caches the symlink body (first caller wins; bodies do not change).
    pub fn set_cached_link(&self, body: Box<[u8]>) {
        debug_assert_eq!(self.file_type(), FileType::Symlink, "a body cached for another type");
        if self.file_type() == FileType::Symlink {
            // SAFETY: as in `cached_link`.
            let _ = unsafe { &*self.by_type.link }.set(Box::new(body));
        }
    }
}

/// Writes the attribute group of an inode; only exists inside [`Inode::update`].
pub struct AttrWriter<'a> {
    inode: &'a Inode,
}

impl AttrWriter<'_> {
    /// Current attributes.
    pub fn get(&self) -> Attrs {
        let i = self.inode;
        Attrs {
            mode: i.mode.load(Ordering::Relaxed),
            uid: i.uid.load(Ordering::Relaxed),
            gid: i.gid.load(Ordering::Relaxed),
            nlink: i.nlink.load(Ordering::Relaxed),
            size: i.size.load(Ordering::Relaxed),
            blocks: i.blocks.load(Ordering::Relaxed),
            atime: i.atime.load(),
            mtime: i.mtime.load(),
            ctime: i.ctime.load(),
        }
    }
    /// Sets the permission bits (keeps the type bits). A set-id bit may be back: the next
    /// write checks again what it must remove.
    pub fn set_mode(&mut self, mode: u32) {
        let old = self.inode.mode.load(Ordering::Relaxed);
        let m = (old & S_IFMT) | (mode & !S_IFMT);
        if m != old {
            self.inode.set_nosec(false);
        }
        // Who may search a directory may change: see `SuperBlock::names_change`.
        let _change = ((m ^ old) & 0o111 != 0 && self.inode.is_dir()).then(|| self.inode.sb.names_change());
        self.inode.mode.store(m, Ordering::Relaxed);
    }
    /// Sets the owner.
    pub fn set_uid(&mut self, uid: u32) {
        let _change = self.dir_owner_change(&self.inode.uid, uid);
        self.inode.uid.store(uid, Ordering::Relaxed);
    }
    /// Sets the group.
    pub fn set_gid(&mut self, gid: u32) {
        let _change = self.dir_owner_change(&self.inode.gid, gid);
        self.inode.gid.store(gid, Ordering::Relaxed);
    }
    /// A directory's owner or group changing changes who may search it: see
    /// `SuperBlock::names_change`.
    fn dir_owner_change(&self, field: &AtomicU32, new: u32) -> Option<crate::core::superblock::NamesChange<'_>> {
        (self.inode.is_dir() && field.load(Ordering::Relaxed) != new).then(|| self.inode.sb.names_change())
    }
    /// Sets the link count.
    pub fn set_nlink(&mut self, n: u32) {
        self.inode.nlink.store(n, Ordering::Relaxed);
    }
    /// Sets the size.
    pub fn set_size(&mut self, n: u64) {
        self.inode.size.store(n, Ordering::Relaxed);
    }
    /// Sets the block count.
    pub fn set_blocks(&mut self, n: u64) {
        self.inode.blocks.store(n, Ordering::Relaxed);
    }
    /// Sets the access time.
    pub fn set_atime(&mut self, t: Timespec) {
        self.inode.atime.store(t);
    }
    /// Sets the modification time.
    pub fn set_mtime(&mut self, t: Timespec) {
        self.inode.mtime.store(t);
    }
    /// Sets the change time to `t` as it is (a host's, a copied one).
    pub fn set_ctime(&mut self, t: Timespec) {
        self.inode.ctime.store(t);
    }
    /// Stamps the change time for a change made now (Linux's `inode_set_ctime_current`):
    /// `now`, the operation's [`current_time`], unless a `stat` reported the change time
    /// and `now` is not later, in which case a fine-grained stamp, so that the change
    /// shows. Never earlier than the time it replaces. Returns the time the inode has, for
    /// the other times the change sets.
    pub fn stamp_ctime(&mut self, now: Timespec) -> Timespec {
        let c = &self.inode.ctime;
        let raw = c.nsec.load(Ordering::Relaxed);
        let old = c.load();
        // Not below a fine stamp made since `now` was read (by this very operation, on
        // another of its inodes, perhaps).
        let mut t = now.max(from_ns(MG_FLOOR.load(Ordering::Relaxed)));
        if raw & I_CTIME_QUERIED != 0 {
            if t <= old {
                t = fine_time();
            }
            if t <= old {
                // A clock behind the time there (set back, or a host's ahead): the change
                // must still show, and not go back, so one nanosecond past it.
                t = from_ns(to_ns(old) + 1);
            }
        } else if t <= old {
            // Nothing to store: the same tick's stamp again (a burst of changes nobody
            // looked at), or a clock behind the time there (a host's fine stamp that
            // hostfs applied since): the change keeps it, as the floor keeps uvfs's own
            // stamps in order. A `stat` marking it meanwhile reported what stays.
            return old;
        }
        // A plain store: a `stat` marks only a time it read unmarked (a CAS), and the new
        // time differs from one unmarked (it is later), so no mark can be lost unseen.
        c.store(t);
        t
    }
    /// [`AttrWriter::stamp_ctime`], and the modification time set to the same stamp: a
    /// change of contents (`inode_set_mtime_to_ts(inode, inode_set_ctime_current(inode))`).
    pub fn stamp_cmtime(&mut self, now: Timespec) -> Timespec {
        let t = self.stamp_ctime(now);
        self.inode.mtime.store(t);
        t
    }
}

impl std::fmt::Debug for Inode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inode").field("ino", &self.ino).field("type", &self.file_type()).finish()
    }
}

/// Owner, group, mode and inherited ACLs of a node `creds` creates in `dir` with the
/// requested `mode` (type bits included): `inode_init_owner` (setgid rules, decided on the
/// requested mode), then `posix_acl_create` (the directory's default ACL, or the umask).
pub(crate) fn new_node_args(
    creds: &crate::abi::cred::Credentials,
    dir: &crate::core::inode::Inode,
    mode: u32,
    umask: u32,
) -> crate::abi::errno::Result<CreateArgs<'static>> {
    let is_dir = mode & S_IFMT == FileType::Directory.mode_bits();
    let (gid, m) = init_owner(creds, dir, mode, is_dir);
    let a = posix_acl_create(dir, m, umask)?;
    Ok(CreateArgs { mode: a.mode, uid: creds.uid.0, gid, acl: a.acl, default_acl: a.default_acl, ..Default::default() })
}

// The inode's lines, counted in its `Arc`'s allocation: the `Arc`'s strong and weak counts
// (16 bytes) come first, and the allocator hands out this 160-byte allocation from its
// 160-byte class, whose blocks start on a cache line or half-way into one (mimalloc's do;
// `uvfs-alloc`'s tests check it). What lookups and permission checks read (mode, ids,
// flags, the notify mask, the access ACL) is the 32 bytes at 64..96: within one line at
// either start, and never the line of the counts, `opens` and the lock, which opens,
// closes and reference counting write (seed 004's rule for the dentry, kept here too).
// 160 bytes an inode, where the 192-byte layout with a line of its own for each group
// took 192 and a 64-aligned inode with its counts on a line of their own 256. Checked at
// compile time (not in the loom build, whose sequence count is loom's model of one).
#[cfg(not(loom))]
const _: () = {
    use crate::sync::rcu::ARC_COUNTS as COUNTS;
    use std::mem::{align_of, offset_of, size_of};
    assert!(align_of::<Inode>() == 8);
    assert!(size_of::<ByType>() == 8 && size_of::<OnceBox<Box<dyn Any + Send + Sync>>>() == 8);
    assert!(COUNTS + size_of::<Inode>() == 160, "the 160-byte class");
    assert!(COUNTS + offset_of!(Inode, opens) + 4 <= 32 && COUNTS + offset_of!(Inode, lock) < 32);
    assert!(COUNTS + offset_of!(Inode, attr_seq) == 64);
    assert!(
        offset_of!(Inode, mode) > offset_of!(Inode, attr_seq) && offset_of!(Inode, uid) > offset_of!(Inode, attr_seq)
    );
    assert!(
        offset_of!(Inode, gid) > offset_of!(Inode, attr_seq) && offset_of!(Inode, iflags) > offset_of!(Inode, attr_seq)
    );
    assert!(offset_of!(Inode, mark_mask) > offset_of!(Inode, attr_seq));
    assert!(COUNTS + offset_of!(Inode, acl_access) + size_of::<AclSlot>() == 96);
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::stat::Ino;
    use crate::{DirFd, OpenFlags, Vfs, VfsConfig};

    /// The slot only some types use holds each type's own: a directory's default ACL
    /// (inherited by a subdirectory, absent on a file), a symlink's body (read twice: the
    /// second from the cache), a device's number (and none for a fifo given one); each
    /// freed with its inode (Miri runs this: the slot is a union told apart by the type).
    #[test]
    fn each_type_keeps_its_own_in_the_shared_slot() {
        use crate::core::acl::{Acl, AclEntry, AclTag};
        use crate::{XattrFlags, abi::stat::S_IFMT};
        // Limits given, so that Miri need not ask the machine's memory (`sysinfo`).
        let vfs =
            Vfs::new(VfsConfig { root_size_limit: Some(1 << 20), root_inode_limit: Some(100), ..Default::default() });
        let t = vfs.root_task();
        let acl = Acl::new(vec![
            AclEntry::new(AclTag::UserObj, 7),
            AclEntry::new(AclTag::User(1000), 5),
            AclEntry::new(AclTag::GroupObj, 5),
            AclEntry::new(AclTag::Mask, 5),
            AclEntry::new(AclTag::Other, 0),
        ]);
        let name = b"system.posix_acl_default";
        t.mkdir(b"/d", 0o755).unwrap();
        t.setxattr(b"/d", name, &acl.to_xattr_vec(), XattrFlags::empty()).unwrap();
        t.mkdir(b"/d/sub", 0o755).unwrap();
        let mut buf = [0u8; 64];
        let n = t.getxattr(b"/d/sub", name, &mut buf).unwrap();
        assert_eq!(Acl::from_xattr(&buf[..n]).unwrap(), Some(acl), "inherited default ACL");
        t.mknodat(DirFd::Cwd, b"/d/f", 0o100644, 0).unwrap();
        assert_eq!(t.getxattr(b"/d/f", name, &mut buf), Err(crate::Errno::ENODATA), "a file's default ACL");
        t.symlink(b"target/of/the/link", b"/d/l").unwrap();
        for _ in 0..2 {
            let n = t.readlink(b"/d/l", &mut buf).unwrap();
            assert_eq!(&buf[..n], b"target/of/the/link");
        }
        let dev = (1 << 8) | 3;
        t.mknodat(DirFd::Cwd, b"/d/c", 0o020644, dev).unwrap();
        t.mknodat(DirFd::Cwd, b"/d/p", 0o010644, dev).unwrap();
        let (c, p) = (t.lstat(b"/d/c").unwrap(), t.lstat(b"/d/p").unwrap());
        assert_eq!((c.rdev, c.mode & S_IFMT, p.rdev, p.mode & S_IFMT), (dev, 0o020000, 0, 0o010000));
        assert_eq!((t.lstat(b"/d").unwrap().rdev, t.lstat(b"/d/l").unwrap().rdev), (0, 0));
        t.unlink(b"/d/l").unwrap();
        t.unlink(b"/d/c").unwrap();
    }

    /// A change after a `stat` shows, and never goes back, also when the time there is
    /// ahead of the clock (the clock set back, a host's stamp from a clock ahead); one
    /// nobody looked at keeps the time there.
    #[test]
    fn a_change_time_ahead_of_the_clock_is_not_taken_back() {
        let vfs = Vfs::new(VfsConfig::default());
        let root = vfs.root_task().openat_file(DirFd::Cwd, b"/", OpenFlags::RDONLY, 0).unwrap();
        let now = current_time();
        let ahead = Timespec { sec: now.sec + 3600, nsec: 999_999_999 };
        let n = NewInode {
            ino: Ino(u64::MAX),
            mode: 0o100644,
            uid: 0,
            gid: 0,
            nlink: 1,
            size: 0,
            blocks: 0,
            rdev: 0,
            times: [ahead; 3],
            acl: AclInit::Known(None),
            default_acl: AclInit::Known(None),
            link: None,
            btime: None,
        };
        let inode = Inode::new(root.inode().sb(), n, Box::new(()));
        assert_eq!(inode.update(|w| w.stamp_ctime(current_time())), ahead, "unseen: the time there stays");
        let seen = inode.stat().ctime;
        assert_eq!(seen, ahead);
        inode.update(|w| w.stamp_ctime(current_time()));
        let after = inode.stat().ctime;
        assert!(after > seen, "a change after a stat shows and is not earlier: {after:?} after {seen:?}");
    }
}
