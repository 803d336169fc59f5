//! Flag newtypes of the syscall-shaped API, with Linux's bit values.
//!
//! Values match `<fcntl.h>`/`<linux/fs.h>` on x86-64 so a frontend passes them through
//! unchanged. Unknown bits are rejected with `EINVAL` where Linux rejects them
//! ([`OpenFlags::from_bits`] keeps the known ones; the calls check with `from_bits`).

use bitflags::bitflags;

bitflags! {
    /// `open(2)` flags.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct OpenFlags: u32 {
        const RDONLY = 0;
        const WRONLY = 0o1;
        const RDWR = 0o2;
        const CREAT = 0o100;
        const EXCL = 0o200;
        const NOCTTY = 0o400;
        const TRUNC = 0o1000;
        const APPEND = 0o2000;
        const NONBLOCK = 0o4000;
        const DSYNC = 0o10000;
        const ASYNC = 0o20000;
        const DIRECT = 0o40000;
        const LARGEFILE = 0o100000;
        const DIRECTORY = 0o200000;
        const NOFOLLOW = 0o400000;
        const NOATIME = 0o1000000;
        const CLOEXEC = 0o2000000;
        /// `__O_SYNC`; `O_SYNC` is this plus `DSYNC`.
        const SYNC = 0o4000000;
        const PATH = 0o10000000;
        /// `__O_TMPFILE`; `O_TMPFILE` is this plus `DIRECTORY`.
        const TMPFILE = 0o20000000;
    }
}

impl OpenFlags {
    /// The access mode bits (`O_ACCMODE`).
    pub const ACCMODE: u32 = 0o3;

    /// `O_RDONLY`/`O_WRONLY`/`O_RDWR` as 0, 1, 2 (3 is invalid except with `O_PATH`).
    pub fn access_mode(self) -> u32 {
        self.bits() & Self::ACCMODE
    }

    /// Whether the file is opened for reading.
    pub fn readable(self) -> bool {
        matches!(self.access_mode(), 0 | 2) && !self.contains(Self::PATH)
    }

    /// Whether the file is opened for writing.
    pub fn writable(self) -> bool {
        matches!(self.access_mode(), 1 | 2) && !self.contains(Self::PATH)
    }
}

bitflags! {
    /// `AT_*` flags of the `*at` calls.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct AtFlags: u32 {
        const SYMLINK_NOFOLLOW = 0x100;
        /// `AT_REMOVEDIR` for `unlinkat`; `AT_EACCESS` for `faccessat` (same value on Linux).
        const REMOVEDIR = 0x200;
        const SYMLINK_FOLLOW = 0x400;
        const NO_AUTOMOUNT = 0x800;
        const EMPTY_PATH = 0x1000;
        /// `AT_STATX_FORCE_SYNC` (`statx`): what the filesystem has is already current.
        const STATX_FORCE_SYNC = 0x2000;
        /// `AT_STATX_DONT_SYNC` (`statx`): as above.
        const STATX_DONT_SYNC = 0x4000;
    }
}

impl AtFlags {
    /// `AT_EACCESS`: check with the effective ids (shares the bit with `AT_REMOVEDIR`).
    pub const EACCESS: AtFlags = AtFlags::REMOVEDIR;
}

bitflags! {
    /// `renameat2(2)` flags.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct RenameFlags: u32 {
        const NOREPLACE = 1;
        const EXCHANGE = 2;
        const WHITEOUT = 4;
    }
}

bitflags! {
    /// `access(2)` modes (`F_OK` is the empty set).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct AccessMode: u32 {
        const X_OK = 1;
        const W_OK = 2;
        const R_OK = 4;
    }
}

impl AccessMode {
    /// `F_OK`: existence only.
    pub const F_OK: AccessMode = AccessMode::empty();
}

/// A file descriptor number in a task's fd table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fd(pub i32);

bitflags! {
    /// Descriptor flags (`F_GETFD`/`F_SETFD`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct FdFlags: u32 {
        /// `FD_CLOEXEC`.
        const CLOEXEC = 1;
    }
}

/// An `fcntl(2)` command other than the lock commands (those are
/// [`crate::Task::fcntl_lock`]). Leases (`F_SETLEASE`, `F_GETLEASE`) and directory
/// notification (`F_NOTIFY`) are not offered: uvfs has watches instead (README).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FcntlCmd {
    /// `F_DUPFD`: the lowest free descriptor >= the argument.
    DupFd(Fd),
    /// `F_DUPFD_CLOEXEC`: as `DupFd`, with close-on-exec.
    DupFdCloexec(Fd),
    /// `F_GETFD`.
    GetFd,
    /// `F_SETFD`.
    SetFd(FdFlags),
    /// `F_GETFL`: the open file's status flags and access mode.
    GetFl,
    /// `F_SETFL`: only `O_APPEND`, `O_NONBLOCK`, `O_DIRECT`, `O_NOATIME` and `O_ASYNC`
    /// change; the rest of the argument is ignored, as on Linux.
    SetFl(OpenFlags),
}

