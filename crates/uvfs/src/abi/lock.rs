//! The argument types of the lock calls, with Linux's values (`<fcntl.h>`,
//! `<sys/file.h>`, x86-64): `struct flock`, the `fcntl` lock commands, `flock(2)`'s
//! operation bits.

use bitflags::bitflags;

/// `struct flock` (on 64-bit Linux the same as `struct flock64`), with Linux's field
/// meanings. The fields are the raw values a program passes, so a bad `l_type` or
/// `l_whence` reaches the call and is refused there with Linux's errno (EINVAL).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flock {
    /// [`Flock::RDLCK`], [`Flock::WRLCK`] or [`Flock::UNLCK`]; on return from a
    /// `GETLK`, the type of the conflicting lock, or `UNLCK` if there is none.
    pub l_type: i16,
    /// What `l_start` counts from: [`Flock::SEEK_SET`], [`Flock::SEEK_CUR`] (the file
    /// position) or [`Flock::SEEK_END`] (the size). A `GETLK` that finds a conflict sets
    /// it to `SEEK_SET`.
    pub l_whence: i16,
    /// Start of the range, relative to `l_whence`.
    pub l_start: i64,
    /// Length of the range: 0 is "to the end of the file, however far it grows"; a
    /// negative length covers the `-l_len` bytes before `l_start`.
    pub l_len: i64,
    /// On return from `F_GETLK`, the pid of the conflicting lock's owner (-1 for an
    /// open-file-description lock). Must be 0 for the `F_OFD_*` commands (EINVAL).
    pub l_pid: i32,
}

impl Flock {
    /// `F_RDLCK`: a shared (read) lock.
    pub const RDLCK: i16 = 0;
    /// `F_WRLCK`: an exclusive (write) lock.
    pub const WRLCK: i16 = 1;
    /// `F_UNLCK`: unlock (or, from `GETLK`, "no conflict").
    pub const UNLCK: i16 = 2;
    /// `SEEK_SET`.
    pub const SEEK_SET: i16 = 0;
    /// `SEEK_CUR`.
    pub const SEEK_CUR: i16 = 1;
    /// `SEEK_END`.
    pub const SEEK_END: i16 = 2;

    /// A lock of `l_type` on `len` bytes from offset `start` (`SEEK_SET`).
    pub fn new(l_type: i16, start: i64, len: i64) -> Flock {
        Flock { l_type, l_whence: Flock::SEEK_SET, l_start: start, l_len: len, l_pid: 0 }
    }
}

/// The lock commands of `fcntl(2)` (the other commands are not locks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockCmd {
    /// `F_GETLK` (5): the first classic POSIX or OFD lock that would conflict.
    GetLk,
    /// `F_SETLK` (6): take or release a classic POSIX record lock; EAGAIN on conflict.
    SetLk,
    /// `F_SETLKW` (7): as `SetLk`, waiting for conflicting locks to go (EDEADLK if that
    /// would deadlock, EINTR if interrupted).
    SetLkW,
    /// `F_OFD_GETLK` (36): as `GetLk` for an open-file-description lock.
    OfdGetLk,
    /// `F_OFD_SETLK` (37): an open-file-description lock.
    OfdSetLk,
    /// `F_OFD_SETLKW` (38): as `OfdSetLk`, waiting.
    OfdSetLkW,
}

impl LockCmd {
    /// The command of a raw `fcntl` value; `None` if it is not a lock command.
    pub fn from_raw(cmd: i32) -> Option<LockCmd> {
        Some(match cmd {
            5 => LockCmd::GetLk,
            6 => LockCmd::SetLk,
            7 => LockCmd::SetLkW,
            36 => LockCmd::OfdGetLk,
            37 => LockCmd::OfdSetLk,
            38 => LockCmd::OfdSetLkW,
            _ => return None,
        })
    }

    /// The raw `fcntl` value.
    pub fn raw(self) -> i32 {
        match self {
            LockCmd::GetLk => 5,
            LockCmd::SetLk => 6,
            LockCmd::SetLkW => 7,
            LockCmd::OfdGetLk => 36,
            LockCmd::OfdSetLk => 37,
            LockCmd::OfdSetLkW => 38,
        }
    }

    /// Whether it asks about a lock rather than taking one.
    pub fn is_get(self) -> bool {
        matches!(self, LockCmd::GetLk | LockCmd::OfdGetLk)
    }

    /// Whether it is an open-file-description command.
    pub fn is_ofd(self) -> bool {
        matches!(self, LockCmd::OfdGetLk | LockCmd::OfdSetLk | LockCmd::OfdSetLkW)
    }

    /// Whether it waits for conflicting locks.
    pub fn waits(self) -> bool {
        matches!(self, LockCmd::SetLkW | LockCmd::OfdSetLkW)
    }
}

bitflags! {
    /// The `operation` of `flock(2)`. Exactly one of `SH`, `EX`, `UN` (EINVAL
    /// otherwise), optionally with `NB`; `MAND` (a removed feature) makes the call do
    /// nothing, as on Linux.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct FlockOp: u32 {
        /// `LOCK_SH`: shared.
        const SH = 1;
        /// `LOCK_EX`: exclusive.
        const EX = 2;
        /// `LOCK_NB`: EWOULDBLOCK instead of waiting.
        const NB = 4;
        /// `LOCK_UN`: unlock.
        const UN = 8;
        /// `LOCK_MAND`: ignored (the call succeeds and does nothing).
        const MAND = 32;
    }
}
