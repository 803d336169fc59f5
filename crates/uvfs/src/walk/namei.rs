//! The path walk. Mirrors Linux's `fs/namei.c` (`link_path_walk`, `walk_component`,
//! `step_into`, `follow_dotdot`, `handle_mounts`), but: neither tier takes reference counts
//! (the walk stays pinned and its caller counts only what it keeps), and it runs over a
//! `WalkCtx`, not a task.
//!
//! # Tiers
//! A walk runs first in the **lockless tier**: it pins the collector, samples the global
//! rename sequence, and follows dentries and inodes with plain loads: no lock, no
//! reference count, no allocation, no write to shared memory. When a step cannot be
//! answered that way (a miss in a directory that is not complete in the cache, a symlink
//! whose body is not cached) or the rename sequence moved under it, it restarts in the
//! **locked tier**: the same walk, taking each directory's lock around its lookup and
//! asking the filesystem on a miss. [`FastPaths::LOCKLESS_WALK`] off starts there. The
//! locked tier validates against the rename sequence too, and redoes a walk that a rename
//! overlapped holding the rename lock, so neither tier answers with a state the tree was
//! never in.
//!
//! Both tiers stay pinned for the whole walk, which is what keeps every dentry, inode and
//! name they touch alive (see [`crate::sync::rcu`]); so neither takes reference counts on the
//! way. The caller's closure sees the outcome while still pinned, and takes a reference
//! only if it keeps the result (an open file, a cwd).
//!
//! # Paths
//! Paths are bytes. Components are split in place, never copied; symlink bodies are
//! pushed on a fixed stack of at most [`MAXSYMLINKS`] segments. Limits are Linux's: a
//! component over 255 bytes is ENAMETOOLONG, a path of 4096 bytes or more too, a NUL byte
//! anywhere is EINVAL (a C caller could not have passed it), more than 40 symlinks ELOOP.

use std::mem::MaybeUninit;

use bitflags::bitflags;

use crate::abi::config::FastPaths;
use crate::abi::cred::Credentials;
use crate::abi::errno::{Errno, Result};
use crate::core::dentry::{DENTRY_DEAD, DENTRY_MOUNTED, Dentry};
use crate::core::file::DirFd;

use crate::abi::flags::AtFlags;
use crate::abi::limits::MAXSYMLINKS;
use crate::abi::limits::NAME_MAX;
use crate::abi::limits::PATH_MAX;
use crate::abi::stat::FileType;
use crate::core::fdtable::FdTable;
use crate::core::instance::VfsInner;
use crate::core::path::FsContext;
use crate::core::path::PathRef;
use crate::core::path::Pos;
use crate::core::permission::{MAY_EXEC, generic_permission};
use crate::sync::counters;
use crate::sync::rcu::{ArcBorrow, LocalGuard};
use crate::sync::rcu::{RcuArc, RcuBox};
use crate::walk::pathcache::{self, Probe, Stamps};

bitflags! {
    /// How to walk (`LOOKUP_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct LookupFlags: u32 {
        /// Follow a symlink in the last component.
        const FOLLOW = 1 << 0;
        /// The result must be a directory.
        const DIRECTORY = 1 << 1;
        /// An empty path means the start directory (or dirfd's file) itself.
        const EMPTY = 1 << 2;
        /// Stop before the last component (create, unlink, rename).
        const PARENT = 1 << 3;
        /// A missing last component is an outcome, not an error (open with O_CREAT).
        const MISSING_OK = 1 << 4;
        /// Start in the locked tier (a fast path is switched off).
        const LOCKED = 1 << 5;
        /// `RESOLVE_BENEATH`: the start directory is the root, and leaving it (`..` at it,
        /// an absolute path or symlink) is EXDEV.
        const BENEATH = 1 << 6;
        /// `RESOLVE_IN_ROOT`: the start directory is the root: `..` at it stays, absolute
        /// paths and symlinks start at it.
        const IN_ROOT = 1 << 7;
        /// `RESOLVE_NO_SYMLINKS`: any symlink to follow is ELOOP.
        const NO_SYMLINKS = 1 << 8;
        /// `RESOLVE_NO_XDEV`: crossing a mount (down, up, or by an absolute symlink) is
        /// EXDEV.
        const NO_XDEV = 1 << 9;
        /// `RESOLVE_NO_MAGICLINKS`: uvfs has no magic links (`/proc/*/fd`), so nothing to
        /// refuse.
        const NO_MAGICLINKS = 1 << 10;
        /// `RESOLVE_CACHED`: the lockless tier only; EAGAIN where it would fall back.
        const CACHED = 1 << 11;
        /// Neither answered nor learned by the path cache: a walk nobody repeats (a FUSE
        /// server's lookup of a name, which the kernel caches itself), whose entry would
        /// only push out one that is asked again.
        const NO_PATH_CACHE = 1 << 12;
        /// Set by the walk itself, under `NO_XDEV` only, at a `..`: Linux's walk holds its
        /// root from then on (`nd->root`, which it sets only when it needs it: an absolute
        /// path, a scope, a `..`, an absolute symlink; see `Nameidata::root_set`).
        const ROOT_SET = 1 << 13;
        /// The walk leaves the `MNT_EXPIRE` mark of the mount it ends on as it is: the
        /// walk of `umount2`'s target, which tests that mark (Linux's `path_umount` puts
        /// its path with `mntput_no_expire` for that reason).
        const KEEP_EXPIRY = 1 << 14;
    }
}

impl LookupFlags {
    /// The scoping flags (`LOOKUP_IS_SCOPED`).
    pub const SCOPED: LookupFlags = LookupFlags::BENEATH.union(LookupFlags::IN_ROOT);
}

/// What kind of last component a parent walk stopped before (`LAST_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LastType {
    /// A name.
    Normal,
    /// `"."`.
    Dot,
    /// `".."`.
    DotDot,
    /// The path was `"/"` (or only slashes).
    Root,
}

/// A component copied out of a symlink body the filesystem returned (a name has at most
/// 255 bytes): no allocation.
#[derive(Clone, Copy)]
struct NameBuf {
    len: u8,
    buf: [u8; NAME_MAX],
}

impl NameBuf {
    fn new(b: &[u8]) -> NameBuf {
        let mut n = NameBuf { len: b.len() as u8, buf: [0; NAME_MAX] };
        n.buf[..b.len()].copy_from_slice(b);
        n
    }
    /// The bytes.
    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }
}

/// The last name of a walk that stopped before it (`PARENT`) or did not find it
/// (`MISSING_OK`): where it is in the caller's path, or, when it came from a symlink body
/// the walk read, a copy. No name is copied on the common path: a parent walk's last name
/// is always the path's own (a last component is not followed), and a create's is unless
/// it names a dangling symlink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LastName {
    /// `path[start..end]` of the path the walk was given.
    InPath(usize, usize),
    /// From a symlink body (or empty, for a last component that is not a name).
    Copied(Box<[u8]>),
}

impl LastName {
    /// The bytes, given the path the walk was given.
    #[inline]
    pub fn bytes<'p>(&'p self, path: &'p [u8]) -> &'p [u8] {
        match self {
            LastName::InPath(s, e) => &path[*s..*e],
            LastName::Copied(b) => b,
        }
    }
}

