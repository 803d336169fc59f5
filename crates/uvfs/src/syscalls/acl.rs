//! The ACL calls: `get_acl`, `set_acl`, `remove_acl` on a path (what `acl_get_file` and
//! `acl_set_file` do through the `system.posix_acl_*` xattrs). Mirrors the `vfs_get_acl`
//! and `vfs_set_acl` entry points of Linux's `fs/posix_acl.c`; the ACLs themselves are in
//! `core/acl.rs`.

use crate::abi::errno::{Errno, Result};
use crate::abi::flags::AtFlags;
use crate::core::acl::Acl;
use crate::core::acl::AclType;
use crate::core::acl::{set_posix_acl, vfs_get_acl};
use crate::core::file::DirFd;
use crate::core::fsnotify::EventMask;
use crate::task::Task;

impl Task {
    /// The ACL of `type` of the file at `path` (`acl_get_file`); `None` when it has none.
    /// `AtFlags::SYMLINK_NOFOLLOW`, `AtFlags::EMPTY_PATH`. EOPNOTSUPP on a symlink. Like
    /// Linux, reading an ACL needs no permission on the file itself.
    pub fn get_acl(&self, dirfd: DirFd, path: &[u8], ty: AclType, flags: AtFlags) -> Result<Option<Acl>> {
        let p = self.acl_target(dirfd, path, flags)?;
        let inode = p.dentry.inode().ok_or(Errno::ENOENT)?;
        Ok(vfs_get_acl(inode, ty)?.map(|a| Acl::clone(&a)))
    }

    /// Sets the ACL of `type` (`acl_set_file`); errors as `setxattr` of the
    /// `system.posix_acl_*` name.
    pub fn set_acl(&self, dirfd: DirFd, path: &[u8], ty: AclType, acl: &Acl, flags: AtFlags) -> Result<()> {
        let p = self.acl_target(dirfd, path, flags)?;
        p.mnt.want_write()?;
        let inode = p.dentry.inode().ok_or(Errno::ENOENT)?;
        set_posix_acl(&self.credentials(), inode, ty, Some(acl.clone()))?;
        self.notify_attr(&p.mnt, &p.dentry, inode, EventMask::ATTRIB);
        Ok(())
    }

    /// Removes the ACL of `type` (`acl_delete_def_file` and the like); succeeds when there
    /// is none, as Linux.
    pub fn remove_acl(&self, dirfd: DirFd, path: &[u8], ty: AclType, flags: AtFlags) -> Result<()> {
        let p = self.acl_target(dirfd, path, flags)?;
        p.mnt.want_write()?;
        let inode = p.dentry.inode().ok_or(Errno::ENOENT)?;
        set_posix_acl(&self.credentials(), inode, ty, None)?;
        self.notify_attr(&p.mnt, &p.dentry, inode, EventMask::ATTRIB);
        Ok(())
    }

    fn acl_target(&self, dirfd: DirFd, path: &[u8], flags: AtFlags) -> Result<crate::core::path::PathRef> {
        if !(AtFlags::SYMLINK_NOFOLLOW | AtFlags::EMPTY_PATH).contains(flags) {
            return Err(Errno::EINVAL);
        }
        self.resolve(dirfd, path, crate::walk::namei::at_lookup(flags))
    }
}
