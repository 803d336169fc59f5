//! Permission checks. Mirrors `generic_permission`, `may_delete`, `may_create` and the
//! sticky-bit and ownership helpers of Linux's `fs/namei.c` and `fs/attr.c`.
//!
//! The check is lockless: mode and ids are single atomics, the ACL slot one atomic load
//! (seed 001). Only an ACL that is not cached takes the inode lock to load it.

use crate::abi::config::FastPaths;
use crate::abi::cred::{Capabilities, Credentials, Gid};
use crate::abi::errno::{Errno, Result};
use crate::abi::stat::{S_ISGID, S_ISVTX, is_setgid_exec};
use crate::core::acl::{Acl, AclState, AclType, load_locked};
use crate::core::inode::Inode;
use crate::sync::rcu::LocalGuard;

/// Execute / search.
pub const MAY_EXEC: u32 = 1;
/// Write.
pub const MAY_WRITE: u32 = 2;
/// Read.
pub const MAY_READ: u32 = 4;

/// Mode bits, ACL and owner checks for `mask` (`MAY_*`), as `acl_permission_check`.
#[inline]
fn acl_permission_check(
    creds: &Credentials,
    inode: &Inode,
    mask: u32,
    fast: FastPaths,
    guard: &LocalGuard<'_>,
) -> Result<()> {
    let mut mode = inode.mode();
    let mask = mask & 7;
    if creds.uid.0 == inode.uid() {
        mode >>= 6;
        return if mask & !mode & 7 != 0 { Err(Errno::EACCES) } else { Ok(()) };
    }
    // An ACL matters only when the group class has bits (the mask lives there).
    if mode & 0o070 != 0 {
        match acl_state(creds, inode, mask, fast, guard) {
            AclCheck::Decided(r) => return r,
            AclCheck::None => {}
        }
    }
    // Group membership matters only when group and other bits differ where we care.
    if mask & (mode ^ (mode >> 3)) != 0 && creds.in_group(Gid(inode.gid())) {
        mode >>= 3;
    }
    if mask & !mode & 7 != 0 { Err(Errno::EACCES) } else { Ok(()) }
}

/// What the ACL says: nothing (mode bits decide), or the answer.
enum AclCheck {
    None,
    Decided(Result<()>),
}

/// Reads the ACL slot: lockless when known (seed 001), else loads under the inode lock.
/// "Known none" touches no ACL data.
#[inline]
fn acl_state(creds: &Credentials, inode: &Inode, mask: u32, fast: FastPaths, guard: &LocalGuard<'_>) -> AclCheck {
    if fast.contains(FastPaths::ACL) {
        match inode.acl_access.load(guard) {
            AclState::None => return AclCheck::None,
            AclState::Some(acl) => return AclCheck::Decided(check_acl(creds, inode, acl, mask)),
            AclState::NotCached => {}
        }
    }
    acl_state_slow(creds, inode, mask)
}

/// `posix_acl_permission` for `creds`.
fn check_acl(creds: &Credentials, inode: &Inode, acl: &Acl, mask: u32) -> Result<()> {
    acl.permission(creds.uid.0, inode.uid(), inode.gid(), |g| creds.in_group(Gid(g)), mask)
}

/// The general path: take the inode lock, ask the filesystem, cache the answer. With
/// [`FastPaths::ACL`] off every check comes here.
#[cold]
fn acl_state_slow(creds: &Credentials, inode: &Inode, mask: u32) -> AclCheck {
    let loaded = {
        let _g = inode.lock.lock();
        load_locked(inode, AclType::Access)
    };
    match loaded {
        Ok(Some(acl)) => AclCheck::Decided(check_acl(creds, inode, &acl, mask)),
        Ok(None) => AclCheck::None,
        // As Linux's `check_acl`: a failed load fails the check (and is not cached).
        Err(e) => AclCheck::Decided(Err(e)),
    }
}