/// A last name from a symlink body: rare, kept out of the walk's loop.
#[cold]
#[inline(never)]
fn copied_name(name: &[u8]) -> LastName {
    LastName::Copied(name.into())
}

/// The outcome of a walk.
pub enum Outcome<'a> {
    /// The path names this (positive) dentry.
    Found(Pos<'a>),
    /// `MISSING_OK`: the last component does not exist in `parent`.
    Missing {
        /// The directory it would be in.
        parent: Pos<'a>,
        /// Its name.
        name: LastName,
        /// The path ended in a slash.
        trailing_slash: bool,
        /// What the lockless lookup of the name saw in `parent`'s table, if it made one (a
        /// create hands it to [`VfsInner::lookup_excl_probed`], which then need not look
        /// the name up again under the directory's lock).
        probe: Option<crate::core::dhash::Probe>,
    },
    /// `PARENT`: the walk stopped before the last component.
    Parent {
        /// The directory.
        parent: Pos<'a>,
        /// The kind of last component.
        last: LastType,
        /// The last component (empty unless `Normal`).
        name: LastName,
        /// The path ended in a slash.
        trailing_slash: bool,
        /// The last component is over `NAME_MAX` (`name` is then empty): ENAMETOOLONG
        /// once the caller looks it up.
        too_long: bool,
    },
}

impl Outcome<'_> {
    /// The walk's use of the mount it ended on is over (Linux's `path_put` of the walk's
    /// result, whose `mntput` clears the mount's `MNT_EXPIRE` mark): a `stat` under a
    /// mount keeps it from expiring, as an open does.
    /// Only once the instance has seen `MNT_EXPIRE` (`VfsInner::expiry_used`): one load
    /// on every walk until then.
    #[inline]
    fn put_mount(&self, vfs: &VfsInner, flags: LookupFlags) {
        if vfs.expiry_used.load(std::sync::atomic::Ordering::Relaxed) && !flags.contains(LookupFlags::KEEP_EXPIRY) {
            self.put_mount_marked();
        }
    }

    #[cold]
    #[inline(never)]
    fn put_mount_marked(&self) {
        match self {
            Outcome::Found(p) | Outcome::Missing { parent: p, .. } | Outcome::Parent { parent: p, .. } => p.mnt.touch(),
        }
    }
}

/// Why a lockless attempt gave up.
enum Stop {
    /// A real answer.
    Err(Errno),
    /// Needs the locked tier.
    Fallback,
}

impl From<Errno> for Stop {
    fn from(e: Errno) -> Stop {
        Stop::Err(e)
    }
}

/// Where the bytes of a path segment live.
enum SegSrc<'a> {
    /// The caller's path, a cached symlink body (alive under the guard).
    Borrowed(&'a [u8]),
    /// A body the filesystem returned (locked tier only).
    Owned(Box<[u8]>),
}

struct Seg<'a> {
    src: SegSrc<'a>,
    /// Where the next component starts (slashes after the last one already skipped).
    pos: usize,
    /// The last component taken from this segment was followed by a slash.
    slash_after: bool,
}

impl Seg<'_> {
    #[inline]
    fn bytes(&self) -> &[u8] {
        match &self.src {
            SegSrc::Borrowed(b) => b,
            SegSrc::Owned(b) => b,
        }
    }
    /// Whether the segment is used up.
    #[inline]
    fn at_end(&self) -> bool {
        self.pos == self.bytes().len()
    }
}

/// The walk's segments: the caller's path, then the bodies of the symlinks being
/// followed. Fixed capacity and never initialized beyond what is pushed, so a walk
/// without symlinks touches one slot (an initialized array of 41 was a measurable part of
/// a cached stat).
struct SegStack<'a> {
    /// Slots below `len` are initialized.
    len: usize,
    items: [MaybeUninit<Seg<'a>>; MAXSYMLINKS + 1],
}

impl<'a> SegStack<'a> {
    #[inline]
    fn new(path: &'a [u8]) -> Self {
        let mut st = SegStack { len: 0, items: [const { MaybeUninit::uninit() }; MAXSYMLINKS + 1] };
        st.push(Seg { src: SegSrc::Borrowed(path), pos: 0, slash_after: false });
        st
    }

    /// Pushes a segment; the walk gives up with ELOOP after MAXSYMLINKS links, before the
    /// stack could overflow (and indexing would panic rather than corrupt if it did).
    #[inline]
    fn push(&mut self, seg: Seg<'a>) {
        self.items[self.len].write(seg);
        self.len += 1;
    }

    #[inline]
    fn pop(&mut self) {
        self.len -= 1;
        // SAFETY: slots below the old `len` are initialized; this one is no longer counted.
        unsafe { self.items[self.len].assume_init_drop() };
    }

    #[inline]
    fn top(&mut self) -> &mut Seg<'a> {
        // SAFETY: slots below `len` are initialized; indexing panics if `len` is 0.
        unsafe { self.items[self.len - 1].assume_init_mut() }
    }

    #[inline]
    fn top_ref(&self) -> &Seg<'a> {
        // SAFETY: as `top`.
        unsafe { self.items[self.len - 1].assume_init_ref() }
    }

    /// The bottom segment: the path the walk was given.
    #[inline]
    fn bottom(&self) -> Option<&Seg<'a>> {
        // SAFETY: slots below `len` are initialized.
        (self.len > 0).then(|| unsafe { self.items[0].assume_init_ref() })
    }

    /// The segments below the top one.
    #[inline]
    fn lower(&self) -> impl Iterator<Item = &Seg<'a>> {
        // SAFETY: slots below `len` are initialized.
        self.items[..self.len.saturating_sub(1)].iter().map(|s| unsafe { s.assume_init_ref() })
    }
}

impl Drop for SegStack<'_> {
    fn drop(&mut self) {
        while self.len > 0 {
            self.pop();
        }
    }
}

/// A component: borrowed from the path or a cached body, or copied.
// Boxing the copy would allocate on the walk; this lives on the stack for one step.
#[allow(clippy::large_enum_variant)]
enum Comp<'a> {
    Borrowed(&'a [u8]),
    Copied(NameBuf),
}

impl Comp<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Comp::Borrowed(b) => b,
            Comp::Copied(n) => n.as_bytes(),
        }
    }
}

/// Refreshes the attributes of `p`'s inode if its filesystem revalidates (see
/// [`FileSystem::getattr`](crate::core::superblock::FileSystem::getattr)); one flag test
/// otherwise.
#[inline]
pub(crate) fn getattr(p: Pos<'_>) -> Result<()> {
    if p.dentry.needs_revalidate() {
        return refresh_attrs(p);
    }
    Ok(())
}

/// `->getattr` of a revalidating filesystem, out of line: the walk's hot path only tests
/// the dentry's flag.
#[cold]
#[inline(never)]
fn refresh_attrs(p: Pos<'_>) -> Result<()> {
    p.mnt.sb.fs().getattr(p.inode())
}

/// `d_revalidate` of the child `d` of `dir`, out of line (see [`refresh_attrs`]).
#[cold]
#[inline(never)]
fn revalidate(dir: Pos<'_>, name: &[u8], d: &Dentry) -> Result<bool> {
    dir.mnt.sb.fs().d_revalidate(dir.inode(), name, d)
}

