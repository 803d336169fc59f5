//! `hostfs`: a filesystem that passes through to a directory of the host. The role of
//! Linux's disk filesystems' `lookup` + `iget5_locked` (and of FUSE's passthrough).
//!
//! **No string paths.** Every host call is relative to a directory file descriptor with a
//! single name component (`openat`, `fstatat`, `readlinkat`, `mkdirat`, ...), never a
//! joined path, and never follows a host symlink (`AT_SYMLINK_NOFOLLOW`, `O_NOFOLLOW`):
//! symlinks are followed only by uvfs's own walk, inside uvfs's namespace. So a rename on
//! the host (say, a directory swapped for a symlink to `/`) cannot lead uvfs outside the
//! directory it was given: a directory is opened with `O_DIRECTORY | O_NOFOLLOW` and its
//! (device, inode) checked against the `fstatat` that found it, and everything below it is
//! relative to that descriptor. The one exception is `chmod` of a device node, fifo or
//! socket, which has no descriptor to `fchmod`: it goes through `/proc/self/fd/N` of an
//! `O_PATH` descriptor whose identity was checked (what glibc's `fchmodat` does for
//! `AT_SYMLINK_NOFOLLOW`); that magic link names the inode itself, not a path.
//!
//! **Inodes.** Inodes are found through the superblock's
//! `InodeCache` (`core::icache`) by the host's (device, inode number), and
//! their attributes are refreshed from the host after every change uvfs makes (so `stat`
//! shows the host's own sizes, link counts and times). Each knows where it is named: a
//! directory its parent and name, updated by renames and by lookups that find it under
//! another name; any other file the names uvfs has seen it by (each hard link looked up,
//! linked or renamed to, less those unlinked or renamed over), so removing one of them
//! leaves the file reachable by another. A directory has an `O_RDONLY | O_DIRECTORY` descriptor (every `*at`
//! call below it, `fchmod`, xattrs, `getdents`); a regular file opens an I/O descriptor
//! on first I/O (`openat(parent, name, O_NOFOLLOW)`, checked to be the same (device,
//! inode)); so a cold scan that only stats costs one `fstatat` per file and no descriptor.
//!
//! **A bounded number of host descriptors.** Those descriptors are a cache
//! (`hostfs/filecache.rs`, the role of the NFS server's open-file cache), bounded by
//! [`HostFsOptions::descriptor_limit`] (by default a quarter of the soft
//! `RLIMIT_NOFILE` when the instance is made): once more are open, the least recently
//! used are closed, and a closed one is reopened on demand by name, relative to the
//! parent's descriptor (itself reopened the same way if it was closed, up to the root,
//! whose descriptor is held for the instance's life), with `O_NOFOLLOW` and the (device,
//! inode) check. A directory listed to its end keeps the description it was read by in
//! the cache too, for the call that continues there (`EndStreams`). So uvfs's own
//! caches (a million dentries and inodes by default, or a FUSE kernel's) hold no host
//! descriptors. What is never closed by the cache: the
//! descriptor of a file or directory uvfs has open (pinned from `FileSystem::open` to
//! `release`: an open file keeps its data when its name goes, on the host or through
//! uvfs, as on Linux), the root's, and the one a call in progress uses (it holds it for
//! the call). A file with no name left (unlinked through uvfs, or with no links on the
//! host) has its descriptor closed when its last uvfs open goes: the cache does not keep
//! removed files alive. A reopen never uses a string path nor a file handle:
//! `open_by_handle_at` would need `CAP_DAC_READ_SEARCH` (root), and it opens the inode
//! wherever it now is, outside the given directory too; by names, a reopened directory
//! is one reachable from the root now. The cost is after a host rename: a directory
//! whose descriptor was closed is found again by a lookup of its new name (revalidating,
//! the next walk does it); until then its old name gives ENOENT, or ESTALE if it now
//! names another inode (that name is then forgotten, so a retry ends in ENOENT).
//!
//! **Directories are not complete.** A miss asks the host and leaves a negative dentry,
//! which later lookups find without asking the host. What the cached names say is kept
//! true by [`HostChanges`]: by default (`Revalidate`) a cached name, positive or
//! negative, is checked against the host before use (`d_revalidate`: one `fstatat` of the
//! name in its directory's descriptor, which also refreshes the inode's attributes, and a
//! name that now names another inode or nothing is dropped and looked up again), and a
//! `stat` that ends on a position no name lookup checked (`fstat`, `.`, `..`, the root)
//! refreshes the attributes (`getattr`); a `max_age` lets a check stand for that long, as
//! FUSE's entry and attribute timeouts do. `HostChanges::Never` is the explicit promise
//! that nothing changes the host directory behind uvfs's back: cached names and
//! attributes are then trusted as they are (the cold-scan benchmark's mode), and so is
//! the absence of a file capability (`security.capability`, which the kernel asks a FUSE
//! server for before every chown and first write; see `NoCaps`), and so are listings: a
//! directory's listing read whole from the host is kept and served again, with the host's
//! cookies, until uvfs changes the directory (`hostfs/listing.rs`, bounded by
//! [`HostFsOptions::listing_limit`]).
//!
//! **Xattr reads** go through a small buffer first: the host kernel allocates and zeroes
//! a buffer of the size it is given, and a 64 KiB one cost more than the call.
//!
//! **Bad input.** Host errors pass through with the same errno. A directory removed on
//! the host gives the host's answers on its descriptor (ENOENT for creations, empty
//! listings), and ENOENT once that descriptor is closed; a file or directory whose name
//! now names another inode gives ESTALE (see above).

mod filecache;
mod listing;

use std::any::Any;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use rustix::fs::{AtFlags, Mode, OFlags};

use self::filecache::{FileCache, HostFd, Slot};
use crate::abi::errno::{Errno, Result};
use crate::abi::flags::Timespec;
use crate::abi::stat::{DevIno, Ino};
use crate::abi::stat::{FileType, StatFs, StatxAttrs};
use crate::core::acl::{Acl, AclInit, AclType};
use crate::core::inode::{AttrWriter, Inode, NewInode};
use crate::core::superblock::{CreateArgs, DirEntry, FileSystem, RenameReq, SetAttr, SuperBlock, TruncateBy, WriteAt};
use crate::core::xattr::{XATTR_NAME_CAPS, XattrFlags};
use crate::sync::{Mutex, counters};

/// Whether the host directory may change behind uvfs's back, and how uvfs notices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostChanges {
    /// Nothing changes the host directory behind uvfs's back while it is mounted: cached
    /// names (positive and negative) and attributes are trusted without asking the host.
    Never,
    /// The host may change: a cached name is checked against the host before use, and
    /// attributes are refreshed before they are reported, unless the last check of that
    /// name or inode is less than `max_age` old (`Duration::ZERO`: every time).
    Revalidate {
        /// How long a check stands.
        max_age: std::time::Duration,
    },
}

/// Options of a hostfs mount.
#[derive(Clone, Copy, Debug)]
pub struct HostFsOptions {
    /// Whether (and how) changes made on the host behind uvfs's back are noticed.
    pub changes: HostChanges,
    /// How many host descriptors the instance keeps open (directories', files' not open
    /// in uvfs, and listings read to their end) before it closes the least recently
    /// used; the files uvfs has open keep theirs beyond it (see the module docs). `None`:
    /// a quarter of the soft `RLIMIT_NOFILE` when the instance is made, from 16 to
    /// 65,536. `Some(0)` is EINVAL.
    pub descriptor_limit: Option<usize>,
    /// Under [`HostChanges::Never`], how many directory entries the instance keeps in the
    /// listings it serves again without the host (`hostfs/listing.rs`; at most 65,536 of
    /// one directory): [`DEFAULT_LISTING_LIMIT`] by default, 0 for none.
    pub listing_limit: usize,
}

/// [`HostFsOptions::listing_limit`]'s default: about 10 MB of entries.
pub const DEFAULT_LISTING_LIMIT: usize = 1 << 18;

impl Default for HostFsOptions {
    /// Every cached name and attribute checked against the host before use; the
    /// descriptor bound from `RLIMIT_NOFILE`.
    fn default() -> Self {
        HostFsOptions {
            changes: HostChanges::Revalidate { max_age: std::time::Duration::ZERO },
            descriptor_limit: None,
            listing_limit: DEFAULT_LISTING_LIMIT,
        }
    }
}

/// The descriptor bound when none is given: a quarter of the soft `RLIMIT_NOFILE`, from 16
/// to 65,536. The rest of the limit is left to what the bound does not cover: one host
/// descriptor per file open in uvfs, the embedding program's own (a FUSE server's
/// channels), and the short-lived ones of calls in progress. Past the working set a
/// larger cache buys little: a miss costs one `openat` and one `fstat`.
fn default_descriptor_limit() -> usize {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(u64::MAX);
    (soft / 4).clamp(16, 65_536) as usize
}

/// How many times a lookup tries when the name changes on the host between its `fstatat`
/// and the open of the directory it found.
const LOOKUP_ATTEMPTS: usize = 4;

/// Longest chain of closed ancestors a reopen climbs before it gives up (ESTALE): more
/// than any real tree, and a stop for a loop of stale names (see `HostDir::parent_fd`).
const MAX_REOPEN_DEPTH: usize = 1 << 16;

/// Most names of one file a reopen tries before it gives up (see `HostNode::open_by_name`).
const MAX_NAMES_TRIED: usize = 64;

/// The hostfs filesystem type.
pub struct HostFs {
    /// Immutable: the directory given, opened `O_DIRECTORY`; its descriptor is held for
    /// the instance's life.
    root: Arc<HostDir>,
    /// Immutable.
    opts: HostFsOptions,
    /// Immutable: the origin of the timestamps of checks (`Dentry::d_time`,
    /// `HostNode::checked`), in nanoseconds since it (0: never checked).
    epoch: std::time::Instant,
    /// Atomic: hostfs inodes alive (for tests: the bound on memory).
    live: Arc<AtomicUsize>,
    /// The instance's host descriptors (internally synchronized).
    cache: Arc<FileCache>,
    /// Host directory descriptions left at a listing's end, for the `readdir` that
    /// continues there.
    streams: EndStreams,
    /// Atomic: entries of the listings kept (`hostfs/listing.rs`), against its bound.
    listed: Arc<AtomicUsize>,
}

