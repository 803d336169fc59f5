//! Extended attributes: `getxattr`, `setxattr`, `listxattr` and `removexattr`, each in
//! path, lpath (no symlink following), fd and `*at` forms. Mirrors Linux's `fs/xattr.c`
//! (with the capability hooks of `security/commoncap.c` for `security.*`).
//!
//! The VFS checks everything before the filesystem sees a name, in Linux's order (it
//! decides which errno a caller gets when several apply):
//! 1. the flags (EINVAL), the name (empty or over 255 bytes: ERANGE) and the value size
//!    (over 64 KiB: E2BIG), before the path is looked up;
//! 2. the lookup, then a writable mount for changes (EROFS);
//! 3. `system.posix_acl_access` / `system.posix_acl_default` go to [`crate::core::acl`] (no
//!    permission needed to read them; the owner or `CAP_FOWNER` to change them; the
//!    `CREATE`/`REPLACE` flags are ignored, as Linux);
//! 4. [`xattr_permission`]: `trusted.*` needs `CAP_SYS_ADMIN` (EPERM to change, ENODATA to
//!    read); `user.*` exists only on regular files and directories (EPERM / ENODATA
//!    elsewhere), a sticky directory's only for its owner, and needs read or write
//!    permission on the file, as do names outside the known namespaces;
//! 5. changing `security.*` needs `CAP_SYS_ADMIN` (EPERM), the capability LSM's rule;
//! 6. the name must belong to a namespace the filesystem stores (`security.`, `trusted.`,
//!    `user.`): EOPNOTSUPP otherwise, EINVAL for a bare prefix;
//! 7. the filesystem: ENODATA, EEXIST, ERANGE, ENOSPC.
//!
//! `listxattr` needs no permission; it lists the ACL names first, then the stored names,
//! without `trusted.*` ones for a caller lacking `CAP_SYS_ADMIN`.
//!
//! Not modelled: `security.capability`'s value conversion (`cap_convert_nscap`); uvfs
//! treats it as any other `security.*` name.

use crate::abi::cred::Capabilities;
use crate::abi::errno::{Errno, Result};
use crate::abi::flags::AtFlags;
use crate::abi::limits::XATTR_LIST_MAX;
use crate::abi::limits::XATTR_SIZE_MAX;
use crate::core::acl::{self, Acl, AclType};
use crate::core::dentry::Dentry;
use crate::core::file::{DirFd, FileRef};
use crate::core::fsnotify::EventMask;
use crate::core::inode::Inode;
use crate::core::inode::current_time;
use crate::core::mount::Mount;
use crate::core::permission::{MAY_READ, MAY_WRITE};
use crate::core::xattr::TRUSTED_PREFIX;
use crate::core::xattr::XattrFlags;
use crate::core::xattr::import_name;
use crate::core::xattr::resolve_name;
use crate::core::xattr::security_may_change;
use crate::core::xattr::xattr_permission;
use crate::task::Task;
use std::sync::Arc;

impl Task {
    fn xattr_object(&self, t: Target<'_>) -> Result<Object> {
        match t {
            Target::Path(dirfd, path, flags) => {
                let p = self.resolve(dirfd, path, crate::walk::namei::at_lookup(flags))?;
                let inode = p.dentry.inode().ok_or(Errno::ENOENT)?.clone();
                Ok(Object { mnt: p.mnt, dentry: p.dentry, inode })
            }
            Target::Fd(fd) => {
                let file = self.file_arc(fd)?;
                // `fdget` does not see O_PATH descriptors.
                if file.is_path() {
                    return Err(Errno::EBADF);
                }
                Ok(Object { mnt: file.mnt.clone(), dentry: file.dentry.clone(), inode: file.inode().clone() })
            }
        }
    }

    fn do_getxattr(&self, t: Target<'_>, name: &[u8], buf: &mut [u8]) -> Result<usize> {
        t.check()?;
        import_name(name)?;
        let o = self.xattr_object(t)?;
        let asked = buf.len();
        let buf = &mut buf[..asked.min(XATTR_SIZE_MAX)];
        let r = match AclType::from_xattr_name(name) {
            Some(ty) => match acl::vfs_get_acl(&o.inode, ty)? {
                Some(a) => a.to_xattr(buf),
                None => Err(Errno::ENODATA),
            },
            None => {
                let guard = self.vfs.rcu.pin();
                let creds = self.creds.load(&guard).get();
                xattr_permission(creds, &o.inode, name, MAY_READ, self.vfs.fast, &guard)?;
                resolve_name(name)?;
                o.inode.sb().fs().getxattr(&o.inode, name, buf)
            }
        };
        too_big(r, asked, XATTR_SIZE_MAX)
    }