bitflags! {
    /// `preadv2`/`pwritev2` flags (`RWF_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct RwfFlags: u32 {
        /// `RWF_HIPRI`: poll for completion (nothing to do in-process).
        const HIPRI = 0x1;
        /// `RWF_DSYNC`: as `O_DSYNC` for this write.
        const DSYNC = 0x2;
        /// `RWF_SYNC`: as `O_SYNC` for this write.
        const SYNC = 0x4;
        /// `RWF_NOWAIT`: do not wait for data or locks (EOPNOTSUPP, as on tmpfs).
        const NOWAIT = 0x8;
        /// `RWF_APPEND`: as `O_APPEND` for this write.
        const APPEND = 0x10;
        /// `RWF_NOAPPEND`: ignore `O_APPEND` for this write (Linux 6.9).
        const NOAPPEND = 0x20;
        /// `RWF_ATOMIC`: untorn writes (needs `O_DIRECT` and filesystem support: EOPNOTSUPP
        /// on memfs, as on tmpfs).
        const ATOMIC = 0x40;
        /// `RWF_DONTCACHE`: drop the pages after the I/O (EOPNOTSUPP, as on tmpfs).
        const DONTCACHE = 0x80;
        /// `RWF_NOSIGNAL`: no SIGPIPE on EPIPE (there are no signals in-process).
        const NOSIGNAL = 0x100;
    }
}

bitflags! {
    /// `fallocate(2)` modes (`FALLOC_FL_*`). The low bits choose the operation (none:
    /// allocate), `KEEP_SIZE` modifies allocation and is required by `PUNCH_HOLE`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct FallocFlags: u32 {
        /// `FALLOC_FL_KEEP_SIZE`: allocate past the end without moving the size.
        const KEEP_SIZE = 0x01;
        /// `FALLOC_FL_PUNCH_HOLE`: free the range (reads give zeros); with `KEEP_SIZE`.
        const PUNCH_HOLE = 0x02;
        /// `FALLOC_FL_COLLAPSE_RANGE` (EOPNOTSUPP on memfs, as on tmpfs).
        const COLLAPSE_RANGE = 0x08;
        /// `FALLOC_FL_ZERO_RANGE` (EOPNOTSUPP on memfs, as on tmpfs).
        const ZERO_RANGE = 0x10;
        /// `FALLOC_FL_INSERT_RANGE` (EOPNOTSUPP on memfs, as on tmpfs).
        const INSERT_RANGE = 0x20;
        /// `FALLOC_FL_UNSHARE_RANGE` (EOPNOTSUPP on memfs, as on tmpfs).
        const UNSHARE_RANGE = 0x40;
        /// `FALLOC_FL_WRITE_ZEROES` (Linux 6.17; EOPNOTSUPP on memfs, as on tmpfs).
        const WRITE_ZEROES = 0x80;
    }
}

bitflags! {
    /// `copy_file_range(2)` flags: Linux defines none for callers (any bit is EINVAL).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct CopyRangeFlags: u32 {}
}

/// `MAX_RW_COUNT`: the most one read, write or copy moves (`INT_MAX & PAGE_MASK`).
pub const MAX_RW_COUNT: usize = 0x7fff_f000;

