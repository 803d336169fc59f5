//! `getcwd`. Mirrors Linux's `fs/d_path.c`: the path is built from the dentry up to the
//! task's root, crossing mount roots, validated against the rename sequence.

use crate::abi::cred::Capabilities;
use crate::abi::errno::{Errno, Result};
use crate::core::file::DirFd;
use crate::core::file::FileRef;
use crate::core::path::climb;
use crate::core::path::join;
use crate::core::path::{PathRef, Pos};
use crate::core::permission::MAY_EXEC;
use crate::core::permission::generic_permission;
use crate::task::Task;
use crate::walk::namei::LookupFlags;

impl Task {
    /// `getcwd(2)`: ENOENT if the working directory was removed; a directory outside the
    /// task's root (after chroot) is reported with the `(unreachable)` prefix, as Linux.
    pub fn getcwd(&self) -> Result<Vec<u8>> {
        loop {
            let guard = self.vfs.rcu.pin();
            let seq = self.vfs.rename_seq.read_begin().map_err(|_| Errno::EIO)?;
            let fsx = self.fs.load(&guard);
            let (root_m, root_d) = (&*fsx.root.mnt, &*fsx.root.dentry);
            let (m, d) = (&*fsx.cwd.mnt, &*fsx.cwd.dentry);
            if d.is_dead() {
                return Err(Errno::ENOENT);
            }
            let mut parts: Vec<&[u8]> = Vec::new();
            let unreachable = !climb(m, d, Some((root_m, root_d)), &guard, |n| parts.push(n));
            let mut out = Vec::new();
            if unreachable {
                out.extend_from_slice(b"(unreachable)");
            }
            out.extend_from_slice(&join(&parts));
            if !self.vfs.rename_seq.read_retry(seq) {
                return Ok(out);
            }
        }
    }

    /// `chdir(2)`.
    pub fn chdir(&self, path: &[u8]) -> Result<()> {
        loop {
            let p = self.resolve(DirFd::Cwd, path, LookupFlags::FOLLOW | LookupFlags::DIRECTORY)?;
            self.check_exec(&p)?;
            // ESTALE: a umount took the mount away after the walk: walk again.
            match self.set_fs(|f| f.cwd = p) {
                Err(Errno::ESTALE) => continue,
                r => return r,
            }
        }
    }

    /// `fchdir(2)`.
    pub fn fchdir<'f>(&self, fd: impl Into<FileRef<'f>>) -> Result<()> {
        let file = self.file_arc(fd.into())?;
        if !file.inode().is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let p = Pos::of_file(&file).to_path();
        self.check_exec(&p)?;
        self.set_fs(|f| f.cwd = p)
    }

    /// `chroot(2)`.
    pub fn chroot(&self, path: &[u8]) -> Result<()> {
        loop {
            let p = self.resolve(DirFd::Cwd, path, LookupFlags::FOLLOW | LookupFlags::DIRECTORY)?;
            self.check_exec(&p)?;
            if !self.credentials().capable(Capabilities::SYS_CHROOT) {
                return Err(Errno::EPERM);
            }
            // ESTALE: as in chdir.
            match self.set_fs(|f| f.root = p) {
                Err(Errno::ESTALE) => continue,
                r => return r,
            }
        }
    }

    fn check_exec(&self, p: &PathRef) -> Result<()> {
        let guard = self.vfs.rcu.pin();
        let creds = self.creds.load(&guard).get();
        generic_permission(creds, p.dentry.inode().ok_or(Errno::ENOENT)?, MAY_EXEC, self.vfs.fast, &guard)
    }
}