    fn do_setxattr(&self, t: Target<'_>, name: &[u8], value: &[u8], flags: XattrFlags) -> Result<()> {
        t.check()?;
        if !XattrFlags::all().contains(flags) {
            return Err(Errno::EINVAL);
        }
        import_name(name)?;
        if value.len() > XATTR_SIZE_MAX {
            return Err(Errno::E2BIG);
        }
        let o = self.xattr_object(t)?;
        o.mnt.want_write()?;
        let guard = self.vfs.rcu.pin();
        let creds = self.creds.load(&guard).get();
        if let Some(ty) = AclType::from_xattr_name(name) {
            acl::set_posix_acl(creds, &o.inode, ty, Acl::from_xattr(value)?)?;
        } else {
            xattr_permission(creds, &o.inode, name, MAY_WRITE, self.vfs.fast, &guard)?;
            security_may_change(creds, name)?;
            resolve_name(name)?;
            let _g = o.inode.lock.lock();
            o.inode.sb().fs().setxattr(&o.inode, name, value, flags)?;
            if name.starts_with(b"security.") {
                // A file capability, perhaps: the next write checks again (`S_NOSEC`).
                o.inode.set_nosec(false);
            }
            o.inode.update_locked(|w| w.stamp_ctime(current_time()));
        }
        // fsnotify_xattr.
        self.notify_attr(&o.mnt, &o.dentry, &o.inode, EventMask::ATTRIB);
        Ok(())
    }

    fn do_listxattr(&self, t: Target<'_>, buf: &mut [u8]) -> Result<usize> {
        t.check()?;
        let o = self.xattr_object(t)?;
        let asked = buf.len();
        let mut out = ListWriter { buf: &mut buf[..asked.min(XATTR_LIST_MAX)], len: 0 };
        let r = (|| {
            if acl::supported(&o.inode) {
                for ty in [AclType::Access, AclType::Default] {
                    if acl::get_acl(&o.inode, ty)?.is_some() {
                        out.push(ty.xattr_name())?;
                    }
                }
            }
            let trusted = self.credentials().capable(Capabilities::SYS_ADMIN);
            o.inode.sb().fs().listxattr(&o.inode, &mut |name| {
                if !trusted && name.starts_with(TRUSTED_PREFIX) { Ok(()) } else { out.push(name) }
            })?;
            Ok(out.len)
        })();
        too_big(r, asked, XATTR_LIST_MAX)
    }

    fn do_removexattr(&self, t: Target<'_>, name: &[u8]) -> Result<()> {
        t.check()?;
        import_name(name)?;
        let o = self.xattr_object(t)?;
        o.mnt.want_write()?;
        let guard = self.vfs.rcu.pin();
        let creds = self.creds.load(&guard).get();
        if let Some(ty) = AclType::from_xattr_name(name) {
            acl::set_posix_acl(creds, &o.inode, ty, None)?;
        } else {
            xattr_permission(creds, &o.inode, name, MAY_WRITE, self.vfs.fast, &guard)?;
            security_may_change(creds, name)?;
            resolve_name(name)?;
            let _g = o.inode.lock.lock();
            o.inode.sb().fs().removexattr(&o.inode, name)?;
            o.inode.update_locked(|w| w.stamp_ctime(current_time()));
        }
        self.notify_attr(&o.mnt, &o.dentry, &o.inode, EventMask::ATTRIB);
        Ok(())
    }

    /// `getxattrat(2)`: reads the xattr `name` of the file at `dirfd`/`path` into `buf`
    /// and returns its size; an empty `buf` only asks for the size (ERANGE when `buf` is
    /// too small, ENODATA when absent). `AtFlags::SYMLINK_NOFOLLOW`, `AtFlags::EMPTY_PATH`.
    pub fn getxattrat(&self, dirfd: DirFd, path: &[u8], flags: AtFlags, name: &[u8], buf: &mut [u8]) -> Result<usize> {
        self.do_getxattr(Target::Path(dirfd, path, flags), name, buf)
    }

    /// `getxattr(2)`: follows a final symlink.
    pub fn getxattr(&self, path: &[u8], name: &[u8], buf: &mut [u8]) -> Result<usize> {
        self.getxattrat(DirFd::Cwd, path, AtFlags::empty(), name, buf)
    }

    /// `lgetxattr(2)`: the symlink itself.
    pub fn lgetxattr(&self, path: &[u8], name: &[u8], buf: &mut [u8]) -> Result<usize> {
        self.getxattrat(DirFd::Cwd, path, AtFlags::SYMLINK_NOFOLLOW, name, buf)
    }

