//! The kernel's FUSE ABI (`include/uapi/linux/fuse.h`, protocol 7.45 as Linux 6.18 speaks
//! it): the message structs, opcodes and flags.
//!
//! Every struct is `#[repr(C)]` with explicit padding and derives zerocopy's
//! `FromBytes`/`IntoBytes`, so a request is read from its bytes with
//! [`read_prefix`] (unaligned, length-checked: a short buffer is an error, never a
//! panic) and a reply struct is written as its bytes. Names follow the header's, without
//! the `fuse_` prefix.

#![allow(missing_docs)]

use bitflags::bitflags;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// The protocol major version.
pub const KERNEL_VERSION: u32 = 7;
/// The newest minor version this server knows (Linux 6.18 sends 7.45).
pub const KERNEL_MINOR_VERSION: u32 = 45;
/// The oldest minor version served: `fuse_init_in.flags2` (7.36) and everything the
/// handlers rely on are there.
pub const MIN_MINOR_VERSION: u32 = 36;
/// The node id of the root.
pub const ROOT_ID: u64 = 1;
/// The smallest read buffer the kernel accepts on `/dev/fuse`.
pub const MIN_READ_BUFFER: usize = 8192;

/// Opcodes (`enum fuse_opcode`).
pub mod opcode {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const SETXATTR: u32 = 21;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const REMOVEXATTR: u32 = 24;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const GETLK: u32 = 31;
    pub const SETLK: u32 = 32;
    pub const SETLKW: u32 = 33;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const INTERRUPT: u32 = 36;
    pub const BMAP: u32 = 37;
    pub const DESTROY: u32 = 38;
    pub const IOCTL: u32 = 39;
    pub const POLL: u32 = 40;
    pub const NOTIFY_REPLY: u32 = 41;
    pub const BATCH_FORGET: u32 = 42;
    pub const FALLOCATE: u32 = 43;
    pub const READDIRPLUS: u32 = 44;
    pub const RENAME2: u32 = 45;
    pub const LSEEK: u32 = 46;
    pub const COPY_FILE_RANGE: u32 = 47;
    pub const SYNCFS: u32 = 50;
    pub const TMPFILE: u32 = 51;
    pub const STATX: u32 = 52;

    /// The name of an opcode (`FUSE_` left off), for reports.
    pub fn name(op: u32) -> &'static str {
        const NAMES: [(u32, &str); 48] = [
            (LOOKUP, "LOOKUP"),
            (FORGET, "FORGET"),
            (GETATTR, "GETATTR"),
            (SETATTR, "SETATTR"),
            (READLINK, "READLINK"),
            (SYMLINK, "SYMLINK"),
            (MKNOD, "MKNOD"),
            (MKDIR, "MKDIR"),
            (UNLINK, "UNLINK"),
            (RMDIR, "RMDIR"),
            (RENAME, "RENAME"),
            (LINK, "LINK"),
            (OPEN, "OPEN"),
            (READ, "READ"),
            (WRITE, "WRITE"),
            (STATFS, "STATFS"),
            (RELEASE, "RELEASE"),
            (FSYNC, "FSYNC"),
            (SETXATTR, "SETXATTR"),
            (GETXATTR, "GETXATTR"),
            (LISTXATTR, "LISTXATTR"),
            (REMOVEXATTR, "REMOVEXATTR"),
            (FLUSH, "FLUSH"),
            (INIT, "INIT"),
            (OPENDIR, "OPENDIR"),
            (READDIR, "READDIR"),
            (RELEASEDIR, "RELEASEDIR"),
            (FSYNCDIR, "FSYNCDIR"),
            (GETLK, "GETLK"),
            (SETLK, "SETLK"),
            (SETLKW, "SETLKW"),
            (ACCESS, "ACCESS"),
            (CREATE, "CREATE"),
            (INTERRUPT, "INTERRUPT"),
            (BMAP, "BMAP"),
            (DESTROY, "DESTROY"),
            (IOCTL, "IOCTL"),
            (POLL, "POLL"),
            (NOTIFY_REPLY, "NOTIFY_REPLY"),
            (BATCH_FORGET, "BATCH_FORGET"),
            (FALLOCATE, "FALLOCATE"),
            (READDIRPLUS, "READDIRPLUS"),
            (RENAME2, "RENAME2"),
            (LSEEK, "LSEEK"),
            (COPY_FILE_RANGE, "COPY_FILE_RANGE"),
            (SYNCFS, "SYNCFS"),
            (TMPFILE, "TMPFILE"),
            (STATX, "STATX"),
        ];
        NAMES.iter().find(|(o, _)| *o == op).map_or("UNKNOWN", |(_, n)| n)
    }
}

