//! hostfs and changes made on the host behind uvfs's back: by default every cached name
//! and attribute is checked against the host, so uvfs answers what the host holds at
//! every step; `HostChanges::Never` trusts the cache; `max_age` lets a check stand.
//! Also: names uvfs has not walked to yet can be removed, renamed and collide.

mod hostops;
mod scratch;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use hostops::{NAMES, Op, SLOTS, XNAME, apply, host_list, op, slot_of};
use proptest::prelude::*;
use uvfs::fs::hostfs::{HostChanges, HostFs, HostFsOptions};
use uvfs::{
    AccessMode, Acl, AclEntry, AclTag, AtFlags, Credentials, DirFd, Errno, Gid, OpenFlags, RenameFlags, Uid, Vfs,
    VfsConfig,
};

/// A fresh host directory under /dev/shm (a tmpfs), removed on drop.
fn tmp(tag: &str) -> tempfile::TempDir {
    // 0755, as a directory made by mkdir: unprivileged tasks walk through it.
    tempfile::Builder::new()
        .prefix(&format!("uvfs-hostchg-{tag}-"))
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .tempdir_in(scratch::scratch_in("/dev/shm"))
        .unwrap()
}

fn vfs_over(dir: &Path, changes: HostChanges) -> Vfs {
    let fs = HostFs::with_options(dir, HostFsOptions { changes, ..HostFsOptions::default() }).unwrap();
    Vfs::with_root(VfsConfig::default(), Box::new(fs)).unwrap()
}

const STRICT: HostChanges = HostChanges::Revalidate { max_age: Duration::ZERO };

/// Names on the host that uvfs never looked at are found by unlink, rmdir, rename, link
/// and the exclusive creates (Linux looks the last name up under the directory lock).
#[test]
fn unwalked_host_names() {
    for changes in [STRICT, HostChanges::Never] {
        let dir = tmp("unwalked");
        let h = dir.path();
        std::fs::create_dir_all(h.join("d/sub")).unwrap();
        for f in ["f", "g", "h", "d/sub/x"] {
            std::fs::write(h.join(f), b"x").unwrap();
        }
        let vfs = vfs_over(h, changes);
        let t = vfs.root_task();
        assert_eq!(t.mkdir(b"/f", 0o755), Err(Errno::EEXIST));
        assert_eq!(t.open(b"/g", OpenFlags::CREAT | OpenFlags::EXCL | OpenFlags::WRONLY, 0o644), Err(Errno::EEXIST));
        assert_eq!(t.symlinkat(b"t", DirFd::Cwd, b"/h"), Err(Errno::EEXIST));
        assert_eq!(t.rmdir(b"/d"), Err(Errno::ENOTEMPTY));
        t.unlink(b"/f").unwrap();
        assert!(!h.join("f").exists());
        t.rename(b"/g", b"/h").unwrap();
        assert!(!h.join("g").exists() && h.join("h").exists());
        t.linkat(DirFd::Cwd, b"/h", DirFd::Cwd, b"/d/sub/y", AtFlags::empty()).unwrap();
        assert_eq!(std::fs::metadata(h.join("h")).unwrap().nlink(), 2);
        assert_eq!(t.rename(b"/h", b"/d/sub/x"), Ok(()));
        t.unlink(b"/d/sub/x").unwrap();
        t.unlink(b"/d/sub/y").unwrap();
        t.rmdir(b"/d/sub").unwrap();
        t.rmdir(b"/d").unwrap();
        assert_eq!(std::fs::read_dir(h).unwrap().count(), 0);
    }
}

/// Removing a directory under which misses were cached frees it and its host descriptor
/// (its cached children held it, as their parent, while it held them).
#[test]
fn rmdir_frees_cached_misses() {
    let dir = tmp("prune");
    let fs = HostFs::new(dir.path()).unwrap();
    let live = fs.live_inodes();
    let vfs = Vfs::with_root(VfsConfig::default(), Box::new(fs)).unwrap();
    let t = vfs.root_task();
    let base = live.load(std::sync::atomic::Ordering::Relaxed);
    for i in 0..50 {
        let d = format!("/d{i}");
        t.mkdir(d.as_bytes(), 0o755).unwrap();
        t.mkdir(format!("{d}/e").as_bytes(), 0o755).unwrap();
        for j in 0..4 {
            assert_eq!(t.stat(format!("{d}/e/miss{j}").as_bytes()), Err(Errno::ENOENT));
        }
        t.rmdir(format!("{d}/e").as_bytes()).unwrap();
        t.rmdir(d.as_bytes()).unwrap();
    }
    // Freed inodes wait for the collector's next batch; this many would be every one.
    let left = live.load(std::sync::atomic::Ordering::Relaxed) - base;
    assert!(left < 100, "{left} removed directories still alive");
    drop(t);
    drop(vfs);
    assert_eq!(live.load(std::sync::atomic::Ordering::Relaxed), 0);
}

