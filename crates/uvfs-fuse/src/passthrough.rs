//! FUSE passthrough (`FOPEN_PASSTHROUGH`, Linux 6.9+): an open regular file of a host
//! directory (hostfs) is handed to the kernel as a backing file, and the kernel reads,
//! writes and maps that host file itself, without a round trip per request.
//!
//! The server registers the host descriptor the open pinned
//! ([`uvfs::FileSystem::with_host_fd`]) with `FUSE_DEV_IOC_BACKING_OPEN` on `/dev/fuse`
//! (which needs `CAP_SYS_ADMIN`), answers OPEN/CREATE with the backing id, and closes the
//! id at RELEASE (the kernel's open file holds its own reference to the host file by
//! then). The kernel writes the host file behind uvfs's back, so uvfs re-reads what it
//! caches of the file ([`uvfs::FileSystem::host_changed`]: size, times) when the kernel
//! asks for its attributes while it is open, when the last such handle is released, and
//! at every in-process `stat` meanwhile (the inode is marked while backed:
//! [`uvfs::Inode::set_stat_by_fs`]). In-process watches see no MODIFY events for those
//! writes.
//!
//! When the kernel or the host refuses (no `CAP_SYS_ADMIN`, a host filesystem that is
//! itself stacked, a kernel without passthrough), one line says so and files are served
//! through the page cache as before: a missing speed-up never fails an open.
//!
//! Not every open is backed: with [`crate::Levers::CACHED_READS`] a small file opened for
//! reading only is served through the page cache (the kernel forgets a backed file's
//! atime at every read, so each `stat` after one was a round trip). The kernel fails an
//! open whose mode (backed or cached) differs from that of the inode's other open files,
//! with EIO to the opener (`fs/fuse/iomode.c`), so a node stays in the mode of its first
//! open until its last handle is released: a writer of a file open cached is served
//! through the server, a reader of a file open backed gets the backing file.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use uvfs::{Errno, File, FileType};

/// `_IOW(229, 1, struct fuse_backing_map)`.
const FUSE_DEV_IOC_BACKING_OPEN: libc::c_ulong = 0x4010_e501;
/// `_IOW(229, 2, uint32_t)`.
const FUSE_DEV_IOC_BACKING_CLOSE: libc::c_ulong = 0x4004_e502;

/// `struct fuse_backing_map`.
#[repr(C)]
struct BackingMap {
    fd: i32,
    flags: u32,
    padding: u64,
}

/// Backing files by node, and the handles that use them.
#[derive(Default)]
struct Backed {
    /// File handle -> its node.
    by_fh: HashMap<u64, u64>,
    /// Node id -> (backing id, handles using it). One backing file per node: the kernel
    /// refuses an open whose backing file differs from the one the inode's other open
    /// files use (EIO to the opener).
    nodes: HashMap<u64, (u32, u32)>,
    /// Handles served through the page cache instead ([`Passthrough::open`]'s
    /// `prefer_cache`) -> their node.
    cached_fh: HashMap<u64, u64>,
    /// Node id -> its handles served through the page cache. A node never has backed and
    /// cached handles at once: the kernel fails an open whose mode differs from the
    /// inode's open files' (EIO to the opener). No page of a file outlives a write through
    /// its backing file: a backed open's reply carries no `FOPEN_KEEP_CACHE`, so the
    /// kernel drops the file's pages at each one, and none are read in while it is open.
    cached: HashMap<u64, u32>,
}

/// The server's passthrough state.
#[derive(Default)]
pub(crate) struct Passthrough {
    /// The `/dev/fuse` descriptor the backing ioctls go to (set once, by the session).
    pub(crate) dev: OnceLock<Arc<OwnedFd>>,
    /// Atomic: the kernel accepted `FUSE_PASSTHROUGH` and nothing has refused it since.
    on: AtomicBool,
    /// Atomic, set once with `on`: a refusal is said on stderr
    /// ([`crate::MountOptions::notices`]).
    notices: AtomicBool,
    /// Own lock; held across a registration so that a node gets one backing id.
    backed: Mutex<Backed>,
    /// Atomic, written under `backed`'s lock: its number of backed nodes, so that
    /// [`Passthrough::backs`] (asked at every READDIRPLUS entry)
    /// takes no lock while nothing is backed (a memfs mount, a tree not written).
    backed_nodes: AtomicUsize,
}

impl Passthrough {
    /// INIT settled: whether the kernel accepted passthrough, and whether a refusal later
    /// is said on stderr.
    pub(crate) fn set_negotiated(&self, on: bool, notices: bool) {
        self.notices.store(notices, Ordering::Relaxed);
        self.on.store(on, Ordering::Relaxed);
    }

