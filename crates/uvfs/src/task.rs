//! `Task`: what a process is to the kernel: credentials, umask, root, cwd and an fd
//! table. Every call goes through a task, so every check knows who asks. Mirrors the parts
//! of `task_struct` the VFS reads (`cred`, `fs_struct`, `files_struct`), but: no scheduling
//! or signals, and the calls are its methods (`syscalls/`).
//!
//! A task may be shared by threads (`&self` everywhere): credentials and the root/cwd
//! pair are read locklessly and replaced whole, like Linux's `struct cred` and
//! `struct fs_struct`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::abi::cred::Credentials;
use crate::abi::errno::{Errno, Result};
use crate::core::fdtable::FdTable;
use crate::core::file::DirFd;
use crate::core::instance::VfsInner;
use crate::core::path::FsContext;
use crate::core::path::PathRef;
use crate::sync::Mutex;
use crate::sync::rcu::{RcuArc, RcuBox};
use crate::vfs::Vfs;
use crate::walk::namei::{LookupFlags, Outcome, WalkCtx};

/// A task: a process of the VFS.
pub struct Task {
    /// Immutable: the instance.
    pub(crate) vfs: Arc<VfsInner>,
    /// Replaced whole by `set_credentials`.
    pub(crate) creds: RcuArc<Credentials>,
    /// Atomic: the umask.
    umask: AtomicU32,
    /// Root and cwd; replaced whole under `fs_lock`.
    pub(crate) fs: RcuBox<FsContext>,
    /// Serializes changes of `fs`.
    fs_lock: Mutex<()>,
    /// The descriptor table; shared with the tasks made by [`Task::with_credentials`].
    pub(crate) files: Arc<FdTable>,
    /// Immutable: the process id (Linux's `tgid`), what `F_GETLK` reports for the locks
    /// of this task's table; shared with the tasks made by [`Task::with_credentials`].
    pid: i32,
}

impl Task {
    pub(crate) fn new(vfs: Arc<VfsInner>, creds: Credentials) -> Task {
        let root = PathRef::root_of(&vfs.root);
        // Root and cwd are users of the root mount (which is never unmounted), and
        // holders of its root's contents.
        root.mnt.get_user_held();
        root.mnt.get_user_held();
        hold(&root);
        hold(&root);
        let files = Arc::new(FdTable::new(&vfs.rcu, vfs.fast));
        let pid = vfs.next_pid.fetch_add(1, Ordering::Relaxed);
        Task {
            pid,
            creds: RcuArc::new(Arc::new(creds.installed())),
            umask: AtomicU32::new(0o022),
            fs: RcuBox::new(FsContext { root: root.clone(), cwd: root }),
            fs_lock: Mutex::new(()),
            files,
            vfs,
        }
    }

    /// The instance this task belongs to.
    pub fn vfs(&self) -> Vfs {
        Vfs { inner: self.vfs.clone() }
    }

    /// A child process: same credentials, umask, root and cwd, a copy of the fd table
    /// sharing its open files (fork), and a pid of its own. The child's table is another
    /// owner of POSIX locks: it inherits none of the parent's (it shares the parent's
    /// open file descriptions, and so their OFD and `flock` locks).
    pub fn fork(&self) -> Task {
        let pid = self.vfs.next_pid.fetch_add(1, Ordering::Relaxed);
        self.clone_task(self.credentials(), Arc::new(self.files.fork()), pid)
    }

    /// A task with other credentials sharing this one's descriptor table (a thread that
    /// ran `setfsuid`/`setgroups` for itself, or `clone(CLONE_FILES)`): a descriptor
    /// opened by either is seen by both. Umask, root and cwd start as copies. A server
    /// acting for many callers (the FUSE frontend) keeps one such task per caller identity.
    pub fn with_credentials(&self, creds: Credentials) -> Task {
        self.clone_task(Arc::new(creds.installed()), self.files.clone(), self.pid)
    }

    /// A new task with `creds` and `files`, and copies of this one's umask, root and cwd
    /// (`copy_process`'s share of the work).
    fn clone_task(&self, creds: Arc<Credentials>, files: Arc<FdTable>, pid: i32) -> Task {
        let guard = self.vfs.rcu.pin();
        let _l = self.fs_lock.lock();
        let fsx = self.fs.load(&guard);
        // Our own counts keep both mounts from being unmounted meanwhile, and our holds
        // both directories' contents.
        fsx.root.mnt.get_user_held();
        fsx.cwd.mnt.get_user_held();
        hold(&fsx.root);
        hold(&fsx.cwd);
        Task {
            vfs: self.vfs.clone(),
            creds: RcuArc::new(creds),
            umask: AtomicU32::new(self.umask.load(Ordering::Relaxed)),
            fs: RcuBox::new(fsx.clone()),
            fs_lock: Mutex::new(()),
            files,
            pid,
        }
    }

    /// `getpid(2)`: the process id, numbered from 1 per instance; a task made by
    /// [`Task::with_credentials`] shares it (a thread of the same process), a
    /// [`Task::fork`] child gets the next.
    pub fn getpid(&self) -> i32 {
        self.pid
    }