/// `Never` is a promise the cache relies on: a miss stays a miss, a file removed on the
/// host is still seen; `Revalidate` with a long `max_age` lets a check stand as long;
/// with `max_age` zero every change is seen at once.
#[test]
fn how_long_a_check_stands() {
    let cases = [
        (HostChanges::Never, false),
        (HostChanges::Revalidate { max_age: Duration::from_secs(3600) }, false),
        (STRICT, true),
    ];
    for (changes, sees) in cases {
        let dir = tmp("age");
        std::fs::write(dir.path().join("old"), b"x").unwrap();
        let vfs = vfs_over(dir.path(), changes);
        let t = vfs.root_task();
        assert_eq!(t.stat(b"/new"), Err(Errno::ENOENT));
        assert_eq!(t.stat(b"/old").unwrap().size, 1);
        std::fs::write(dir.path().join("new"), b"xy").unwrap();
        std::fs::write(dir.path().join("old"), b"xyz").unwrap();
        let (new, old) = (t.stat(b"/new").map(|s| s.size), t.stat(b"/old").map(|s| s.size));
        if sees {
            assert_eq!((new, old), (Ok(2), Ok(3)), "{changes:?}");
        } else {
            assert_eq!((new, old), (Err(Errno::ENOENT), Ok(1)), "{changes:?}");
        }
        let before = uvfs::counters().dentries_invalidated;
        std::fs::remove_file(dir.path().join("old")).unwrap();
        assert_eq!(t.stat(b"/old").is_err(), sees, "{changes:?}");
        assert_eq!(uvfs::counters().dentries_invalidated - before, u64::from(sees));
    }
}