/// `inode_permission` + `generic_permission`: nobody writes an immutable inode (EPERM,
/// before any mode bit or capability is asked), then mode bits and ACL, then the DAC
/// capabilities.
pub fn generic_permission(
    creds: &Credentials,
    inode: &Inode,
    mask: u32,
    fast: FastPaths,
    guard: &LocalGuard<'_>,
) -> Result<()> {
    // A lookup asks MAY_EXEC only: it never loads the flags.
    if mask & MAY_WRITE != 0 && inode.is_immutable() {
        return Err(Errno::EPERM);
    }
    match acl_permission_check(creds, inode, mask, fast, guard) {
        Ok(()) => return Ok(()),
        Err(Errno::EACCES) => {}
        // Not a denial (an ACL that could not be read): no capability overrides it.
        Err(e) => return Err(e),
    }
    if inode.is_dir() {
        if mask & MAY_WRITE == 0 && creds.capable(Capabilities::DAC_READ_SEARCH) {
            return Ok(());
        }
        if creds.capable(Capabilities::DAC_OVERRIDE) {
            return Ok(());
        }
        return Err(Errno::EACCES);
    }
    let mask = mask & (MAY_READ | MAY_WRITE | MAY_EXEC);
    if mask == MAY_READ && creds.capable(Capabilities::DAC_READ_SEARCH) {
        return Ok(());
    }
    if (mask & MAY_EXEC == 0 || inode.mode() & 0o111 != 0) && creds.capable(Capabilities::DAC_OVERRIDE) {
        return Ok(());
    }
    Err(Errno::EACCES)
}

/// `inode_owner_or_capable`: the caller owns the inode or has `CAP_FOWNER`.
pub fn owner_or_capable(creds: &Credentials, inode: &Inode) -> bool {
    creds.uid.0 == inode.uid() || creds.capable(Capabilities::FOWNER)
}

/// `check_sticky`: in a sticky directory only the file's or directory's owner (or
/// `CAP_FOWNER`) may remove or rename an entry.
pub fn check_sticky(creds: &Credentials, dir: &Inode, inode: &Inode) -> bool {
    if dir.mode() & S_ISVTX == 0 {
        return false;
    }
    !(creds.uid.0 == inode.uid() || creds.uid.0 == dir.uid() || creds.capable(Capabilities::FOWNER))
}

/// `may_create` minus the existence check: search and write on the directory.
pub fn may_create_in(creds: &Credentials, dir: &Inode, fast: FastPaths, guard: &LocalGuard<'_>) -> Result<()> {
    generic_permission(creds, dir, MAY_WRITE | MAY_EXEC, fast, guard)
}

/// `may_delete`: remove `victim` from `dir`; `want_dir` for rmdir and directory renames.
/// Nothing leaves an append-only directory, and an immutable or append-only victim
/// stays (EPERM, with the sticky-bit refusal).
pub fn may_delete(
    creds: &Credentials,
    dir: &Inode,
    victim: &Inode,
    want_dir: bool,
    fast: FastPaths,
    guard: &LocalGuard<'_>,
) -> Result<()> {
    generic_permission(creds, dir, MAY_WRITE | MAY_EXEC, fast, guard)?;
    if dir.is_append() || check_sticky(creds, dir, victim) || victim.is_immutable_or_append() {
        return Err(Errno::EPERM);
    }
    if want_dir {
        if !victim.is_dir() {
            return Err(Errno::ENOTDIR);
        }
    } else if victim.is_dir() {
        return Err(Errno::EISDIR);
    }
    Ok(())
}

/// The setgid bit a new inode keeps (`inode_init_owner` / `mode_strip_sgid`): returns
/// (gid, mode) for a node created by `creds` in `dir`.
pub fn init_owner(creds: &Credentials, dir: &Inode, mut mode: u32, is_dir: bool) -> (u32, u32) {
    if dir.mode() & S_ISGID != 0 {
        let gid = dir.gid();
        if is_dir {
            mode |= S_ISGID;
        } else if is_setgid_exec(mode) && !creds.in_group(Gid(gid)) && !creds.capable(Capabilities::FSETID) {
            mode &= !S_ISGID;
        }
        (gid, mode)
    } else {
        if !is_dir && is_setgid_exec(mode) && !creds.in_group(creds.gid) && !creds.capable(Capabilities::FSETID) {
            mode &= !S_ISGID;
        }
        (creds.gid.0, mode)
    }
}
