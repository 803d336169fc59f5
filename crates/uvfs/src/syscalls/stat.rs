//! `fstatat`, `stat`, `lstat`, `fstat`, `readlinkat`, `statfs`, `fstatfs`. Mirrors
//! Linux's `fs/stat.c` and `fs/statfs.c`. A cached `stat` or `readlink` takes no lock and
//! allocates nothing (seeds 002 and 004).

use crate::abi::errno::{Errno, Result};
use crate::abi::flags::AtFlags;
use crate::abi::stat::{FileType, Ino};
use crate::abi::stat::{Stat, Statx, StatxAttrs, StatxMask};
use crate::abi::stat::{StatFs, StatFsFlags};
use crate::core::file::{DirFd, File, FileRef};
use crate::core::mount::{Mount, MountFlags};
use crate::task::Task;
use crate::walk::namei::{LookupFlags, Outcome};

impl Task {
    /// `fstatat(2)` (`newfstatat`): `AT_SYMLINK_NOFOLLOW`, `AT_EMPTY_PATH`.
    /// On cached names: lockless, no allocation, no shared write but the mark of a change
    /// time reported for the first time (multigrain timestamps: `core/inode.rs`).
    pub fn fstatat(&self, dirfd: DirFd, path: &[u8], flags: AtFlags) -> Result<Stat> {
        if !(AtFlags::SYMLINK_NOFOLLOW | AtFlags::EMPTY_PATH | AtFlags::NO_AUTOMOUNT).contains(flags) {
            return Err(Errno::EINVAL);
        }
        self.walk(dirfd, path, crate::walk::namei::at_lookup(flags), |o| match o {
            Outcome::Found(p) => Ok(p.inode().stat()),
            _ => Err(Errno::ENOENT),
        })
    }

    /// `statx(2)`: the `stat` fields with what is asked for in `mask` and known: birth
    /// time where the filesystem records it (memfs), the mount's id, the attributes
    /// (`STATX_ATTR_MOUNT_ROOT`, the file flags). As tmpfs with its multigrain
    /// timestamps, `mtime`/`ctime` are reported only when one of them is asked for.
    /// `AT_STATX_FORCE_SYNC`/`AT_STATX_DONT_SYNC` change nothing (uvfs's attributes are
    /// current, or revalidated as for `stat`); both at once are EINVAL, as an unknown
    /// flag or `STATX__RESERVED`.
    pub fn statx(&self, dirfd: DirFd, path: &[u8], flags: AtFlags, mask: StatxMask) -> Result<Statx> {
        let sync = AtFlags::STATX_FORCE_SYNC | AtFlags::STATX_DONT_SYNC;
        if !(AtFlags::SYMLINK_NOFOLLOW | AtFlags::EMPTY_PATH | AtFlags::NO_AUTOMOUNT | sync).contains(flags)
            || flags.contains(sync)
            || mask.bits() & StatxMask::RESERVED != 0
        {
            return Err(Errno::EINVAL);
        }
        let lookup = crate::walk::namei::at_lookup(flags - sync);
        self.walk(dirfd, path, lookup, |o| match o {
            Outcome::Found(p) => {
                let inode = p.inode();
                let fs = inode.sb().fs();
                let mut out_mask = StatxMask::BASIC_STATS;
                if !mask.intersects(StatxMask::MTIME | StatxMask::CTIME) {
                    out_mask -= StatxMask::MTIME | StatxMask::CTIME;
                }
                let btime = if mask.contains(StatxMask::BTIME) { fs.btime(inode) } else { None };
                if btime.is_some() {
                    out_mask |= StatxMask::BTIME;
                }
                out_mask |=
                    if mask.contains(StatxMask::MNT_ID_UNIQUE) { StatxMask::MNT_ID_UNIQUE } else { StatxMask::MNT_ID };
                let (mut attributes, fs_mask) = fs.statx_attributes(inode);
                let is_root = std::ptr::eq(p.mnt.get().root.as_ref(), p.dentry.get());
                if is_root {
                    attributes |= StatxAttrs::MOUNT_ROOT;
                }
                Ok(Statx {
                    mask: out_mask,
                    // As Linux: only a `statx` that asks for them has seen the times.
                    stat: if mask.intersects(StatxMask::MTIME | StatxMask::CTIME) {
                        inode.stat()
                    } else {
                        inode.stat_unseen()
                    },
                    btime: btime.unwrap_or_default(),
                    attributes,
                    attributes_mask: fs_mask | StatxAttrs::AUTOMOUNT | StatxAttrs::MOUNT_ROOT | StatxAttrs::DAX,
                    mnt_id: p.mnt.get().id.0,
                })
            }
            _ => Err(Errno::ENOENT),
        })
    }

    /// `stat(2)`.
    pub fn stat(&self, path: &[u8]) -> Result<Stat> {
        self.fstatat(DirFd::Cwd, path, AtFlags::empty())
    }