/// An ACL added on the host is in force at once (the cached "no ACL" is dropped with the
/// inode's ctime change), and so is a mode change on a position reached by `..`.
#[test]
fn host_permission_changes() {
    let dir = tmp("perm");
    std::fs::create_dir(dir.path().join("d")).unwrap();
    std::fs::write(dir.path().join("d/f"), b"x").unwrap();
    std::fs::set_permissions(dir.path().join("d/f"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let vfs = vfs_over(dir.path(), STRICT);
    let user = vfs.task(Credentials::new(Uid(4242), Gid(4242), &[]));
    assert_eq!(user.access(b"/d/f", AccessMode::R_OK), Err(Errno::EACCES));
    let acl = Acl::new(vec![
        AclEntry::new(AclTag::UserObj, 6),
        AclEntry::new(AclTag::User(4242), 4),
        AclEntry::new(AclTag::GroupObj, 0),
        AclEntry::new(AclTag::Mask, 4),
        AclEntry::new(AclTag::Other, 0),
    ]);
    rustix::fs::setxattr(
        dir.path().join("d/f"),
        "system.posix_acl_access",
        &acl.to_xattr_vec(),
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    assert_eq!(user.access(b"/d/f", AccessMode::R_OK), Ok(()));
    let root = vfs.root_task();
    assert_eq!(root.stat(b"/d/..").unwrap().mode & 0o777, std::fs::metadata(dir.path()).unwrap().mode() & 0o777);
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    assert_eq!(root.stat(b"/d/..").unwrap().mode & 0o777, 0o711);
    assert_eq!(root.stat(b"/").unwrap().mode & 0o777, 0o711);
}

/// One step of the sequence: done on the host directly, or through uvfs; or a descriptor
/// opened (on both sides at once: the host's and uvfs's then name the same host file) or
/// closed.
#[derive(Clone, Debug)]
enum Step {
    Host(Op),
    Uvfs(Op),
    Open(usize, usize, bool),
    Close(usize),
}

/// What the probes look at besides the names: positions reached by `.` and `..`.
const PROBES: [&str; 4] = ["a/.", "a/x/..", "b/x/../x", "."];
fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => op().prop_map(Step::Host),
        4 => op().prop_map(Step::Uvfs),
        1 => (0..NAMES.len(), 0..SLOTS, any::<bool>()).prop_map(|(a, s, rw)| Step::Open(a, s, rw)),
        1 => (0..SLOTS).prop_map(Step::Close),
    ]
}

/// The descriptors held: slot `i`'s host descriptor and uvfs descriptor name one file.
#[derive(Default)]
struct Held {
    host: [Option<std::os::fd::OwnedFd>; SLOTS],
    uvfs: [Option<uvfs::Fd>; SLOTS],
}

fn uvfs_do(t: &uvfs::Task, held: &Held, op: &Op) {
    use uvfs::{TimeSpec, Timespec, XattrFlags};
    let p = |i: usize| format!("/{}", NAMES[i]).into_bytes();
    let _ = match op {
        Op::Write(a, l) => {
            t.open(&p(*a), OpenFlags::CREAT | OpenFlags::TRUNC | OpenFlags::WRONLY, 0o644).and_then(|fd| {
                let r = t.write(fd, &vec![b'w'; *l]).map(|_| ());
                t.close(fd).and(r)
            })
        }
        Op::Mkdir(a) => t.mkdir(&p(*a), 0o755),
        Op::Rmdir(a) => t.rmdir(&p(*a)),
        Op::Unlink(a) => t.unlink(&p(*a)),
        Op::Rename(a, b) => t.rename(&p(*a), &p(*b)),
        Op::Exchange(a, b) => t.renameat2(DirFd::Cwd, &p(*a), DirFd::Cwd, &p(*b), RenameFlags::EXCHANGE),
        Op::Symlink(a, b) => t.symlinkat(NAMES[*a].as_bytes(), DirFd::Cwd, &p(*b)),
        Op::Link(a, b) => t.linkat(DirFd::Cwd, &p(*a), DirFd::Cwd, &p(*b), AtFlags::empty()),
        Op::Chmod(a, m) => t.fchmodat(DirFd::Cwd, &p(*a), *m, AtFlags::empty()),
        Op::Chown(a, u, g) => t.fchownat(DirFd::Cwd, &p(*a), Some(Uid(*u)), Some(Gid(*g)), AtFlags::SYMLINK_NOFOLLOW),
        Op::Utimes(a, s, ns) => {
            let ts = TimeSpec::At(Timespec { sec: *s, nsec: *ns });
            t.utimensat(DirFd::Cwd, &p(*a), Some([ts, ts]), AtFlags::SYMLINK_NOFOLLOW)
        }
        Op::Truncate(a, l) => t.truncate(&p(*a), *l as i64),
        Op::SetXattr(a, l) => t.lsetxattr(&p(*a), XNAME.as_bytes(), &b"vvv"[..*l], XattrFlags::empty()),
        Op::RemoveXattr(a) => t.lremovexattr(&p(*a), XNAME.as_bytes()),
        Op::FdWrite(s, l) => held.uvfs[*s].map_or(Ok(()), |fd| t.pwrite(fd, &vec![b'f'; *l], 0).map(|_| ())),
        Op::FdTruncate(s, l) => held.uvfs[*s].map_or(Ok(()), |fd| t.ftruncate(fd, *l as i64)),
        Op::FdChmod(s, m) => held.uvfs[*s].map_or(Ok(()), |fd| t.fchmod(fd, *m)),
    };
}

/// Opens `NAMES[a]` on both sides into slot `s` (closing what it held); the two results
/// must agree.
fn open_both(root: &Path, t: &uvfs::Task, held: &mut Held, a: usize, s: usize, rw: bool) -> Result<(), String> {
    close_both(t, held, s);
    let (hf, uf) =
        if rw { (rustix::fs::OFlags::RDWR, OpenFlags::RDWR) } else { (rustix::fs::OFlags::RDONLY, OpenFlags::RDONLY) };
    let h = rustix::fs::open(root.join(NAMES[a]), hf | rustix::fs::OFlags::CLOEXEC, rustix::fs::Mode::empty());
    let u = t.open(format!("/{}", NAMES[a]).as_bytes(), uf, 0);
    let (he, ue) = (h.as_ref().err().map(|e| e.raw_os_error()), u.as_ref().err().map(|e| e.raw()));
    if he != ue {
        return Err(format!("open {} rw={rw}: host {he:?}, uvfs {ue:?}", NAMES[a]));
    }
    held.host[s] = h.ok();
    held.uvfs[s] = u.ok();
    Ok(())
}

fn close_both(t: &uvfs::Task, held: &mut Held, s: usize) {
    held.host[s] = None;
    if let Some(fd) = held.uvfs[s].take() {
        t.close(fd).unwrap();
    }
}

/// What a file shows: type and permission bits, inode, size, links, owner, group, data
/// and status-change times.
type View = (u32, u64, u64, u64, u32, u32, (i64, i64), (i64, i64));

/// What a path shows (a [`View`] and the extended attribute's value or errno), or the
/// errno.
fn host_view(root: &Path, rel: &str) -> Result<(View, Result<Vec<u8>, i32>), i32> {
    let m = std::fs::symlink_metadata(root.join(rel)).map_err(|e| e.raw_os_error().unwrap_or(0))?;
    let v = (
        m.mode(),
        m.ino(),
        m.size(),
        m.nlink(),
        m.uid(),
        m.gid(),
        (m.mtime(), m.mtime_nsec()),
        (m.ctime(), m.ctime_nsec()),
    );
    let mut buf = [0u8; 16];
    let x = rustix::fs::lgetxattr(root.join(rel), XNAME, &mut buf[..])
        .map(|n| buf[..n].to_vec())
        .map_err(|e| e.raw_os_error());
    Ok((v, x))
}

fn uvfs_stat_view(s: &uvfs::Stat) -> View {
    (
        s.mode,
        s.ino,
        s.size,
        s.nlink as u64,
        s.uid,
        s.gid,
        (s.mtime.sec, s.mtime.nsec as i64),
        (s.ctime.sec, s.ctime.nsec as i64),
    )
}

fn uvfs_view(t: &uvfs::Task, rel: &str) -> Result<(View, Result<Vec<u8>, i32>), i32> {
    let p = format!("/{rel}").into_bytes();
    let s = t.lstat(&p).map_err(|e| e.raw())?;
    let mut buf = [0u8; 16];
    let x = t.lgetxattr(&p, XNAME.as_bytes(), &mut buf).map(|n| buf[..n].to_vec()).map_err(|e| e.raw());
    Ok((uvfs_stat_view(&s), x))
}

/// What a held descriptor shows: its file's [`View`] and its first bytes (or the errno of
/// reading them).
fn host_fd_view(fd: &std::os::fd::OwnedFd) -> (View, Result<Vec<u8>, i32>) {
    let s = rustix::fs::fstat(fd).unwrap();
    let v = (
        s.st_mode,
        s.st_ino,
        s.st_size as u64,
        s.st_nlink,
        s.st_uid,
        s.st_gid,
        (s.st_mtime, s.st_mtime_nsec as i64),
        (s.st_ctime, s.st_ctime_nsec as i64),
    );
    let mut buf = [0u8; 16];
    let d = rustix::io::pread(fd, &mut buf[..], 0).map(|n| buf[..n].to_vec()).map_err(|e| e.raw_os_error());
    (v, d)
}

fn uvfs_fd_view(t: &uvfs::Task, fd: uvfs::Fd) -> (View, Result<Vec<u8>, i32>) {
    let s = t.fstat(fd).unwrap();
    let mut buf = [0u8; 16];
    let d = t.pread(fd, &mut buf, 0).map(|n| buf[..n].to_vec()).map_err(|e| e.raw());
    (uvfs_stat_view(&s), d)
}

fn uvfs_list(t: &uvfs::Task, rel: &str) -> Option<Vec<Vec<u8>>> {
    let fd =
        t.open(format!("/{rel}").as_bytes(), OpenFlags::RDONLY | OpenFlags::DIRECTORY | OpenFlags::NOFOLLOW, 0).ok()?;
    let mut v: Vec<Vec<u8>> =
        t.getdents(fd, 1000).unwrap().into_iter().map(|e| e.name).filter(|n| n != b"." && n != b"..").collect();
    t.close(fd).unwrap();
    v.sort();
    Some(v)
}

proptest! {
    // PROPTEST_CASES overrides the count for a longer hunt.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Host changes interleaved with uvfs's own: after every step, every name (and the
    /// positions reached by `.` and `..`) shows through uvfs exactly what the host shows
    /// (type, mode, inode, size, links, owner, group, times, an extended attribute, or the
    /// errno), listings agree, and each descriptor held open shows what the host's
    /// descriptor for the same file shows (its attributes and first bytes), whichever side
    /// changed the file, by name or through a descriptor.
    #[test]
    fn uvfs_sees_what_the_host_holds(steps in proptest::collection::vec(step(), 1..24)) {
        let dir = tmp("seq");
        // A start with something cached: every name looked up (mostly misses).
        let vfs = vfs_over(dir.path(), STRICT);
        let t = vfs.root_task();
        for n in NAMES {
            let _ = t.lstat(format!("/{n}").as_bytes());
        }
        let mut held = Held::default();
        for (i, s) in steps.iter().enumerate() {
            match s {
                Step::Host(op) => apply(dir.path(), slot_of(op).and_then(|s| held.host[s].as_ref()), op),
                Step::Uvfs(op) => uvfs_do(&t, &held, op),
                Step::Open(a, slot, rw) => {
                    let r = open_both(dir.path(), &t, &mut held, *a, *slot, *rw);
                    prop_assert!(r.is_ok(), "after step {} ({:?}): {}", i, s, r.unwrap_err());
                }
                Step::Close(slot) => close_both(&t, &mut held, *slot),
            }
            for rel in NAMES.iter().chain(PROBES.iter()) {
                prop_assert_eq!(uvfs_view(&t, rel), host_view(dir.path(), rel), "after step {} ({:?}): {}", i, s, rel);
            }
            for rel in [".", "a", "b", "a/x"] {
                prop_assert_eq!(uvfs_list(&t, rel), host_list(dir.path(), rel), "after step {} ({:?}): list {}", i, s, rel);
            }
            for slot in 0..SLOTS {
                if let (Some(h), Some(u)) = (&held.host[slot], held.uvfs[slot]) {
                    prop_assert_eq!(uvfs_fd_view(&t, u), host_fd_view(h), "after step {} ({:?}): slot {}", i, s, slot);
                }
            }
        }
        for slot in 0..SLOTS {
            close_both(&t, &mut held, slot);
        }
    }
}

/// A host directory that vanishes under uvfs (removed on the host while uvfs stands in
/// it, holds files open in it and has its names cached) gives errno answers, never a
/// panic, in both modes: creations in it are ENOENT (the host's answer on its
/// descriptor), listings are empty, open files keep their data, and (revalidating) its
/// cached names go.
#[test]
fn vanished_host_directory() {
    for changes in [STRICT, HostChanges::Never] {
        let dir = tmp("vanish");
        std::fs::create_dir_all(dir.path().join("d/sub")).unwrap();
        std::fs::write(dir.path().join("d/f"), b"data").unwrap();
        let vfs = vfs_over(dir.path(), changes);
        let t = vfs.root_task();
        t.chdir(b"/d").unwrap();
        let fd = t.open(b"f", OpenFlags::RDONLY, 0).unwrap();
        assert!(t.stat(b"sub").is_ok());
        assert_eq!(t.stat(b"miss"), Err(Errno::ENOENT));
        std::fs::remove_dir_all(dir.path().join("d")).unwrap();
        assert_eq!(t.mkdir(b"new", 0o755), Err(Errno::ENOENT), "{changes:?}");
        assert_eq!(t.open(b"new", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644), Err(Errno::ENOENT), "{changes:?}");
        let dfd = t.open(b".", OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
        let names: Vec<Vec<u8>> = t.getdents(dfd, 100).unwrap().into_iter().map(|e| e.name).collect();
        assert!(names.iter().all(|n| n == b"." || n == b".."), "{changes:?}: {names:?}");
        t.close(dfd).unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(t.pread(fd, &mut buf, 0), Ok(4));
        assert_eq!(&buf[..4], b"data");
        t.close(fd).unwrap();
        if changes == STRICT {
            assert_eq!(t.stat(b"sub"), Err(Errno::ENOENT));
            assert_eq!(t.stat(b"/d"), Err(Errno::ENOENT));
            assert_eq!(t.stat(b"/d/f"), Err(Errno::ENOENT));
        } else {
            // Trusted caches answer what they hold; calls that reach the host get its errno.
            let _ = t.stat(b"sub");
            assert_eq!(t.unlink(b"f").err().map(|e| e == Errno::ENOENT || e == Errno::ESTALE), Some(true));
        }
        // Whatever the answers, the instance still works.
        t.chdir(b"/").unwrap();
        t.mkdir(b"/again", 0o755).unwrap();
        assert!(dir.path().join("again").is_dir());
    }
}

/// Host changes racing uvfs's own walks and changes, revalidating: nothing panics or
/// hangs, every answer is one the host could give (a file that is or was there, or an
/// errno of a missing name), and once the host is quiet again uvfs shows exactly what
/// the host holds. Exercises dropping and pruning cached directories while lockless walks
/// stand in them.
#[test]
fn host_changes_racing_walks() {
    let dir = tmp("race");
    let h = dir.path().to_path_buf();
    for d in ["x", "y"] {
        std::fs::create_dir_all(h.join(d).join("sub")).unwrap();
        for f in 0..4 {
            std::fs::write(h.join(format!("{d}/sub/f{f}")), b"1").unwrap();
        }
    }
    let vfs = vfs_over(&h, STRICT);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let walks = std::sync::atomic::AtomicUsize::new(0);
    let steps = std::env::var("UVFS_STRESS_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(3000usize);
    std::thread::scope(|s| {
        // The host: swaps x and y, makes and removes files and a directory, until the uvfs
        // threads have done their share.
        let host = s.spawn(|| {
            let mut i = 0usize;
            while walks.load(std::sync::atomic::Ordering::Relaxed) < 2 * steps {
                i += 1;
                let _ = rustix::fs::renameat_with(
                    rustix::fs::CWD,
                    h.join("x"),
                    rustix::fs::CWD,
                    h.join("y"),
                    rustix::fs::RenameFlags::EXCHANGE,
                );
                let f = h.join(format!("x/sub/f{}", i % 4));
                if i.is_multiple_of(3) {
                    let _ = std::fs::remove_file(&f);
                } else {
                    let _ = std::fs::write(&f, b"22");
                }
                if i.is_multiple_of(7) {
                    let _ = std::fs::remove_dir_all(h.join("y/tmp"));
                } else {
                    let _ = std::fs::create_dir(h.join("y/tmp"));
                }
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let mut workers = Vec::new();
        for k in 0..2usize {
            let (vfs, stop, walks) = (&vfs, &stop, &walks);
            workers.push(s.spawn(move || {
                let before = uvfs::counters().dentries_invalidated;
                let t = vfs.root_task();
                let mut i = k;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    i += 1;
                    walks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let d = if i.is_multiple_of(2) { "x" } else { "y" };
                    let p = format!("/{d}/sub/f{}", i % 4);
                    match t.stat(p.as_bytes()) {
                        Ok(st) => assert!(st.size == 1 || st.size == 2 || st.size == 0, "{p}: {st:?}"),
                        Err(Errno::ENOENT) => {}
                        Err(e) => panic!("{p}: {e:?}"),
                    }
                    match t.mkdir(format!("/{d}/tmp/m{k}").as_bytes(), 0o755) {
                        Ok(()) | Err(Errno::ENOENT | Errno::EEXIST) => {}
                        Err(e) => panic!("mkdir: {e:?}"),
                    }
                    if let Ok(fd) = t.open(format!("/{d}/sub").as_bytes(), OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0)
                    {
                        assert!(t.getdents(fd, 64).is_ok());
                        t.close(fd).unwrap();
                    }
                    let _ = t.stat(format!("/{d}/tmp/../sub/./f0").as_bytes());
                }
                uvfs::counters().dentries_invalidated - before
            }));
        }
        host.join().unwrap();
        // The host's changes did reach uvfs's cache (names were dropped and looked up again).
        let invalidated: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        assert!(invalidated > 0);
    });
    // Quiet again: every name shows what the host holds.
    let t = vfs.root_task();
    for rel in
        ["x", "y", "x/sub", "y/sub", "x/tmp", "y/tmp", "x/tmp/m0", "y/tmp/m1", "x/sub/f0", "y/sub/f1", "x/sub/f2"]
    {
        assert_eq!(uvfs_view(&t, rel), host_view(&h, rel), "{rel}");
    }
    for rel in [".", "x/sub", "y/sub", "x", "y"] {
        assert_eq!(uvfs_list(&t, rel), host_list(&h, rel), "list {rel}");
    }
}

/// A file capability (`security.capability`, a v2 `vfs_cap_data`: revision 2, permitted
/// `CAP_NET_RAW`), as root sets it.
fn caps() -> Vec<u8> {
    let mut v = 0x0200_0000u32.to_le_bytes().to_vec();
    for w in [1u32 << 13, 0, 0, 0] {
        v.extend_from_slice(&w.to_le_bytes());
    }
    v
}

/// `security.capability`, which the kernel asks a FUSE server for before every chown and
/// first write: under `HostChanges::Never` hostfs remembers that a file has none (it
/// made the file, or the host said so) and answers without asking the host, which the
/// capability set on the host behind its back shows; a set through uvfs is seen at once,
/// and a write or chown still takes a capability away (on the host too). By default
/// every question goes to the host.
#[test]
fn file_capability_absence_remembered() {
    const CAPS: &[u8] = b"security.capability";
    let get = |t: &uvfs::Task, p: &[u8]| {
        let mut buf = [0u8; 64];
        t.getxattr(p, CAPS, &mut buf).map(|n| buf[..n].to_vec())
    };
    let size = |t: &uvfs::Task, p: &[u8]| t.getxattr(p, CAPS, &mut []);
    for changes in [STRICT, HostChanges::Never] {
        let dir = tmp("caps");
        let h = dir.path();
        std::fs::write(h.join("old"), b"x").unwrap();
        rustix::fs::setxattr(h.join("old"), CAPS, &caps(), rustix::fs::XattrFlags::empty()).unwrap();
        let vfs = vfs_over(h, changes);
        let t = vfs.root_task();
        // A file found by lookup: the host is asked.
        assert_eq!(get(&t, b"/old"), Ok(caps()));
        assert_eq!(size(&t, b"/old"), Ok(caps().len()));
        // A chown takes it away, on the host too; then it is known absent.
        t.fchownat(DirFd::Cwd, b"/old", None, None, AtFlags::empty()).unwrap();
        assert_eq!(get(&t, b"/old"), Err(Errno::ENODATA));
        assert!(rustix::fs::getxattr(h.join("old"), CAPS, &mut [0u8; 64]).is_err());

        let fd = t.open(b"/new", OpenFlags::CREAT | OpenFlags::EXCL | OpenFlags::WRONLY, 0o755).unwrap();
        assert_eq!(size(&t, b"/new"), Err(Errno::ENODATA));
        // Set behind uvfs's back: seen by default, not under the promise.
        rustix::fs::setxattr(h.join("new"), CAPS, &caps(), rustix::fs::XattrFlags::empty()).unwrap();
        let behind = get(&t, b"/new");
        if changes == HostChanges::Never {
            assert_eq!(behind, Err(Errno::ENODATA));
            assert_eq!(size(&t, b"/old"), Err(Errno::ENODATA));
        } else {
            assert_eq!(behind, Ok(caps()));
        }
        rustix::fs::removexattr(h.join("new"), CAPS).unwrap();
        // Set through uvfs: seen at once, in both modes; a write takes it away.
        t.setxattr(b"/new", CAPS, &caps(), uvfs::XattrFlags::empty()).unwrap();
        assert_eq!(get(&t, b"/new"), Ok(caps()));
        assert_eq!(t.write(fd, b"y"), Ok(1));
        assert_eq!(get(&t, b"/new"), Err(Errno::ENODATA));
        assert!(rustix::fs::getxattr(h.join("new"), CAPS, &mut [0u8; 64]).is_err());
        // Set again: the next chown finds it.
        t.setxattr(b"/new", CAPS, &caps(), uvfs::XattrFlags::empty()).unwrap();
        assert_eq!(size(&t, b"/new"), Ok(caps().len()));
        t.fchown(fd, None, None).unwrap();
        assert_eq!(get(&t, b"/new"), Err(Errno::ENODATA));
        t.close(fd).unwrap();
    }
}

/// Xattr values and name lists larger than the small buffer hostfs reads into first, and
/// a caller's buffer too small for them (ERANGE), as the host answers.
#[test]
fn large_xattrs() {
    let dir = tmp("bigx");
    let h = dir.path();
    std::fs::write(h.join("f"), b"x").unwrap();
    let vfs = vfs_over(h, HostChanges::Never);
    let t = vfs.root_task();
    let big: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    t.setxattr(b"/f", b"user.big", &big, uvfs::XattrFlags::empty()).unwrap();
    let mut names = Vec::new();
    for i in 0..40 {
        let n = format!("user.a-fairly-long-attribute-name-{i:02}");
        t.setxattr(b"/f", n.as_bytes(), b"v", uvfs::XattrFlags::empty()).unwrap();
        names.push(n);
    }
    assert_eq!(t.getxattr(b"/f", b"user.big", &mut []), Ok(big.len()));
    let mut buf = vec![0u8; 65536];
    assert_eq!(t.getxattr(b"/f", b"user.big", &mut buf), Ok(big.len()));
    assert_eq!(&buf[..big.len()], &big[..]);
    assert_eq!(t.getxattr(b"/f", b"user.big", &mut buf[..big.len() - 1]), Err(Errno::ERANGE));
    assert_eq!(t.getxattr(b"/f", b"user.a-fairly-long-attribute-name-07", &mut buf), Ok(1));
    let n = t.listxattr(b"/f", &mut buf).unwrap();
    let mut listed: Vec<String> =
        buf[..n].split(|&b| b == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8(s.to_vec()).unwrap()).collect();
    listed.sort();
    let mut want = names.clone();
    want.push("user.big".into());
    want.sort();
    assert_eq!(listed, want);
    // An ACL of many entries, larger than the small buffer, read back whole.
    let mut acl = vec![AclEntry::new(AclTag::UserObj, 6)];
    acl.extend((1000..1040).map(|id| AclEntry::new(AclTag::User(id), 4)));
    acl.extend([AclEntry::new(AclTag::GroupObj, 4), AclEntry::new(AclTag::Mask, 6), AclEntry::new(AclTag::Other, 4)]);
    let acl = Acl::new(acl);
    t.set_acl(DirFd::Cwd, b"/f", uvfs::AclType::Access, &acl, AtFlags::empty()).unwrap();
    drop(t);
    drop(vfs);
    let vfs = vfs_over(h, HostChanges::Never);
    let t = vfs.root_task();
    assert_eq!(t.get_acl(DirFd::Cwd, b"/f", uvfs::AclType::Access, AtFlags::empty()), Ok(Some(acl)));
}

/// A re-reading of a host file's attributes (`FileSystem::host_changed`, what the FUSE
/// server calls once the kernel wrote the file itself, through passthrough) racing
/// `chmod`s through uvfs: every `stat` after a `chmod` shows its mode. The re-reading
/// could read the host before a `chmod` and apply what it read after it, undoing it (a
/// run of the mount's differential ACL sequences over `/dev/fuse` found it).
#[test]
fn a_host_rereading_never_undoes_a_chmod() {
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    let dir = tmp("reread");
    std::fs::write(dir.path().join("f"), b"x").unwrap();
    let vfs = vfs_over(dir.path(), HostChanges::Never);
    let t = vfs.root_task();
    let f = t.openat_file(DirFd::Cwd, b"/f", OpenFlags::RDONLY, 0).unwrap();
    let stop = AtomicBool::new(false);
    let rereadings = std::sync::atomic::AtomicU32::new(0);
    let wrong = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Relaxed) {
                f.inode().sb().fs().host_changed(f.inode());
                rereadings.fetch_add(1, Relaxed);
            }
        });
        let mut wrong = Vec::new();
        for i in 0..20_000u32 {
            let mode = 0o600 | (i & 0o077);
            t.fchmodat(DirFd::Cwd, b"/f", mode, AtFlags::empty()).unwrap();
            let seen = t.stat(b"/f").unwrap().mode & 0o7777;
            if seen != mode {
                wrong.push((mode, seen));
            }
        }
        stop.store(true, Relaxed);
        wrong
    });
    assert!(rereadings.load(Relaxed) > 0);
    assert!(wrong.is_empty(), "{} chmods undone, e.g. (set, seen): {:?}", wrong.len(), &wrong[..wrong.len().min(5)]);
}