/// Notification codes (`enum fuse_notify_code`), sent in `out_header.error` with
/// `unique` 0.
pub mod notify_code {
    pub const INVAL_INODE: i32 = 2;
    pub const INVAL_ENTRY: i32 = 3;
    pub const DELETE: i32 = 6;
}

bitflags! {
    /// INIT flags: `flags` in the low 32 bits, `flags2` in the high 32 bits.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct InitFlags: u64 {
        const ASYNC_READ = 1 << 0;
        const POSIX_LOCKS = 1 << 1;
        const FILE_OPS = 1 << 2;
        const ATOMIC_O_TRUNC = 1 << 3;
        const EXPORT_SUPPORT = 1 << 4;
        const BIG_WRITES = 1 << 5;
        const DONT_MASK = 1 << 6;
        const SPLICE_WRITE = 1 << 7;
        const SPLICE_MOVE = 1 << 8;
        const SPLICE_READ = 1 << 9;
        const FLOCK_LOCKS = 1 << 10;
        const HAS_IOCTL_DIR = 1 << 11;
        const AUTO_INVAL_DATA = 1 << 12;
        const DO_READDIRPLUS = 1 << 13;
        const READDIRPLUS_AUTO = 1 << 14;
        const ASYNC_DIO = 1 << 15;
        const WRITEBACK_CACHE = 1 << 16;
        const NO_OPEN_SUPPORT = 1 << 17;
        const PARALLEL_DIROPS = 1 << 18;
        const HANDLE_KILLPRIV = 1 << 19;
        const POSIX_ACL = 1 << 20;
        const ABORT_ERROR = 1 << 21;
        const MAX_PAGES = 1 << 22;
        const CACHE_SYMLINKS = 1 << 23;
        const NO_OPENDIR_SUPPORT = 1 << 24;
        const EXPLICIT_INVAL_DATA = 1 << 25;
        const MAP_ALIGNMENT = 1 << 26;
        const SUBMOUNTS = 1 << 27;
        const HANDLE_KILLPRIV_V2 = 1 << 28;
        const SETXATTR_EXT = 1 << 29;
        const INIT_EXT = 1 << 30;
        const INIT_RESERVED = 1 << 31;
        const SECURITY_CTX = 1 << 32;
        const HAS_INODE_DAX = 1 << 33;
        const CREATE_SUPP_GROUP = 1 << 34;
        const HAS_EXPIRE_ONLY = 1 << 35;
        const DIRECT_IO_ALLOW_MMAP = 1 << 36;
        const PASSTHROUGH = 1 << 37;
        const NO_EXPORT_SUPPORT = 1 << 38;
        const HAS_RESEND = 1 << 39;
        const ALLOW_IDMAP = 1 << 40;
        const OVER_IO_URING = 1 << 41;
        const REQUEST_TIMEOUT = 1 << 42;
    }
}

bitflags! {
    /// `fuse_open_out.open_flags`: how the kernel treats an open file (page cache, seeking).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
    pub struct FopenFlags: u32 {
        const DIRECT_IO = 1 << 0;
        const KEEP_CACHE = 1 << 1;
        const NONSEEKABLE = 1 << 2;
        const CACHE_DIR = 1 << 3;
        const STREAM = 1 << 4;
        const NOFLUSH = 1 << 5;
        const PARALLEL_DIRECT_WRITES = 1 << 6;
        const PASSTHROUGH = 1 << 7;
    }
}

/// `fuse_setattr_in.valid` bits.
pub mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const FH: u32 = 1 << 6;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    /// The bits that ask for a change (the others say how: `FH`, and
    /// `FATTR_LOCKOWNER`, `FATTR_CTIME`, `FATTR_KILL_SUIDGID`, which the server does not read).
    pub const CHANGES: u32 = MODE | UID | GID | SIZE | ATIME | MTIME | ATIME_NOW | MTIME_NOW;
}