    /// `fgetxattr(2)`: EBADF for an `O_PATH` descriptor.
    pub fn fgetxattr<'f>(&self, fd: impl Into<FileRef<'f>>, name: &[u8], buf: &mut [u8]) -> Result<usize> {
        self.do_getxattr(Target::Fd(fd.into()), name, buf)
    }

    /// `setxattrat(2)`: sets the xattr `name` to `value` (`XattrFlags::CREATE`: EEXIST if
    /// present; `XattrFlags::REPLACE`: ENODATA if absent).
    pub fn setxattrat(
        &self,
        dirfd: DirFd,
        path: &[u8],
        flags: AtFlags,
        name: &[u8],
        value: &[u8],
        xflags: XattrFlags,
    ) -> Result<()> {
        self.do_setxattr(Target::Path(dirfd, path, flags), name, value, xflags)
    }

    /// `setxattr(2)`.
    pub fn setxattr(&self, path: &[u8], name: &[u8], value: &[u8], flags: XattrFlags) -> Result<()> {
        self.setxattrat(DirFd::Cwd, path, AtFlags::empty(), name, value, flags)
    }

    /// `lsetxattr(2)`.
    pub fn lsetxattr(&self, path: &[u8], name: &[u8], value: &[u8], flags: XattrFlags) -> Result<()> {
        self.setxattrat(DirFd::Cwd, path, AtFlags::SYMLINK_NOFOLLOW, name, value, flags)
    }

    /// `fsetxattr(2)`: any descriptor but `O_PATH` (no write mode needed).
    pub fn fsetxattr<'f>(
        &self,
        fd: impl Into<FileRef<'f>>,
        name: &[u8],
        value: &[u8],
        flags: XattrFlags,
    ) -> Result<()> {
        self.do_setxattr(Target::Fd(fd.into()), name, value, flags)
    }

    /// `listxattrat(2)`: the names, each NUL-terminated, into `buf`; returns the length.
    /// An empty `buf` only asks for the length; ERANGE when `buf` is too small.
    pub fn listxattrat(&self, dirfd: DirFd, path: &[u8], flags: AtFlags, buf: &mut [u8]) -> Result<usize> {
        self.do_listxattr(Target::Path(dirfd, path, flags), buf)
    }

    /// `listxattr(2)`.
    pub fn listxattr(&self, path: &[u8], buf: &mut [u8]) -> Result<usize> {
        self.listxattrat(DirFd::Cwd, path, AtFlags::empty(), buf)
    }

    /// `llistxattr(2)`.
    pub fn llistxattr(&self, path: &[u8], buf: &mut [u8]) -> Result<usize> {
        self.listxattrat(DirFd::Cwd, path, AtFlags::SYMLINK_NOFOLLOW, buf)
    }

    /// `flistxattr(2)`.
    pub fn flistxattr<'f>(&self, fd: impl Into<FileRef<'f>>, buf: &mut [u8]) -> Result<usize> {
        self.do_listxattr(Target::Fd(fd.into()), buf)
    }

    /// `removexattrat(2)`: ENODATA when absent (removing an absent ACL succeeds).
    pub fn removexattrat(&self, dirfd: DirFd, path: &[u8], flags: AtFlags, name: &[u8]) -> Result<()> {
        self.do_removexattr(Target::Path(dirfd, path, flags), name)
    }

    /// `removexattr(2)`.
    pub fn removexattr(&self, path: &[u8], name: &[u8]) -> Result<()> {
        self.removexattrat(DirFd::Cwd, path, AtFlags::empty(), name)
    }

    /// `lremovexattr(2)`.
    pub fn lremovexattr(&self, path: &[u8], name: &[u8]) -> Result<()> {
        self.removexattrat(DirFd::Cwd, path, AtFlags::SYMLINK_NOFOLLOW, name)
    }

    /// `fremovexattr(2)`.
    pub fn fremovexattr<'f>(&self, fd: impl Into<FileRef<'f>>, name: &[u8]) -> Result<()> {
        self.do_removexattr(Target::Fd(fd.into()), name)
    }
}

/// What an xattr call names: a path (`*at` flags) or a descriptor.
#[derive(Clone, Copy)]
enum Target<'p> {
    Path(DirFd<'p>, &'p [u8], AtFlags),
    Fd(FileRef<'p>),
}

impl Target<'_> {
    /// The `*at` flags come first (EINVAL), as in Linux's `path_*xattrat`.
    fn check(&self) -> Result<()> {
        match self {
            Target::Path(_, _, flags) if !(AtFlags::SYMLINK_NOFOLLOW | AtFlags::EMPTY_PATH).contains(*flags) => {
                Err(Errno::EINVAL)
            }
            _ => Ok(()),
        }
    }
}

/// The object of an xattr call, with references.
struct Object {
    mnt: Arc<Mount>,
    /// The name it was reached through (for the change event).
    dentry: Arc<Dentry>,
    inode: Arc<Inode>,
}

/// Appends NUL-terminated names to a `listxattr` buffer, or only counts them when the
/// buffer is empty (`xattr_list_one`).
struct ListWriter<'b> {
    buf: &'b mut [u8],
    len: usize,
}

impl ListWriter<'_> {
    fn push(&mut self, name: &[u8]) -> Result<()> {
        let end = self.len + name.len() + 1;
        if !self.buf.is_empty() {
            let out = self.buf.get_mut(self.len..end).ok_or(Errno::ERANGE)?;
            out[..name.len()].copy_from_slice(name);
            out[name.len()] = 0;
        }
        self.len = end;
        Ok(())
    }
}

/// ERANGE from a buffer already at the largest size a call accepts is E2BIG: the value
/// or list could never fit (Linux's `do_getxattr`/`listxattr`).
fn too_big(r: Result<usize>, asked: usize, max: usize) -> Result<usize> {
    match r {
        Err(Errno::ERANGE) if asked >= max => Err(Errno::E2BIG),
        r => r,
    }
}
