//! The limits of the ABI: Linux's constants for path, name, file-size, descriptor and xattr
//! sizes, which the calls check and a frontend may rely on.

/// Most symlinks one walk follows (`MAXSYMLINKS`).
pub const MAXSYMLINKS: usize = 40;

/// Longest path, including the terminating NUL a C caller passes (`PATH_MAX`).
pub const PATH_MAX: usize = 4096;

/// Longest component (`NAME_MAX`).
pub const NAME_MAX: usize = 255;

/// Largest file size (`MAX_LFS_FILESIZE`).
pub(crate) const MAX_LFS_FILESIZE: u64 = i64::MAX as u64;

/// Default limit on descriptors (`RLIMIT_NOFILE`).
pub const DEFAULT_MAX_FDS: usize = 65536;

/// Largest limit (`fs.nr_open`'s default).
pub const NR_OPEN: usize = 1 << 20;

/// Longest name, prefix included (`XATTR_NAME_MAX`).
pub const XATTR_NAME_MAX: usize = 255;

/// Largest value (`XATTR_SIZE_MAX`).
pub const XATTR_SIZE_MAX: usize = 65536;

/// Largest list `listxattr` returns (`XATTR_LIST_MAX`).
pub const XATTR_LIST_MAX: usize = 65536;

/// `PIPE_BUF`: a write to a fifo of at most this many bytes is atomic.
pub const PIPE_BUF: usize = 4096;