/// Validates a path argument: length and NUL bytes.
#[inline]
pub fn check_path(path: &[u8]) -> Result<()> {
    if path.len() >= PATH_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    if memchr_nul(path) {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// Whether `b` holds a NUL byte, eight bytes at a time. `contains(&0)` scans a slice
/// shorter than 16 bytes, most paths, one byte per step (some 75 instructions for a
/// 13-byte path, about 2 % of a create); this reads the path as words, the
/// last one overlapping the one before (Linux's `strncpy_from_user` also copies a path a
/// word at a time and tests each word for a zero byte).
#[inline]
fn memchr_nul(b: &[u8]) -> bool {
    let has_zero = |w: u64| crate::core::dhash::zero_bytes(w) != 0;
    let n = b.len();
    if n < 8 {
        return b.contains(&0);
    }
    let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("eight bytes"));
    let mut i = 0;
    while i + 8 < n {
        if has_zero(word(i)) {
            return true;
        }
        i += 8;
    }
    has_zero(word(n - 8))
}

/// The shortest path whose last name's parent the path cache is asked for: a shorter one
/// is seldom deep, and is walked about as fast as the cache would answer it (a 2-component
/// create pays nothing for the cache this way).
const PARENT_PROBE_MIN: usize = 16;

/// The last slash of `b` and how many it has, a word at a time as [`memchr_nul`] reads.
#[inline]
fn slashes(b: &[u8]) -> (Option<usize>, u32) {
    const SLASHES: u64 = 0x2f2f_2f2f_2f2f_2f2f;
    let n = b.len();
    if n < 8 {
        let mut found = (None, 0);
        for (i, &c) in b.iter().enumerate() {
            if c == b'/' {
                found = (Some(i), found.1 + 1);
            }
        }
        return found;
    }
    let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("eight bytes"));
    let (mut last, mut count, mut i) = (None, 0, 0);
    let mut take = |at: usize, m: u64| {
        if m != 0 {
            count += m.count_ones();
            last = Some(at + (63 - m.leading_zeros()) as usize / 8);
        }
    };
    while i + 8 <= n {
        take(i, crate::core::dhash::zero_bytes(word(i) ^ SLASHES));
        i += 8;
    }
    if i < n {
        // The last word overlaps the one before: its bytes before `i` were counted.
        let seen = 8 * (i - (n - 8));
        take(n - 8, crate::core::dhash::zero_bytes(word(n - 8) ^ SLASHES) & !((1u64 << seen) - 1));
    }
    (last, count)
}

/// One walk's state.
struct Nameidata<'a, 't> {
    vfs: &'t VfsInner,
    creds: &'a Credentials,
    fast: FastPaths,
    guard: &'a LocalGuard<'a>,
    locked: bool,
    /// The locked tier after a lockless attempt gave up (Linux's ref-walk `lookup_fast`):
    /// cached names are still found without the directory lock, only a miss (or a dentry
    /// its filesystem disowns) takes it. Off when the caller asked for the locked walk
    /// (`LOCKED`: a fast path switched off, or an open waiting out an unlink).
    lockless_hits: bool,
    /// How to walk.
    flags: LookupFlags,
    /// Where `..` stops and absolute symlinks start: the task's root, or for a scoped
    /// walk the start directory.
    root: Pos<'a>,
    cur: Pos<'a>,
    links: usize,
    stack: SegStack<'a>,
    /// `cur` was reached by a name lookup (which revalidated it), not by `..`, a mount
    /// crossing or the start: see [`Nameidata::found`].
    fresh: bool,
    /// The path cache may learn this walk's answer (or its last name's parent): it was
    /// asked, and so far the walk stayed in its start's mount, and needed no permission
    /// check that depends on who asks unless the credentials are part of the key (see
    /// [`crate::walk::pathcache`]).
    cacheable: bool,
    /// Where the path's last name starts, when the path cache may learn that name's
    /// parent (a walk to a name to create): the walk then notes the parent it reached
    /// there in `parent_found`, while still cacheable.
    learn_parent: Option<usize>,
    /// The parent noted (see `learn_parent`).
    parent_found: Option<Pos<'a>>,
}

