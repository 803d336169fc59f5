//! What a write, a truncate or a chown takes away: the set-id bits a writer without
//! `CAP_FSETID` clears, and the file capability (`security.capability`), which goes
//! whoever writes. Mirrors `file_remove_privs`, `should_remove_suid` and
//! `security_inode_killpriv` (`fs/inode.c`, `fs/attr.c`, `security/commoncap.c`), with
//! `S_NOSEC` remembering that there is nothing to remove, but: the flag lives in the
//! inode's `iflags`, cleared by a mode change or a `security.*` xattr.

use crate::abi::cred::{Capabilities, Credentials};
use crate::abi::errno::{Errno, Result};
use crate::abi::stat::{FileType, S_ISGID, S_ISUID, is_setgid_exec, is_sxid};
use crate::core::inode::Inode;

use crate::core::xattr::XATTR_NAME_CAPS;

/// `file_remove_privs` (write, truncate, fallocate) of a regular file: the set-id bits a
/// writer without `CAP_FSETID` clears ([`kill_suid`]) and the file capability, which goes
/// whoever writes ([`kill_priv`]). While the inode is `I_NOSEC` this is one flag test;
/// the first call that finds nothing to remove sets it.
pub(crate) fn file_remove_privs(creds: &Credentials, inode: &Inode) -> Result<()> {
    if inode.is_nosec() || inode.file_type() != FileType::Regular {
        return Ok(());
    }
    kill_suid(creds, inode);
    let had_caps = kill_priv(inode)?;
    if !had_caps && !is_sxid(inode.mode()) {
        inode.set_nosec(true);
    }
    Ok(())
}

/// `security_inode_killpriv`: removes the file capability, if the file has one; true if
/// it had. A filesystem without xattrs has none.
pub(crate) fn kill_priv(inode: &Inode) -> Result<bool> {
    let fs = inode.sb().fs();
    match fs.getxattr(inode, XATTR_NAME_CAPS, &mut []) {
        Ok(_) => {}
        Err(Errno::ENODATA | Errno::EOPNOTSUPP) => return Ok(false),
        Err(e) => return Err(e),
    }
    let _g = inode.lock.lock();
    match fs.removexattr(inode, XATTR_NAME_CAPS) {
        Ok(()) | Err(Errno::ENODATA) => Ok(true),
        Err(e) => Err(e),
    }
}

/// `should_remove_suid`: the privilege bits a write or truncate by `creds` clears.
pub(crate) fn kill_suid(creds: &Credentials, inode: &Inode) {
    let mode = inode.mode();
    let mut kill = 0;
    if mode & S_ISUID != 0 {
        kill |= S_ISUID;
    }
    if is_setgid_exec(mode) {
        kill |= S_ISGID;
    }
    if kill != 0 && inode.file_type() == FileType::Regular && !creds.capable(Capabilities::FSETID) {
        inode.update(|w| {
            w.set_mode(mode & !kill);
            w.stamp_ctime(crate::core::inode::current_time());
        });
        // Persisted like any mode change (Linux's `file_remove_privs` -> `notify_change`):
        // a passthrough filesystem would otherwise keep the bits (the host process may
        // hold CAP_FSETID). Best effort, as the write or truncate goes on either way.
        let _ = inode
            .sb()
            .fs()
            .setattr(inode, &crate::core::superblock::SetAttr { mode: Some(mode & !kill), ..Default::default() });
    }
}