    /// `lstat(2)`.
    pub fn lstat(&self, path: &[u8]) -> Result<Stat> {
        self.fstatat(DirFd::Cwd, path, AtFlags::SYMLINK_NOFOLLOW)
    }

    /// `fstat(2)` (works on `O_PATH` descriptors, as Linux).
    pub fn fstat<'f>(&self, fd: impl Into<FileRef<'f>>) -> Result<Stat> {
        let guard = self.vfs.rcu.pin();
        let file = self.fget(fd.into(), &guard)?;
        crate::walk::namei::getattr(crate::core::path::Pos::of_file(file))?;
        Ok(file.inode().stat())
    }

    /// The device and inode number of the directory holding the name `file` was opened
    /// by (`None` for a filesystem's root): a FUSE server tells the kernel about that
    /// directory when the file is read. Lockless, no count taken.
    pub fn parent_ino(&self, file: &File) -> Option<(u64, Ino)> {
        let guard = self.vfs.rcu.pin();
        let d = file.dentry();
        if d.is_root() {
            return None;
        }
        let dir = d.parent(&guard).inode()?;
        Some((dir.sb().dev(), dir.ino()))
    }

    /// `statfs(2)`: what the filesystem holding `path` has and has left.
    pub fn statfs(&self, path: &[u8]) -> Result<StatFs> {
        let p = self.resolve(DirFd::Cwd, path, LookupFlags::FOLLOW)?;
        Ok(statfs_of(&p.mnt))
    }

    /// `fstatfs(2)` (works on `O_PATH` descriptors, as Linux).
    pub fn fstatfs<'f>(&self, fd: impl Into<FileRef<'f>>) -> Result<StatFs> {
        let file = self.file_arc(fd.into())?;
        Ok(statfs_of(&file.mnt))
    }

    /// `readlinkat(2)`: copies at most `buf.len()` bytes of the target, no NUL.
    ///
    /// Seed 002: the body is cached in the inode, so this is one bounded copy with no
    /// lock and no allocation. With [`FastPaths::SYMLINK_CACHE`](crate::FastPaths) off the
    /// filesystem is asked every time.
    pub fn readlinkat(&self, dirfd: DirFd, path: &[u8], buf: &mut [u8]) -> Result<usize> {
        if buf.is_empty() {
            return Err(Errno::EINVAL);
        }
        let empty = path.is_empty();
        let cache = self.vfs.fast.contains(crate::FastPaths::SYMLINK_CACHE);
        self.walk(dirfd, path, LookupFlags::EMPTY, |o| {
            let Outcome::Found(p) = o else { return Err(Errno::ENOENT) };
            let inode = p.inode();
            if inode.file_type() != FileType::Symlink {
                return Err(if empty { Errno::ENOENT } else { Errno::EINVAL });
            }
            // `do_readlinkat`: reading a link is an access.
            inode.touch_atime(&p.mnt);
            if cache && let Some(body) = inode.cached_link() {
                let n = body.len().min(buf.len());
                buf[..n].copy_from_slice(&body[..n]);
                return Ok(n);
            }
            crate::sync::counters::bump(|c| c.link_fs_reads += 1);
            let body = inode.sb().fs().readlink(inode)?;
            let n = body.len().min(buf.len());
            buf[..n].copy_from_slice(&body[..n]);
            if cache {
                inode.set_cached_link(body.into_boxed_slice());
            }
            Ok(n)
        })
    }

    /// `readlink(2)`.
    pub fn readlink(&self, path: &[u8], buf: &mut [u8]) -> Result<usize> {
        self.readlinkat(DirFd::Cwd, path, buf)
    }
}

/// The filesystem's `statfs` answer for `mnt`, with the flags of the mount and of the
/// whole filesystem (Linux's `calculate_f_flags`: `flags_by_mnt` and `flags_by_sb`).
fn statfs_of(mnt: &Mount) -> StatFs {
    let mut s = mnt.sb.fs().statfs(&mnt.sb);
    let m = mnt.flags();
    let mut f = StatFsFlags::VALID;
    for (mf, sf) in [
        (MountFlags::RDONLY, StatFsFlags::RDONLY),
        (MountFlags::NOSUID, StatFsFlags::NOSUID),
        (MountFlags::NODEV, StatFsFlags::NODEV),
        (MountFlags::NOEXEC, StatFsFlags::NOEXEC),
        (MountFlags::NOATIME, StatFsFlags::NOATIME),
        (MountFlags::NODIRATIME, StatFsFlags::NODIRATIME),
        (MountFlags::NOSYMFOLLOW, StatFsFlags::NOSYMFOLLOW),
    ] {
        if m.contains(mf) {
            f |= sf;
        }
    }
    if !m.intersects(MountFlags::NOATIME | MountFlags::STRICTATIME) {
        f |= StatFsFlags::RELATIME;
    }
    if mnt.sb.read_only() {
        f |= StatFsFlags::RDONLY;
    }
    s.flags = f;
    s
}