impl<'a, 't: 'a> Nameidata<'a, 't> {
    /// Whether everything below the top segment is used up.
    fn lower_at_end(&self) -> bool {
        self.stack.lower().all(|s| s.at_end())
    }

    /// Whether a lower segment ended in a slash (`link/` while `link`'s body is walked).
    fn lower_has_slash(&self) -> bool {
        self.stack.lower().any(|s| s.slash_after)
    }

    /// Next component of the top segment: (start, end, last in its segment, followed by a
    /// slash). Pops used-up segments. One pass over the bytes.
    #[inline]
    fn next_component(&mut self) -> Option<(usize, usize, bool, bool)> {
        loop {
            if self.stack.len == 0 {
                return None;
            }
            let seg = self.stack.top();
            let b = seg.bytes();
            let mut i = seg.pos;
            while i < b.len() && b[i] == b'/' {
                i += 1;
            }
            if i == b.len() {
                self.stack.pop();
                continue;
            }
            let start = i;
            while i < b.len() && b[i] != b'/' {
                i += 1;
            }
            let end = i;
            while i < b.len() && b[i] == b'/' {
                i += 1;
            }
            let (done, slash) = (i == b.len(), i > end);
            seg.pos = i;
            seg.slash_after = slash;
            return Some((start, end, done, slash));
        }
    }

    /// The component `s..e` of the top segment, borrowed when the segment outlives the
    /// walk, copied (at most 255 bytes, on the stack) when it is an owned body.
    fn component(&self, s: usize, e: usize) -> Comp<'a> {
        match &self.stack.top_ref().src {
            SegSrc::Borrowed(b) => Comp::Borrowed(&b[s..e]),
            SegSrc::Owned(b) => Comp::Copied(NameBuf::new(&b[s..e])),
        }
    }

    /// The last name, `name`, the component at `s` of the top segment: a range when that
    /// segment is the caller's path, else a copy.
    /// Inlined: made out of line, the range was written to the stack in pieces and read
    /// back whole, a stalled store-to-load forward on every create and unlink.
    #[inline(always)]
    fn last_name(&self, s: usize, name: &[u8]) -> LastName {
        if self.stack.len == 1 {
            // The bottom segment is the path itself, under PATH_MAX: the range fits.
            LastName::InPath(s, s + name.len())
        } else {
            copied_name(name)
        }
    }

    /// Search permission on the current directory. A directory whose mode lets every class
    /// search it and that has no ACL grants it to anyone: no owner, group, capability or
    /// flag matters then, so the general check is skipped (Linux's
    /// `lookup_inode_permission_may_exec`, from "fs: speed up path lookup with cheaper
    /// handling of MAY_EXEC", November 2025). It reads the ACL slot, so it is part of the
    /// ACL fast path's switch.
    #[inline(always)]
    fn may_lookup(&mut self) -> Result<()> {
        let inode = self.cur.inode();
        if self.fast.contains(FastPaths::ACL) && inode.mode() & 0o111 == 0o111 && inode.acl_access.known_none() {
            return Ok(());
        }
        // The answer now depends on who asks: the path cache keys it by the credentials'
        // install serial, which credentials no task installed do not have, and which
        // does not name whoever a group source answers for.
        if self.creds.serial() == 0 || self.creds.groups_asked() {
            self.cacheable = false;
        }
        generic_permission(self.creds, inode, MAY_EXEC, self.fast, self.guard)
    }

    /// Crosses mounts stacked on the current dentry (`traverse_mounts`). Without a mount
    /// this is one test of a flag the lookup already loaded: no lock, no probe.
    #[inline]
    fn follow_mounts(&mut self) -> std::result::Result<(), Stop> {
        if self.cur.dentry.flags() & DENTRY_MOUNTED != 0 {
            self.cross_mounts()?;
        }
        Ok(())
    }

    /// Something is mounted here: one lockless probe of the mount table per mount crossed.
    /// A mount appearing or going meanwhile moves the rename sequence, so the walk's
    /// answer is discarded if it saw either half of the change.
    #[cold]
    fn cross_mounts(&mut self) -> std::result::Result<(), Stop> {
        while self.cur.dentry.flags() & DENTRY_MOUNTED != 0 {
            match self.vfs.lookup_mount(&self.cur.mnt, &self.cur.dentry, self.guard) {
                Some(m) => {
                    if self.flags.contains(LookupFlags::NO_XDEV) {
                        return Err(Stop::Err(Errno::EXDEV));
                    }
                    self.cur = Pos { mnt: m, dentry: ArcBorrow::from_arc(&m.get().root) };
                    self.fresh = false;
                    self.cacheable = false;
                }
                None => break,
            }
        }
        Ok(())
    }

    /// `..` (`follow_dotdot`): stays at the root (EXDEV under `BENEATH`), climbs from a
    /// mount's root to its mountpoint (EXDEV under `NO_XDEV`), then to the parent and
    /// across what is mounted there.
    ///
    /// Under a scope this cannot climb out of it: a walk answers only from a window in
    /// which no rename or mount change happened (the rename sequence did not move, or the
    /// walk held the rename lock), and in a tree that does not change, climbing from a
    /// descendant of the root meets the root first. Linux instead returns EAGAIN when `..`
    /// overlapped a rename; uvfs walks again (under the rename lock, at worst).
    fn dotdot(&mut self) -> std::result::Result<(), Stop> {
        if self.flags.contains(LookupFlags::NO_XDEV) {
            self.flags |= LookupFlags::ROOT_SET;
        }
        if self.cur.same(&self.root) {
            return self.dotdot_in_root();
        }
        if std::ptr::eq(self.cur.dentry.as_ptr(), &*self.cur.mnt.root) {
            self.cacheable = false;
            // `choose_mountpoint`: the mountpoint below this mount, skipping mounts stacked
            // on a mount's root; none if that would be the root itself or the top.
            let mut m = self.cur.mnt;
            let up = loop {
                match m.get().parent_borrow(self.guard) {
                    None => break None,
                    Some((pm, mp)) => {
                        let up = Pos { mnt: pm, dentry: mp };
                        if up.same(&self.root) {
                            break None;
                        }
                        if !std::ptr::eq(mp.as_ptr(), &*pm.root) {
                            break Some(up);
                        }
                        m = pm;
                    }
                }
            };
            let Some(up) = up else { return self.dotdot_in_root() };
            self.cur = up;
            if self.flags.contains(LookupFlags::NO_XDEV) {
                return Err(Stop::Err(Errno::EXDEV));
            }
        }
        if let Some(parent) = self.cur.dentry.get().parent_borrow(self.guard) {
            self.cur.dentry = parent;
        }
        self.follow_mounts()
    }

    /// `..` at the root (or the top of the tree): stays, and crosses what is mounted on
    /// it; EXDEV under `BENEATH`.
    fn dotdot_in_root(&mut self) -> std::result::Result<(), Stop> {
        if self.flags.contains(LookupFlags::BENEATH) {
            return Err(Stop::Err(Errno::EXDEV));
        }
        self.follow_mounts()
    }

    /// Whether `p` is the root or below it (`path_is_under`), climbing through mount
    /// roots. A final check of every scoped answer, as Linux's `complete_walk` does: the
    /// walk itself already cannot leave the scope (see `dotdot`).
    fn is_under_root(&self, p: Pos<'a>) -> bool {
        crate::core::path::climb(
            p.mnt.get(),
            p.dentry.get(),
            Some((&self.root.mnt, &self.root.dentry)),
            self.guard,
            |_| {},
        )
    }

    /// Whether Linux's walk would hold its root by now (`nd->root`, which it sets only
    /// when it needs it: an absolute path, a scope, a `..`, an absolute symlink). Under
    /// `NO_XDEV` an absolute symlink met before that is EXDEV, as `nd_jump_root` compares
    /// the mount with a root it has not set yet. Worked out when asked, so that the walks
    /// that never ask pay nothing: the path's segment is the stack's bottom one for as
    /// long as the walk runs (it is popped last).
    #[cold]
    fn root_set(&self) -> bool {
        self.flags.intersects(LookupFlags::SCOPED.union(LookupFlags::ROOT_SET))
            || self.stack.bottom().is_some_and(|s| s.bytes().first() == Some(&b'/'))
    }

    /// Jumps to the root for an absolute symlink (`nd_jump_root`). Under `NO_XDEV` Linux
    /// refuses the jump unless the walk already holds a root on the same mount (see
    /// `LookupFlags::ROOT_SET`; checked on 6.18: `c/l2` to `/a` is EXDEV, `c/../c/l2` is
    /// not).
    fn jump_root(&mut self) -> std::result::Result<(), Stop> {
        if self.flags.contains(LookupFlags::BENEATH) {
            return Err(Stop::Err(Errno::EXDEV));
        }
        let other_mount = !self.cur.mnt.ptr_eq(self.root.mnt);
        if self.flags.contains(LookupFlags::NO_XDEV) {
            if other_mount || !self.root_set() {
                return Err(Stop::Err(Errno::EXDEV));
            }
            self.flags |= LookupFlags::ROOT_SET;
        } else if other_mount {
            self.cacheable = false;
        }
        self.cur = self.root;
        Ok(())
    }

    /// Looks `name` up in the current directory: the dentry, or `None` for a miss.
    #[inline(always)]
    fn lookup(&mut self, name: &[u8]) -> std::result::Result<Option<ArcBorrow<'a, Dentry>>, Stop> {
        let dir = self.cur.dentry.get();
        if !self.locked {
            let Some(found) = dir.lookup_rcu(name, self.guard) else { return Err(Stop::Fallback) };
            if let Some(d) = found {
                let d = ArcBorrow::from_arc(d);
                // `d_revalidate` in RCU mode: a dentry its filesystem no longer vouches for
                // is replaced by the locked tier.
                if d.needs_revalidate() {
                    self.cacheable = false;
                    if !revalidate(self.cur, name, &d)? {
                        return Err(Stop::Fallback);
                    }
                }
                return Ok(if d.inode().is_some() { Some(d) } else { None });
            }
            if self.cur.mnt.sb.dcache_complete() {
                return Ok(None);
            }
            return Err(Stop::Fallback);
        }
        if self.lockless_hits
            && let Some(Some(d)) = dir.lookup_rcu(name, self.guard)
            && (!d.needs_revalidate() || revalidate(self.cur, name, d)?)
        {
            return Ok(if d.inode().is_some() { Some(ArcBorrow::from_arc(d)) } else { None });
        }
        let d = self.vfs.lookup_locked(self.cur, name, self.guard)?;
        Ok(d)
    }

    /// [`Nameidata::lookup`] of a name the caller may create: in the lockless tier on a
    /// filesystem whose dentry cache is complete, a certain miss also says where in the
    /// directory's table the name would go, for the create (see `Outcome::Missing`).
    #[inline]
    fn lookup_probed(
        &mut self,
        name: &[u8],
    ) -> std::result::Result<(Option<ArcBorrow<'a, Dentry>>, Option<crate::core::dhash::Probe>), Stop> {
        let dir = self.cur.dentry.get();
        if self.locked || !self.cur.mnt.sb.dcache_complete() {
            return Ok((self.lookup(name)?, None));
        }
        let Some(children) = dir.dir().map(|d| &d.children) else { return Ok((None, None)) };
        match children.get_probed(name, self.guard) {
            Some((Some(d), _)) if !d.needs_revalidate() => {
                Ok((d.inode().is_some().then(|| ArcBorrow::from_arc(d)), None))
            }
            Some((Some(_), _)) => Ok((self.lookup(name)?, None)),
            Some((None, probe)) => Ok((None, probe)),
            None => Err(Stop::Fallback),
        }
    }

    /// The body of the symlink `d`, pushed as a new segment.
    fn push_link(&mut self, d: &'a Dentry) -> std::result::Result<(), Stop> {
        // `RESOLVE_NO_SYMLINKS`, or a `nosymfollow` mount (the link's: the current one).
        if self.flags.contains(LookupFlags::NO_SYMLINKS)
            || self.cur.mnt.flags().contains(crate::core::mount::MountFlags::NOSYMFOLLOW)
        {
            return Err(Stop::Err(Errno::ELOOP));
        }
        self.links += 1;
        if self.links > MAXSYMLINKS {
            return Err(Stop::Err(Errno::ELOOP));
        }
        let inode = d.inode().expect("positive");
        // `pick_link`: following a link is an access of it. The path cache does not keep
        // such walks, whose hits would skip it.
        inode.touch_atime_outlined(&self.cur.mnt);
        self.cacheable = false;
        let src = match inode.cached_link().filter(|_| self.fast.contains(FastPaths::SYMLINK_CACHE)) {
            Some(b) => SegSrc::Borrowed(b),
            None if !self.locked => return Err(Stop::Fallback),
            None => {
                counters::bump(|c| c.link_fs_reads += 1);
                let body = inode.sb().fs().readlink(inode)?;
                if self.fast.contains(FastPaths::SYMLINK_CACHE) {
                    inode.set_cached_link(body.clone().into_boxed_slice());
                }
                SegSrc::Owned(body.into_boxed_slice())
            }
        };
        let b = match &src {
            SegSrc::Borrowed(b) => *b,
            SegSrc::Owned(b) => b,
        };
        if b.is_empty() {
            return Err(Stop::Err(Errno::ENOENT));
        }
        if b[0] == b'/' {
            self.jump_root()?;
        }
        self.stack.push(Seg { src, pos: 0, slash_after: false });
        Ok(())
    }

    /// The walk names `cur`. On a filesystem that revalidates, a position no name lookup
    /// of this walk checked (`.`, `..`, a root) gets its attributes refreshed
    /// (`->getattr`), so what the caller reports is current. The caller then returns
    /// `Outcome::Found(self.cur)` itself (an `Outcome` once carried a 255-byte name, and
    /// a copy of it cost a cached readlink a third of its speed).
    #[inline(always)]
    fn check_found(&mut self) -> std::result::Result<(), Stop> {
        if !self.fresh && self.cur.dentry.needs_revalidate() {
            self.cacheable = false;
            return refresh_attrs(self.cur).map_err(Stop::Err);
        }
        Ok(())
    }

    fn run(&mut self) -> std::result::Result<Outcome<'a>, Stop> {
        let flags = self.flags;
        loop {
            let Some((s, e, seg_done, slash_after)) = self.next_component() else {
                // Only slashes (or a symlink body of slashes) were left: the current
                // position is the answer.
                if flags.contains(LookupFlags::PARENT) {
                    return Ok(Outcome::Parent {
                        parent: self.cur,
                        last: LastType::Root,
                        name: LastName::Copied(Box::default()),
                        trailing_slash: false,
                        too_long: false,
                    });
                }
                self.check_found()?;
                return Ok(Outcome::Found(self.cur));
            };
            let is_last = seg_done && self.lower_at_end();
            let trailing_slash = is_last && (slash_after || self.lower_has_slash());
            // The path's last name, reached in the path itself (not in a symlink's body):
            // `cur` is what the path before it resolves to, for the path cache.
            if is_last && self.learn_parent == Some(s) && self.stack.len == 1 && self.cacheable {
                self.parent_found = Some(self.cur);
            }
            // Search permission on the directory, as `link_path_walk` checks before each
            // component.
            self.may_lookup()?;
            let comp = self.component(s, e.min(s + NAME_MAX));
            let name = comp.bytes();
            let kind = match name {
                b"." => LastType::Dot,
                b".." => LastType::DotDot,
                _ => LastType::Normal,
            };
            // `open_last_lookups`: O_CREAT and a trailing slash is EISDIR, whatever the
            // name is (`.` and `..` get it later, as directories).
            if is_last && trailing_slash && kind == LastType::Normal && flags.contains(LookupFlags::MISSING_OK) {
                return Err(Stop::Err(Errno::EISDIR));
            }
            // A parent walk leaves the last name's length to its caller, which checks it
            // where Linux's lookup of that name would (after the other parent walk of a
            // rename, after EROFS).
            let too_long = e - s > NAME_MAX;
            if is_last && flags.contains(LookupFlags::PARENT) {
                let nb = if kind == LastType::Normal && !too_long {
                    self.last_name(s, name)
                } else {
                    LastName::Copied(Box::default())
                };
                return Ok(Outcome::Parent { parent: self.cur, last: kind, name: nb, trailing_slash, too_long });
            }
            if too_long {
                return Err(Stop::Err(Errno::ENAMETOOLONG));
            }
            match kind {
                LastType::Dot => {}
                LastType::DotDot => {
                    self.fresh = false;
                    self.dotdot()?
                }
                _ => {
                    let (found, probe) = match is_last && flags.contains(LookupFlags::MISSING_OK) {
                        true => self.lookup_probed(name)?,
                        false => (self.lookup(name)?, None),
                    };
                    let Some(d) = found else {
                        if is_last && flags.contains(LookupFlags::MISSING_OK) {
                            return Ok(Outcome::Missing {
                                parent: self.cur,
                                name: self.last_name(s, name),
                                trailing_slash,
                                probe,
                            });
                        }
                        // Linux looks a miss up in the filesystem with a reference on the
                        // path, whose put clears the mount's `MNT_EXPIRE` mark.
                        if self.vfs.expiry_used.load(std::sync::atomic::Ordering::Relaxed) {
                            self.cur.mnt.touch();
                        }
                        return Err(Stop::Err(Errno::ENOENT));
                    };
                    let ftype = d.inode().expect("positive").file_type();
                    if ftype == FileType::Symlink && (!is_last || trailing_slash || flags.contains(LookupFlags::FOLLOW))
                    {
                        self.push_link(d.get())?;
                        continue;
                    }
                    self.cur = Pos { mnt: self.cur.mnt, dentry: d };
                    self.fresh = true;
                    self.follow_mounts()?;
                }
            }
            if !is_last {
                if !self.cur.inode().is_dir() {
                    return Err(Stop::Err(Errno::ENOTDIR));
                }
                continue;
            }
            if (trailing_slash || flags.contains(LookupFlags::DIRECTORY)) && !self.cur.inode().is_dir() {
                return Err(Stop::Err(Errno::ENOTDIR));
            }
            // A symlink body that ended here may still have outer segments of slashes;
            // they were accounted for in `is_last`.
            self.check_found()?;
            return Ok(Outcome::Found(self.cur));
        }
    }
}