/// `fuse_lk_in.lk_flags`: the request is a `flock(2)` (emulated with a whole-file lock).
pub const LK_FLOCK: u32 = 1 << 0;
/// `fuse_release_in.release_flags`: the file is flushed too.
pub const RELEASE_FLUSH: u32 = 1 << 0;
/// `fuse_release_in.release_flags`: the file held `flock` locks; release them
/// (`lock_owner` is set).
pub const RELEASE_FLOCK_UNLOCK: u32 = 1 << 1;

/// `fuse_ioctl_in.flags`: a 32-bit caller on a 64-bit kernel.
pub const IOCTL_COMPAT: u32 = 1 << 0;
/// `fuse_ioctl_in.flags`: not restricted to the sizes the command encodes (CUSE only).
pub const IOCTL_UNRESTRICTED: u32 = 1 << 1;
/// `fuse_ioctl_in.flags`: the node is a directory.
pub const IOCTL_DIR: u32 = 1 << 4;

/// `FS_IOC_GETFLAGS` (`_IOR('f', 1, long)`), as the kernel's `fileattr_get` sends it (with
/// an `unsigned int`'s 4 bytes).
pub const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
/// `FS_IOC_SETFLAGS` (`_IOW('f', 2, long)`).
pub const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
/// `FS_IOC32_GETFLAGS` (`_IOR('f', 1, int)`).
pub const FS_IOC32_GETFLAGS: u32 = 0x8004_6601;
/// `FS_IOC32_SETFLAGS` (`_IOW('f', 2, int)`).
pub const FS_IOC32_SETFLAGS: u32 = 0x4004_6602;

/// `FS_IOC_FSGETXATTR` (`_IOR('X', 31, struct fsxattr)`): the flags as `FS_XFLAG_*`,
/// which the kernel's `fileattr_set` reads the old flags with.
pub const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
/// `FS_IOC_FSSETXATTR` (`_IOW('X', 32, struct fsxattr)`).
pub const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;

/// The `FS_XFLAG_*` twin of each `FS_*_FL` that has one (`fileattr_fill_flags`).
const XFLAGS: [(u32, uvfs::FsFlags); 7] = [
    (0x20, uvfs::FsFlags::SYNC),
    (0x8, uvfs::FsFlags::IMMUTABLE),
    (0x10, uvfs::FsFlags::APPEND),
    (0x80, uvfs::FsFlags::NODUMP),
    (0x40, uvfs::FsFlags::NOATIME),
    (0x8000, uvfs::FsFlags::DAX),
    (0x200, uvfs::FsFlags::PROJINHERIT),
];

/// `FS_XFLAG_*` of `flags` (those without a twin are dropped, as Linux does).
pub fn xflags_of(flags: uvfs::FsFlags) -> u32 {
    XFLAGS.iter().filter(|(_, f)| flags.contains(*f)).fold(0, |x, (b, _)| x | b)
}

/// The `FS_*_FL` of `xflags`; `None` if one has no twin (`FS_XFLAG_COMMON`).
pub fn flags_of_xflags(xflags: u32) -> Option<uvfs::FsFlags> {
    let known = XFLAGS.iter().fold(0, |x, (b, _)| x | b);
    if xflags & !known != 0 {
        return None;
    }
    Some(XFLAGS.iter().filter(|(b, _)| xflags & b != 0).fold(uvfs::FsFlags::empty(), |f, (_, fl)| f | *fl))
}

/// `fuse_getattr_in.getattr_flags`: `fh` is valid.
pub const GETATTR_FH: u32 = 1 << 0;
/// `fuse_fsync_in.fsync_flags`: data only.
pub const FSYNC_FDATASYNC: u32 = 1 << 0;