/// A host directory: its descriptor (closed by the cache when unused, reopened by name)
/// and where it is named. Shared by the directory's inode and its children's [`Loc`]s.
struct HostDir {
    /// Immutable: the host's (device, inode number), checked on every reopen.
    key: DevIno,
    /// Immutable: the descriptor's slot (`O_RDONLY | O_DIRECTORY`).
    fd: Arc<Slot>,
    /// Where it is named (`None`: the root, or removed). Leaf lock; changed by rename, and
    /// by a lookup that finds it under another name.
    loc: Mutex<Option<DirLoc>>,
    /// Its listing, kept under `HostChanges::Never` (`hostfs/listing.rs`; own leaf lock).
    listing: listing::DirListing,
}

/// Where a directory is named on the host. The parent is weak (a directory's parent does
/// not need it, and names that went stale on the host could otherwise make a loop of
/// strong references); while the directory is in use its dentry holds its parent's.
struct DirLoc {
    parent: Weak<HostDir>,
    /// The single name component.
    name: Box<[u8]>,
}

/// Host directory descriptions that a `readdir` read to the end of their directory, kept
/// for the call that continues from there. A listing takes several calls: the VFS reads
/// in batches and then once more to see the end, and FUSE's kernel asks again at the end
/// offset to complete its cached listing. Each opened the host directory, seeked to its
/// cursor and closed it again; continuing a kept description is one `getdents64`. Only
/// descriptions read to their end are kept: no entry read from one is left unreturned, so
/// continuing one reads what a description opened now and seeked to the same cookie would
/// (`getdents64` leaves the last entry's cookie and the position equal). Each is a slot of
/// the descriptor cache, so counted in its limit and closed by it like any other (the
/// next call then opens afresh); at most [`EndStreams::KEPT`] are kept.
#[derive(Default)]
struct EndStreams(Mutex<Vec<EndStream>>);

/// One kept description (see [`EndStreams`]).
struct EndStream {
    /// The directory (compared by address; the weak count keeps the address from being
    /// reused while the entry exists).
    dir: Weak<HostDir>,
    /// The cookie of the last entry read (the cursor the description continues from).
    at: u64,
    /// The description, `O_RDONLY | O_DIRECTORY`, positioned at the directory's end.
    slot: Arc<Slot>,
}

impl EndStream {
    /// Whether this is a description of `dir`.
    fn is_of(&self, dir: &Arc<HostDir>) -> bool {
        std::ptr::eq(self.dir.as_ptr(), Arc::as_ptr(dir))
    }
}

impl EndStreams {
    /// Descriptions kept at most.
    const KEPT: usize = 8;

    /// The description of `dir` left at cursor `at`, taken out.
    fn take(&self, dir: &Arc<HostDir>, at: u64) -> Option<Arc<Slot>> {
        let mut v = self.0.lock();
        let i = v.iter().position(|e| e.at == at && e.is_of(dir))?;
        Some(v.remove(i).slot)
    }

    /// Keeps `slot`, whose description `dir`'s listing read to its end at cursor `at`.
    /// Those of directories whose inodes are gone, and the oldest past `KEPT`, are closed.
    fn keep(&self, dir: &Arc<HostDir>, at: u64, slot: Arc<Slot>) {
        let closed: Vec<EndStream> = {
            let mut v = self.0.lock();
            v.push(EndStream { dir: Arc::downgrade(dir), at, slot });
            let mut closed: Vec<EndStream> = v.extract_if(.., |e| e.dir.strong_count() == 0).collect();
            if v.len() > Self::KEPT {
                closed.push(v.remove(0));
            }
            closed
        };
        // Closed outside the lock.
        drop(closed);
    }

    /// Closes the descriptions of `dir` (removed: nothing kept may hold it on the host).
    fn forget(&self, dir: &Arc<HostDir>) {
        let closed: Vec<EndStream> = self.0.lock().extract_if(.., |e| e.is_of(dir)).collect();
        drop(closed);
    }
}

/// A descriptor held for a call: a cached one, or one opened for the call.
enum Held {
    Host(HostFd),
    Path(OwnedFd),
}

impl AsFd for Held {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Held::Host(fd) => fd.as_fd(),
            Held::Path(fd) => fd.as_fd(),
        }
    }
}

/// Where a non-directory is named on the host.
struct Loc {
    /// The parent directory.
    parent: Arc<HostDir>,
    /// The single name component.
    name: Box<[u8]>,
}

impl Loc {
    fn is(&self, parent: &Arc<HostDir>, name: &[u8]) -> bool {
        Arc::ptr_eq(&self.parent, parent) && *self.name == *name
    }
}

/// The names of a non-directory hostfs knows, the one seen last first: each hard link
/// uvfs looked up, made or renamed to. A descriptor is reopened by the first that still
/// names the inode, so removing one name (the last one seen, say) leaves the file
/// reachable by another, as a kernel inode is by any of its dentries. Usually one entry.
#[derive(Default)]
struct Names(Vec<Loc>);

impl Names {
    /// The name seen last.
    fn first(&self) -> Option<(Arc<HostDir>, Box<[u8]>)> {
        self.0.first().map(|l| (l.parent.clone(), l.name.clone()))
    }

    /// `(parent, name)` names the inode (seen just now): it goes first.
    fn saw(&mut self, parent: &Arc<HostDir>, name: &[u8]) {
        match self.0.iter().position(|l| l.is(parent, name)) {
            Some(0) => {}
            Some(i) => self.0[..=i].rotate_right(1),
            None => self.0.insert(0, Loc { parent: parent.clone(), name: name.into() }),
        }
    }

    /// `(parent, name)` no longer names the inode.
    fn lost(&mut self, parent: &Arc<HostDir>, name: &[u8]) {
        self.0.retain(|l| !l.is(parent, name));
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `openat` with `O_NOATIME` where the host allows it (the owner, or `CAP_FOWNER`);
/// without it where the host refuses (EPERM). For what hostfs reads on its own account
/// (the listings it keeps) and for a caller whose read keeps the access time
/// (`FileSystem::read_keeping_atime`): uvfs decides those (`FileSystem::update_atime`).
fn no_atime_open<P: rustix::path::Arg + Copy>(
    dir: impl AsFd,
    name: P,
    flags: OFlags,
) -> std::result::Result<OwnedFd, rustix::io::Errno> {
    match rustix::fs::openat(&dir, name, flags | OFlags::NOATIME, Mode::empty()) {
        Err(rustix::io::Errno::PERM) => rustix::fs::openat(&dir, name, flags, Mode::empty()),
        r => r,
    }
}

/// The magic link that names what `fd` holds (`/proc/self/fd/N`), also a file with no
/// name left: for calls that take a path only, or a description of its own.
fn fd_link(fd: impl AsFd) -> String {
    format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd())
}

/// The host's `truncate(2)` of what `fd` holds, through its magic link: the host moves
/// the times by its own rule for `truncate(2)`, which `ftruncate`'s differ from. `false`
/// where the host refuses the path (permission, no `/proc`): the caller truncates the
/// descriptor instead.
fn truncate_by_path(fd: impl AsFd, size: u64) -> Result<bool> {
    let link = std::ffi::CString::new(fd_link(fd)).expect("a path of digits has no NUL");
    let len = i64::try_from(size).map_err(|_| Errno::EFBIG)?;
    // SAFETY: a NUL-terminated path; `truncate` reads nothing else.
    if unsafe { libc::truncate(link.as_ptr(), len) } == 0 {
        return Ok(true);
    }
    match rustix::io::Errno::from_io_error(&std::io::Error::last_os_error()).map(host) {
        Some(Errno::EACCES | Errno::EPERM | Errno::ENOENT | Errno::ENOTDIR) => Ok(false),
        Some(e) => Err(e),
        None => Err(Errno::EIO),
    }
}

/// Opens the directory `name` in `dir`, checked to be `key` (the name may have been
/// swapped since it was looked at: only the same directory will do).
fn open_dir(dir: &HostFd, name: &[u8], key: DevIno) -> Result<OwnedFd> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(host)?;
    if key_of(&rustix::fs::fstat(&fd).map_err(host)?) != key {
        return Err(Errno::ESTALE);
    }
    Ok(fd)
}

impl HostDir {
    /// The parent directory: ENOENT for the root or a removed directory, ESTALE if the
    /// parent is gone from memory.
    fn parent(&self) -> Result<Arc<HostDir>> {
        let loc = self.loc.lock();
        loc.as_ref().ok_or(Errno::ENOENT)?.parent.upgrade().ok_or(Errno::ESTALE)
    }

    /// The descriptor, reopened by name if the cache closed it.
    fn fd(&self) -> Result<HostFd> {
        if let Some(fd) = self.fd.get() {
            return Ok(fd);
        }
        let pfd = self.parent_fd()?;
        self.fd.get_or_open(|| self.open_in(&pfd))
    }

    /// Opens this directory by its name in its parent's descriptor `pfd`. A name that
    /// now names another inode is forgotten (see `HostNode::forget_name`).
    fn open_in(&self, pfd: &HostFd) -> Result<OwnedFd> {
        let name = self.loc.lock().as_ref().ok_or(Errno::ENOENT)?.name.clone();
        let r = open_dir(pfd, &name, self.key);
        if r.as_ref().is_err_and(|e| *e == Errno::ESTALE) {
            let mut loc = self.loc.lock();
            if loc.as_ref().is_some_and(|l| l.name == name) {
                *loc = None;
            }
        }
        r
    }

    /// The parent's descriptor, reopening the closed ancestors on the way from the
    /// nearest open one down (a loop, not a recursion: a deep tree does not use stack).
    /// Each step is one name in a checked descriptor, so a reopened directory is one
    /// reachable from the root by names now; a step whose name now names another inode
    /// is ESTALE.
    fn parent_fd(&self) -> Result<HostFd> {
        let parent = self.parent()?;
        if let Some(fd) = parent.fd.get() {
            return Ok(fd);
        }
        let mut closed = vec![parent];
        let mut fd = loop {
            if closed.len() > MAX_REOPEN_DEPTH {
                return Err(Errno::ESTALE);
            }
            let p = closed[closed.len() - 1].parent()?;
            if let Some(fd) = p.fd.get() {
                break fd;
            }
            closed.push(p);
        };
        for d in closed.iter().rev() {
            fd = d.fd.get_or_open(|| d.open_in(&fd))?;
        }
        Ok(fd)
    }