/// A lockless walk's answer stood (the rename sequence did not move): counted, and what it
/// taught the path cache filled in.
#[inline]
fn lockless_done(learn: Option<Learn<'_>>) {
    counters::bump(|c| c.walk_lockless += 1);
    if let Some(l) = learn {
        l.probe.fill(l.stamps, l.found);
        match l.parent {
            true => counters::bump(|c| c.path_cache_parent_fills += 1),
            false => counters::bump(|c| c.path_cache_fills += 1),
        }
    }
}

/// Where a walk starts and as whom (gVisor's `PathOperation` plus credentials; the
/// inputs of Linux's `nameidata`): the instance, the credentials search permission is
/// checked with, the root and working directory, and the descriptors a `dirfd` names. The
/// cells are read anew, under the walk's guard, by every attempt (a task's cwd or
/// credentials may be replaced meanwhile); the walk takes no reference on any of them.
#[derive(Clone, Copy)]
pub(crate) struct WalkCtx<'t> {
    /// The instance.
    pub(crate) vfs: &'t VfsInner,
    /// The caller's credentials.
    pub(crate) creds: &'t RcuArc<Credentials>,
    /// Other credentials to walk with instead (`access(2)` walks with the real ids, as
    /// Linux's `access_override_creds` does before the lookup).
    pub(crate) as_creds: Option<&'t Credentials>,
    /// Root and working directory.
    pub(crate) fs: &'t RcuBox<FsContext>,
    /// The descriptors a `dirfd` is looked up in.
    pub(crate) files: &'t FdTable,
}

