//! Linux error numbers.
//!
//! Every call returns `Result<T, Errno>`; the values are Linux's (x86-64/arm64 generic), so a
//! frontend (FUSE, a syscall emulator) can hand them to the kernel or a program unchanged.

use std::fmt;

/// A Linux errno value.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(i32);

/// Result of a uvfs call.
pub type Result<T> = std::result::Result<T, Errno>;

macro_rules! errnos {
    ($($name:ident = $val:expr, $desc:expr;)*) => {
        impl Errno {
            $(#[doc = $desc] pub const $name: Errno = Errno($val);)*

            /// The symbolic name (`"ENOENT"`), or `None` for a value uvfs does not name.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($val => Some(stringify!($name)),)*
                    _ => None,
                }
            }

            fn description(self) -> &'static str {
                match self.0 {
                    $($val => $desc,)*
                    _ => "unknown error",
                }
            }
        }
    };
}

errnos! {
    EPERM = 1, "Operation not permitted";
    ENOENT = 2, "No such file or directory";
    EINTR = 4, "Interrupted system call";
    EIO = 5, "Input/output error";
    ENXIO = 6, "No such device or address";
    E2BIG = 7, "Argument list too long";
    EBADF = 9, "Bad file descriptor";
    EAGAIN = 11, "Resource temporarily unavailable";
    ENOMEM = 12, "Cannot allocate memory";
    EACCES = 13, "Permission denied";
    EFAULT = 14, "Bad address";
    EBUSY = 16, "Device or resource busy";
    EEXIST = 17, "File exists";
    EXDEV = 18, "Invalid cross-device link";
    ENODEV = 19, "No such device";
    ENOTDIR = 20, "Not a directory";
    EISDIR = 21, "Is a directory";
    EINVAL = 22, "Invalid argument";
    ENFILE = 23, "Too many open files in system";
    EMFILE = 24, "Too many open files";
    ENOTTY = 25, "Inappropriate ioctl for device";
    ETXTBSY = 26, "Text file busy";
    EFBIG = 27, "File too large";
    ENOSPC = 28, "No space left on device";
    ESPIPE = 29, "Illegal seek";
    EROFS = 30, "Read-only file system";
    EMLINK = 31, "Too many links";
    EPIPE = 32, "Broken pipe";
    ERANGE = 34, "Numerical result out of range";
    EDEADLK = 35, "Resource deadlock avoided";
    ENAMETOOLONG = 36, "File name too long";
    ENOLCK = 37, "No locks available";
    ENOSYS = 38, "Function not implemented";
    ENOTEMPTY = 39, "Directory not empty";
    ELOOP = 40, "Too many levels of symbolic links";
    ENODATA = 61, "No data available";
    EOVERFLOW = 75, "Value too large for defined data type";
    EOPNOTSUPP = 95, "Operation not supported";
    ESTALE = 116, "Stale file handle";
}

impl Errno {
    /// `ENOTSUP` is the same number as `EOPNOTSUPP` on Linux.
    pub const ENOTSUP: Errno = Errno::EOPNOTSUPP;
    /// `EWOULDBLOCK` is the same number as `EAGAIN` on Linux.
    pub const EWOULDBLOCK: Errno = Errno::EAGAIN;
    /// `EDEADLOCK` is the same number as `EDEADLK` on Linux.
    pub const EDEADLOCK: Errno = Errno::EDEADLK;

    /// Wraps a raw Linux errno value.
    pub const fn from_raw(raw: i32) -> Errno {
        Errno(raw)
    }

    /// The raw positive value, as in `errno`.
    pub const fn raw(self) -> i32 {
        self.0
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "Errno({})", self.0),
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:?})", self.description(), self)
    }
}

impl std::error::Error for Errno {}

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> Self {
        std::io::Error::from_raw_os_error(e.0)
    }
}
