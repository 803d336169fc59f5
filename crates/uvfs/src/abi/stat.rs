//! `struct stat` and file types, Linux-shaped.

use crate::abi::flags::Timespec;

/// File type bits of `st_mode` (`S_IFMT`).
pub const S_IFMT: u32 = 0o170000;
/// Set-user-id bit.
pub const S_ISUID: u32 = 0o4000;
/// Set-group-id bit.
pub const S_ISGID: u32 = 0o2000;
/// Sticky bit.
pub const S_ISVTX: u32 = 0o1000;
/// Permission bits plus suid/sgid/sticky.
pub const S_IALLUGO: u32 = 0o7777;

/// The type of an inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FileType {
    /// A regular file.
    Regular = 1,
    /// A directory.
    Directory = 2,
    /// A symbolic link.
    Symlink = 3,
    /// A named pipe.
    Fifo = 4,
    /// A character device node.
    CharDevice = 5,
    /// A block device node.
    BlockDevice = 6,
    /// A unix socket node.
    Socket = 7,
}

impl FileType {
    /// The `S_IF*` bits.
    pub const fn mode_bits(self) -> u32 {
        match self {
            FileType::Regular => 0o100000,
            FileType::Directory => 0o040000,
            FileType::Symlink => 0o120000,
            FileType::Fifo => 0o010000,
            FileType::CharDevice => 0o020000,
            FileType::BlockDevice => 0o060000,
            FileType::Socket => 0o140000,
        }
    }

    /// Parses the `S_IF*` bits of a mode; `None` for an invalid type.
    pub const fn from_mode(mode: u32) -> Option<FileType> {
        Some(match mode & S_IFMT {
            0o100000 => FileType::Regular,
            0o040000 => FileType::Directory,
            0o120000 => FileType::Symlink,
            0o010000 => FileType::Fifo,
            0o020000 => FileType::CharDevice,
            0o060000 => FileType::BlockDevice,
            0o140000 => FileType::Socket,
            _ => return None,
        })
    }

    /// The `d_type` value of a directory entry (`DT_*`).
    pub const fn dirent_type(self) -> u8 {
        match self {
            FileType::Regular => 8,
            FileType::Directory => 4,
            FileType::Symlink => 10,
            FileType::Fifo => 1,
            FileType::CharDevice => 2,
            FileType::BlockDevice => 6,
            FileType::Socket => 12,
        }
    }
}

/// Linux `struct stat`, field for field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Stat {
    /// Device of the filesystem.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
    /// Type and permission bits.
    pub mode: u32,
    /// Link count.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number for device nodes.
    pub rdev: u64,
    /// Size in bytes (symlinks: length of the target).
    pub size: u64,
    /// Preferred I/O block size.
    pub blksize: u32,
    /// 512-byte blocks allocated.
    pub blocks: u64,
    /// Last access.
    pub atime: Timespec,
    /// Last modification of the data.
    pub mtime: Timespec,
    /// Last status change.
    pub ctime: Timespec,
}

impl Stat {
    /// The file type, from `mode`.
    pub fn file_type(&self) -> Option<FileType> {
        FileType::from_mode(self.mode)
    }
}

/// Linux `struct statfs`, the fields uvfs fills.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct StatFs {
    /// Filesystem magic (`TMPFS_MAGIC` for memfs).
    pub fs_type: u64,
    /// Block size.
    pub bsize: u64,
    /// Total blocks.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Blocks available to unprivileged users.
    pub bavail: u64,
    /// Total inodes.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Maximum name length.
    pub namelen: u64,
    /// `f_flags`: the mount's flags and the filesystem's, as the VFS fills them for the
    /// mount a `statfs` went through (a filesystem leaves them empty).
    pub flags: StatFsFlags,
}

bitflags::bitflags! {
    /// `statfs`'s `f_flags` (`ST_*`, the same bits as `statvfs`'s `f_flag`): Linux's
    /// `calculate_f_flags`, from the mount's flags and the superblock's.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct StatFsFlags: u64 {
        /// `ST_RDONLY`: the mount or the whole filesystem is read-only.
        const RDONLY = 1;
        /// `ST_NOSUID`
        const NOSUID = 2;
        /// `ST_NODEV`
        const NODEV = 4;
        /// `ST_NOEXEC`
        const NOEXEC = 8;
        /// `ST_SYNCHRONOUS` (never: uvfs has no synchronous filesystems).
        const SYNCHRONOUS = 16;
        /// `ST_VALID`: the flags are filled (always, since Linux 2.6.36).
        const VALID = 32;
        /// `ST_MANDLOCK` (never: no mandatory locks).
        const MANDLOCK = 64;
        /// `ST_NOATIME`
        const NOATIME = 1024;
        /// `ST_NODIRATIME`
        const NODIRATIME = 2048;
        /// `ST_RELATIME`: the default access-time mode (neither `noatime` nor
        /// `strictatime`).
        const RELATIME = 4096;
        /// `ST_NOSYMFOLLOW`
        const NOSYMFOLLOW = 8192;
    }
}