    /// Records where it is named now, if that changed.
    fn set_loc(&self, parent: &Arc<HostDir>, name: &[u8]) {
        let mut loc = self.loc.lock();
        if loc.as_ref().is_none_or(|l| !std::ptr::eq(l.parent.as_ptr(), Arc::as_ptr(parent)) || *l.name != *name) {
            *loc = Some(DirLoc { parent: Arc::downgrade(parent), name: name.into() });
        }
    }
}

/// Per-inode private data.
struct HostNode {
    /// Immutable: the host's (device, inode number), checked whenever a descriptor is
    /// opened by name.
    key: DevIno,
    /// Immutable: a directory's descriptor and name (`None` for anything else).
    dir: Option<Arc<HostDir>>,
    /// Where a non-directory is named (empty for directories and unnamed `O_TMPFILE`
    /// files). Leaf lock; changed by lookup, rename, link and unlink (the last three
    /// serialized by the VFS with the directory locks).
    names: Mutex<Names>,
    /// A regular file's I/O descriptor slot, made on first use (set once).
    io: OnceLock<Arc<Slot>>,
    /// Immutable: the superblock whose inode cache to tell when this inode is dropped
    /// (weak: the superblock owns the cache, the cache does not own inodes).
    sb: Weak<SuperBlock>,
    /// Immutable: the filesystem's count of live inodes.
    live: Arc<AtomicUsize>,
    /// Atomic: when the attributes were last read from the host (see `HostFs::epoch`);
    /// kept only under `HostChanges::Revalidate` with a `max_age`.
    checked: AtomicU64,
    /// Atomic: whether the host file is known to have no `security.capability` (bit 0;
    /// kept only under `HostChanges::Never`), and a count of that xattr's sets through uvfs
    /// (the other bits). The kernel asks for it before every chown and first write through
    /// a mount, and it is almost never there; see [`NoCaps`].
    no_caps: AtomicU64,
}

/// The memo of an absent `security.capability` in [`HostNode::no_caps`]. A host answer of
/// ENODATA sets the bit only if no set of that xattr began or ended since the question was
/// asked (the count moves at both ends of each set, clearing the bit), so an answer read
/// before a concurrent set cannot outlive it. A file uvfs just made has none. The host
/// removes the xattr by itself (a write or chown), which only makes the memo truer.
struct NoCaps;

impl NoCaps {
    const KNOWN: u64 = 1;

    /// Whether the file is known to have none, and the word to [`NoCaps::learned`] from.
    fn get(n: &HostNode) -> (bool, u64) {
        let w = n.no_caps.load(Ordering::Acquire);
        (w & Self::KNOWN != 0, w)
    }

    /// The host said ENODATA to a question asked when the word was `seen`.
    fn learned(n: &HostNode, seen: u64) {
        let _ = n.no_caps.compare_exchange(seen, seen | Self::KNOWN, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// A set of `security.capability` begins or ends.
    fn forget(n: &HostNode) {
        let _ = n.no_caps.fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| Some(w.wrapping_add(2) & !Self::KNOWN));
    }
}

impl HostNode {
    fn new(
        sb: &Arc<SuperBlock>,
        live: &Arc<AtomicUsize>,
        key: DevIno,
        dir: Option<Arc<HostDir>>,
        names: Names,
    ) -> HostNode {
        live.fetch_add(1, Ordering::Relaxed);
        HostNode {
            key,
            dir,
            names: Mutex::new(names),
            io: OnceLock::new(),
            sb: Arc::downgrade(sb),
            live: live.clone(),
            checked: AtomicU64::new(0),
            no_caps: AtomicU64::new(0),
        }
    }
}

impl HostNode {
    /// Opens a descriptor of this non-directory with `open` in a parent's descriptor and
    /// a name, by the names it is known by, the one seen last first. A name that is gone
    /// or now names another inode is forgotten, and the next one tried; when none is left,
    /// the call is ENOENT if the names were just gone, ESTALE if one named another inode
    /// (an open retries an ESTALE with a fresh walk, whose lookup finds the inode again;
    /// forgetting the names makes sure a walk that trusts its cache gets a final answer).
    fn open_by_name(&self, open: impl Fn(&HostFd, &[u8]) -> Result<OwnedFd>) -> Result<OwnedFd> {
        let mut tried = 0;
        let mut stale = false;
        // Bounded: each failed name is forgotten, but a lookup may add names meanwhile.
        while tried < MAX_NAMES_TRIED {
            let Some((parent, name)) = self.names.lock().first() else { break };
            tried += 1;
            let r = parent.fd().and_then(|pfd| {
                let fd = open(&pfd, &name)?;
                if key_of(&rustix::fs::fstat(&fd).map_err(host)?) != self.key {
                    return Err(Errno::ESTALE);
                }
                Ok(fd)
            });
            match r {
                Ok(fd) => return Ok(fd),
                Err(e @ (Errno::ENOENT | Errno::ESTALE)) => {
                    stale |= e == Errno::ESTALE;
                    self.names.lock().lost(&parent, &name);
                }
                Err(e) => return Err(e),
            }
        }
        Err(if stale || tried == 0 { Errno::ESTALE } else { Errno::ENOENT })
    }
}

impl Drop for HostNode {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
        // Linux's `remove_inode_hash` on the final iput; only queues (see `icache`).
        if let Some(sb) = self.sb.upgrade() {
            sb.icache().reap(self.key);
        }
    }
}

fn host(e: rustix::io::Errno) -> Errno {
    Errno::from_raw(e.raw_os_error())
}

/// Rejects what is not a single name component.
fn component(name: &[u8]) -> Result<&[u8]> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
        return Err(Errno::EINVAL);
    }
    Ok(name)
}

/// A host timestamp (`st_*time_nsec` is unsigned in rustix's raw-syscall backend, signed
/// in its libc one, which Miri builds use).
fn ts(sec: i64, nsec: impl TryInto<u32>) -> Timespec {
    Timespec { sec, nsec: nsec.try_into().unwrap_or(0) }
}

fn node(inode: &Inode) -> &HostNode {
    inode.private::<HostNode>().expect("hostfs inode without hostfs data")
}

fn key_of(st: &rustix::fs::Stat) -> DevIno {
    DevIno { dev: st.st_dev, ino: Ino(st.st_ino) }
}

/// Copies host attributes into the inode (only when they differ: a write of the same
/// values would still take the inode lock).
fn apply_stat(inode: &Inode, st: &rustix::fs::Stat) {
    if !stat_differs(inode, st) {
        return;
    }
    inode.update(|w| write_stat(w, st));
}

/// `inode`'s attribute generation at a moment when no change through uvfs is under way,
/// waiting for one that is: the VFS applies a change (a `chmod`) to the attributes and
/// then to the host, both under the inode lock, so while it holds the lock the host may
/// still show what the change replaced.
fn settled_generation(inode: &Inode) -> u32 {
    loop {
        // The generation first: a writer that updated it before this load holds the lock
        // until its host call is done, and the load below cannot miss that it does.
        let since = inode.attr_generation();
        if !inode.lock.is_locked() {
            return since;
        }
        drop(inode.lock.lock());
    }
}

/// Applies the host's `st` of `inode`, read after the inode's attribute generation was
/// `since` ([`settled_generation`]), unless a change through uvfs was made since: a
/// `chmod` or `chown` by another thread that `st` may predate, and would undo. False if
/// so: nothing applied, the caller reads the host again.
fn apply_stat_since(inode: &Inode, since: u32, st: &rustix::fs::Stat) -> bool {
    if !stat_differs(inode, st) {
        return true;
    }
    let _g = inode.lock.lock();
    if inode.attr_generation() != since {
        return false;
    }
    inode.update_locked(|w| write_stat(w, st));
    true
}

/// Reads `inode`'s attributes from the host with `stat` and applies them, again while a
/// change through uvfs overtakes the reading ([`apply_stat_since`]).
fn refresh_with(inode: &Inode, stat: impl Fn() -> Result<rustix::fs::Stat>) -> Result<()> {
    loop {
        let since = settled_generation(inode);
        if apply_stat_since(inode, since, &stat()?) {
            return Ok(());
        }
    }
}

/// Whether the host's `st` differs from what uvfs has of `inode`.
fn stat_differs(inode: &Inode, st: &rustix::fs::Stat) -> bool {
    let a = inode.attrs();
    !(a.mode == st.st_mode
        && a.uid == st.st_uid
        && a.gid == st.st_gid
        && a.nlink == st.st_nlink as u32
        && a.size == st.st_size as u64
        && a.blocks == st.st_blocks as u64
        && a.atime == ts(st.st_atime, st.st_atime_nsec)
        && a.mtime == ts(st.st_mtime, st.st_mtime_nsec)
        && a.ctime == ts(st.st_ctime, st.st_ctime_nsec))
}

/// Writes the host's `st` into the attributes (the caller holds the inode lock).
fn write_stat(w: &mut AttrWriter<'_>, st: &rustix::fs::Stat) {
    w.set_mode(st.st_mode);
    w.set_uid(st.st_uid);
    w.set_gid(st.st_gid);
    w.set_nlink(st.st_nlink as u32);
    w.set_size(st.st_size as u64);
    w.set_blocks(st.st_blocks as u64);
    w.set_atime(ts(st.st_atime, st.st_atime_nsec));
    w.set_mtime(ts(st.st_mtime, st.st_mtime_nsec));
    w.set_ctime(ts(st.st_ctime, st.st_ctime_nsec));
}

impl HostFs {
    /// A hostfs over the host directory `dir` (opened once, here; everything after is
    /// relative to that descriptor).
    pub fn new(dir: impl AsRef<Path>) -> Result<HostFs> {
        HostFs::with_options(dir, HostFsOptions::default())
    }