impl<'t> WalkCtx<'t> {
    /// Resolves `path` relative to `dirfd` and runs `f` on the outcome while the walk is
    /// still pinned. `f` may run more than once (a lockless attempt whose result the rename
    /// sequence invalidates is discarded), so it must not have side effects it cannot
    /// repeat; it takes references only for what the caller keeps.
    pub(crate) fn walk<R>(
        &self,
        dirfd: DirFd,
        path: &[u8],
        flags: LookupFlags,
        mut f: impl FnMut(Outcome<'_>) -> Result<R>,
    ) -> Result<R> {
        check_path(path)?;
        // An empty path is ENOENT before the dirfd is looked at (`getname` fails first).
        if path.is_empty() && !flags.contains(LookupFlags::EMPTY) {
            return Err(Errno::ENOENT);
        }
        let vfs = self.vfs;
        let fast = vfs.fast;
        if fast.contains(FastPaths::LOCKLESS_WALK) && !flags.contains(LookupFlags::LOCKED) {
            for _ in 0..2 {
                let guard = vfs.rcu.pin();
                let Some(seq) = vfs.rename_seq.try_read_begin() else { break };
                let mut learn = None;
                match self.walk_tier(&guard, dirfd, path, flags, Some((seq, &mut learn))) {
                    Err(Stop::Fallback) => break,
                    res => {
                        let r = match res {
                            Ok(o) => {
                                o.put_mount(vfs, flags);
                                f(o)
                            }
                            Err(Stop::Err(e)) => Err(e),
                            Err(Stop::Fallback) => unreachable!(),
                        };
                        if !vfs.rename_seq.read_retry(seq) {
                            lockless_done(learn);
                            return r;
                        }
                        counters::bump(|c| c.walk_retries += 1);
                    }
                }
            }
        }
        self.walk_locked(dirfd, path, flags, |o, _| f(o))
    }

    /// The locked tier of [`WalkCtx::walk`] and [`WalkCtx::walk_then`]: `f` runs once, on
    /// an outcome the rename sequence validated, under the walk's guard (and under the
    /// rename lock when the walk needed it). EAGAIN for `LOOKUP_CACHED`: what the lockless
    /// tier cannot answer is never a lock or a call into the filesystem.
    fn walk_locked<R>(
        &self,
        dirfd: DirFd,
        path: &[u8],
        flags: LookupFlags,
        f: impl FnOnce(Outcome<'_>, &LocalGuard<'_>) -> Result<R>,
    ) -> Result<R> {
        if flags.contains(LookupFlags::CACHED) {
            return Err(Errno::EAGAIN);
        }
        let vfs = self.vfs;
        counters::bump(|c| c.walk_locked += 1);
        // The locked tier locks one directory at a time, so a rename between two of its
        // steps could make it answer what the path named neither before nor after (ENOENT
        // for `dir/../name` while `dir` moves). As Linux's `read_seqbegin_or_lock`: validate
        // against the rename sequence, and if a rename overlapped, walk once more holding
        // the rename lock (first in the lock order), so that no rename can.
        let mut rename_locked = None;
        loop {
            let guard = vfs.rcu.pin();
            // Poisoned: a rename panicked halfway; nothing the dcache says can be trusted.
            let seq = vfs.rename_seq.read_begin().map_err(|_| Errno::EIO)?;
            let res = match self.walk_tier(&guard, dirfd, path, flags, None) {
                Ok(o) => Ok(o),
                Err(Stop::Err(e)) => Err(e),
                Err(Stop::Fallback) => Err(Errno::EIO),
            };
            if rename_locked.is_some() || !vfs.rename_seq.read_retry(seq) {
                let r = res.and_then(|o| {
                    o.put_mount(vfs, flags);
                    f(o, &guard)
                });
                // The locked tier is where cached dentries are made: keep them bounded.
                drop(rename_locked);
                drop(guard);
                vfs.shrink_dcache();
                return r;
            }
            counters::bump(|c| c.walk_retries += 1);
            rename_locked = Some(vfs.rename_lock.lock());
        }
    }

    /// [`WalkCtx::walk`] for a change: `f` runs once, on an outcome the rename sequence
    /// has already validated, still under the walk's guard, which it is given. So it may
    /// change what it found (it locks the parent and looks the name up again, as after
    /// Linux's walk), and it needs no counted reference to the parent: the guard keeps
    /// it. (An unlink took two counts on the parent and pinned a second guard: six
    /// atomic read-modify-writes.) The walk's own loop stays apart: `walk` answers every
    /// cached `stat`, and one loop for both cost it instructions.
    pub(crate) fn walk_then<R>(
        &self,
        dirfd: DirFd,
        path: &[u8],
        flags: LookupFlags,
        f: impl FnOnce(Outcome<'_>, &LocalGuard<'_>) -> Result<R>,
    ) -> Result<R> {
        check_path(path)?;
        if path.is_empty() && !flags.contains(LookupFlags::EMPTY) {
            return Err(Errno::ENOENT);
        }
        let vfs = self.vfs;
        if vfs.fast.contains(FastPaths::LOCKLESS_WALK) && !flags.contains(LookupFlags::LOCKED) {
            for _ in 0..2 {
                let guard = vfs.rcu.pin();
                let Some(seq) = vfs.rename_seq.try_read_begin() else { break };
                let mut learn = None;
                let res = match self.walk_tier(&guard, dirfd, path, flags, Some((seq, &mut learn))) {
                    Err(Stop::Fallback) => break,
                    Ok(o) => Ok(o),
                    Err(Stop::Err(e)) => Err(e),
                };
                if !vfs.rename_seq.read_retry(seq) {
                    lockless_done(learn);
                    return res.and_then(|o| {
                        o.put_mount(vfs, flags);
                        f(o, &guard)
                    });
                }
                counters::bump(|c| c.walk_retries += 1);
            }
        }
        self.walk_locked(dirfd, path, flags, f)
    }

    /// One attempt: the lockless tier when `lockless` gives the rename sequence it
    /// started under and where to leave what the path cache may learn, else the locked
    /// tier.
    fn walk_tier<'a>(
        &self,
        guard: &'a LocalGuard<'a>,
        dirfd: DirFd<'a>,
        path: &'a [u8],
        flags: LookupFlags,
        mut lockless: Option<(u32, &mut Option<Learn<'a>>)>,
    ) -> std::result::Result<Outcome<'a>, Stop>
    where
        't: 'a,
    {
        let locked = lockless.is_none();
        let creds = self.as_creds.unwrap_or_else(|| self.creds.load(guard).get());
        let fsx = self.fs.load(guard);
        let mut root = Pos::of(&fsx.root);
        let absolute = path.first() == Some(&b'/');
        // `path_init`: an absolute path jumps to the root, which a `BENEATH` walk may not;
        // an `IN_ROOT` walk starts at its directory whatever the path says.
        if absolute && flags.contains(LookupFlags::BENEATH) {
            return Err(Stop::Err(Errno::EXDEV));
        }
        let start = if absolute && !flags.contains(LookupFlags::IN_ROOT) {
            root
        } else {
            match dirfd {
                DirFd::Cwd => Pos::of(&fsx.cwd),
                DirFd::Fd(_) | DirFd::File(_) => {
                    let file: &'a crate::core::file::File = match dirfd {
                        DirFd::File(f) => f,
                        DirFd::Fd(fd) => self.files.get(fd, guard)?.get(),
                        DirFd::Cwd => unreachable!(),
                    };
                    let p = Pos::of_file(file);
                    if path.is_empty() {
                        // AT_EMPTY_PATH on a file of any type.
                        if !flags.contains(LookupFlags::EMPTY) {
                            return Err(Stop::Err(Errno::ENOENT));
                        }
                        getattr(p)?;
                        return Ok(Outcome::Found(p));
                    }
                    if !file.inode().is_dir() {
                        return Err(Stop::Err(Errno::ENOTDIR));
                    }
                    p
                }
            }
        };
        if path.is_empty() {
            if !flags.contains(LookupFlags::EMPTY) {
                return Err(Stop::Err(Errno::ENOENT));
            }
            getattr(start)?;
            return Ok(Outcome::Found(start));
        }
        if let Some((seq, learn)) = &mut lockless
            && flags.contains(LookupFlags::MISSING_OK)
            && path.len() >= PARENT_PROBE_MIN
            && let Some(out) = self.walk_from_parent(guard, creds, start, root, path, flags, *seq, learn)
        {
            return out;
        }
        let mut probe = None;
        if let Some((seq, _)) = &lockless
            && let Some(p) = self.path_cache_probe(creds, start, root, path, flags, *seq)
        {
            if let Some(found) = p.0.lookup(p.1) {
                counters::bump(|c| c.path_cache_hits += 1);
                // SAFETY: an entry holds a dentry its walk found in the tree, and answers
                // only under the stamps that walk started under, read now after pinning
                // `guard`: no change that could take the dentry out of the tree (and so
                // retire its last count) has begun since, so whatever retires it does so
                // after `guard` was pinned (see `crate::walk::pathcache`). The mount is the
                // start's, which the walk stayed in.
                let dentry = unsafe { ArcBorrow::from_raw(found) };
                return Ok(Outcome::Found(Pos { mnt: start.mnt, dentry }));
            }
            probe = Some(p);
        }
        let scoped = flags.intersects(LookupFlags::SCOPED);
        if scoped {
            root = start;
        }
        let mut nd = self.nameidata(guard, creds, locked, flags, root, start, path);
        nd.cacheable = probe.is_some();
        if !scoped {
            let out = nd.run();
            if nd.cacheable
                && let Ok(Outcome::Found(found)) = &out
                && let Some((probe, stamps)) = probe
                && let Some((_, learn)) = lockless
                && self.may_key(start, *found)
            {
                *learn = Some(Learn { probe, stamps, found: found.dentry.as_ptr(), parent: false });
            }
            return out;
        }
        let out = nd.run()?;
        {
            let at = match &out {
                Outcome::Found(p) => *p,
                Outcome::Missing { parent, .. } | Outcome::Parent { parent, .. } => *parent,
            };
            if !nd.is_under_root(at) {
                return Err(Stop::Err(Errno::EXDEV));
            }
        }
        Ok(out)
    }