/// Defines `#[repr(C)]` ABI structs with the zerocopy derives.
macro_rules! abi_structs {
    ($($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident: $t:ty,)* })*) => {$(
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
        pub struct $name { $($(#[$fm])* pub $f: $t,)* }
    )*};
}

abi_structs! {
    pub struct InHeader {
        pub len: u32,
        pub opcode: u32,
        pub unique: u64,
        pub nodeid: u64,
        pub uid: u32,
        pub gid: u32,
        pub pid: u32,
        pub total_extlen: u16,
        pub padding: u16,
    }
    pub struct OutHeader {
        pub len: u32,
        pub error: i32,
        pub unique: u64,
    }
    /// Times are seconds as a signed value stored in `u64`, plus nanoseconds that always
    /// add (also before 1970).
    pub struct Attr {
        pub ino: u64,
        pub size: u64,
        pub blocks: u64,
        pub atime: u64,
        pub mtime: u64,
        pub ctime: u64,
        pub atimensec: u32,
        pub mtimensec: u32,
        pub ctimensec: u32,
        pub mode: u32,
        pub nlink: u32,
        pub uid: u32,
        pub gid: u32,
        pub rdev: u32,
        pub blksize: u32,
        pub flags: u32,
    }
    pub struct Kstatfs {
        pub blocks: u64,
        pub bfree: u64,
        pub bavail: u64,
        pub files: u64,
        pub ffree: u64,
        pub bsize: u32,
        pub namelen: u32,
        pub frsize: u32,
        pub padding: u32,
        pub spare: [u32; 6],
    }
    pub struct EntryOut {
        pub nodeid: u64,
        pub generation: u64,
        pub entry_valid: u64,
        pub attr_valid: u64,
        pub entry_valid_nsec: u32,
        pub attr_valid_nsec: u32,
        pub attr: Attr,
    }
    pub struct ForgetIn {
        pub nlookup: u64,
    }
    pub struct ForgetOne {
        pub nodeid: u64,
        pub nlookup: u64,
    }
    pub struct BatchForgetIn {
        pub count: u32,
        pub dummy: u32,
    }
    pub struct GetattrIn {
        pub getattr_flags: u32,
        pub dummy: u32,
        pub fh: u64,
    }
    pub struct AttrOut {
        pub attr_valid: u64,
        pub attr_valid_nsec: u32,
        pub dummy: u32,
        pub attr: Attr,
    }
    pub struct MknodIn {
        pub mode: u32,
        pub rdev: u32,
        pub umask: u32,
        pub padding: u32,
    }
    pub struct MkdirIn {
        pub mode: u32,
        pub umask: u32,
    }
    pub struct RenameIn {
        pub newdir: u64,
    }
    pub struct Rename2In {
        pub newdir: u64,
        pub flags: u32,
        pub padding: u32,
    }
    pub struct LinkIn {
        pub oldnodeid: u64,
    }
    /// `atime`/`mtime`/`ctime`: signed seconds in `u64`; the `*nsec` fields add.
    pub struct SetattrIn {
        pub valid: u32,
        pub padding: u32,
        pub fh: u64,
        pub size: u64,
        pub lock_owner: u64,
        pub atime: u64,
        pub mtime: u64,
        pub ctime: u64,
        pub atimensec: u32,
        pub mtimensec: u32,
        pub ctimensec: u32,
        pub mode: u32,
        pub unused4: u32,
        pub uid: u32,
        pub gid: u32,
        pub unused5: u32,
    }
    pub struct OpenIn {
        pub flags: u32,
        pub open_flags: u32,
    }
    pub struct CreateIn {
        pub flags: u32,
        pub mode: u32,
        pub umask: u32,
        pub open_flags: u32,
    }
    pub struct OpenOut {
        pub fh: u64,
        pub open_flags: u32,
        pub backing_id: i32,
    }
    pub struct ReleaseIn {
        pub fh: u64,
        pub flags: u32,
        pub release_flags: u32,
        pub lock_owner: u64,
    }
    pub struct FlushIn {
        pub fh: u64,
        pub unused: u32,
        pub padding: u32,
        pub lock_owner: u64,
    }
    pub struct ReadIn {
        pub fh: u64,
        pub offset: u64,
        pub size: u32,
        pub read_flags: u32,
        pub lock_owner: u64,
        pub flags: u32,
        pub padding: u32,
    }
    pub struct WriteIn {
        pub fh: u64,
        pub offset: u64,
        pub size: u32,
        pub write_flags: u32,
        pub lock_owner: u64,
        pub flags: u32,
        pub padding: u32,
    }
    pub struct WriteOut {
        pub size: u32,
        pub padding: u32,
    }
    pub struct StatfsOut {
        pub st: Kstatfs,
    }
    pub struct FsyncIn {
        pub fh: u64,
        pub fsync_flags: u32,
        pub padding: u32,
    }
    /// The pre-7.33 layout, which the kernel sends unless `SETXATTR_EXT` was negotiated
    /// (it is not).
    pub struct SetxattrIn {
        pub size: u32,
        pub flags: u32,
    }
    pub struct GetxattrIn {
        pub size: u32,
        pub padding: u32,
    }
    pub struct GetxattrOut {
        pub size: u32,
        pub padding: u32,
    }
    pub struct AccessIn {
        pub mask: u32,
        pub padding: u32,
    }
    pub struct InitIn {
        pub major: u32,
        pub minor: u32,
        pub max_readahead: u32,
        pub flags: u32,
        pub flags2: u32,
        pub unused: [u32; 11],
    }
    pub struct InitOut {
        pub major: u32,
        pub minor: u32,
        pub max_readahead: u32,
        pub flags: u32,
        pub max_background: u16,
        pub congestion_threshold: u16,
        pub max_write: u32,
        pub time_gran: u32,
        pub max_pages: u16,
        pub map_alignment: u16,
        pub flags2: u32,
        pub max_stack_depth: u32,
        pub request_timeout: u16,
        pub unused: [u16; 11],
    }
    pub struct InterruptIn {
        pub unique: u64,
    }
    /// A lock range (`end` inclusive, `i64::MAX` for "to the end of the file").
    pub struct FileLock {
        pub start: u64,
        pub end: u64,
        pub typ: u32,
        pub pid: u32,
    }
    pub struct LkIn {
        pub fh: u64,
        pub owner: u64,
        pub lk: FileLock,
        pub lk_flags: u32,
        pub padding: u32,
    }
    pub struct LkOut {
        pub lk: FileLock,
    }
    pub struct FallocateIn {
        pub fh: u64,
        pub offset: u64,
        pub length: u64,
        pub mode: u32,
        pub padding: u32,
    }
    pub struct LseekIn {
        pub fh: u64,
        pub offset: u64,
        pub whence: u32,
        pub padding: u32,
    }
    pub struct LseekOut {
        pub offset: u64,
    }
    /// Followed by `in_size` bytes of the command's input.
    pub struct IoctlIn {
        pub fh: u64,
        pub flags: u32,
        pub cmd: u32,
        pub arg: u64,
        pub in_size: u32,
        pub out_size: u32,
    }
    /// Followed by the command's output (at most `out_size` bytes of the request).
    pub struct IoctlOut {
        pub result: i32,
        pub flags: u32,
        pub in_iovs: u32,
        pub out_iovs: u32,
    }
    /// `struct fsxattr` (`linux/fs.h`), of FSGETXATTR and FSSETXATTR.
    pub struct Fsxattr {
        pub xflags: u32,
        pub extsize: u32,
        pub nextents: u32,
        pub projid: u32,
        pub cowextsize: u32,
        pub pad: [u8; 8],
    }
    pub struct CopyFileRangeIn {
        pub fh_in: u64,
        pub off_in: u64,
        pub nodeid_out: u64,
        pub fh_out: u64,
        pub off_out: u64,
        pub len: u64,
        pub flags: u64,
    }
    /// Followed by `namelen` name bytes, padded to 8.
    pub struct Dirent {
        pub ino: u64,
        pub off: u64,
        pub namelen: u32,
        pub typ: u32,
    }
    pub struct NotifyInvalInodeOut {
        pub ino: u64,
        pub off: i64,
        pub len: i64,
    }
    /// Followed by the name and a NUL.
    pub struct NotifyInvalEntryOut {
        pub parent: u64,
        pub namelen: u32,
        pub flags: u32,
    }
    /// Followed by the name and a NUL.
    pub struct NotifyDeleteOut {
        pub parent: u64,
        pub child: u64,
        pub namelen: u32,
        pub padding: u32,
    }
    /// The trailer of [`UringReqHeader`]: written by the kernel with a request (its
    /// `commit_id` and the payload bytes), by the server with the reply (`payload_sz`).
    pub struct UringEntInOut {
        pub flags: u64,
        pub commit_id: u64,
        pub payload_sz: u32,
        pub padding: u32,
        pub reserved: u64,
    }
    /// The command in the 80-byte area of a 128-byte SQE.
    pub struct UringCmdReq {
        pub flags: u64,
        pub commit_id: u64,
        pub qid: u16,
        pub padding: [u8; 6],
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
/// The header buffer of a ring entry (`iov[0]` of REGISTER): `in_out` holds the
/// `InHeader` of a request and the `OutHeader` of its reply, `op_in` the opcode's
/// fixed argument struct (its other arguments are in the payload buffer).
pub struct UringReqHeader {
    pub in_out: [u8; 128],
    pub op_in: [u8; 128],
    pub ring_ent_in_out: UringEntInOut,
}

/// `fuse_direntplus`: an entry (node, attributes, timeouts) then a dirent.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct DirentPlus {
    pub entry_out: EntryOut,
    pub dirent: Dirent,
}

/// `FUSE_IO_URING_CMD_REGISTER`: hand the kernel a ring entry's buffers.
pub const URING_CMD_REGISTER: u32 = 1;
/// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`: a reply, and the entry is free for the next
/// request.
pub const URING_CMD_COMMIT_AND_FETCH: u32 = 2;

/// `FUSE_DEV_IOC_CLONE` (`_IOR(229, 0, uint32_t)`): binds a new `/dev/fuse` descriptor to
/// the connection of another.
pub const DEV_IOC_CLONE: libc::c_ulong = 0x8004_e500;

/// Reads a `T` from the start of `bytes` (unaligned); `None` if `bytes` is too short.
pub fn read_prefix<T: FromBytes + KnownLayout + Immutable>(bytes: &[u8]) -> Option<T> {
    T::read_from_prefix(bytes).ok().map(|(t, _)| t)
}

/// The padded length of a dirent (or direntplus) record with `fixed` header bytes and a
/// name of `namelen`.
pub const fn dirent_size(fixed: usize, namelen: usize) -> usize {
    (fixed + namelen + 7) & !7
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_the_kernel() {
        use std::mem::size_of;
        assert_eq!(size_of::<InHeader>(), 40);
        assert_eq!(size_of::<OutHeader>(), 16);
        assert_eq!(size_of::<Attr>(), 88);
        assert_eq!(size_of::<EntryOut>(), 128);
        assert_eq!(size_of::<AttrOut>(), 104);
        assert_eq!(size_of::<SetattrIn>(), 88);
        assert_eq!(size_of::<ReadIn>(), 40);
        assert_eq!(size_of::<WriteIn>(), 40);
        assert_eq!(size_of::<InitIn>(), 64);
        assert_eq!(size_of::<InitOut>(), 64);
        assert_eq!(size_of::<Kstatfs>(), 80);
        assert_eq!(size_of::<Dirent>(), 24);
        assert_eq!(size_of::<DirentPlus>(), 152);
        assert_eq!(size_of::<CopyFileRangeIn>(), 56);
        assert_eq!(size_of::<LseekIn>(), 24);
        assert_eq!(size_of::<LseekOut>(), 8);
        assert_eq!(size_of::<IoctlIn>(), 32);
        assert_eq!(size_of::<IoctlOut>(), 16);
        assert_eq!(size_of::<Fsxattr>(), 28);
        assert_eq!(size_of::<LkIn>(), 48);
        assert_eq!(size_of::<LkOut>(), 24);
        assert_eq!(size_of::<UringEntInOut>(), 32);
        assert_eq!(size_of::<UringReqHeader>(), 288);
        assert_eq!(size_of::<UringCmdReq>(), 24);
        assert_eq!(size_of::<NotifyInvalEntryOut>(), 16);
        assert_eq!(size_of::<NotifyDeleteOut>(), 24);
        assert_eq!(size_of::<NotifyInvalInodeOut>(), 24);
    }

    #[test]
    fn xflags_round_trip() {
        use uvfs::FsFlags as F;
        assert_eq!(xflags_of(F::IMMUTABLE | F::APPEND | F::NODUMP | F::NOATIME), 0x8 | 0x10 | 0x80 | 0x40);
        assert_eq!(xflags_of(F::CASEFOLD | F::SECRM), 0);
        assert_eq!(flags_of_xflags(0x8 | 0x40), Some(F::IMMUTABLE | F::NOATIME));
        assert_eq!(flags_of_xflags(0x1), None, "FS_XFLAG_REALTIME has no FS_*_FL");
    }

    #[test]
    fn short_input_is_none() {
        assert!(read_prefix::<InHeader>(&[0u8; 39]).is_none());
        assert!(read_prefix::<InHeader>(&[0u8; 40]).is_some());
    }
}