    /// As [`HostFs::new`], with options.
    pub fn with_options(dir: impl AsRef<Path>, opts: HostFsOptions) -> Result<HostFs> {
        let limit = match opts.descriptor_limit {
            Some(0) => return Err(Errno::EINVAL),
            Some(n) => n,
            None => default_descriptor_limit(),
        };
        let fd = rustix::fs::open(dir.as_ref(), OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(host)?;
        let key = key_of(&rustix::fs::fstat(&fd).map_err(host)?);
        let cache = FileCache::new(limit);
        let root =
            Arc::new(HostDir { key, fd: Slot::fixed(&cache, fd), loc: Mutex::new(None), listing: Default::default() });
        Ok(HostFs {
            root,
            opts,
            epoch: std::time::Instant::now(),
            live: Arc::default(),
            cache,
            streams: EndStreams::default(),
            listed: Arc::default(),
        })
    }

    /// A handle on the number of hostfs inodes alive (kept by tests after the filesystem
    /// is mounted).
    pub fn live_inodes(&self) -> Arc<AtomicUsize> {
        self.live.clone()
    }

    /// The bound on host descriptors kept open (see [`HostFsOptions::descriptor_limit`]).
    pub fn descriptor_limit(&self) -> usize {
        self.cache.limit()
    }

    /// `max_age` of `HostChanges::Revalidate` in nanoseconds (`None` under `Never`).
    fn max_age(&self) -> Option<u64> {
        match self.opts.changes {
            HostChanges::Never => None,
            HostChanges::Revalidate { max_age } => Some(max_age.as_nanos().min(u64::MAX as u128) as u64),
        }
    }

    /// Now, as a check timestamp (never 0).
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64 | 1
    }

    /// Whether a check made at `at` still stands (a `max_age` of 0: never).
    fn recent(&self, at: u64, max_age: u64) -> bool {
        max_age != 0 && at != 0 && self.now().saturating_sub(at) < max_age
    }

    /// Attributes just read from the host for `inode`, after its attribute generation was
    /// `since` if known ([`apply_stat_since`]; false: a change through uvfs overtook the
    /// reading, nothing applied). Under `Revalidate`, a change of ctime also drops the
    /// cached ACLs (they may have changed with it), and the check is timestamped for
    /// `max_age`.
    fn revalidated(&self, inode: &Inode, since: Option<u32>, st: &rustix::fs::Stat) -> bool {
        if self.max_age().is_some() && inode.attrs().ctime != ts(st.st_ctime, st.st_ctime_nsec) {
            inode.forget_cached_acls();
        }
        let applied = match since {
            Some(since) => apply_stat_since(inode, since, st),
            None => {
                apply_stat(inode, st);
                true
            }
        };
        if applied && self.max_age().is_some_and(|a| a != 0) {
            node(inode).checked.store(self.now(), Ordering::Relaxed);
        }
        applied
    }

    /// Reads `inode`'s attributes from the host and applies them as
    /// [`HostFs::revalidated`], again while a change through uvfs overtakes the reading.
    /// Without opening it: the descriptor it has, else its name (checked to be it). False
    /// if the host cannot show it any more (it keeps what it had).
    fn restat(&self, inode: &Inode) -> bool {
        loop {
            let since = settled_generation(inode);
            match Self::stat_quietly(inode) {
                Some(st) if !self.revalidated(inode, Some(since), &st) => continue,
                Some(_) => return true,
                None => return false,
            }
        }
    }

    fn dir(inode: &Inode) -> Result<&Arc<HostDir>> {
        node(inode).dir.as_ref().ok_or(Errno::ENOTDIR)
    }

    /// A directory's descriptor for the length of a call, reopened if it was closed.
    fn dir_fd(inode: &Inode) -> Result<HostFd> {
        Self::dir(inode)?.fd()
    }

    /// A directory whose entries a call is about to change on the host, and its
    /// descriptor, with the host shown a `stat` first if one was reported since its last
    /// change ([`HostFs::show_stat_to_host`]).
    fn dir_to_change(dir: &Inode) -> Result<(&Arc<HostDir>, HostFd)> {
        let d = Self::dir(dir)?;
        let dfd = d.fd()?;
        Self::show_stat_to_host(dir, &dfd);
        Ok((d, dfd))
    }

    /// A listing from its start, read from the host to the directory's end (also past
    /// what `out` takes, up to what `listing::DIR_MAX` keeps) and kept if nothing changed
    /// the directory meanwhile.
    fn readdir_whole(&self, hd: &Arc<HostDir>, out: &mut dyn FnMut(DirEntry) -> bool) -> Result<()> {
        let at = hd.listing.generation();
        let fd = Self::open_stream(hd)?;
        let mut whole = listing::Builder::new();
        let mut giving = true;
        let ended = list_host_dir(&fd, 0, &mut |e| {
            whole.push(&e);
            if giving {
                giving = out(e);
            }
            // On while `out` takes entries or the listing can still be kept.
            giving || !whole.over()
        })?;
        // (`None`: stopped early, or the directory is gone on the host.) A listing not kept
        // leaves its description at the end for the call that continues there, as below.
        if let Some(end) = ended
            && !hd.listing.keep(at, whole, &self.listed, self.opts.listing_limit)
        {
            self.keep_stream(hd, end, fd);
        }
        Ok(())
    }