    /// The current credentials.
    pub fn credentials(&self) -> Arc<Credentials> {
        let guard = self.vfs.rcu.pin();
        self.creds.get(&guard)
    }

    /// Replaces the credentials (setuid/setgroups/capset in one step).
    pub fn set_credentials(&self, creds: Credentials) {
        self.creds.replace(Arc::new(creds.installed()), &self.vfs.rcu);
    }

    /// `umask(2)`: sets the mask, returns the previous one.
    pub fn umask(&self, mask: u32) -> u32 {
        self.umask.swap(mask & 0o777, Ordering::Relaxed)
    }

    pub(crate) fn current_umask(&self) -> u32 {
        self.umask.load(Ordering::Relaxed)
    }

    /// Replaces root and/or cwd. The new ones become users of their mounts, the old ones
    /// stop being users (now, not when the collector frees the old context, so that a
    /// umount right after a chdir away succeeds). ESTALE if a non-lazy umount took a new
    /// one's mount away after the caller's walk found it: the caller walks again.
    ///
    /// The holds given back go after the task's lock, as Linux's `set_fs_pwd` puts the old
    /// path after unlocking: the last hold of a removed directory evicts it, and eviction
    /// takes the filesystem's locks, which rank before the task's.
    pub(crate) fn set_fs(&self, f: impl FnOnce(&mut FsContext)) -> Result<()> {
        let guard = self.vfs.rcu.pin();
        let l = self.fs_lock.lock();
        let old = self.fs.load(&guard);
        let mut ctx = old.clone();
        f(&mut ctx);
        ctx.root.mnt.get_user()?;
        if let Err(e) = ctx.cwd.mnt.get_user() {
            ctx.root.mnt.put_user();
            return Err(e);
        }
        // A directory whose contents went after the walk found it (removed meanwhile):
        // ESTALE, and the caller walks again (which then finds no such name).
        if hold(&ctx.root) | hold(&ctx.cwd) {
            ctx.root.mnt.put_user();
            ctx.cwd.mnt.put_user();
            drop(l);
            unhold(&ctx.root);
            unhold(&ctx.cwd);
            return Err(Errno::ESTALE);
        }
        old.root.mnt.put_user();
        old.cwd.mnt.put_user();
        self.fs.replace(ctx, &self.vfs.rcu);
        drop(l);
        // `old` stays readable under `guard` after the replace (freed after it).
        unhold(&old.root);
        unhold(&old.cwd);
        Ok(())
    }
}

/// The walk as this task: its credentials, root, working directory and descriptors.
impl Task {
    /// The context a walk of this task starts from (with `as_creds` instead of its own
    /// credentials for the search permissions, as `access(2)`).
    #[inline]
    pub(crate) fn walk_ctx<'t>(&'t self, as_creds: Option<&'t Credentials>) -> WalkCtx<'t> {
        WalkCtx { vfs: &self.vfs, creds: &self.creds, as_creds, fs: &self.fs, files: &self.files }
    }

    /// [`WalkCtx::walk`] as this task.
    #[inline]
    pub(crate) fn walk<R>(
        &self,
        dirfd: DirFd,
        path: &[u8],
        flags: LookupFlags,
        f: impl FnMut(Outcome<'_>) -> Result<R>,
    ) -> Result<R> {
        self.walk_ctx(None).walk(dirfd, path, flags, f)
    }

    /// [`WalkCtx::walk`] as this task with other credentials for the search permissions.
    #[inline]
    pub(crate) fn walk_as<R>(
        &self,
        as_creds: Option<&Credentials>,
        dirfd: DirFd,
        path: &[u8],
        flags: LookupFlags,
        f: impl FnMut(Outcome<'_>) -> Result<R>,
    ) -> Result<R> {
        self.walk_ctx(as_creds).walk(dirfd, path, flags, f)
    }

    /// [`WalkCtx::resolve`] as this task.
    pub(crate) fn resolve(&self, dirfd: DirFd, path: &[u8], flags: LookupFlags) -> Result<PathRef> {
        self.walk_ctx(None).resolve(dirfd, path, flags)
    }
}

impl Drop for Task {
    /// The task's root and cwd stop being users of their mounts (exit).
    fn drop(&mut self) {
        let guard = self.vfs.rcu.pin();
        let fsx = self.fs.load(&guard);
        fsx.root.mnt.put_user();
        fsx.cwd.mnt.put_user();
        unhold(&fsx.root);
        unhold(&fsx.cwd);
    }
}

/// A task's root or working directory holds its directory's contents
/// ([`Inode::hold`](crate::core::inode::Inode::hold)): true if they were evicted already.
fn hold(p: &PathRef) -> bool {
    p.dentry.inode().is_some_and(|i| i.hold())
}

/// The hold of [`hold`] given back.
fn unhold(p: &PathRef) {
    if let Some(i) = p.dentry.inode() {
        i.closed();
    }
}