/// A change the host refuses is not shown: the host's immutable flag, set behind uvfs's
/// back on a file it has cached, makes the host's chmod, chown and utimes fail with EPERM;
/// uvfs returns that error and its attributes stay the host's (the VFS used to apply a
/// change to the inode before asking the filesystem to persist it).
#[test]
fn a_change_the_host_refuses_is_not_shown() {
    /// The host file's immutable flag, set while alive (`FS_IOC_SETFLAGS`): cleared on
    /// drop, also when the test fails, so that the directory can be removed.
    struct Immutable(std::fs::File);
    fn set_flags(f: &std::fs::File, on: bool) -> rustix::io::Result<()> {
        use rustix::fs::IFlags;
        let flags = rustix::fs::ioctl_getflags(f)?;
        rustix::fs::ioctl_setflags(f, if on { flags | IFlags::IMMUTABLE } else { flags - IFlags::IMMUTABLE })
    }
    impl Drop for Immutable {
        fn drop(&mut self) {
            let _ = set_flags(&self.0, false);
        }
    }

    let dir = tmp("refused");
    let path = dir.path().join("f");
    std::fs::write(&path, b"x").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let vfs = vfs_over(dir.path(), HostChanges::Never);
    let t = vfs.root_task();
    let before = t.stat(b"/f").unwrap();
    let host = std::fs::File::open(&path).unwrap();
    set_flags(&host, true).expect("FS_IOC_SETFLAGS on /dev/shm (tmpfs)");
    let _flag = Immutable(host);

    assert_eq!(t.fchmodat(DirFd::Cwd, b"/f", 0o600, AtFlags::empty()), Err(Errno::EPERM));
    assert_eq!(t.fchownat(DirFd::Cwd, b"/f", Some(Uid(1000)), Some(Gid(1000)), AtFlags::empty()), Err(Errno::EPERM));
    assert_eq!(t.utimensat(DirFd::Cwd, b"/f", None, AtFlags::empty()), Err(Errno::EPERM));
    let after = t.stat(b"/f").unwrap();
    assert_eq!(
        (after.mode, after.uid, after.gid, after.atime, after.mtime, after.ctime),
        (before.mode, before.uid, before.gid, before.atime, before.mtime, before.ctime)
    );
    let host_st = std::fs::metadata(&path).unwrap();
    assert_eq!((host_st.mode(), host_st.uid(), host_st.gid()), (after.mode, after.uid, after.gid));
}