/// An inode number within its filesystem (`st_ino`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Ino(pub u64);

/// A file's identity across filesystems: its device (`st_dev`) and inode number, as the
/// inode cache of a filesystem that loads inodes keys them (hostfs: the host's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DevIno {
    /// Device number.
    pub dev: u64,
    /// Inode number on that device.
    pub ino: Ino,
}

/// Whether `mode` has setgid together with group execute: a setgid program. (Setgid
/// without group execute marks a file for mandatory locking; writes and chowns keep it.)
#[inline]
pub(crate) const fn is_setgid_exec(mode: u32) -> bool {
    mode & (S_ISGID | 0o010) == (S_ISGID | 0o010)
}

/// Linux's `is_sxid`: setuid, or a setgid program.
#[inline]
pub(crate) const fn is_sxid(mode: u32) -> bool {
    mode & S_ISUID != 0 || is_setgid_exec(mode)
}

/// Makes a device number from major and minor, as glibc's `makedev`.
pub const fn makedev(major: u32, minor: u32) -> u64 {
    let (ma, mi) = (major as u64, minor as u64);
    ((ma & 0xffff_f000) << 32) | ((ma & 0xfff) << 8) | ((mi & 0xffff_ff00) << 12) | (mi & 0xff)
}

/// The major and minor numbers of a device number, as glibc's `major`/`minor`.
pub const fn major_minor(dev: u64) -> (u32, u32) {
    let major = ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff);
    let minor = ((dev >> 12) & 0xffff_ff00) | (dev & 0xff);
    (major as u32, minor as u32)
}

// ---- fstatat, readlinkat (Linux's fs/stat.c) ----

bitflags::bitflags! {
    /// `statx(2)`'s mask (`STATX_*`): which fields a caller asks for and which the answer
    /// fills.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct StatxMask: u32 {
        /// `STATX_TYPE`
        const TYPE = 0x1;
        /// `STATX_MODE`
        const MODE = 0x2;
        /// `STATX_NLINK`
        const NLINK = 0x4;
        /// `STATX_UID`
        const UID = 0x8;
        /// `STATX_GID`
        const GID = 0x10;
        /// `STATX_ATIME`
        const ATIME = 0x20;
        /// `STATX_MTIME`
        const MTIME = 0x40;
        /// `STATX_CTIME`
        const CTIME = 0x80;
        /// `STATX_INO`
        const INO = 0x100;
        /// `STATX_SIZE`
        const SIZE = 0x200;
        /// `STATX_BLOCKS`
        const BLOCKS = 0x400;
        /// `STATX_BASIC_STATS`: everything `stat(2)` gives.
        const BASIC_STATS = 0x7ff;
        /// `STATX_BTIME`: birth time.
        const BTIME = 0x800;
        /// `STATX_MNT_ID`: the mount's id.
        const MNT_ID = 0x1000;
        /// `STATX_DIOALIGN` (never filled: no direct I/O).
        const DIOALIGN = 0x2000;
        /// `STATX_MNT_ID_UNIQUE`: the mount's 64-bit id, never reused.
        const MNT_ID_UNIQUE = 0x4000;
        /// Bits Linux may define later: ignored, as Linux ignores them.
        const _ = 0x7fff_ffff;
    }
}

impl StatxMask {
    /// `STATX__RESERVED`: a caller setting it gets EINVAL.
    pub const RESERVED: u32 = 0x8000_0000;
}

bitflags::bitflags! {
    /// `statx(2)`'s attributes (`STATX_ATTR_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct StatxAttrs: u64 {
        /// `STATX_ATTR_IMMUTABLE` (the `i` file flag).
        const IMMUTABLE = 0x10;
        /// `STATX_ATTR_APPEND` (the `a` file flag).
        const APPEND = 0x20;
        /// `STATX_ATTR_NODUMP` (the `d` file flag).
        const NODUMP = 0x40;
        /// `STATX_ATTR_AUTOMOUNT`
        const AUTOMOUNT = 0x1000;
        /// `STATX_ATTR_MOUNT_ROOT`: the path is the root of its mount.
        const MOUNT_ROOT = 0x2000;
        /// `STATX_ATTR_DAX`
        const DAX = 0x20_0000;
    }
}

/// Linux `struct statx`, the fields uvfs fills (no direct-I/O alignments).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Statx {
    /// What is filled: the basic stats, then what was asked for and is known.
    pub mask: StatxMask,
    /// The `stat(2)` fields (the times that are not in `mask` are still the inode's).
    pub stat: Stat,
    /// Birth time (with [`StatxMask::BTIME`]).
    pub btime: Timespec,
    /// Attributes of the file.
    pub attributes: StatxAttrs,
    /// Which attributes this filesystem can report.
    pub attributes_mask: StatxAttrs,
    /// The mount's id (`STATX_MNT_ID`, or the unique one with `STATX_MNT_ID_UNIQUE`).
    pub mnt_id: u64,
}