    /// A walk's state at its start.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn nameidata<'a>(
        &self,
        guard: &'a LocalGuard<'a>,
        creds: &'a Credentials,
        locked: bool,
        flags: LookupFlags,
        root: Pos<'a>,
        start: Pos<'a>,
        path: &'a [u8],
    ) -> Nameidata<'a, 't> {
        Nameidata {
            vfs: self.vfs,
            creds,
            fast: self.vfs.fast,
            guard,
            locked,
            lockless_hits: locked
                && self.vfs.fast.contains(FastPaths::LOCKLESS_WALK)
                && !flags.contains(LookupFlags::LOCKED),
            flags,
            root,
            cur: start,
            links: 0,
            stack: SegStack::new(path),
            fresh: false,
            cacheable: false,
            learn_parent: None,
            parent_found: None,
        }
    }

    /// Whether the path cache may key an answer `found` of a walk from `start`: the walk
    /// stayed in the start's mount, and the start is neither a removed directory nor in a
    /// detached mount (whose addresses could be reused while an entry still names them).
    #[inline(always)]
    fn may_key(&self, start: Pos<'_>, found: Pos<'_>) -> bool {
        found.mnt.ptr_eq(start.mnt) && start.dentry.flags() & DENTRY_DEAD == 0 && start.mnt.is_attached()
    }

    /// The lockless walk to a name to create (`MISSING_OK`) whose parent the path cache is
    /// asked for: the same entry as a walk of the path before the last name with
    /// `FOLLOW | DIRECTORY` (what the walk of a path's inner components is). On a hit the
    /// last name is looked up from the parent; on a miss the whole path is walked and the
    /// parent learned. `None` where the cache is not asked, and the caller walks as for any
    /// other path: a last name that is not one (`.` or `..`, too long, a trailing slash), a
    /// parent less than two components away, flags but `FOLLOW` and `DIRECTORY` (which
    /// concern the last name only). Out of line: the other walks, a cached stat's above
    /// all, stay as they were.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn walk_from_parent<'a>(
        &self,
        guard: &'a LocalGuard<'a>,
        creds: &'a Credentials,
        start: Pos<'a>,
        root: Pos<'a>,
        path: &'a [u8],
        flags: LookupFlags,
        seq: u32,
        learn: &mut Option<Learn<'a>>,
    ) -> Option<std::result::Result<Outcome<'a>, Stop>>
    where
        't: 'a,
    {
        const CREATE_FLAGS: LookupFlags =
            LookupFlags::MISSING_OK.union(LookupFlags::FOLLOW).union(LookupFlags::DIRECTORY);
        const INNER: LookupFlags = LookupFlags::FOLLOW.union(LookupFlags::DIRECTORY);
        if !CREATE_FLAGS.contains(flags) {
            return None;
        }
        // A parent one component away is walked about as fast as the cache is probed, and
        // the cache's few slots are better kept for deeper ones: at least two slashes
        // before the last name (one more for the root's).
        let (slash, count) = slashes(path);
        let slash = slash?;
        if count < 2 + u32::from(path[0] == b'/') {
            return None;
        }
        let name = &path[slash + 1..];
        if name.is_empty() || name == b"." || name == b".." || name.len() > NAME_MAX {
            return None;
        }
        let mut end = slash;
        while end > 0 && path[end - 1] == b'/' {
            end -= 1;
        }
        if end == 0 {
            return None;
        }
        let (probe, stamps) = self.path_cache_probe(creds, start, root, &path[..end], INNER, seq)?;
        let mut nd = self.nameidata(guard, creds, false, flags, root, start, path);
        let miss = match probe.lookup(stamps) {
            Some(found) => {
                counters::bump(|c| c.path_cache_parent_hits += 1);
                // SAFETY: as for a whole path's hit in `walk_tier`: the entry's walk found
                // this directory in the tree, under the stamps read now, after `guard` was
                // pinned. The mount is the start's, which that walk stayed in.
                let dentry = unsafe { ArcBorrow::from_raw(found) };
                // The walk goes on from the parent, with the last name only.
                nd.cur = Pos { mnt: start.mnt, dentry };
                nd.stack.top().pos = slash + 1;
                None
            }
            None => {
                (nd.cacheable, nd.learn_parent) = (true, Some(slash + 1));
                Some((probe, stamps))
            }
        };
        let out = nd.run();
        if let Some((probe, stamps)) = miss
            && let Some(found) = nd.parent_found
            && self.may_key(start, found)
        {
            *learn = Some(Learn { probe, stamps, found: found.dentry.as_ptr(), parent: true });
        }
        Some(out)
    }

    /// The path cache's probe for this walk and the stamps it starts under, if the cache
    /// may answer or learn it (see [`crate::walk::pathcache`]): no flags but `FOLLOW`,
    /// `DIRECTORY` and `EMPTY`, a start in a filesystem whose names no change is in
    /// progress on. (What only a fill must check is checked then.)
    #[inline]
    fn path_cache_probe<'a>(
        &self,
        creds: &Credentials,
        start: Pos<'a>,
        root: Pos<'a>,
        path: &'a [u8],
        flags: LookupFlags,
        rename: u32,
    ) -> Option<(Probe<'a>, Stamps)> {
        const CACHED_FLAGS: LookupFlags = LookupFlags::FOLLOW.union(LookupFlags::DIRECTORY).union(LookupFlags::EMPTY);
        const NEEDS: FastPaths = FastPaths::PATH_CACHE.union(FastPaths::ACL);
        if !self.vfs.fast.contains(NEEDS) || !CACHED_FLAGS.contains(flags) {
            return None;
        }
        let names = start.mnt.sb.names_stamp()?;
        let key = pathcache::Key::new(self.vfs.id, creds.serial(), &start, &root, flags.bits());
        Some((Probe::new(key, path), Stamps { rename, names }))
    }

    /// Resolves a path to a counted reference.
    pub(crate) fn resolve(&self, dirfd: DirFd, path: &[u8], flags: LookupFlags) -> Result<PathRef> {
        self.walk(dirfd, path, flags, |o| match o {
            Outcome::Found(p) => Ok(p.to_path()),
            _ => Err(Errno::ENOENT),
        })
    }
}

