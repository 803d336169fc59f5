//! "No shared write on lookup": a stat, access, readlink or failed open of cached names
//! allocates nothing and takes no lock. A counting allocator (per thread) and the VFS's
//! own per-thread lock counter prove it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use uvfs::{
    AccessMode, Acl, AclEntry, AclTag, AclType, AtFlags, CopyRangeFlags, Credentials, DirFd, Errno, FastPaths, Gid,
    OpenFlags, Uid, Vfs, VfsConfig,
};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
    static BYTES: Cell<u64> = const { Cell::new(0) };
    /// Bytes allocated less bytes freed, on this thread.
    static LIVE: Cell<i64> = const { Cell::new(0) };
    /// Allocations of exactly `WATCH_SIZE` bytes (0: none watched).
    static WATCH_SIZE: Cell<usize> = const { Cell::new(0) };
    static WATCHED: Cell<u64> = const { Cell::new(0) };
    /// Allocations just over a 4 KiB page (up to 256 bytes over): what a page of data with
    /// a header inline would be, costing the allocator its next size class.
    static OVER_PAGE: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is thread-local and const-init, so
// it never allocates itself.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        let _ = BYTES.try_with(|c| c.set(c.get() + l.size() as u64));
        let _ = LIVE.try_with(|c| c.set(c.get() + l.size() as i64));
        if WATCH_SIZE.try_with(|w| w.get() == l.size()).unwrap_or(false) {
            let _ = WATCHED.try_with(|c| c.set(c.get() + 1));
        }
        if (4097..=4096 + 256).contains(&l.size()) {
            let _ = OVER_PAGE.try_with(|c| c.set(c.get() + 1));
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        let _ = LIVE.try_with(|c| c.set(c.get() - l.size() as i64));
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        let _ = BYTES.try_with(|c| c.set(c.get() + n as u64));
        let _ = LIVE.try_with(|c| c.set(c.get() + n as i64 - l.size() as i64));
        // SAFETY: same contract as ours.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

/// Bytes allocated on this thread so far (frees not subtracted).
fn bytes() -> u64 {
    BYTES.with(|c| c.get())
}

/// Bytes allocated on this thread and not freed (by it) since.
fn live() -> i64 {
    LIVE.with(|c| c.get())
}

/// Allocations of exactly `size` bytes by `f` on this thread.
fn sized_allocs(size: usize, f: impl FnOnce()) -> u64 {
    WATCH_SIZE.with(|w| w.set(size));
    let w0 = WATCHED.with(|c| c.get());
    f();
    WATCH_SIZE.with(|w| w.set(0));
    WATCHED.with(|c| c.get()) - w0
}

/// Counts allocations and lock acquisitions of `f` on this thread.
fn measure(mut f: impl FnMut()) -> (u64, u64) {
    f(); // warm the thread's collector slot
    let (a0, l0) = (allocs(), uvfs::counters().locks);
    for _ in 0..100 {
        f();
    }
    (allocs() - a0, uvfs::counters().locks - l0)
}

/// A 6-component path a/b/c/d/e/f with a symlink beside the file, group-readable dirs
/// owned by uid 1000 so uid 2000 (in group 1000) walks them as a non-owner.
fn setup(fast: FastPaths) -> (Vfs, uvfs::Task, uvfs::Task) {
    let vfs = Vfs::new(VfsConfig { fast_paths: fast, ..Default::default() });
    let root = vfs.root_task();
    let mut p = Vec::new();
    for c in [b"a", b"b", b"c", b"d", b"e"] {
        p.extend_from_slice(b"/");
        p.extend_from_slice(c);
        root.mkdir(&p, 0o750).unwrap();
        root.fchownat(DirFd::Cwd, &p, Some(Uid(1000)), Some(Gid(1000)), AtFlags::empty()).unwrap();
    }
    let fd = root.open(b"/a/b/c/d/e/f", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap();
    root.close(fd).unwrap();
    root.symlink(b"f", b"/a/b/c/d/e/link").unwrap();
    // Access times after the change times: no access moves them (relatime), whenever the
    // clock ticks. A fresh object's access time equals its change time, so an access
    // after the next tick moves it, which locks the inode once.
    let ahead = uvfs::TimeSpec::At(uvfs::Timespec { sec: root.stat(b"/").unwrap().ctime.sec + 3600, nsec: 0 });
    for p in [&b"/a/b/c/d/e/f"[..], b"/a/b/c/d/e/link"] {
        root.utimensat(DirFd::Cwd, p, Some([ahead, uvfs::TimeSpec::Omit]), AtFlags::SYMLINK_NOFOLLOW).unwrap();
    }
    let owner = vfs.task(Credentials::new(Uid(1000), Gid(1000), &[]));
    let other = vfs.task(Credentials::new(Uid(2000), Gid(2000), &[Gid(1000)]));
    (vfs, owner, other)
}

#[test]
fn cached_lookups_allocate_nothing_and_take_no_lock() {
    let (_vfs, owner, other) = setup(FastPaths::all());
    for t in [&owner, &other] {
        let (a, l) = measure(|| {
            t.fstatat(DirFd::Cwd, b"/a/b/c/d/e/f", AtFlags::empty()).unwrap();
        });
        assert_eq!((a, l), (0, 0), "fstatat allocations, locks");
        let (a, l) = measure(|| {
            t.faccessat(DirFd::Cwd, b"/a/b/c/d/e/f", AccessMode::R_OK, AtFlags::empty()).unwrap();
        });
        assert_eq!((a, l), (0, 0), "faccessat allocations, locks");
        let mut buf = [0u8; 64];
        let (a, l) = measure(|| {
            assert_eq!(t.readlinkat(DirFd::Cwd, b"/a/b/c/d/e/link", &mut buf).unwrap(), 1);
        });
        assert_eq!((a, l), (0, 0), "readlinkat allocations, locks");
        let (a, l) = measure(|| {
            assert_eq!(t.openat(DirFd::Cwd, b"/a/b/c/d/e/missing", OpenFlags::RDONLY, 0), Err(Errno::ENOENT));
        });
        assert_eq!((a, l), (0, 0), "failed openat allocations, locks");
        // Through the symlink, too.
        let (a, l) = measure(|| {
            t.fstatat(DirFd::Cwd, b"/a/b/c/d/e/link", AtFlags::empty()).unwrap();
        });
        assert_eq!((a, l), (0, 0), "fstatat via symlink allocations, locks");
    }
    let c = uvfs::counters();
    assert!(c.walk_lockless > 0 && c.walk_locked == 0, "{c:?}");
}

#[test]
fn general_paths_are_what_the_switches_select() {
    // Lockless walk off: the same calls take directory locks.
    let (_vfs, _owner, other) = setup(FastPaths::all() - FastPaths::LOCKLESS_WALK);
    let (_, l) = measure(|| {
        other.fstatat(DirFd::Cwd, b"/a/b/c/d/e/f", AtFlags::empty()).unwrap();
    });
    assert!(l >= 100 * 6, "locked walk took {l} locks for 100 stats of 6 components");

    // Failed-open fast path off: the file is allocated before the walk.
    let (_vfs, _owner, other) = setup(FastPaths::all() - FastPaths::FAILED_OPEN);
    let (a, _) = measure(|| {
        assert_eq!(other.openat(DirFd::Cwd, b"/a/b/c/d/e/missing", OpenFlags::RDONLY, 0), Err(Errno::ENOENT));
    });
    assert!(a >= 100, "general failed open allocated {a} times in 100 calls");

    // Symlink cache off: the filesystem is asked for the body every time.
    let (_vfs, _owner, other) = setup(FastPaths::all() - FastPaths::SYMLINK_CACHE);
    let before = uvfs::counters().link_fs_reads;
    let mut buf = [0u8; 16];
    for _ in 0..10 {
        other.readlinkat(DirFd::Cwd, b"/a/b/c/d/e/link", &mut buf).unwrap();
    }
    assert_eq!(uvfs::counters().link_fs_reads - before, 10);
}

/// An ACL on /a/b/c that names the non-owner (uid 2000): its search permission comes from
/// the named entry, limited by the mask.
fn name_the_non_owner(vfs: &Vfs) {
    let acl = Acl::new(vec![
        AclEntry::new(AclTag::UserObj, 7),
        AclEntry::new(AclTag::User(2000), 5),
        AclEntry::new(AclTag::GroupObj, 0),
        AclEntry::new(AclTag::Mask, 5),
        AclEntry::new(AclTag::Other, 0),
    ]);
    vfs.root_task().set_acl(DirFd::Cwd, b"/a/b/c", AclType::Access, &acl, AtFlags::empty()).unwrap();
}

/// Seed 001: the exec-search check of a walk as a non-owner (every directory reaches the
/// ACL slot: group bits set) reads the slot without a lock. Through ACL-free directories
/// and through a directory whose ACL is cached, stat and access allocate nothing and take
/// no lock.
#[test]
fn acl_checks_on_the_walk_allocate_nothing_and_take_no_lock() {
    let (vfs, _owner, other) = setup(FastPaths::all());
    let (a, l) = measure(|| {
        other.fstatat(DirFd::Cwd, b"/a/b/c/d/e/f", AtFlags::empty()).unwrap();
    });
    assert_eq!((a, l), (0, 0), "ACL-free walk: allocations, locks");
    name_the_non_owner(&vfs);
    let (a, l) = measure(|| {
        other.fstatat(DirFd::Cwd, b"/a/b/c/d/e/f", AtFlags::empty()).unwrap();
    });
    assert_eq!((a, l), (0, 0), "walk through a cached ACL: allocations, locks");
    let (a, l) = measure(|| {
        other.faccessat(DirFd::Cwd, b"/a/b/c/d/e/f", AccessMode::R_OK, AtFlags::empty()).unwrap();
    });
    assert_eq!((a, l), (0, 0), "access through a cached ACL: allocations, locks");
    // The ACL decides: without the named entry's x bit the walk stops at /a/b/c.
    let deny = Acl::new(vec![
        AclEntry::new(AclTag::UserObj, 7),
        AclEntry::new(AclTag::User(2000), 4),
        AclEntry::new(AclTag::GroupObj, 5),
        AclEntry::new(AclTag::Mask, 5),
        AclEntry::new(AclTag::Other, 0),
    ]);
    vfs.root_task().set_acl(DirFd::Cwd, b"/a/b/c", AclType::Access, &deny, AtFlags::empty()).unwrap();
    assert_eq!(other.fstatat(DirFd::Cwd, b"/a/b/c/d/e/f", AtFlags::empty()).map(|_| ()), Err(Errno::EACCES));
}

/// With the ACL fast path off, every check that reaches the slot takes the inode lock and
/// asks the filesystem (the general path), on each directory of the walk: the root and
/// a..e, all with group bits, walked by a non-owner.
#[test]
fn acl_switch_off_takes_the_inode_lock_each_time() {
    let (vfs, owner, other) = setup(FastPaths::all() - FastPaths::ACL);
    name_the_non_owner(&vfs);
    let (_, l) = measure(|| {
        other.fstatat(DirFd::Cwd, b"/a/b/c/d/e/f", AtFlags::empty()).unwrap();
    });
    assert!(l >= 100 * 6, "ACL switch off: {l} locks for 100 stats through 6 directories");
    // The owner's checks are decided by the mode: no ACL load. Only the root directory
    // is not the owner's: one load per walk, one lock (the inode's; memfs answers "no
    // ACL" for an inode that never had one without its ACL lock).
    let (_, l) = measure(|| {
        owner.fstatat(DirFd::Cwd, b"/a/b/c/d/e/f", AtFlags::empty()).unwrap();
    });
    assert_eq!(l, 100, "owner walk with the ACL switch off");
}

/// Issue 5: crossing a mount point costs one flag test and one lockless probe of the mount
/// table. A cached stat (and a failed open, and a scoped `openat2` with `RESOLVE_CACHED`)
/// of a path that crosses two mounts (a memfs on /a/b, and on its directory m a bind of
/// /a) and climbs out of one with `..` allocates nothing and takes no lock, as owner and
/// as non-owner.
#[test]
fn walks_across_mounts_allocate_nothing_and_take_no_lock() {
    let (vfs, owner, other) = setup(FastPaths::all());
    let root = vfs.root_task();
    root.mount(uvfs::MountSource::MemFs(Default::default()), b"/a/b", uvfs::MountFlags::empty()).unwrap();
    root.mkdir(b"/a/b/m", 0o755).unwrap();
    root.mount(uvfs::MountSource::Bind { path: b"/a", recursive: false }, b"/a/b/m", uvfs::MountFlags::empty())
        .unwrap();
    let direct = root.stat(b"/a/b/c/d/e/f");
    assert_eq!(direct.map(|_| ()), Err(Errno::ENOENT), "the memfs covers /a/b");
    let dirfd = owner.open(b"/a", OpenFlags::PATH | OpenFlags::DIRECTORY, 0).unwrap();
    let how = uvfs::OpenHow {
        flags: OpenFlags::RDONLY,
        mode: 0,
        resolve: uvfs::ResolveFlags::BENEATH | uvfs::ResolveFlags::CACHED,
    };
    for t in [&owner, &other] {
        // Down across /a/b and /a/b/m, up out of the bind's root, down across it again.
        let path = b"/a/b/m/../m/b/c/d/e/f";
        let (a, l) = measure(|| {
            t.fstatat(DirFd::Cwd, path, AtFlags::empty()).unwrap();
        });
        assert_eq!((a, l), (0, 0), "stat across two mounts: allocations, locks");
        let (a, l) = measure(|| {
            assert_eq!(t.openat(DirFd::Cwd, b"/a/b/m/b/c/d/e/missing", OpenFlags::RDONLY, 0), Err(Errno::ENOENT));
        });
        assert_eq!((a, l), (0, 0), "failed open across two mounts: allocations, locks");
    }
    let (a, l) = measure(|| {
        assert_eq!(owner.openat2(DirFd::Fd(dirfd), b"b/m/b/../b/c/missing", &how), Err(Errno::ENOENT));
    });
    assert_eq!((a, l), (0, 0), "scoped cached miss across mounts: allocations, locks");
    let c = uvfs::counters();
    assert!(c.walk_lockless > 0 && c.walk_locked == 0, "{c:?}");
}

/// Seed 000: with nobody watching, and with a watch on an unrelated directory, a write
/// allocates nothing at all, and the notify checks of open and close add no allocation
/// to what open itself needs (its file); no notify lock is taken.
#[test]
fn unwatched_write_open_close_allocate_nothing_for_notify() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    t.mkdir(b"/watched", 0o755).unwrap();
    t.mkdir(b"/work", 0o755).unwrap();
    let fd = t.open(b"/work/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
    let open_close = || {
        let f = t.open(b"/work/f", OpenFlags::RDONLY, 0).unwrap();
        t.close(f).unwrap();
    };
    let notify_locks = || uvfs::counters().notify_locks;
    // Counts (allocations, notify locks) of pwrite and of open+close, 101 calls each.
    let run = || {
        let n0 = notify_locks();
        let (w, _) = measure(|| {
            t.pwrite(fd, b"x", 0).unwrap();
        });
        let (o, _) = measure(open_close);
        (w, o, notify_locks() - n0)
    };
    let (write_none, open_none, locks_none) = run();
    let ino = t.inotify_init1(uvfs::InotifyFlags::NONBLOCK).unwrap();
    t.inotify_add_watch(&ino, b"/watched", uvfs::EventMask::ALL_EVENTS).unwrap();
    let (write_one, open_one, locks_one) = run();
    assert_eq!((write_none, write_one), (0, 0), "pwrite allocated (no watcher, unrelated watcher)");
    assert_eq!((locks_none, locks_one), (0, 0), "notify locks (no watcher, unrelated watcher)");
    // open+close allocates its file and the box that retires it; the collector also
    // allocates a batch every 64 retirements, whose boundary falls differently in the two
    // runs. A notify allocation per call would add at least 101 here.
    assert!(
        open_one.abs_diff(open_none) <= 4,
        "an unrelated watcher made open+close allocate: {open_one} vs {open_none} for 101 calls"
    );
    assert_eq!(ino.read_events(10, None), Err(uvfs::Errno::EAGAIN), "the unrelated watch saw events");
}

/// A successful open of a cached file takes one lock, the descriptor table's to install
/// the file, and close one, to take it out. An open that may create or truncate reserves
/// its descriptor first (before anything it could not undo), which takes the table's lock
/// once more.
#[test]
fn open_and_close_lock_the_descriptor_table_once_each() {
    let (_vfs, owner, _) = setup(FastPaths::all());
    // `measure` runs its closure 100 times.
    let (_, l) = measure(|| {
        let fd = owner.open(b"/a/b/c/d/e/f", OpenFlags::RDONLY, 0).unwrap();
        owner.close(fd).unwrap();
    });
    assert_eq!(l, 100 * 2, "open + close: locks");
    let (_, l) = measure(|| {
        let fd = owner.open(b"/a/b/c/d/e/f", OpenFlags::CREAT | OpenFlags::RDONLY, 0).unwrap();
        owner.close(fd).unwrap();
    });
    assert_eq!(l, 100 * 3, "open with O_CREAT of an existing file + close: locks");
}

/// Names chosen to collide in a directory's hash table (found by brute force against the
/// fixed seed uvfs once used for every table) are found with as few probes as any names,
/// and with no lock: each table's seed is drawn from the OS's randomness. (Probes are
/// counted in debug builds, which the test suite is.)
#[cfg(debug_assertions)]
#[test]
fn colliding_names_cost_no_more_probes() {
    use std::hash::BuildHasher;
    let fixed = foldhash::fast::FixedState::with_seed(0x9e37_79b9_7f4a_7c15);
    // 256 names whose hashes agree in their low 12 bits: one chain in any table of up to
    // 4096 buckets (a directory of 256 entries has 256).
    let target = fixed.hash_one(b"x0".as_slice()) & 0xfff;
    let colliding: Vec<Vec<u8>> = (0u64..)
        .map(|i| format!("x{i}").into_bytes())
        .filter(|n| fixed.hash_one(n.as_slice()) & 0xfff == target)
        .take(256)
        .collect();
    let plain: Vec<Vec<u8>> = (0..256).map(|i| format!("plain{i}").into_bytes()).collect();
    let vfs = Vfs::default();
    let t = vfs.root_task();
    let mut per_name = Vec::new();
    for (dir, names) in [(b"/c".as_slice(), &colliding), (b"/p".as_slice(), &plain)] {
        t.mkdir(dir, 0o755).unwrap();
        for n in names {
            t.mknodat(DirFd::Cwd, &[dir, b"/", n].concat(), 0o644, 0).unwrap();
        }
        let paths: Vec<Vec<u8>> = names.iter().map(|n| [dir, b"/", n].concat()).collect();
        let c0 = uvfs::counters();
        for p in &paths {
            t.stat(p).unwrap();
        }
        let c1 = uvfs::counters();
        assert_eq!(c1.locks, c0.locks, "a cached stat took a lock");
        per_name.push((c1.hash_probes - c0.hash_probes) as f64 / paths.len() as f64);
    }
    let (colliding, plain) = (per_name[0], per_name[1]);
    // Each stat probes the root's table and the directory's: about 2 with short chains,
    // about 130 for the colliding names in one chain.
    assert!(colliding < 2.0 * plain + 2.0, "probes per stat: colliding {colliding}, plain {plain}");
}

/// Issue 13: a file nobody locks pays nothing for the lock manager. Its inode has no lock
/// context, close tests that one pointer and takes no lock for it, and open, close and
/// write allocate and lock exactly as much once other files of the instance are locked
/// (flock, POSIX and OFD locks, by two tasks) as before any lock existed. A file that
/// is locked shows what the test would see otherwise: its close takes the lock context's
/// lock too.
#[test]
fn a_file_nobody_locks_pays_nothing_for_locks() {
    use uvfs::{Flock, FlockOp, LockCmd};
    let (vfs, _, _) = setup(FastPaths::all());
    let owner = vfs.root_task();
    let f = b"/a/b/c/d/e/f";
    let wfd = owner.open(f, OpenFlags::RDWR, 0).unwrap();
    let open_close = || {
        let fd = owner.open(f, OpenFlags::RDONLY, 0).unwrap();
        owner.close(fd).unwrap();
    };
    // (allocations, locks) of 100 pwrites, and of 100 open+close pairs.
    let run = || {
        let w = measure(|| {
            owner.pwrite(wfd, b"x", 0).unwrap();
        });
        (w, measure(open_close))
    };
    let before = run();
    // Lock another file every way, from this task and a fork.
    let g = b"/a/b/c/d/e/g";
    let gfd = owner.open(g, OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
    owner.flock(gfd, FlockOp::EX).unwrap();
    owner.fcntl_lock(gfd, LockCmd::SetLk, &mut Flock::new(Flock::WRLCK, 0, 10)).unwrap();
    owner.fcntl_lock(gfd, LockCmd::OfdSetLk, &mut Flock::new(Flock::RDLCK, 20, 10)).unwrap();
    let child = owner.fork();
    child.fcntl_lock(gfd, LockCmd::SetLk, &mut Flock::new(Flock::RDLCK, 40, 0)).unwrap();
    let after = run();
    let ((w_alloc0, w_locks0), (oc_alloc0, oc_locks0)) = before;
    let ((w_alloc1, w_locks1), (oc_alloc1, oc_locks1)) = after;
    assert_eq!((w_alloc0, w_alloc1), (0, 0), "pwrite allocated");
    assert_eq!(w_locks1, w_locks0, "pwrite locks with other files locked");
    // The table's lock at open and at close, nothing else.
    assert_eq!((oc_locks0, oc_locks1), (100 * 2, 100 * 2), "open + close locks");
    // open+close allocates its file and nothing else (close retires the file's own
    // `Arc` pointer, no box); the collector's batch boundary falls differently in the
    // two runs (see the notify test).
    assert!(oc_alloc1.abs_diff(oc_alloc0) <= 4, "open+close allocations: {oc_alloc0} before, {oc_alloc1} after");
    // 100 files and a few batches of the collector's (102 and 104 when measured).
    assert!(oc_alloc0.max(oc_alloc1) <= 100 + 5, "open+close allocations: {oc_alloc0} before, {oc_alloc1} after");
    let inode = owner.file(wfd).unwrap().inode().clone();
    assert!(inode.file_locks().is_empty());
    assert_eq!(owner.file(gfd).unwrap().inode().file_locks().len(), 4, "g's locks: flock, 2 POSIX, OFD");
    // The contrast: a locked file's close takes its lock context's lock too, twice for
    // a last close (its POSIX locks, then the description's own: Linux's
    // `locks_remove_posix` and `locks_remove_file`).
    let (_, l) = measure(|| {
        let fd = owner.open(g, OpenFlags::RDONLY, 0).unwrap();
        owner.close(fd).unwrap();
    });
    assert_eq!(l, 100 * 4, "open + close of a locked file");
}

/// memfs holes cost no memory, and a copy shares the source's pages until one of the
/// files writes (issue 13): a 1 MiB `copy_file_range` allocates a few hundred bytes of
/// page table, not 1 MiB; reads of a 1 TiB hole allocate nothing.
#[test]
fn copies_share_pages_and_holes_cost_nothing() {
    let vfs = Vfs::new(VfsConfig::default());
    let t = vfs.root_task();
    let rw = OpenFlags::CREAT | OpenFlags::RDWR;
    let src = t.openat(DirFd::Cwd, b"/src", rw, 0o644).unwrap();
    let dst = t.openat(DirFd::Cwd, b"/dst", rw, 0o644).unwrap();
    const MIB: usize = 1 << 20;
    assert_eq!(t.pwrite(src, &vec![7u8; MIB], 0).unwrap(), MIB);

    assert_eq!(OVER_PAGE.with(|c| c.get()), 0, "a page of data was allocated with a header inline");

    let b0 = bytes();
    let made = uvfs::counters().data_pages_made;
    let (mut a, mut b) = (0i64, 0i64);
    let n = t.copy_file_range(src, Some(&mut a), dst, Some(&mut b), MIB, CopyRangeFlags::empty()).unwrap();
    let used = bytes() - b0;
    assert_eq!((n, a, b), (MIB, MIB as i64, MIB as i64));
    assert!(used < 64 * 1024, "a 1 MiB copy allocated {used} bytes");
    assert_eq!(uvfs::counters().data_pages_made, made, "a copy made pages of data");
    assert_eq!(t.fstat(dst).unwrap().blocks, (MIB / 512) as u64, "the copy's blocks are counted as tmpfs");

    // Writing either side unshares only that page (a single page is the heap's; a big
    // write's pages are the shmem file's, see `fs/memfs/shmem.rs`).
    let b0 = bytes();
    let made = uvfs::counters().data_pages_made;
    assert_eq!(t.pwrite(dst, b"x", 4096).unwrap(), 1);
    let used = bytes() - b0;
    assert_eq!(uvfs::counters().data_pages_made - made, 1, "unsharing one page made another number of pages");
    assert!((4096..3 * 4096).contains(&used), "unsharing one page allocated {used} bytes");
    let mut buf = [0u8; 2];
    t.pread(src, &mut buf, 4096).unwrap();
    assert_eq!(buf, [7, 7], "the source kept its data");
    t.pread(dst, &mut buf, 4096).unwrap();
    assert_eq!(buf, [b'x', 7]);

    // A hole: truncated to 1 TiB, read in the middle.
    let b0 = bytes();
    t.ftruncate(src, 1 << 40).unwrap();
    let mut big = vec![1u8; 4096];
    let before = bytes();
    assert_eq!(t.pread(src, &mut big, 1 << 39).unwrap(), 4096);
    assert!(big.iter().all(|&b| b == 0));
    assert_eq!(bytes() - before, 0, "reading a hole allocates nothing");
    assert!(bytes() - b0 < 8192, "a 1 TiB hole costs {} bytes", bytes() - b0);
    assert_eq!(t.fstat(src).unwrap().blocks, (MIB / 512) as u64);
}

/// Where a write's new pages go (`SmallWritePages`): by default a small write's (under 16
/// pages) on the heap and a big one's in the shmem file; with `Shmem` (what `uvfs mount`
/// serves memfs with) every page in the file, and the data reads back the same.
#[test]
fn small_writes_pages_go_where_the_config_says() {
    use uvfs::SmallWritePages;
    for small in [SmallWritePages::Heap, SmallWritePages::Shmem] {
        let vfs = Vfs::new(VfsConfig { root_small_write_pages: small, ..VfsConfig::default() });
        let t = vfs.root_task();
        let fd = t.openat(DirFd::Cwd, b"/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
        let data: Vec<u8> = (0..10 * 1024).map(|i| (i % 251) as u8).collect();
        let c0 = uvfs::counters();
        assert_eq!(t.pwrite(fd, &data, 100).unwrap(), data.len());
        let c1 = uvfs::counters();
        assert_eq!(c1.data_pages_made - c0.data_pages_made, 3, "{small:?}");
        let in_file = if small == SmallWritePages::Shmem { 3 } else { 0 };
        assert_eq!(c1.data_pages_in_shmem - c0.data_pages_in_shmem, in_file, "{small:?}");
        // A write into a page the file holds alone is made in place, whatever its store.
        assert_eq!(t.pwrite(fd, b"xyz", 4000).unwrap(), 3);
        assert_eq!(uvfs::counters().data_pages_made, c1.data_pages_made, "{small:?}");
        let big = vec![9u8; 64 * 4096];
        assert_eq!(t.pwrite(fd, &big, 1 << 20).unwrap(), big.len());
        let c2 = uvfs::counters();
        assert_eq!(c2.data_pages_in_shmem - c1.data_pages_in_shmem, 64, "{small:?}: a big write's pages");
        let mut back = vec![0u8; data.len()];
        assert_eq!(t.pread(fd, &mut back, 100).unwrap(), data.len());
        let mut want = data.clone();
        want[4000 - 100..4003 - 100].copy_from_slice(b"xyz");
        assert!(back == want, "{small:?}: the data read back differs");
    }
}

/// The overlay keeps the walk's fast paths (issue 14): once looked up, a stat through it
/// (a lower file, a copied-up one, a miss) allocates nothing and takes no lock.
#[test]
fn cached_stat_through_an_overlay_allocates_nothing() {
    let lower = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(lower.path().join("a/b")).unwrap();
    std::fs::write(lower.path().join("a/b/f"), b"lower").unwrap();
    std::fs::write(lower.path().join("a/g"), b"lower").unwrap();
    let host = uvfs::fs::hostfs::HostFs::new(lower.path()).unwrap();
    let fs = uvfs::fs::overlay::OverlayFs::new(vec![Box::new(host)]).unwrap();
    let vfs = Vfs::with_root(VfsConfig::default(), Box::new(fs)).unwrap();
    let t = vfs.root_task();
    t.fchmodat(DirFd::Cwd, b"/a/g", 0o600, AtFlags::empty()).unwrap();
    for path in [b"/a/b/f".as_slice(), b"/a/g", b"/a/nope"] {
        let expect = t.stat(path).map(|s| s.size);
        let (allocs, locks) = measure(|| assert_eq!(t.stat(path).map(|s| s.size), expect));
        assert_eq!((allocs, locks), (0, 0), "{}", String::from_utf8_lossy(path));
    }
}

/// File flags cost a load where they are checked: a write, an open and a close take
/// the same locks and allocations whether the file is flagged or not, and a cached
/// `stat`, `access(W_OK)` refused by the immutable flag and refused open for writing take
/// no lock and allocate nothing.
#[test]
fn file_flags_cost_no_lock_and_no_allocation() {
    let (vfs, owner, _) = setup(FastPaths::all());
    let root = vfs.root_task();
    let f = b"/a/b/c/d/e/f";
    root.fchownat(DirFd::Cwd, f, Some(Uid(1000)), None, AtFlags::empty()).unwrap();
    let fd = owner.open(f, OpenFlags::WRONLY, 0).unwrap();
    let counts = || {
        let w = measure(|| {
            owner.pwrite(fd, b"x", 0).unwrap();
        });
        let o = measure(|| {
            let fd = owner.open(f, OpenFlags::RDONLY, 0).unwrap();
            owner.close(fd).unwrap();
        });
        (w, o.1)
    };
    let unflagged = counts();
    let r = root.open(f, OpenFlags::RDONLY, 0).unwrap();
    root.ioctl_setflags(r, uvfs::FsFlags::IMMUTABLE | uvfs::FsFlags::NODUMP).unwrap();
    // Through a descriptor opened before, an immutable file is still written (as Linux).
    assert_eq!(counts(), unflagged, "pwrite (allocations, locks) and open+close locks: unflagged vs immutable");
    let (a, l) = measure(|| {
        owner.fstatat(DirFd::Cwd, f, AtFlags::empty()).unwrap();
        assert_eq!(owner.faccessat(DirFd::Cwd, f, AccessMode::W_OK, AtFlags::empty()), Err(Errno::EPERM));
        assert_eq!(owner.openat(DirFd::Cwd, f, OpenFlags::WRONLY, 0), Err(Errno::EPERM));
    });
    assert_eq!((a, l), (0, 0), "stat, access and refused open of an immutable file: allocations, locks");
    root.ioctl_setflags(r, uvfs::FsFlags::empty()).unwrap();
}

/// Issue 15: an empty file allocates its objects and nothing else. The directory table's
/// slot keeps a name of up to 15 bytes inline and the dentry one of up to 39, so each file
/// with a 24-byte name makes exactly one 24-byte copy of it (the slot's), one with a
/// 40-byte name exactly two 40-byte copies, and one with an 8-byte name none; and nothing
/// else more. With short names a file is 3 allocations (the memfs node, the inode, the
/// dentry) plus the amortized growth of the directory's table and readdir order; its live
/// bytes are what `uvfs bench --case scale` reports per file, and an inode that nobody
/// watches or locks carries no room for marks or locks, nor a memfs file without data,
/// xattrs or ACLs a page map or room for those.
#[test]
fn an_empty_file_allocates_its_objects_only() {
    let vfs = Vfs::new(VfsConfig::default());
    let t = vfs.root_task();
    // (allocations, live bytes, allocations of `copy` bytes) of 1000 files.
    let make = |dir: &[u8], name_len: usize, copy: usize| {
        t.mkdir(dir, 0o755).unwrap();
        let paths: Vec<Vec<u8>> =
            (0..1000).map(|i| [dir, b"/", format!("{i:0>name_len$}").as_bytes()].concat()).collect();
        let (a0, l0) = (allocs(), live());
        let copies = sized_allocs(copy, || {
            for p in &paths {
                t.mknodat(DirFd::Cwd, p, 0o100644, 0).unwrap();
            }
        });
        (allocs() - a0, live() - l0, copies)
    };
    // The thread's first creates also set up its reclamation state.
    make(b"/warm", 8, 40);
    let (short, short_live, short_copies) = make(b"/short", 8, 40);
    let (_, _, short_24) = make(b"/short2", 8, 24);
    let (mid, mid_live, mid_copies) = make(b"/mid", 24, 24);
    let (long, long_live, long_copies) = make(b"/long", 40, 40);
    // The file's own objects: its inode (160 bytes with the `Arc`'s counts) and its dentry
    // (96, the name inline), one of each a file: 256 bytes (issue 15). Beside them, a
    // directory's table arrays and the reclaimer's batches may happen to take a block of
    // either size (one 160-byte one when measured).
    let (_, _, inodes) = make(b"/objects_i", 8, 160);
    let (_, _, dentries) = make(b"/objects_d", 8, 96);
    assert!(inodes.abs_diff(1000) <= 4 && dentries.abs_diff(1000) <= 4, "160-byte {inodes}, 96-byte {dentries}");
    println!(
        "1000 files: {short} allocations, {short_live} live bytes (8-byte names); {mid}, {mid_live} (24-byte); \
         {long}, {long_live} (40-byte)"
    );
    assert_eq!((short_copies, short_24), (0, 0), "40- and 24-byte allocations with 8-byte names");
    assert_eq!(mid_copies, 1000, "24-byte allocations: the table's copies only");
    assert_eq!(long_copies, 2000, "40-byte allocations: the table's and the dentries' copies");
    // Beyond the copies, they differ only by the reclaimer's bookkeeping: a new batch
    // after an outgrown table was handed to it (a few per directory), and a batch's worth
    // of bytes.
    assert!(mid.abs_diff(short + 1000) <= 4, "allocations beyond a file's objects: {short} short, {mid} mid");
    assert!(long.abs_diff(short + 2000) <= 4, "allocations beyond a file's objects: {short} short, {long} long");
    assert!((mid_live - short_live - 24_000).abs() <= 4096, "live bytes: {short_live} short, {mid_live} mid");
    assert!((long_live - short_live - 80_000).abs() <= 4096, "live bytes: {short_live} short, {long_live} long");
    // Two a file: the dentry and the inode (memfs makes its node at the first write, xattr
    // or flag), with the table's growth and the reclaimer's batches beside them.
    assert!(short <= 2050, "allocations of 1000 empty files: {short}");
    // Reading an empty file makes no page map: an open, a read and a close allocate the
    // open file and nothing else.
    let mut buf = [0u8; 16];
    let paths: Vec<String> = (0..100).map(|i| format!("/short/{i:0>8}")).collect();
    let a0 = allocs();
    for p in &paths {
        let fd = t.open(p.as_bytes(), OpenFlags::RDONLY, 0).unwrap();
        assert_eq!(t.read(fd, &mut buf), Ok(0));
        t.close(fd).unwrap();
    }
    let reads = allocs() - a0;
    assert!(reads <= 100 + 5, "open + read + close of 100 empty files: {reads} allocations");
    // 309.5 live bytes a file when measured (the inode 160 with its counts and the birth
    // time, the dentry 96 with its counts and its name: the file's objects in 256; no
    // memfs node, the directory table's slot and growth, 16 in the readdir order): no
    // more. (The tables a directory outgrew were freed once nobody could be reading them.)
    assert!(short_live <= 311 * 1000, "live bytes of 1000 empty files: {short_live}");
}

/// The open and the close of a file nobody watches reach no reclamation domain for their
/// events (seed 000), and a create in a directory without a default ACL none for it (seed
/// 001): each pin's release is an atomic swap, and reaching an inode's domain takes and
/// drops a count. Guard pins are counted in debug builds, which the test suite is. A watch
/// on the file adds one pin to its open and one to its close, for their events; a default
/// ACL on the directory one to a create in it.
#[cfg(debug_assertions)]
#[test]
fn unwatched_opens_and_closes_pin_no_guard_for_events() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    for d in [b"/work".as_slice(), b"/other", b"/inherit"] {
        t.mkdir(d, 0o755).unwrap();
    }
    t.close(t.open(b"/work/f", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap()).unwrap();
    let default_acl = Acl::new(vec![
        AclEntry::new(AclTag::UserObj, 7),
        AclEntry::new(AclTag::GroupObj, 5),
        AclEntry::new(AclTag::Other, 5),
    ]);
    t.set_acl(DirFd::Cwd, b"/inherit", AclType::Default, &default_acl, AtFlags::empty()).unwrap();
    let pins = |f: &mut dyn FnMut()| {
        let p0 = uvfs::counters().guard_pins;
        f();
        uvfs::counters().guard_pins - p0
    };
    // Pins of an open of /work/f, of its close, and of a create + unlink of a new name
    // in /work and in /inherit.
    let run = || {
        let mut fd = None;
        let open = pins(&mut || fd = Some(t.open(b"/work/f", OpenFlags::RDONLY, 0).unwrap()));
        let close = pins(&mut || t.close(fd.take().unwrap()).unwrap());
        let create = |dir: &str| {
            let path = format!("{dir}/new");
            let n = pins(&mut || {
                t.close(t.open(path.as_bytes(), OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap()).unwrap()
            });
            t.unlink(path.as_bytes()).unwrap();
            n
        };
        (open, close, create("/work"), create("/inherit"))
    };
    run(); // the thread's first pins
    let none = run();
    let ino = t.inotify_init1(uvfs::InotifyFlags::NONBLOCK).unwrap();
    t.inotify_add_watch(&ino, b"/other", uvfs::EventMask::ALL_EVENTS).unwrap();
    let unrelated = run();
    t.inotify_add_watch(&ino, b"/work/f", uvfs::EventMask::OPEN | uvfs::EventMask::CLOSE).unwrap();
    let watched = run();
    assert_eq!(none.1, 0, "close of an unwatched file: pins");
    assert_eq!(unrelated, none, "an unrelated watch changed the pins of (open, close, creates)");
    assert_eq!((watched.0, watched.1), (none.0 + 1, 1), "open and close of a watched file: pins");
    assert_eq!(none.3, none.2 + 1, "a create under a default ACL against one without: pins");
    assert_eq!(ino.read_events(10, None).map(|e| e.len()), Ok(2), "the watch on the file saw its open and close");
}

/// A create looks its name up once, in its walk's lockless lookup: under the directory's
/// lock that answer stands (nothing changed the directory since) and the name goes where
/// that lookup found room; an unlink looks its name up once, under the lock, and removes
/// it from the slot it found. Each costs as many lookups in directories' tables as a
/// failed open of the same path (one per component; counted in debug builds, which the
/// test suite is), where a create once took two more and an unlink one. A create that
/// grows the table, or meets it being rebuilt, looks up more.
#[cfg(debug_assertions)]
#[test]
fn creates_and_unlinks_look_their_name_up_once() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    t.mkdir(b"/d", 0o755).unwrap();
    let lookups = |f: &mut dyn FnMut()| {
        let n0 = uvfs::counters().dir_lookups;
        f();
        uvfs::counters().dir_lookups - n0
    };
    let paths: Vec<Vec<u8>> = (0..100).map(|i| format!("/d/f{i}").into_bytes()).collect();
    // (lookups of a failed open, of a create + close), path by path.
    let mut counts = Vec::new();
    for p in &paths {
        let missed = lookups(&mut || assert_eq!(t.open(p, OpenFlags::RDONLY, 0), Err(Errno::ENOENT)));
        let created =
            lookups(&mut || t.close(t.open(p, OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap()).unwrap());
        counts.push((missed, created));
    }
    let once = counts.iter().filter(|(m, c)| m == c).count();
    assert!(once >= 90, "creates + closes that looked their name up once: {once} of 100 ({counts:?})");
    assert!(counts.iter().all(|(m, c)| c >= m), "{counts:?}");
    for p in &paths {
        assert_eq!(
            lookups(&mut || t.unlink(p).unwrap()),
            2,
            "an unlink: the parent in its walk, the name under the lock"
        );
    }
    // The other creates walk to the parent only and look the name up under the lock, once;
    // so does rmdir: as many lookups as a failed open too.
    t.close(t.open(b"/d/keep", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap()).unwrap();
    let mut counts = Vec::new();
    for i in 0..20 {
        let (dir, node, link) = (format!("/d/dir{i}"), format!("/d/node{i}"), format!("/d/link{i}"));
        let missed = lookups(&mut || assert_eq!(t.open(dir.as_bytes(), OpenFlags::RDONLY, 0), Err(Errno::ENOENT)));
        let made = [
            lookups(&mut || t.mkdir(dir.as_bytes(), 0o755).unwrap()),
            lookups(&mut || t.mknodat(DirFd::Cwd, node.as_bytes(), 0o100644, 0).unwrap()),
            lookups(&mut || t.symlink(b"keep", link.as_bytes()).unwrap()),
            lookups(&mut || t.rmdir(dir.as_bytes()).unwrap()),
        ];
        counts.push((missed, made));
    }
    let once = counts.iter().filter(|(m, made)| made.iter().all(|n| n == m)).count();
    assert!(once >= 16, "mkdir, mknod, symlink, rmdir that looked their name up once: {once} of 20 ({counts:?})");
}

/// A server's LOOKUP of a name whose inode it holds already (`Task::lookup_path` with
/// `held` saying so) walks locklessly and makes nothing: no file, no allocation, no lock;
/// the inode comes back. Of a name it does not hold, it makes the `O_PATH` file an
/// `openat` would.
#[test]
fn a_lookup_of_a_held_inode_makes_no_file() {
    use uvfs::Looked;
    let (vfs, owner, _other) = setup(FastPaths::all());
    let dir = owner.openat_file(DirFd::Cwd, b"/a/b/c/d/e", OpenFlags::PATH, 0).unwrap();
    let f = owner.openat_file(DirFd::File(&dir), b"f", OpenFlags::PATH | OpenFlags::NOFOLLOW, 0).unwrap();
    let held = |_: &uvfs::Stat, i: &uvfs::Inode| std::ptr::eq(i, &**f.inode());
    let (a, l) = measure(|| {
        let (st, looked) = owner.lookup_path(DirFd::File(&dir), b"f", AtFlags::SYMLINK_NOFOLLOW, held).unwrap();
        assert!(matches!(looked, Looked::Held(i) if std::sync::Arc::ptr_eq(&i, f.inode())));
        assert_eq!(st.ino, f.inode().ino().0);
    });
    assert_eq!((a, l), (0, 0), "lookup of a held inode: allocations, locks");
    // The symlink is not held: its own O_PATH file, not its target's.
    let (st, looked) = owner.lookup_path(DirFd::File(&dir), b"link", AtFlags::SYMLINK_NOFOLLOW, held).unwrap();
    let Looked::Opened(file) = looked else { panic!("a file of what is not held") };
    assert!(file.is_path() && file.inode().file_type() == uvfs::FileType::Symlink);
    assert_eq!(st.ino, file.inode().ino().0);
    // `held` is asked about what the walk found: the target, when following.
    let (_, looked) = owner.lookup_path(DirFd::File(&dir), b"link", AtFlags::empty(), held).unwrap();
    assert!(matches!(looked, Looked::Held(_)));
    // Misses, search permission and bad flags as fstatat's.
    let never = |_: &uvfs::Stat, _: &uvfs::Inode| -> bool { panic!("asked about nothing") };
    assert_eq!(owner.lookup_path(DirFd::File(&dir), b"missing", AtFlags::empty(), never).err(), Some(Errno::ENOENT));
    let stranger = vfs.task(Credentials::new(Uid(3000), Gid(3000), &[]));
    assert_eq!(stranger.lookup_path(DirFd::File(&dir), b"f", AtFlags::empty(), never).err(), Some(Errno::EACCES));
    assert_eq!(owner.lookup_path(DirFd::File(&dir), b"f", AtFlags::REMOVEDIR, never).err(), Some(Errno::EINVAL));
}