bitflags! {
    /// Inode flags (`FS_*_FL`) of `FS_IOC_GETFLAGS`/`FS_IOC_SETFLAGS`, what `lsattr` shows
    /// and `chattr` sets ([`crate::Task::ioctl_getflags`]), Linux's values. A filesystem
    /// keeps the ones it supports (memfs, as tmpfs: `IMMUTABLE`, `APPEND`, `NODUMP`,
    /// `NOATIME`) and refuses the others with EOPNOTSUPP; the VFS enforces `IMMUTABLE` and
    /// `APPEND`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct FsFlags: u32 {
        /// `FS_SECRM_FL`: secure deletion.
        const SECRM = 0x1;
        /// `FS_UNRM_FL`: undelete.
        const UNRM = 0x2;
        /// `FS_COMPR_FL`: compress.
        const COMPR = 0x4;
        /// `FS_SYNC_FL`: synchronous updates.
        const SYNC = 0x8;
        /// `FS_IMMUTABLE_FL` (`chattr +i`): not opened for writing, truncated, changed in
        /// attributes or xattrs, renamed, linked or removed; a directory gains and loses
        /// no entry. A descriptor opened for writing before still writes, as on Linux.
        /// Only with `CAP_LINUX_IMMUTABLE`.
        const IMMUTABLE = 0x10;
        /// `FS_APPEND_FL` (`chattr +a`): opened for writing only with `O_APPEND` (which
        /// then stays); no truncate, change of attributes (but `touch`) or xattrs, rename,
        /// unlink or new name; a directory's entries cannot be removed. Only with
        /// `CAP_LINUX_IMMUTABLE`.
        const APPEND = 0x20;
        /// `FS_NODUMP_FL` (`chattr +d`): not for `dump(8)`; inherited by new entries.
        const NODUMP = 0x40;
        /// `FS_NOATIME_FL` (`chattr +A`): no access-time updates; inherited by new entries.
        const NOATIME = 0x80;
        /// `FS_DIRTY_FL`.
        const DIRTY = 0x100;
        /// `FS_COMPRBLK_FL`.
        const COMPRBLK = 0x200;
        /// `FS_NOCOMP_FL`.
        const NOCOMP = 0x400;
        /// `FS_ENCRYPT_FL`.
        const ENCRYPT = 0x800;
        /// `FS_INDEX_FL` (`FS_BTREE_FL`): hashed directory.
        const INDEX = 0x1000;
        /// `FS_IMAGIC_FL`.
        const IMAGIC = 0x2000;
        /// `FS_JOURNAL_DATA_FL`.
        const JOURNAL_DATA = 0x4000;
        /// `FS_NOTAIL_FL`.
        const NOTAIL = 0x8000;
        /// `FS_DIRSYNC_FL`.
        const DIRSYNC = 0x1_0000;
        /// `FS_TOPDIR_FL`.
        const TOPDIR = 0x2_0000;
        /// `FS_HUGE_FILE_FL`.
        const HUGE_FILE = 0x4_0000;
        /// `FS_EXTENT_FL`.
        const EXTENT = 0x8_0000;
        /// `FS_VERITY_FL`.
        const VERITY = 0x10_0000;
        /// `FS_EA_INODE_FL`.
        const EA_INODE = 0x20_0000;
        /// `FS_EOFBLOCKS_FL`.
        const EOFBLOCKS = 0x40_0000;
        /// `FS_NOCOW_FL`.
        const NOCOW = 0x80_0000;
        /// `FS_DAX_FL`.
        const DAX = 0x200_0000;
        /// `FS_INLINE_DATA_FL`.
        const INLINE_DATA = 0x1000_0000;
        /// `FS_PROJINHERIT_FL`.
        const PROJINHERIT = 0x2000_0000;
        /// `FS_CASEFOLD_FL`: case-insensitive directory (memfs has none: EOPNOTSUPP, as
        /// tmpfs mounted without `casefold`).
        const CASEFOLD = 0x4000_0000;
    }
}

/// `UIO_MAXIOV`: the most buffers one vectored call takes.
pub const UIO_MAXIOV: usize = 1024;

/// `lseek(2)` whence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Whence {
    /// `SEEK_SET`
    Set,
    /// `SEEK_CUR`
    Cur,
    /// `SEEK_END`
    End,
    /// `SEEK_DATA`: the first byte of data at or after the offset (ENXIO past it).
    Data,
    /// `SEEK_HOLE`: the first hole at or after the offset (the end of the file counts).
    Hole,
}

/// A time argument of `utimensat(2)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeSpec {
    /// `UTIME_NOW`: the current time.
    Now,
    /// `UTIME_OMIT`: leave the time unchanged.
    Omit,
    /// An explicit time; `nsec` must be below 1e9.
    At(Timespec),
}

/// Seconds and nanoseconds since the epoch, as `struct timespec`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Timespec {
    /// Seconds since 1970-01-01 UTC.
    pub sec: i64,
    /// Nanoseconds, below 1e9.
    pub nsec: u32,
}

impl Timespec {
    /// The current wall-clock time.
    pub fn now() -> Timespec {
        let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Timespec { sec: d.as_secs() as i64, nsec: d.subsec_nanos() }
    }
}

bitflags! {
    /// `openat2(2)`'s `resolve` field (`RESOLVE_*`), Linux's values.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct ResolveFlags: u64 {
        /// Crossing a mount point (either way, or by an absolute symlink) is EXDEV.
        const NO_XDEV = 0x01;
        /// No magic links (`/proc/*/fd/*`); uvfs has none, so this refuses nothing.
        const NO_MAGICLINKS = 0x02;
        /// Any symlink that would be followed is ELOOP.
        const NO_SYMLINKS = 0x04;
        /// Stay beneath the start directory: `..` at it, absolute paths and absolute
        /// symlinks are EXDEV.
        const BENEATH = 0x08;
        /// Treat the start directory as the root: `..` at it stays there, absolute paths
        /// and symlinks start from it.
        const IN_ROOT = 0x10;
        /// Answer from the cache without blocking, or EAGAIN.
        const CACHED = 0x20;
    }
}

/// `struct open_how`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenHow {
    /// `O_*` flags; unknown bits are EINVAL (unlike `openat`, which ignores them).
    pub flags: OpenFlags,
    /// Permission bits for `O_CREAT`/`O_TMPFILE`; must be 0 otherwise.
    pub mode: u32,
    /// How to resolve the path.
    pub resolve: ResolveFlags,
}