/// What the path cache may learn from a lockless walk, once the rename sequence has
/// validated it.
struct Learn<'p> {
    probe: Probe<'p>,
    stamps: Stamps,
    found: *const Dentry,
    /// What was learned is the parent of the path's last name.
    parent: bool,
}

/// Lookup flags of the `AT_SYMLINK_NOFOLLOW`/`AT_EMPTY_PATH` calls.
pub(crate) fn at_lookup(flags: AtFlags) -> LookupFlags {
    let mut lf = LookupFlags::empty();
    if !flags.contains(AtFlags::SYMLINK_NOFOLLOW) {
        lf |= LookupFlags::FOLLOW;
    }
    if flags.contains(AtFlags::EMPTY_PATH) {
        lf |= LookupFlags::EMPTY;
    }
    lf
}

#[cfg(test)]
mod tests {
    use super::{memchr_nul, slashes};

    /// The word-at-a-time slash scan agrees with a byte scan for every length up to 39 and
    /// slashes at every place.
    #[test]
    fn slashes_found_wherever_they_are() {
        for n in 0..40usize {
            for a in 0..n.max(1) {
                for b in [None, Some(0), Some(n / 2), Some(n.saturating_sub(1))] {
                    let mut v = vec![b'x'; n];
                    if n > 0 {
                        v[a] = b'/';
                    }
                    if let Some(b) = b.filter(|&b| b < n) {
                        v[b] = b'/';
                    }
                    let want = (v.iter().rposition(|&c| c == b'/'), v.iter().filter(|&&c| c == b'/').count() as u32);
                    assert_eq!(slashes(&v), want, "{:?}", String::from_utf8_lossy(&v));
                }
            }
        }
    }

    /// The word-at-a-time NUL test agrees with a byte scan for every length up to 39 and a
    /// NUL (or a 0x80 or 0x01 byte, which a wrong borrow test would mistake) at every place.
    #[test]
    fn nul_found_wherever_it_is() {
        for n in 0..40 {
            for fill in [b'a', 0xff, 0x80, 0x01] {
                let clean = vec![fill; n];
                assert!(!memchr_nul(&clean), "{n} bytes of {fill:#x}");
                for at in 0..n {
                    for odd in [0u8, 0x80, 0x01] {
                        let mut b = clean.clone();
                        b[at] = odd;
                        assert_eq!(memchr_nul(&b), odd == 0, "{n} bytes of {fill:#x}, {odd:#x} at {at}");
                    }
                }
            }
        }
    }
}