    /// A new open description of `hd` to list it by (its own position, at its start).
    fn open_stream(hd: &HostDir) -> Result<OwnedFd> {
        let fd = no_atime_open(&hd.fd()?, c".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC).map_err(host)?;
        counters::bump(|c| c.host_dir_streams_opened += 1);
        Ok(fd)
    }

    /// Keeps `fd`, a description of `hd` read to its end at cookie `at`, for the listing
    /// call that continues there ([`EndStreams`]).
    fn keep_stream(&self, hd: &Arc<HostDir>, at: u64, fd: OwnedFd) {
        let slot = Slot::new(&self.cache);
        slot.fill(fd, true);
        self.streams.keep(hd, at, slot);
    }

    /// Makes (or finds in the inode cache) the inode for `st`, found as `name` in
    /// `parent` (whose descriptor is `pfd`). `io` is a descriptor of it already open
    /// (create).
    fn iget(
        &self,
        sb: &Arc<SuperBlock>,
        parent: &Arc<HostDir>,
        pfd: &HostFd,
        name: &[u8],
        st: &rustix::fs::Stat,
        made: Made,
    ) -> Result<Arc<Inode>> {
        let Made { io, acls } = made;
        let key = key_of(st);
        let ftype = FileType::from_mode(st.st_mode).ok_or(Errno::EIO)?;
        let mut io = io;
        let mut made_here = false;
        let inode = sb.icache().iget(
            key,
            &sb.rcu(),
            |i| i.file_type() == ftype,
            || {
                let dir = if ftype == FileType::Directory {
                    // Opened first: the name may change on the host from the lookup's
                    // fstatat on, and an ESTALE here makes the lookup start again.
                    let fd = open_dir(pfd, name, key)?;
                    let slot = Slot::new(&self.cache);
                    slot.fill(fd, true);
                    let loc = DirLoc { parent: Arc::downgrade(parent), name: name.into() };
                    Some(Arc::new(HostDir { key, fd: slot, loc: Mutex::new(Some(loc)), listing: Default::default() }))
                } else {
                    None
                };
                let mut names = Names::default();
                if ftype != FileType::Directory {
                    names.saw(parent, name);
                }
                let n = HostNode::new(sb, &self.live, key, dir, names);
                if let Some(fd) = io.take() {
                    self.io_slot(&n).fill(fd, true);
                }
                let mut new = Self::new_inode(st);
                if let Some([access, default]) = acls {
                    (new.acl, new.default_acl) = (access, default);
                }
                made_here = true;
                Ok(Inode::new(sb, new, Box::new(n)))
            },
        )?;
        // The freshest name (it may have several, or have been renamed on the host): a
        // closed descriptor is reopened by it.
        let n = node(&inode);
        match &n.dir {
            Some(d) => d.set_loc(parent, name),
            None => n.names.lock().saw(parent, name),
        }
        if let Some(fd) = io {
            self.io_slot(n).fill(fd, true);
        }
        // A cached inode whose attributes differ from the caller's `statat`, which may
        // predate a change through uvfs made since (see `apply_stat_since`), is read
        // again from a settled generation (by the name just recorded, if nothing else).
        if made_here || !stat_differs(&inode, st) || !self.restat(&inode) {
            self.revalidated(&inode, None, st);
        }
        Ok(inode)
    }

    fn new_inode(st: &rustix::fs::Stat) -> NewInode {
        NewInode {
            ino: Ino(st.st_ino),
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
            nlink: st.st_nlink as u32,
            size: st.st_size as u64,
            blocks: st.st_blocks as u64,
            rdev: st.st_rdev,
            times: [
                ts(st.st_atime, st.st_atime_nsec),
                ts(st.st_mtime, st.st_mtime_nsec),
                ts(st.st_ctime, st.st_ctime_nsec),
            ],
            acl: AclInit::NotCached,
            default_acl: AclInit::NotCached,
            link: None,
            btime: None,
        }
    }

    /// A regular file's I/O descriptor slot.
    fn io_slot<'a>(&self, n: &'a HostNode) -> &'a Arc<Slot> {
        n.io.get_or_init(|| Slot::new(&self.cache))
    }

    /// Reads at `off` from a host file until `buf` is full or the file ends.
    fn read_from(fd: &impl AsFd, off: u64, buf: &mut [u8]) -> Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match rustix::io::pread(fd, &mut buf[done..], off + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) if done == 0 => return Err(host(e)),
                Err(_) => break,
            }
        }
        Ok(done)
    }

    /// An `O_PATH` descriptor of a non-directory, checked to be this inode.
    fn path_fd(inode: &Inode) -> Result<OwnedFd> {
        node(inode).open_by_name(|pfd, name| {
            rustix::fs::openat(pfd, name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
                .map_err(host)
        })
    }

    /// Opens a regular file's I/O descriptor by its name, checked to be this inode.
    fn open_io(n: &HostNode) -> Result<OwnedFd> {
        let base = OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
        n.open_by_name(|pfd, name| {
            // Read-write when the host allows it; a read-only host file still reads.
            match rustix::fs::openat(pfd, name, base | OFlags::RDWR, Mode::empty()) {
                Err(
                    rustix::io::Errno::ACCESS
                    | rustix::io::Errno::ROFS
                    | rustix::io::Errno::TXTBSY
                    | rustix::io::Errno::PERM,
                ) => rustix::fs::openat(pfd, name, base | OFlags::RDONLY, Mode::empty()),
                r => r,
            }
            .map_err(host)
        })
    }

    /// The I/O descriptor of a regular file for the length of a call: the open one, or
    /// opened by name (and left to the cache).
    fn io(&self, inode: &Inode) -> Result<HostFd> {
        if inode.file_type() != FileType::Regular {
            return Err(Errno::EINVAL);
        }
        let n = node(inode);
        let slot = self.io_slot(n);
        match slot.get() {
            Some(fd) => Ok(fd),
            None => slot.get_or_open(|| Self::open_io(n)),
        }
    }

    /// The descriptor to read attributes and xattrs through: the directory's, the
    /// regular file's I/O one, or (other types) an `O_PATH` one.
    fn with_fd<R>(&self, inode: &Inode, f: impl FnOnce(BorrowedFd<'_>) -> Result<R>) -> Result<R> {
        let n = node(inode);
        let held = match (&n.dir, inode.file_type()) {
            (Some(d), _) => Held::Host(d.fd()?),
            (None, FileType::Regular) => Held::Host(self.io(inode)?),
            (None, _) => Held::Path(Self::path_fd(inode)?),
        };
        f(held.as_fd())
    }

    /// Before a change of `inode` on the host, through `fd` (its own descriptor, or its
    /// directory's for a change of names): if a `stat` reported its change time since its
    /// last change, the host is shown one too. A host with multigrain times (Linux 6.13+:
    /// ext4, xfs, btrfs, tmpfs) stamps a change with its coarse clock unless a `stat` of
    /// its own saw the time before, and uvfs answers `stat`s from its attributes: without
    /// this, two writes in one host tick with a `stat` between them showed the same time,
    /// which the host's own callers (and memfs's, `core/inode.rs`) never see. One `fstat`,
    /// and only after a `stat`.
    fn show_stat_to_host(inode: &Inode, fd: &impl AsFd) {
        if inode.ctime_reported() {
            let _ = rustix::fs::fstat(fd);
        }
    }

    /// Re-reads the inode's attributes from the host.
    fn refresh(&self, inode: &Inode) -> Result<()> {
        refresh_with(inode, || self.with_fd(inode, |fd| rustix::fs::statat(fd, "", AtFlags::EMPTY_PATH).map_err(host)))
    }

    /// The host's attributes of `inode` without opening it: through the descriptor it
    /// has open, else by its name (checked to be it). `None` if the host cannot show it
    /// any more.
    fn stat_quietly(inode: &Inode) -> Option<rustix::fs::Stat> {
        let n = node(inode);
        if let Some(d) = &n.dir {
            if let Some(fd) = d.fd.get() {
                return rustix::fs::fstat(&fd).ok();
            }
            let pfd = d.parent_fd().ok()?;
            let name = d.loc.lock().as_ref()?.name.clone();
            return rustix::fs::statat(&pfd, &*name, AtFlags::SYMLINK_NOFOLLOW).ok().filter(|st| key_of(st) == n.key);
        }
        if let Some(fd) = n.io.get().and_then(|s| s.get()) {
            return rustix::fs::fstat(&fd).ok();
        }
        let (parent, name) = n.names.lock().first()?;
        let pfd = parent.fd().ok()?;
        rustix::fs::statat(&pfd, &*name, AtFlags::SYMLINK_NOFOLLOW).ok().filter(|st| key_of(st) == n.key)
    }

    /// Where to send xattr calls: the descriptor of a directory or regular file; for
    /// other types (an `O_PATH` descriptor, which the xattr calls refuse) the magic link of
    /// a checked `O_PATH` descriptor, as for chmod (see the module docs).
    fn xattr_target(&self, inode: &Inode) -> Result<XTarget> {
        let n = node(inode);
        match &n.dir {
            Some(d) => Ok(XTarget::Fd(d.fd()?)),
            None if inode.file_type() == FileType::Regular => Ok(XTarget::Fd(self.io(inode)?)),
            None => {
                let fd = Self::path_fd(inode)?;
                let link = fd_link(&fd);
                Ok(XTarget::Link(fd, link))
            }
        }
    }

    /// After an unlink/rmdir/rename-over took a name of `inode`: new link count from the
    /// host if it can still be reached, and out of the inode cache once it has no name
    /// (the host may reuse its number). A file with no name left keeps its host
    /// descriptor only while uvfs has it open (Linux keeps an unlinked file's data for
    /// its open files only).
    fn lost_name(inode: &Inode, parent: &Arc<HostDir>, name: &[u8]) {
        let n = node(inode);
        if n.dir.is_none() {
            n.names.lock().lost(parent, name);
        }
        let io = n.io.get();
        let refreshed = match (&n.dir, io.and_then(|s| s.get())) {
            (None, Some(fd)) => refresh_with(inode, || rustix::fs::fstat(&fd).map_err(host)).is_ok(),
            _ => false,
        };
        if !refreshed {
            let now = crate::core::inode::current_time();
            let drop_by = if inode.is_dir() { inode.nlink() } else { 1 };
            inode.update(|w| {
                w.set_nlink(w.get().nlink.saturating_sub(drop_by));
                w.stamp_ctime(now);
            });
        }
        if inode.nlink() == 0 {
            inode.sb().icache().remove(n.key, inode, &inode.sb().rcu());
            match &n.dir {
                // A removed directory holds no data: its descriptor is left to the cache,
                // and calls in it get the host's answers for a removed directory (a
                // task's working directory may be one) until it is closed.
                Some(d) => *d.loc.lock() = None,
                None => {
                    *n.names.lock() = Names::default();
                    if let Some(s) = io {
                        s.close_unless_pinned();
                    }
                }
            }
        }
    }
}

impl FileSystem for HostFs {
    fn fs_type(&self) -> &'static str {
        "hostfs"
    }

    fn dcache_complete(&self) -> bool {
        false
    }

    fn revalidates(&self) -> bool {
        self.max_age().is_some()
    }

    fn d_revalidate(&self, dir: &Inode, name: &[u8], dentry: &crate::core::dentry::Dentry) -> Result<bool> {
        let Some(max_age) = self.max_age() else { return Ok(true) };
        if self.recent(dentry.d_time().load(Ordering::Relaxed), max_age) {
            return Ok(true);
        }
        // (Before the host is asked: see `apply_stat_since`.)
        let since = dentry.inode().map_or(0, |i| settled_generation(i));
        // A directory that cannot be reopened (removed, or its name now another's) has
        // no names, as a removed directory's descriptor answers.
        let st = match Self::dir_fd(dir) {
            Ok(dfd) => rustix::fs::statat(&dfd, name, AtFlags::SYMLINK_NOFOLLOW),
            Err(Errno::ENOENT | Errno::ESTALE) => Err(rustix::io::Errno::NOENT),
            Err(e) => return Err(e),
        };
        let valid = match st {
            // Also the answer in a directory removed on the host.
            Err(rustix::io::Errno::NOENT) => dentry.inode().is_none(),
            Err(e) => return Err(host(e)),
            Ok(st) => match dentry.inode() {
                None => false,
                Some(inode) => {
                    let n = node(inode);
                    let same = key_of(&st) == n.key && FileType::from_mode(st.st_mode) == Some(inode.file_type());
                    // (Its `names` are not touched: a name that moved on the host fails this
                    // check under its old name, and the lookup under the new one updates
                    // it; a lock here would cost every cached walk.)
                    if same && !self.revalidated(inode, Some(since), &st) {
                        // A change through uvfs overtook the `statat`: read again.
                        self.restat(inode);
                    }
                    same
                }
            },
        };
        if valid && max_age != 0 {
            dentry.d_time().store(self.now(), Ordering::Relaxed);
        }
        Ok(valid)
    }

    fn open(&self, inode: &Inode, _flags: crate::abi::flags::OpenFlags) -> Result<()> {
        // The host file is opened with the first uvfs open of it (not at lookup: a cold
        // scan that only stats holds no descriptor), and its descriptor is pinned until
        // `release`: the cache does not close it, so the open file keeps its data
        // whatever happens to its name. A directory's is pinned too (an open directory
        // lists what is there even if it moved on the host).
        let n = node(inode);
        match (&n.dir, inode.file_type()) {
            (Some(d), _) => d.fd.pin(|| d.open_in(&d.parent_fd()?)),
            (None, FileType::Regular) => self.io_slot(n).pin(|| Self::open_io(n)),
            _ => Ok(()),
        }
    }

    fn release(&self, inode: &Inode) {
        let n = node(inode);
        match (&n.dir, inode.file_type()) {
            // A directory's descriptor goes back to the cache (a removed one's too: it
            // holds no data; see `lost_name`).
            (Some(d), _) => d.fd.unpin(|_| true),
            // A file's too, unless the file was removed (through uvfs: it has no name; on
            // the host: no links): nothing could reopen it, and only open files may keep
            // a removed file's data.
            (None, FileType::Regular) => {
                if let Some(s) = n.io.get() {
                    // Where nothing changes the host behind uvfs's back, a file with a name
                    // in uvfs has its links: no `fstat` per close to ask.
                    let trusted = self.max_age().is_none();
                    let linked = |fd: &OwnedFd| trusted || rustix::fs::fstat(fd).is_ok_and(|st| st.st_nlink > 0);
                    s.unpin(|fd| !n.names.lock().is_empty() && linked(fd));
                }
            }
            _ => {}
        }
    }

    fn with_host_fd(&self, inode: &Inode, f: &mut dyn FnMut(BorrowedFd<'_>) -> Result<()>) -> Result<()> {
        // The I/O descriptor an open pins (read-write where the host allows it).
        let fd = self.io(inode)?;
        f(fd.as_fd())
    }

    fn host_changed(&self, inode: &Inode) {
        // Best effort: a host file that cannot be read keeps what uvfs had. (A `chown` by
        // another request meanwhile is not undone: see `apply_stat_since`.)
        let _ = self.refresh(inode);
    }

    fn d_init(&self, dentry: &crate::core::dentry::Dentry) {
        // What a lookup or create just found counts as a check.
        if self.max_age().is_some_and(|a| a != 0) {
            dentry.d_time().store(self.now(), Ordering::Relaxed);
        }
    }

    fn getattr(&self, inode: &Inode) -> Result<()> {
        let Some(max_age) = self.max_age() else { return Ok(()) };
        let n = node(inode);
        if self.recent(n.checked.load(Ordering::Relaxed), max_age) {
            return Ok(());
        }
        self.restat(inode);
        Ok(())
    }

    fn root_inode(&self, sb: &Arc<SuperBlock>) -> Result<Arc<Inode>> {
        let st = rustix::fs::fstat(&self.root.fd()?).map_err(host)?;
        let key = key_of(&st);
        let root = self.root.clone();
        sb.icache().iget(
            key,
            &sb.rcu(),
            |_| true,
            || {
                let n = HostNode::new(sb, &self.live, key, Some(root), Names::default());
                Ok(Inode::new(sb, Self::new_inode(&st), Box::new(n)))
            },
        )
    }

    fn statfs(&self, _sb: &SuperBlock) -> StatFs {
        match self.root.fd().and_then(|fd| rustix::fs::fstatfs(&fd).map_err(host)) {
            Ok(s) => StatFs {
                fs_type: s.f_type as u64,
                bsize: s.f_bsize as u64,
                blocks: s.f_blocks,
                bfree: s.f_bfree,
                bavail: s.f_bavail,
                files: s.f_files,
                ffree: s.f_ffree,
                namelen: s.f_namelen as u64,
                ..StatFs::default()
            },
            Err(_) => StatFs { bsize: 4096, namelen: 255, ..StatFs::default() },
        }
    }

    fn lookup(&self, sb: &Arc<SuperBlock>, dir: &Inode, name: &[u8]) -> Result<Option<Arc<Inode>>> {
        let name = component(name)?;
        let d = Self::dir(dir)?;
        let dfd = match d.fd() {
            Ok(fd) => fd,
            // Removed (by uvfs, or on the host with its descriptor closed since): no
            // names, as a removed directory's descriptor answers.
            Err(Errno::ENOENT) => return Ok(None),
            Err(e) => return Err(e),
        };
        // A directory swapped between the fstatat and its open is looked up again, a few
        // times (a host that renames without pause can hit the window more than once);
        // then ESTALE.
        for attempt in 0..LOOKUP_ATTEMPTS {
            let st = match rustix::fs::statat(&dfd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => return Ok(None),
                Err(e) => return Err(host(e)),
            };
            match self.iget(sb, d, &dfd, name, &st, Made::default()) {
                Err(Errno::ESTALE | Errno::ELOOP | Errno::ENOTDIR | Errno::ENOENT) if attempt + 1 < LOOKUP_ATTEMPTS => {
                    continue;
                }
                r => return r.map(Some),
            }
        }
        Err(Errno::ESTALE)
    }

    fn create(&self, sb: &Arc<SuperBlock>, dir: &Inode, name: &[u8], args: &CreateArgs<'_>) -> Result<Arc<Inode>> {
        let name = component(name)?;
        let (d, dfd) = Self::dir_to_change(dir)?;
        let ftype = FileType::from_mode(args.mode).ok_or(Errno::EINVAL)?;
        let perm = Mode::from_raw_mode(args.mode & 0o7777);
        let mut io = None;
        match ftype {
            FileType::Regular => {
                let fd = rustix::fs::openat(
                    &dfd,
                    name,
                    OFlags::CREATE | OFlags::EXCL | OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    perm,
                )
                .map_err(host)?;
                io = Some(fd);
            }
            FileType::Directory => rustix::fs::mkdirat(&dfd, name, perm).map_err(host)?,
            FileType::Symlink => rustix::fs::symlinkat(args.target.unwrap_or_default(), &dfd, name).map_err(host)?,
            _ => rustix::fs::mknodat(&dfd, name, rustix::fs::FileType::from_raw_mode(args.mode), perm, args.rdev)
                .map_err(host)?,
        }
        d.listing.changed();
        let st = match &io {
            // The file just made, by its descriptor (no second walk of the name).
            Some(fd) => rustix::fs::fstat(fd),
            None => rustix::fs::statat(&dfd, name, AtFlags::SYMLINK_NOFOLLOW),
        }
        .map_err(host)?;
        // The node's ACLs are the ones set below, or none: known, so its first permission
        // check or chmod need not read them back. Only where nothing else changes the
        // host: there a directory's default ACL cannot change between the VFS reading
        // it and the host applying it to this create.
        let acls = (self.max_age().is_none() && ftype != FileType::Symlink)
            .then(|| [AclInit::Known(args.acl.clone()), AclInit::Known(args.default_acl.clone())]);
        let inode = self.iget(sb, d, &dfd, name, &st, Made { io, acls })?;
        if self.max_age().is_none() {
            // New: no file capability, and nothing else gives it one but uvfs.
            NoCaps::learned(node(&inode), 0);
        }
        // Owner, ACLs, then the mode the VFS decided (after chown, which may clear
        // set-id bits, and after the ACLs, whose mask follows the group bits). Each only
        // if the host did not make it so already (a create by the owner it is for, with
        // no umask in the way, as root's untar makes): such a create makes half the
        // system calls it did.
        let mut changed = false;
        if (st.st_uid, st.st_gid) != (args.uid, args.gid) {
            self.with_fd(&inode, |fd| {
                rustix::fs::chownat(
                    fd,
                    "",
                    Some(rustix::fs::Uid::from_raw(args.uid)),
                    Some(rustix::fs::Gid::from_raw(args.gid)),
                    AtFlags::EMPTY_PATH,
                )
                .map_err(host)
            })?;
            changed = true;
        }
        if ftype != FileType::Symlink {
            for (ty, acl) in [(AclType::Access, &args.acl), (AclType::Default, &args.default_acl)] {
                if let Some(acl) = acl {
                    self.xattr_target(&inode)?.set(ty.xattr_name(), &acl.to_xattr_vec(), 0)?;
                    changed = true;
                }
            }
            if changed || st.st_mode & 0o7777 != args.mode & 0o7777 {
                self.chmod(&inode, args.mode & 0o7777)?;
                changed = true;
            }
        }
        // Unchanged since the `statat`, whose attributes `iget` applied.
        if changed {
            self.refresh(&inode)?;
        }
        self.refresh(dir)?;
        Ok(inode)
    }

    fn tmpfile(&self, sb: &Arc<SuperBlock>, dir: &Inode, args: &CreateArgs<'_>) -> Result<Arc<Inode>> {
        let dfd = Self::dir_fd(dir)?;
        let fd = rustix::fs::openat(
            &dfd,
            ".",
            OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
            Mode::from_raw_mode(args.mode & 0o7777),
        )
        .map_err(host)?;
        let st = rustix::fs::fstat(&fd).map_err(host)?;
        rustix::fs::fchown(&fd, Some(rustix::fs::Uid::from_raw(args.uid)), Some(rustix::fs::Gid::from_raw(args.gid)))
            .map_err(host)?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(args.mode & 0o7777)).map_err(host)?;
        let key = key_of(&st);
        let n = HostNode::new(sb, &self.live, key, None, Names::default());
        // Not queued: nothing could reopen an unnamed file. The open that follows pins it;
        // its release closes it, or leaves it to the cache once it has a name (linkat).
        self.io_slot(&n).fill(fd, false);
        // Not in the inode cache: it has no name to be found by until linked.
        let inode = Inode::new(sb, Self::new_inode(&st), Box::new(n));
        self.refresh(&inode)?;
        Ok(inode)
    }

    fn link(&self, dir: &Inode, name: &[u8], inode: &Arc<Inode>) -> Result<()> {
        let name = component(name)?;
        let (d, dfd) = Self::dir_to_change(dir)?;
        let n = node(inode);
        // By descriptor (AT_EMPTY_PATH), so the file linked is this inode even if its old
        // name changed on the host, and an unnamed O_TMPFILE file (whose descriptor is
        // pinned by its open) can be linked.
        let src = match n.io.get().and_then(|s| s.get()) {
            Some(io) => Held::Host(io),
            None => Held::Path(Self::path_fd(inode)?),
        };
        rustix::fs::linkat(&src, "", &dfd, name, AtFlags::EMPTY_PATH).map_err(host)?;
        d.listing.changed();
        n.names.lock().saw(d, name);
        let sb = inode.sb();
        if sb.icache().iget(n.key, &sb.rcu(), |_| true, || Ok(inode.clone())).is_err() {
            return Err(Errno::EIO);
        }
        self.refresh(inode)?;
        self.refresh(dir)
    }

    fn unlink(&self, dir: &Inode, name: &[u8], inode: &Inode) -> Result<()> {
        let name = component(name)?;
        let (d, dfd) = Self::dir_to_change(dir)?;
        // (A file open in uvfs has its descriptor pinned: it stays readable after its
        // last name goes.)
        rustix::fs::unlinkat(&dfd, name, AtFlags::empty()).map_err(host)?;
        d.listing.changed();
        Self::lost_name(inode, d, name);
        self.refresh(dir)
    }

    fn rmdir(&self, dir: &Inode, name: &[u8], inode: &Inode) -> Result<()> {
        let name = component(name)?;
        let (d, dfd) = Self::dir_to_change(dir)?;
        rustix::fs::unlinkat(&dfd, name, AtFlags::REMOVEDIR).map_err(host)?;
        d.listing.changed();
        if let Some(gone) = &node(inode).dir {
            self.streams.forget(gone);
            // The host lists it as empty from now on.
            gone.listing.changed();
        }
        Self::lost_name(inode, d, name);
        self.refresh(dir)
    }

    fn rename(&self, r: &RenameReq<'_>) -> Result<()> {
        let (old_name, new_name) = (component(r.old_name)?, component(r.new_name)?);
        let (od, nd) = (Self::dir(r.old_dir)?, Self::dir(r.new_dir)?);
        let (ofd, nfd) = (od.fd()?, nd.fd()?);
        Self::show_stat_to_host(r.old_dir, &ofd);
        if !std::ptr::eq(r.old_dir, r.new_dir) {
            Self::show_stat_to_host(r.new_dir, &nfd);
        }
        let exchange = r.flags.contains(crate::abi::flags::RenameFlags::EXCHANGE);
        rustix::fs::renameat_with(
            &ofd,
            old_name,
            &nfd,
            new_name,
            rustix::fs::RenameFlags::from_bits_retain(r.flags.bits()),
        )
        .map_err(host)?;
        od.listing.changed();
        nd.listing.changed();
        if let Some((uid, gid)) = r.whiteout_owner {
            // The host made the whiteout as uvfs's user: it is the caller's.
            let (uid, gid) = (rustix::fs::Uid::from_raw(uid), rustix::fs::Gid::from_raw(gid));
            let _ = rustix::fs::chownat(&ofd, old_name, Some(uid), Some(gid), AtFlags::SYMLINK_NOFOLLOW);
        }
        // The new names, which a closed descriptor is reopened by.
        let moved = |inode: &Inode, from: (&Arc<HostDir>, &[u8]), to: (&Arc<HostDir>, &[u8])| match &node(inode).dir {
            Some(d) => d.set_loc(to.0, to.1),
            None => {
                let mut names = node(inode).names.lock();
                names.lost(from.0, from.1);
                names.saw(to.0, to.1);
            }
        };
        moved(r.inode, (od, old_name), (nd, new_name));
        if let Some(t) = r.target {
            if exchange {
                moved(t, (nd, new_name), (od, old_name));
                let _ = self.refresh(t);
            } else {
                if let Some(gone) = &node(t).dir {
                    self.streams.forget(gone);
                    gone.listing.changed();
                }
                Self::lost_name(t, nd, new_name);
            }
        }
        let _ = self.refresh(r.inode);
        self.refresh(r.old_dir)?;
        self.refresh(r.new_dir)
    }

    fn readlink(&self, inode: &Inode) -> Result<Vec<u8>> {
        if inode.file_type() != FileType::Symlink {
            return Err(Errno::EINVAL);
        }
        let fd = Self::path_fd(inode)?;
        let body = rustix::fs::readlinkat(&fd, "", Vec::new()).map_err(host)?;
        Ok(body.into_bytes())
    }

    fn setattr(&self, inode: &Inode, attr: &SetAttr) -> Result<()> {
        if attr.uid.is_some() || attr.gid.is_some() {
            self.with_fd(inode, |fd| {
                rustix::fs::chownat(
                    fd,
                    "",
                    attr.uid.map(rustix::fs::Uid::from_raw),
                    attr.gid.map(rustix::fs::Gid::from_raw),
                    AtFlags::EMPTY_PATH,
                )
                .map_err(host)
            })?;
        }
        if let Some(mode) = attr.mode
            && inode.file_type() != FileType::Symlink
        {
            self.chmod(inode, mode & 0o7777)?;
        }
        if attr.atime.is_some() || attr.mtime.is_some() {
            let t = |t: Option<Timespec>| match t {
                Some(t) => rustix::fs::Timespec { tv_sec: t.sec, tv_nsec: t.nsec as _ },
                None => rustix::fs::Timespec { tv_sec: 0, tv_nsec: rustix::fs::UTIME_OMIT },
            };
            let times = rustix::fs::Timestamps { last_access: t(attr.atime), last_modification: t(attr.mtime) };
            let n = node(inode);
            match (&n.dir, inode.file_type()) {
                (Some(d), _) => rustix::fs::futimens(&d.fd()?, &times).map_err(host)?,
                (None, FileType::Regular) => rustix::fs::futimens(&self.io(inode)?, &times).map_err(host)?,
                _ => {
                    let (parent, name) = n.names.lock().first().ok_or(Errno::ESTALE)?;
                    rustix::fs::utimensat(&parent.fd()?, &*name, &times, AtFlags::SYMLINK_NOFOLLOW).map_err(host)?;
                }
            }
        }
        // No refresh: the VFS has applied the same values, and may hold the inode lock
        // (chmod does), which the refresh would take again.
        Ok(())
    }

    fn update_atime(&self, inode: &Inode, _atime: Timespec) {
        // The host's copy moves by an access of the host object, which the host's own
        // access-time rules judge on the same times (a set time, `utimensat`, would move
        // its change time too): hostfs serves listings and links from its caches, and
        // lists with `O_NOATIME`.
        let n = node(inode);
        let _ = match (&n.dir, inode.file_type()) {
            (Some(d), _) => d.fd().and_then(|fd| {
                let dir =
                    rustix::fs::openat(&fd, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
                        .map_err(host)?;
                // One `getdents64` (a listing's first entries) is the host's access.
                let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 64];
                let _ = rustix::fs::RawDir::new(&dir, &mut buf).next();
                Ok(())
            }),
            // A regular file's moved at the read itself: hostfs reads it from the host
            // (a read of nothing too, see `read`), whose rules are the same.
            (None, FileType::Regular) => Ok(()),
            (None, FileType::Symlink) => {
                Self::path_fd(inode).and_then(|fd| rustix::fs::readlinkat(&fd, "", Vec::new()).map(drop).map_err(host))
            }
            _ => Ok(()),
        };
    }

    fn truncate(&self, inode: &Inode, size: u64, by: TruncateBy) -> Result<()> {
        let fd = self.io(inode)?;
        Self::show_stat_to_host(inode, &fd);
        let by_path = by == TruncateBy::Path && truncate_by_path(&fd, size)?;
        if !by_path {
            rustix::fs::ftruncate(&fd, size).map_err(host)?;
        }
        self.refresh(inode)
    }

    fn read(&self, inode: &Inode, off: u64, buf: &mut [u8]) -> Result<usize> {
        let fd = self.io(inode)?;
        if buf.is_empty() {
            // A read of nothing is an access (tmpfs's); an ext4 host skips the access
            // time of one, so the host is asked for a byte.
            let _ = rustix::io::pread(&fd, &mut [0u8; 1], off);
            return Ok(0);
        }
        Self::read_from(&fd, off, buf)
    }

    fn read_keeping_atime(&self, inode: &Inode, off: u64, buf: &mut [u8]) -> Result<usize> {
        if inode.file_type() != FileType::Regular {
            return Err(Errno::EINVAL);
        }
        // A description of its own, opened through the cached one's `/proc` link (so
        // also for a file with no name left, open in uvfs): the cached one moves the
        // host's access time. Where the host refuses, through the cached one.
        let io = self.io(inode)?;
        match no_atime_open(rustix::fs::CWD, fd_link(&io).as_str(), OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK)
        {
            Ok(fd) => Self::read_from(&fd, off, buf),
            Err(_) => Self::read_from(&io, off, buf),
        }
    }

    fn write(&self, inode: &Inode, at: WriteAt, buf: &[u8]) -> Result<(u64, usize)> {
        let fd = self.io(inode)?;
        Self::show_stat_to_host(inode, &fd);
        let (off, len) = at.resolve(inode.size(), buf.len())?;
        let buf = &buf[..len];
        if at.is_append() {
            // The host places the data at its end of file atomically (`RWF_APPEND`),
            // whoever else appends, in uvfs or on the host; one call, as the host's own
            // O_APPEND write would be.
            let n = loop {
                match rustix::io::pwritev2(&fd, &[std::io::IoSlice::new(buf)], 0, rustix::io::ReadWriteFlags::APPEND) {
                    Err(rustix::io::Errno::INTR) => continue,
                    r => break r.map_err(host)?,
                }
            };
            self.refresh(inode)?;
            return Ok((inode.size().saturating_sub(n as u64), n));
        }
        let mut done = 0;
        while done < buf.len() {
            match rustix::io::pwrite(&fd, &buf[done..], off + done as u64) {
                Ok(n) => done += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) if done == 0 => return Err(host(e)),
                Err(_) => break,
            }
        }
        self.refresh(inode)?;
        Ok((off, done))
    }

    fn readdir(&self, dir: &Inode, cursor: u64, out: &mut dyn FnMut(DirEntry) -> bool) -> Result<()> {
        let hd = Self::dir(dir)?;
        // Where nothing changes the host behind uvfs's back, a listing read whole is kept
        // (`hostfs/listing.rs`) and served again.
        if self.max_age().is_none() {
            if let Some(l) = hd.listing.get()
                && l.serve(cursor, out)
            {
                return Ok(());
            }
            if cursor == 0 {
                return self.readdir_whole(hd, out);
            }
        }
        // The cursor is the host's `d_off` cookie of the last entry given. A description
        // kept at the directory's end there continues (unless the cache closed it).
        if let Some(slot) = self.streams.take(hd, cursor)
            && let Some(fd) = slot.get()
        {
            if let Some(at) = list_host_dir(&fd, cursor, out)? {
                drop(fd);
                self.streams.keep(hd, at, slot);
            }
            return Ok(());
        }
        // Else a fresh open description (its own position), seeked to the cookie.
        let fd = Self::open_stream(hd)?;
        if cursor != 0 {
            rustix::fs::seek(&fd, rustix::fs::SeekFrom::Start(cursor)).map_err(host)?;
        }
        if let Some(at) = list_host_dir(&fd, cursor, out)? {
            self.keep_stream(hd, at, fd);
        }
        Ok(())
    }

    fn fallocate(&self, inode: &Inode, mode: crate::abi::flags::FallocFlags, off: u64, len: u64) -> Result<()> {
        // The host filesystem decides what it supports (its EOPNOTSUPP passes through).
        let mode = rustix::fs::FallocateFlags::from_bits_retain(mode.bits());
        let fd = self.io(inode)?;
        Self::show_stat_to_host(inode, &fd);
        rustix::fs::fallocate(&fd, mode, off, len).map_err(host)?;
        self.refresh(inode)
    }

    fn seek_hole_data(&self, inode: &Inode, off: u64, hole: bool) -> Result<u64> {
        let how = if hole { rustix::fs::SeekFrom::Hole(off) } else { rustix::fs::SeekFrom::Data(off) };
        // A descriptor of its own would do; the pinned I/O one has no position anyone
        // else relies on (every read and write is positioned).
        rustix::fs::seek(&self.io(inode)?, how).map_err(host)
    }

    fn copy_range(&self, src: &Inode, src_off: u64, dst: &Inode, dst_off: u64, len: u64) -> Result<u64> {
        let (from, to) = (self.io(src)?, self.io(dst)?);
        let (mut a, mut b) = (src_off, dst_off);
        let n = loop {
            match rustix::fs::copy_file_range(&from, Some(&mut a), &to, Some(&mut b), len as usize) {
                Err(rustix::io::Errno::INTR) => continue,
                // Across host filesystems, or not offered: uvfs copies through a buffer.
                Err(rustix::io::Errno::XDEV | rustix::io::Errno::NOSYS | rustix::io::Errno::OPNOTSUPP) => {
                    return Err(Errno::EOPNOTSUPP);
                }
                r => break r.map_err(host)?,
            }
        };
        self.refresh(dst)?;
        Ok(n as u64)
    }

    fn statx_attributes(&self, inode: &Inode) -> (StatxAttrs, StatxAttrs) {
        // The host file's own (its file flags); whether it is a mount root is uvfs's.
        let st = self.with_fd(inode, |fd| {
            rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, rustix::fs::StatxFlags::empty()).map_err(host)
        });
        let Ok(st) = st else { return (StatxAttrs::empty(), StatxAttrs::empty()) };
        let own = !(StatxAttrs::MOUNT_ROOT).bits();
        (
            StatxAttrs::from_bits_retain(st.stx_attributes.bits() & own),
            StatxAttrs::from_bits_retain(st.stx_attributes_mask.bits() & own),
        )
    }

    fn btime(&self, inode: &Inode) -> Option<Timespec> {
        let st = self
            .with_fd(inode, |fd| {
                rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, rustix::fs::StatxFlags::BTIME).map_err(host)
            })
            .ok()?;
        (st.stx_mask & rustix::fs::StatxFlags::BTIME.bits() != 0)
            .then_some(Timespec { sec: st.stx_btime.tv_sec, nsec: st.stx_btime.tv_nsec })
    }

    fn fsync(&self, inode: &Inode) -> Result<()> {
        self.with_fd(inode, |fd| rustix::fs::fsync(fd).map_err(host))
    }

    fn posix_acl(&self) -> bool {
        true
    }

    fn get_acl(&self, inode: &Inode, ty: AclType) -> Result<Option<Arc<Acl>>> {
        match self.xattr_target(inode)?.get_value(ty.xattr_name(), |v| Ok(Acl::from_xattr(v)?.map(Arc::new))) {
            Err(Errno::ENODATA | Errno::EOPNOTSUPP) => Ok(None),
            r => r,
        }
    }

    fn set_acl(&self, inode: &Inode, ty: AclType, acl: Option<&Arc<Acl>>) -> Result<()> {
        let t = self.xattr_target(inode)?;
        match acl {
            Some(a) => t.set(ty.xattr_name(), &a.to_xattr_vec(), 0),
            None => match t.remove(ty.xattr_name()) {
                Ok(()) | Err(Errno::ENODATA) => Ok(()),
                Err(e) => Err(e),
            },
        }
    }

    fn getxattr(&self, inode: &Inode, name: &[u8], buf: &mut [u8]) -> Result<usize> {
        let caps = name == XATTR_NAME_CAPS && self.max_age().is_none();
        let (known, seen) = if caps { NoCaps::get(node(inode)) } else { (false, 0) };
        if known {
            return Err(Errno::ENODATA);
        }
        let t = self.xattr_target(inode)?;
        let r = if buf.is_empty() { t.size(name) } else { t.get(name, buf) };
        if caps && r == Err(Errno::ENODATA) {
            NoCaps::learned(node(inode), seen);
        }
        r
    }

    fn setxattr(&self, inode: &Inode, name: &[u8], value: &[u8], flags: XattrFlags) -> Result<()> {
        // Called with the inode lock held: no refresh (only the host's ctime moved).
        let t = self.xattr_target(inode)?;
        if name != XATTR_NAME_CAPS {
            return t.set(name, value, flags.bits());
        }
        let n = node(inode);
        NoCaps::forget(n);
        let r = t.set(name, value, flags.bits());
        NoCaps::forget(n);
        r
    }

    fn removexattr(&self, inode: &Inode, name: &[u8]) -> Result<()> {
        // As setxattr: no refresh under the inode lock.
        self.xattr_target(inode)?.remove(name)
    }

    fn listxattr(&self, inode: &Inode, out: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        self.xattr_target(inode)?.list(|names| {
            for name in names.split(|&b| b == 0).filter(|s| !s.is_empty()) {
                // The VFS lists the ACLs from their slots.
                if AclType::from_xattr_name(name).is_some() {
                    continue;
                }
                out(name)?;
            }
            Ok(())
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl HostFs {
    /// chmod on the host: by descriptor for directories and regular files; device nodes,
    /// fifos and sockets (no descriptor to `fchmod`) through the magic link of a checked
    /// `O_PATH` descriptor (see the module docs).
    fn chmod(&self, inode: &Inode, mode: u32) -> Result<()> {
        let m = Mode::from_raw_mode(mode);
        let n = node(inode);
        match (&n.dir, inode.file_type()) {
            (Some(d), _) => rustix::fs::fchmod(&d.fd()?, m).map_err(host),
            (None, FileType::Regular) => rustix::fs::fchmod(&self.io(inode)?, m).map_err(host),
            (None, FileType::Symlink) => Ok(()),
            _ => {
                let fd = Self::path_fd(inode)?;
                rustix::fs::chmodat(rustix::fs::CWD, fd_link(&fd).as_str(), m, AtFlags::empty()).map_err(host)
            }
        }
    }
}

/// What a create knows of the node it made, for [`HostFs::iget`] (a lookup knows nothing).
#[derive(Default)]
struct Made {
    /// The I/O descriptor the create opened.
    io: Option<OwnedFd>,
    /// The access and default ACLs the node has, if known.
    acls: Option<[AclInit; 2]>,
}

/// The buffer an xattr read tries first. The host kernel allocates and zeroes a buffer of
/// the size it is given (`kvzalloc` in `do_getxattr` and `listxattr`), 64 KiB for a
/// buffer of the largest size, while most values (an absent `security.capability`, an
/// ACL of a few entries) and most name lists fit in a few hundred bytes.
const SMALL_XATTR: usize = 256;

/// Where an xattr call goes (see [`HostFs::xattr_target`]).
enum XTarget {
    /// A descriptor the xattr calls accept.
    Fd(HostFd),
    /// The magic link of the checked `O_PATH` descriptor it holds open (only held: the
    /// link names it while it is open).
    Link(#[allow(dead_code)] OwnedFd, String),
}

impl XTarget {
    /// The value of `name` into `buf` (ERANGE if it does not fit), through a small buffer
    /// first when `buf` is larger (see [`SMALL_XATTR`]).
    fn get(&self, name: &[u8], buf: &mut [u8]) -> Result<usize> {
        if buf.len() <= SMALL_XATTR {
            return self.get_raw(name, buf);
        }
        let mut small = [0u8; SMALL_XATTR];
        match self.get_raw(name, &mut small) {
            Ok(n) => {
                buf[..n].copy_from_slice(&small[..n]);
                Ok(n)
            }
            Err(Errno::ERANGE) => self.get_raw(name, buf),
            Err(e) => Err(e),
        }
    }

    /// The value of `name`, whatever its size, given to `f` (see [`read_whole`]).
    fn get_value<R>(&self, name: &[u8], f: impl FnOnce(&[u8]) -> Result<R>) -> Result<R> {
        read_whole(|buf| self.get_raw(name, buf), || self.size(name), f)
    }

    /// The size of `name`'s value (the host allocates nothing for the question).
    fn size(&self, name: &[u8]) -> Result<usize> {
        match self {
            XTarget::Fd(fd) => rustix::fs::fgetxattr_query(fd, name),
            XTarget::Link(_, p) => rustix::fs::getxattr_query(p.as_str(), name),
        }
        .map_err(host)
    }

    fn get_raw(&self, name: &[u8], buf: &mut [u8]) -> Result<usize> {
        match self {
            XTarget::Fd(fd) => rustix::fs::fgetxattr(fd, name, buf),
            XTarget::Link(_, p) => rustix::fs::getxattr(p.as_str(), name, buf),
        }
        .map_err(host)
    }

    fn set(&self, name: &[u8], value: &[u8], flags: u32) -> Result<()> {
        let f = rustix::fs::XattrFlags::from_bits_retain(flags as _);
        match self {
            XTarget::Fd(fd) => rustix::fs::fsetxattr(fd, name, value, f),
            XTarget::Link(_, p) => rustix::fs::setxattr(p.as_str(), name, value, f),
        }
        .map_err(host)
    }

    fn remove(&self, name: &[u8]) -> Result<()> {
        match self {
            XTarget::Fd(fd) => rustix::fs::fremovexattr(fd, name),
            XTarget::Link(_, p) => rustix::fs::removexattr(p.as_str(), name),
        }
        .map_err(host)
    }

    /// The list of names (NUL-terminated), given to `f` (see [`read_whole`]).
    fn list(&self, f: impl FnOnce(&[u8]) -> Result<()>) -> Result<()> {
        let size = || {
            match self {
                XTarget::Fd(fd) => rustix::fs::flistxattr_query(fd),
                XTarget::Link(_, p) => rustix::fs::listxattr_query(p.as_str()),
            }
            .map_err(host)
        };
        read_whole(|buf| self.list_raw(buf), size, f)
    }

    fn list_raw(&self, buf: &mut [u8]) -> Result<usize> {
        match self {
            XTarget::Fd(fd) => rustix::fs::flistxattr(fd, buf),
            XTarget::Link(_, p) => rustix::fs::listxattr(p.as_str(), buf),
        }
        .map_err(host)
    }
}

/// A whole xattr value or name list given to `f`: read into a small buffer first (see
/// [`SMALL_XATTR`]), else into one of the size the host gives (again if it grew between
/// the question and the read).
fn read_whole<R>(
    read: impl Fn(&mut [u8]) -> Result<usize>,
    size: impl Fn() -> Result<usize>,
    f: impl FnOnce(&[u8]) -> Result<R>,
) -> Result<R> {
    let mut small = [0u8; SMALL_XATTR];
    match read(&mut small) {
        Ok(n) => return f(&small[..n]),
        Err(Errno::ERANGE) => {}
        Err(e) => return Err(e),
    }
    loop {
        let mut buf = vec![0u8; size()?];
        match read(&mut buf) {
            Ok(n) => return f(&buf[..n]),
            Err(Errno::ERANGE) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Lists a host directory from `fd`'s position (`at`: the cookie it is at) into `out`
/// until `out` refuses an entry or the directory ends. `Some(cookie)` when it ended with
/// every entry read given to `out`: the description is then at that cookie, and may be
/// kept to continue from it (see `EndStreams`).
fn list_host_dir(fd: impl AsFd, mut at: u64, out: &mut dyn FnMut(DirEntry) -> bool) -> Result<Option<u64>> {
    // On the stack: a small directory's entries fit in one `getdents64`.
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
    let mut dir = rustix::fs::RawDir::new(fd, &mut buf);
    while let Some(e) = dir.next() {
        let e = match e {
            Ok(e) => e,
            // A directory removed on the host lists as empty (as rustix's `Dir` has it);
            // its description is not kept.
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(host(e)),
        };
        // (A host that does not fill `d_type` has its entries listed as regular files.)
        let dtype = FileType::from_mode(e.file_type().as_raw_mode()).unwrap_or(FileType::Regular).dirent_type();
        let next = e.next_entry_cookie();
        if !out(DirEntry { ino: e.ino(), next, dtype, name: e.file_name().to_bytes().to_vec() }) {
            // Entries after this one may be in the buffer: the description is not kept.
            return Ok(None);
        }
        at = next;
    }
    Ok(Some(at))
}