    /// Whether opens get a backing file.
    pub(crate) fn active(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// The backing id for handle `fh`, an open `file` of node `node`: the node's, or the
    /// host file of `file` registered now. `None` (served through the page cache) if the
    /// file is not a host file, passthrough is off (turned off, with a notice, when the
    /// kernel refuses), the node's open handles are cached, or `prefer_cache` and none of
    /// them is backed.
    pub(crate) fn open(&self, fh: u64, node: u64, file: &File, prefer_cache: bool) -> Option<u32> {
        if !self.active() || file.inode().file_type() != FileType::Regular {
            return None;
        }
        let mut b = self.backed.lock();
        if let Some((id, n)) = b.nodes.get_mut(&node) {
            *n += 1;
            let id = *id;
            b.by_fh.insert(fh, node);
            return Some(id);
        }
        let id = if prefer_cache || b.cached.contains_key(&node) { None } else { self.register(file) };
        match id {
            Some(id) => {
                // The kernel writes the host file behind uvfs from now on: an in-process
                // `stat` re-reads it while the node is backed.
                file.inode().set_stat_by_fs(true);
                b.nodes.insert(node, (id, 1));
                self.backed_nodes.store(b.nodes.len(), Ordering::Release);
                b.by_fh.insert(fh, node);
            }
            None => {
                *b.cached.entry(node).or_insert(0) += 1;
                b.cached_fh.insert(fh, node);
            }
        }
        id
    }

    fn register(&self, file: &File) -> Option<u32> {
        let dev = self.dev.get()?;
        let inode = file.inode();
        let mut id = None;
        let r = inode.sb().fs().with_host_fd(inode, &mut |fd: BorrowedFd<'_>| {
            // The kernel's writes need a host descriptor that can write (a host file only
            // readable to the server is served through the page cache).
            let mode = rustix::fs::fcntl_getfl(fd).map_err(|e| Errno::from_raw(e.raw_os_error()))?;
            if !mode.contains(rustix::fs::OFlags::RDWR) {
                return Err(Errno::EACCES);
            }
            let map = BackingMap { fd: fd.as_raw_fd(), flags: 0, padding: 0 };
            // SAFETY: FUSE_DEV_IOC_BACKING_OPEN reads one `fuse_backing_map`, which `map`
            // is (repr(C), the kernel's layout), from a valid pointer; `dev` is open.
            let r = unsafe { libc::ioctl(dev.as_raw_fd(), FUSE_DEV_IOC_BACKING_OPEN, &map) };
            if r <= 0 {
                return Err(Errno::from_raw(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)));
            }
            id = Some(r as u32);
            Ok(())
        });
        match r {
            Ok(()) => id,
            // Not a host file, or one that cannot back writes: served cached.
            Err(Errno::EOPNOTSUPP | Errno::EACCES) => None,
            Err(e) => {
                if self.on.swap(false, Ordering::Relaxed) && self.notices.load(Ordering::Relaxed) {
                    eprintln!(
                        "uvfs mount: FUSE passthrough not available (the kernel refused a backing file: {e}): \
                         reads and writes go through the server"
                    );
                }
                None
            }
        }
    }

    /// Handle `fh`, an open of `inode`, was released (before its number can be reused):
    /// the node's backing id is closed with its last handle, and the inode's `stat` no
    /// longer re-reads the host file.
    pub(crate) fn release(&self, fh: u64, inode: Option<&uvfs::Inode>) {
        let mut b = self.backed.lock();
        if let Some(node) = b.cached_fh.remove(&fh) {
            if let Some(n) = b.cached.get_mut(&node) {
                *n -= 1;
                if *n == 0 {
                    b.cached.remove(&node);
                }
            }
            return;
        }
        let Some(node) = b.by_fh.remove(&fh) else { return };
        let Some((id, n)) = b.nodes.get_mut(&node) else { return };
        *n -= 1;
        if *n > 0 {
            return;
        }
        let id = *id;
        b.nodes.remove(&node);
        self.backed_nodes.store(b.nodes.len(), Ordering::Release);
        if let Some(i) = inode {
            i.set_stat_by_fs(false);
        }
        if let Some(dev) = self.dev.get() {
            // SAFETY: FUSE_DEV_IOC_BACKING_CLOSE reads one u32 from a valid pointer. Under
            // the lock: a concurrent OPEN of the node registers anew after this.
            unsafe { libc::ioctl(dev.as_raw_fd(), FUSE_DEV_IOC_BACKING_CLOSE, &id) };
        }
    }

    /// Whether handle `fh` has the kernel write to its host file directly.
    pub(crate) fn backs_handle(&self, fh: u64) -> bool {
        self.backed.lock().by_fh.contains_key(&fh)
    }

    /// Whether node `node` has a handle the kernel writes to directly.
    pub(crate) fn backs(&self, node: u64) -> bool {
        // A node backed by an OPEN the kernel was answered before it sent this request is
        // counted: the count is stored before the answer is written.
        self.backed_nodes.load(Ordering::Acquire) != 0 && self.backed.lock().nodes.contains_key(&node)
    }

    /// Unmount: every backing id is forgotten (the connection, and its ids, are gone).
    pub(crate) fn clear(&self) {
        let mut b = self.backed.lock();
        *b = Backed::default();
        self.backed_nodes.store(0, Ordering::Release);
    }
}
