//! `openat2`: open with scoped resolution (`RESOLVE_*`). Mirrors `build_open_flags` of
//! Linux's `fs/open.c`; the walk side of each flag is in [`crate::namei`].
//!
//! These are what sandboxes use: `RESOLVE_BENEATH` and `RESOLVE_IN_ROOT` confine a walk to
//! a directory however its path, its symlinks or concurrent renames try to leave it. The
//! walk answers only from a state of the tree that no rename or mount change overlapped
//! (see [`crate::namei`]), where climbing with `..` meets the scope's root before anything
//! outside it, and every scoped answer is checked to lie below the root before it is
//! returned.

use bitflags::bitflags;

use crate::errno::{Errno, Result};
use crate::file::DirFd;
use crate::flags::{Fd, OpenFlags};
use crate::namei::LookupFlags;
use crate::stat::S_IALLUGO;
use crate::task::Task;

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

impl Task {
    /// `openat2(2)`. EINVAL for unknown flag or resolve bits, `BENEATH` with `IN_ROOT`, a
    /// mode without `O_CREAT`/`O_TMPFILE` or with bits beyond `07777`, `O_PATH` with flags
    /// other than `O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC`; EAGAIN for `CACHED` with
    /// `O_CREAT`, `O_TRUNC` or `O_TMPFILE`, and whenever the answer is not in the cache
    /// (with the lockless walk switched off, always). The rest is `openat`.
    pub fn openat2(&self, dirfd: DirFd, path: &[u8], how: &OpenHow) -> Result<Fd> {
        let flags = how.flags;
        if OpenFlags::from_bits(flags.bits()).is_none() || ResolveFlags::from_bits(how.resolve.bits()).is_none() {
            return Err(Errno::EINVAL);
        }
        let r = how.resolve;
        if r.contains(ResolveFlags::BENEATH | ResolveFlags::IN_ROOT) {
            return Err(Errno::EINVAL);
        }
        let will_create = flags.intersects(OpenFlags::CREAT | OpenFlags::TMPFILE);
        if (will_create && how.mode & !S_IALLUGO != 0) || (!will_create && how.mode != 0) {
            return Err(Errno::EINVAL);
        }
        if flags.contains(OpenFlags::DIRECTORY | OpenFlags::CREAT) {
            return Err(Errno::EINVAL);
        }
        if flags.contains(OpenFlags::TMPFILE)
            && (flags & (OpenFlags::TMPFILE | OpenFlags::DIRECTORY | OpenFlags::CREAT)
                != OpenFlags::TMPFILE | OpenFlags::DIRECTORY
                || !flags.writable())
        {
            return Err(Errno::EINVAL);
        }
        if flags.contains(OpenFlags::PATH)
            && !(OpenFlags::PATH | OpenFlags::DIRECTORY | OpenFlags::NOFOLLOW | OpenFlags::CLOEXEC).contains(flags)
        {
            return Err(Errno::EINVAL);
        }
        let mut lf = LookupFlags::empty();
        for (rf, l) in [
            (ResolveFlags::NO_XDEV, LookupFlags::NO_XDEV),
            (ResolveFlags::NO_MAGICLINKS, LookupFlags::NO_MAGICLINKS),
            (ResolveFlags::NO_SYMLINKS, LookupFlags::NO_SYMLINKS),
            (ResolveFlags::BENEATH, LookupFlags::BENEATH),
            (ResolveFlags::IN_ROOT, LookupFlags::IN_ROOT),
        ] {
            if r.contains(rf) {
                lf |= l;
            }
        }
        if r.contains(ResolveFlags::CACHED) {
            // Don't bother even trying for create/truncate/tmpfile open.
            if flags.intersects(OpenFlags::TRUNC | OpenFlags::CREAT | OpenFlags::TMPFILE) {
                return Err(Errno::EAGAIN);
            }
            lf |= LookupFlags::CACHED;
        }
        self.do_sys_open(dirfd, path, flags, how.mode, lf)
    }
}
