//! The path cache (`FastPaths::PATH_CACHE`, Tsai et al.'s whole-path table): a cached
//! path is answered by one probe, and every change that could change its answer is seen
//! at once: renames, removals, a directory's mode and ACL, mounts, the working directory,
//! the root, other instances. Counts come from `uvfs::counters()` (per thread).

use uvfs::{
    Acl, AclEntry, AclTag, AclType, AtFlags, Credentials, DirFd, Errno, FastPaths, Gid, MountSource, OpenFlags,
    RenameFlags, Task, Uid, Vfs, VfsConfig, counters,
};

const DEEP: &[u8] = b"/base/d1/d2/d3/d4/d5/d6/d7/d8/f";

fn vfs(fast: FastPaths) -> Vfs {
    Vfs::new(VfsConfig { fast_paths: fast, ..VfsConfig::default() })
}

/// `/base/d1/.../d8/f`, every directory 0755, the file holding `content`.
fn tree(t: &Task, content: &[u8]) {
    let mut p = b"/base".to_vec();
    t.mkdir(&p, 0o755).unwrap();
    for i in 1..=8 {
        p.extend_from_slice(format!("/d{i}").as_bytes());
        t.mkdir(&p, 0o755).unwrap();
    }
    write(t, DEEP, content);
}

fn write(t: &Task, path: &[u8], content: &[u8]) {
    let fd = t.open(path, OpenFlags::CREAT | OpenFlags::TRUNC | OpenFlags::WRONLY, 0o644).unwrap();
    assert_eq!(t.write(fd, content).unwrap(), content.len());
    t.close(fd).unwrap();
}

fn size(t: &Task, path: &[u8]) -> Result<u64, Errno> {
    t.fstatat(DirFd::Cwd, path, AtFlags::empty()).map(|s| s.size)
}

fn hits() -> u64 {
    counters().path_cache_hits
}

fn fills() -> u64 {
    counters().path_cache_fills
}

/// An access ACL naming `uid` with `perm`; the owner has rwx, the mask lets `perm` or the
/// group's bits through, whichever is more.
fn naming(uid: u32, perm: u16, group: u16, other: u16) -> Acl {
    Acl::new(vec![
        AclEntry::new(AclTag::UserObj, 7),
        AclEntry::new(AclTag::User(uid), perm),
        AclEntry::new(AclTag::GroupObj, group),
        AclEntry::new(AclTag::Mask, perm | group),
        AclEntry::new(AclTag::Other, other),
    ])
}

fn set_acl(t: &Task, path: &[u8], acl: Acl) {
    t.set_acl(DirFd::Cwd, path, AclType::Access, &acl, AtFlags::empty()).unwrap();
}

fn user(t: &Task) -> Task {
    t.with_credentials(Credentials::new(Uid(2000), Gid(2000), &[]))
}

#[test]
fn a_deep_path_is_learned_once_then_answered_by_the_cache() {
    let v = vfs(FastPaths::all());
    let t = v.root_task();
    tree(&t, b"12345");
    let (h, f) = (hits(), fills());
    assert_eq!(size(&t, DEEP), Ok(5));
    assert_eq!((hits() - h, fills() - f), (0, 1), "the first walk fills");
    let (h, f, l) = (hits(), fills(), counters().locks);
    for _ in 0..100 {
        assert_eq!(size(&t, DEEP), Ok(5));
    }
    assert_eq!((hits() - h, fills() - f), (100, 0), "the next ones hit");
    assert_eq!(counters().locks, l, "a hit takes no lock");
    // Other credentials are another key: learned once for them too.
    let u = user(&t);
    let (h, f) = (hits(), fills());
    assert_eq!(size(&u, DEEP), Ok(5));
    assert_eq!(size(&u, DEEP), Ok(5));
    assert_eq!((hits() - h, fills() - f), (1, 1));
    // A fork shares its parent's credentials, and so its answers.
    let h = hits();
    assert_eq!(size(&t.fork(), DEEP), Ok(5));
    assert_eq!(hits() - h, 1);
    // lstat and stat, and opens, are different walks of the same path.
    let (h, f) = (hits(), fills());
    t.fstatat(DirFd::Cwd, DEEP, AtFlags::SYMLINK_NOFOLLOW).unwrap();
    t.fstatat(DirFd::Cwd, DEEP, AtFlags::SYMLINK_NOFOLLOW).unwrap();
    assert_eq!((hits() - h, fills() - f), (1, 1));
    let fd = t.open(DEEP, OpenFlags::RDONLY, 0).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(t.read(fd, &mut buf).unwrap(), 5);
    t.close(fd).unwrap();
}

#[test]
fn switched_off_it_neither_learns_nor_answers() {
    for off in [FastPaths::PATH_CACHE, FastPaths::ACL, FastPaths::LOCKLESS_WALK] {
        let v = vfs(FastPaths::all() - off);
        let t = v.root_task();
        tree(&t, b"x");
        let (h, f) = (hits(), fills());
        for _ in 0..10 {
            assert_eq!(size(&t, DEEP), Ok(1));
        }
        assert_eq!((hits() - h, fills() - f), (0, 0), "{off:?} off");
    }
}

#[test]
fn renames_of_any_directory_on_the_path_are_seen_at_once() {
    let v = vfs(FastPaths::all());
    let t = v.root_task();
    tree(&t, b"abc");
    t.mkdir(b"/other", 0o755).unwrap();
    assert_eq!(size(&t, DEEP), Ok(3));
    assert_eq!(size(&t, DEEP), Ok(3));
    t.rename(b"/base/d1/d2/d3", b"/other/d3").unwrap();
    assert_eq!(size(&t, DEEP), Err(Errno::ENOENT));
    assert_eq!(size(&t, b"/other/d3/d4/d5/d6/d7/d8/f"), Ok(3));
    // Something else takes the old place.
    t.mkdir(b"/base/d1/d2/d3", 0o755).unwrap();
    assert_eq!(size(&t, DEEP), Err(Errno::ENOENT));
    t.rmdir(b"/base/d1/d2/d3").unwrap();
    t.rename(b"/other/d3", b"/base/d1/d2/d3").unwrap();
    assert_eq!(size(&t, DEEP), Ok(3));
    // An exchange of two directories with the same shape.
    t.mkdir(b"/base/d1/e2", 0o755).unwrap();
    let mut p = b"/base/d1/e2".to_vec();
    for i in 3..=8 {
        p.extend_from_slice(format!("/d{i}").as_bytes());
        t.mkdir(&p, 0o755).unwrap();
    }
    p.extend_from_slice(b"/f");
    write(&t, &p, b"exchanged");
    assert_eq!(size(&t, DEEP), Ok(3));
    t.renameat2(DirFd::Cwd, b"/base/d1/d2", DirFd::Cwd, b"/base/d1/e2", RenameFlags::EXCHANGE).unwrap();
    assert_eq!(size(&t, DEEP), Ok(9));
    // `..` follows the directory's parent of the moment.
    let dotdot = b"/base/d1/d2/d3/../d3/d4/d5/d6/d7/d8/f";
    assert_eq!(size(&t, dotdot), Ok(9));
    assert_eq!(size(&t, dotdot), Ok(9));
    t.rename(b"/base/d1/d2/d3", b"/other/d3").unwrap();
    assert_eq!(size(&t, dotdot), Err(Errno::ENOENT));
}

#[test]
fn removed_and_replaced_files_are_seen_at_once() {
    let v = vfs(FastPaths::all());
    let t = v.root_task();
    tree(&t, b"one");
    let ino = t.stat(DEEP).unwrap().ino;
    assert_eq!(t.stat(DEEP).unwrap().ino, ino);
    t.unlink(DEEP).unwrap();
    assert_eq!(size(&t, DEEP), Err(Errno::ENOENT));
    write(&t, DEEP, b"second");
    assert_ne!(t.stat(DEEP).unwrap().ino, ino);
    assert_eq!(size(&t, DEEP), Ok(6));
    // Replaced by a rename over it.
    write(&t, b"/base/new", b"renamed over");
    assert_eq!(size(&t, DEEP), Ok(6));
    t.rename(b"/base/new", DEEP).unwrap();
    assert_eq!(size(&t, DEEP), Ok(12));
    // A directory on the path, its own path cached, removed and made again, empty.
    t.unlink(DEEP).unwrap();
    let dir = b"/base/d1/d2/d3/d4/d5/d6/d7/d8";
    let ino = t.stat(dir).unwrap().ino;
    let h = hits();
    assert_eq!(t.stat(dir).unwrap().ino, ino);
    assert_eq!(hits() - h, 1, "the directory's path is cached");
    t.rmdir(dir).unwrap();
    assert_eq!(size(&t, dir), Err(Errno::ENOENT));
    t.mkdir(dir, 0o755).unwrap();
    assert_ne!(t.stat(dir).unwrap().ino, ino);
    assert_eq!(size(&t, DEEP), Err(Errno::ENOENT));
}

#[test]
fn symlinks_on_the_path_are_followed_anew_when_replaced() {
    let v = vfs(FastPaths::all());
    let t = v.root_task();
    tree(&t, b"deep");
    t.mkdir(b"/flat", 0o755).unwrap();
    write(&t, b"/flat/f", b"flat file");
    t.symlink(b"base/d1/d2/d3/d4/d5/d6/d7/d8", b"/link").unwrap();
    assert_eq!(size(&t, b"/link/f"), Ok(4));
    assert_eq!(size(&t, b"/link/f"), Ok(4));
    t.unlink(b"/link").unwrap();
    t.symlink(b"/flat", b"/link").unwrap();
    assert_eq!(size(&t, b"/link/f"), Ok(9));
    assert_eq!(size(&t, b"/link/f"), Ok(9));
    // The last component: stat follows, lstat does not.
    t.symlink(b"/flat/f", b"/flat/l").unwrap();
    assert_eq!(size(&t, b"/flat/l"), Ok(9));
    assert_eq!(t.fstatat(DirFd::Cwd, b"/flat/l", AtFlags::SYMLINK_NOFOLLOW).unwrap().size, 7);
    assert_eq!(size(&t, b"/flat/l"), Ok(9));
}

#[test]
fn a_directory_closed_to_others_is_closed_at_once() {
    let v = vfs(FastPaths::all());
    let t = v.root_task();
    tree(&t, b"secret");
    let u = user(&t);
    assert_eq!(size(&u, DEEP), Ok(6));
    assert_eq!(size(&u, DEEP), Ok(6));
    t.fchmodat(DirFd::Cwd, b"/base/d1/d2/d3", 0o750, AtFlags::empty()).unwrap();
    assert_eq!(size(&u, DEEP), Err(Errno::EACCES));
    assert_eq!(size(&t, DEEP), Ok(6), "root still may");
    assert_eq!(size(&t, DEEP), Ok(6));
    // Root's answer needed its capability: it is root's alone.
    assert_eq!(size(&u, DEEP), Err(Errno::EACCES));
    t.fchmodat(DirFd::Cwd, b"/base/d1/d2/d3", 0o755, AtFlags::empty()).unwrap();
    assert_eq!(size(&u, DEEP), Ok(6));
    assert_eq!(size(&u, DEEP), Ok(6));
    // An ACL that names the user without search permission, mode bits unchanged for
    // everyone else.
    set_acl(&t, b"/base/d1/d2/d3/d4", naming(2000, 4, 5, 5));
    assert_eq!(size(&u, DEEP), Err(Errno::EACCES));
    assert_eq!(size(&t.with_credentials(Credentials::new(Uid(3000), Gid(3000), &[])), DEEP), Ok(6));
}

#[test]
fn mounts_on_the_path_are_seen_at_once() {
    let v = vfs(FastPaths::all());
    let t = v.root_task();
    tree(&t, b"under");
    assert_eq!(size(&t, DEEP), Ok(5));
    assert_eq!(size(&t, DEEP), Ok(5));
    t.mount(MountSource::MemFs(Default::default()), b"/base/d1/d2/d3/d4/d5", uvfs::MountFlags::empty()).unwrap();
    assert_eq!(size(&t, DEEP), Err(Errno::ENOENT));
    t.mkdir(b"/base/d1/d2/d3/d4/d5/d6", 0o755).unwrap();
    t.mkdir(b"/base/d1/d2/d3/d4/d5/d6/d7", 0o755).unwrap();
    t.mkdir(b"/base/d1/d2/d3/d4/d5/d6/d7/d8", 0o755).unwrap();
    write(&t, DEEP, b"on top");
    assert_eq!(size(&t, DEEP), Ok(6));
    assert_eq!(size(&t, DEEP), Ok(6));
    t.umount(b"/base/d1/d2/d3/d4/d5").unwrap();
    assert_eq!(size(&t, DEEP), Ok(5));
    // A walk that crosses into a mount is not learned.
    t.mount(MountSource::MemFs(Default::default()), b"/base/d1/d2/d3/d4/d5/d6/d7/d8", uvfs::MountFlags::empty())
        .unwrap();
    write(&t, DEEP, b"in the mount");
    let (h, f) = (hits(), fills());
    assert_eq!(size(&t, DEEP), Ok(12));
    assert_eq!(size(&t, DEEP), Ok(12));
    assert_eq!((hits() - h, fills() - f), (0, 0));
}

#[test]
fn the_start_and_root_are_part_of_the_key() {
    let v = vfs(FastPaths::all());
    let t = v.root_task();
    for d in [&b"/a"[..], b"/a/x", b"/b", b"/b/x"] {
        t.mkdir(d, 0o755).unwrap();
    }
    write(&t, b"/a/x/f", b"a");
    write(&t, b"/b/x/f", b"bb");
    t.chdir(b"/a").unwrap();
    assert_eq!(size(&t, b"x/f"), Ok(1));
    assert_eq!(size(&t, b"x/f"), Ok(1));
    t.chdir(b"/b").unwrap();
    assert_eq!(size(&t, b"x/f"), Ok(2));
    assert_eq!(size(&t, b"x/f"), Ok(2));
    let a = t.open(b"/a", OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
    assert_eq!(t.fstatat(DirFd::Fd(a), b"x/f", AtFlags::empty()).unwrap().size, 1);
    assert_eq!(t.fstatat(DirFd::Fd(a), b"x/f", AtFlags::empty()).unwrap().size, 1);
    t.close(a).unwrap();
    // The same absolute path under another root, and `..` at the root.
    let c = t.fork();
    c.chroot(b"/b").unwrap();
    assert_eq!(size(&t, b"/x/f"), Err(Errno::ENOENT));
    assert_eq!(size(&c, b"/x/f"), Ok(2));
    assert_eq!(size(&c, b"/x/f"), Ok(2));
    assert_eq!(size(&c, b"/../../x/f"), Ok(2));
    assert_eq!(size(&c, b"/../../x/f"), Ok(2));
    assert_eq!(size(&t, b"/../../a/x/f"), Ok(1));
    // Another instance with the same shape, on the same thread.
    let w = vfs(FastPaths::all());
    let wt = w.root_task();
    for d in [&b"/a"[..], b"/a/x"] {
        wt.mkdir(d, 0o755).unwrap();
    }
    write(&wt, b"/a/x/f", b"other instance");
    assert_eq!(size(&t, b"/a/x/f"), Ok(1));
    assert_eq!(size(&wt, b"/a/x/f"), Ok(14));
    assert_eq!(size(&t, b"/a/x/f"), Ok(1));
    assert_eq!(size(&wt, b"/a/x/f"), Ok(14));
}

#[test]
fn a_removed_working_directory_is_never_a_key() {
    let v = vfs(FastPaths::all());
    let t = v.root_task();
    t.mkdir(b"/gone", 0o755).unwrap();
    t.chdir(b"/gone").unwrap();
    t.rmdir(b"/gone").unwrap();
    let (h, f) = (hits(), fills());
    assert_eq!(t.stat(b".").unwrap().nlink, 0);
    assert_eq!(t.stat(b".").unwrap().nlink, 0);
    assert_eq!((hits() - h, fills() - f), (0, 0));
}

#[test]
fn what_the_walk_checks_last_is_part_of_the_answer() {
    let v = vfs(FastPaths::all());
    let t = v.root_task();
    tree(&t, b"f");
    // O_DIRECTORY and a trailing slash on a file: ENOTDIR every time.
    for _ in 0..3 {
        assert_eq!(t.open(DEEP, OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).map(|_| ()), Err(Errno::ENOTDIR));
        let mut slash = DEEP.to_vec();
        slash.push(b'/');
        assert_eq!(size(&t, &slash), Err(Errno::ENOTDIR));
    }
    // Paths longer than an entry holds inline are learned too, and two long paths that
    // differ only past the inline part are told apart.
    let mut long = b"/base".to_vec();
    for _ in 0..60 {
        long.extend_from_slice(b"/d1/..");
    }
    let mut other = long.clone();
    long.extend_from_slice(b"/d1/d2/d3/d4/d5/d6/d7/d8/f");
    other.extend_from_slice(b"/d1/d2/d3/d4/d5/d6/d7/d8");
    assert!(long.len() > 255);
    let (h, f) = (hits(), fills());
    assert_eq!(size(&t, &long), Ok(1));
    assert_eq!(size(&t, &long), Ok(1));
    assert_eq!((hits() - h, fills() - f), (1, 1));
    let dir = size(&t, &other).unwrap();
    assert_eq!(size(&t, &other), Ok(dir));
    assert_eq!(size(&t, &long), Ok(1));
    t.rename(b"/base/d1/d2", b"/base/moved").unwrap();
    assert_eq!(size(&t, &long), Err(Errno::ENOENT));
}

/// [`tree`] holding `group`, its d3 searchable by root and group 100 only.
fn group_only_d3(t: &Task) {
    tree(t, b"group");
    t.fchmodat(DirFd::Cwd, b"/base/d1/d2/d3", 0o750, AtFlags::empty()).unwrap();
    t.fchownat(DirFd::Cwd, b"/base/d1/d2/d3", Some(Uid(0)), Some(Gid(100)), AtFlags::empty()).unwrap();
}

#[test]
fn answers_that_depend_on_who_asks_are_kept_per_credentials() {
    let v = vfs(FastPaths::all());
    let t = v.root_task();
    group_only_d3(&t);
    let member = t.with_credentials(Credentials::new(Uid(1000), Gid(100), &[]));
    let outsider = t.with_credentials(Credentials::new(Uid(1001), Gid(200), &[]));
    let (h, f) = (hits(), fills());
    assert_eq!(size(&member, DEEP), Ok(5));
    assert_eq!(size(&member, DEEP), Ok(5));
    assert_eq!((hits() - h, fills() - f), (1, 1), "the member's walk is learned for the member");
    assert_eq!(size(&outsider, DEEP), Err(Errno::EACCES));
    assert_eq!(size(&outsider, DEEP), Err(Errno::EACCES));
    // The same ids installed again are other credentials: learned anew, same answer.
    member.set_credentials(Credentials::new(Uid(1001), Gid(200), &[]));
    assert_eq!(size(&member, DEEP), Err(Errno::EACCES));
    member.set_credentials(Credentials::new(Uid(1000), Gid(100), &[]));
    assert_eq!(size(&member, DEEP), Ok(5));
    assert_eq!(size(&member, DEEP), Ok(5));
    // The directory's group changes: the member is out at once, the outsider in.
    t.fchownat(DirFd::Cwd, b"/base/d1/d2/d3", None, Some(Gid(200)), AtFlags::empty()).unwrap();
    assert_eq!(size(&member, DEEP), Err(Errno::EACCES));
    assert_eq!(size(&outsider, DEEP), Ok(5));
    assert_eq!(size(&outsider, DEEP), Ok(5));
    // Its owner changes to the outsider, group bits gone: still in, as the owner.
    t.fchmodat(DirFd::Cwd, b"/base/d1/d2/d3", 0o700, AtFlags::empty()).unwrap();
    assert_eq!(size(&outsider, DEEP), Err(Errno::EACCES));
    t.fchownat(DirFd::Cwd, b"/base/d1/d2/d3", Some(Uid(1001)), None, AtFlags::empty()).unwrap();
    assert_eq!(size(&outsider, DEEP), Ok(5));
    assert_eq!(size(&outsider, DEEP), Ok(5));
    t.fchownat(DirFd::Cwd, b"/base/d1/d2/d3", Some(Uid(0)), None, AtFlags::empty()).unwrap();
    assert_eq!(size(&outsider, DEEP), Err(Errno::EACCES));
    // An ACL entry for the member, then its removal.
    set_acl(&t, b"/base/d1/d2/d3", naming(1000, 5, 0, 0));
    assert_eq!(size(&member, DEEP), Ok(5));
    assert_eq!(size(&member, DEEP), Ok(5));
    set_acl(&t, b"/base/d1/d2/d3", naming(1000, 4, 0, 0));
    assert_eq!(size(&member, DEEP), Err(Errno::EACCES));
    // access(2) checks with credentials no task installed: the member's real ids.
    set_acl(&t, b"/base/d1/d2/d3", naming(1000, 5, 0, 0));
    for _ in 0..3 {
        assert_eq!(member.faccessat(DirFd::Cwd, DEEP, uvfs::AccessMode::R_OK, AtFlags::empty()), Ok(()));
        assert_eq!(outsider.faccessat(DirFd::Cwd, DEEP, uvfs::AccessMode::F_OK, AtFlags::empty()), Err(Errno::EACCES));
    }
}

// ---------------------------------------------------------------- cache on against cache off

mod random {
    //! Random sequences of the changes an answer depends on, applied to two instances, one
    //! with the path cache and one without: after every change, every probe path, stated
    //! twice (the second time from the cache) by root, a user and a group member, follow
    //! and nofollow, answers the same on both. Inode numbers are allocated in the same
    //! order on both, so they are compared too.

    use proptest::prelude::*;
    use uvfs::{
        AclType, AtFlags, Credentials, DirFd, Errno, FastPaths, Gid, MountFlags, MountSource, OpenFlags, Task, Uid,
        Vfs, VfsConfig,
    };

    #[derive(Clone, Debug)]
    enum Op {
        Mkdir(&'static str),
        Create(&'static str),
        Symlink(&'static str, &'static str),
        Unlink(&'static str),
        Rmdir(&'static str),
        Rename(&'static str, &'static str),
        Chmod(&'static str, u32),
        Chown(&'static str, u32, u32),
        DenyAcl(&'static str),
        Mount(&'static str),
        Umount(&'static str),
        Chdir(&'static str),
    }

    const PATHS: &[&str] = &["/a", "/b", "/a/b", "/a/c", "/b/a", "/a/b/c", "/b/a/c", "/l", "/a/l", "/a/b/l"];
    const TARGETS: &[&str] = &["a", "/a/b", "..", "b/a", "/nowhere", "c"];
    const PROBES: &[&str] = &[
        "/a",
        "/a/b",
        "/a/b/c",
        "/b/a/c",
        "/l",
        "/l/b",
        "/l/c",
        "/a/l",
        "/a/l/c",
        "/a/b/l",
        "/a/b/l/c",
        "/a/b/../c",
        "/a/../b/a",
        "a/b",
        "b/c",
        "../a",
        "c",
        "/a/b/c/",
        "/l/",
    ];

    fn op() -> impl Strategy<Value = Op> {
        let path = prop::sample::select(PATHS);
        let target = prop::sample::select(TARGETS);
        let id = prop::sample::select(&[0u32, 1000, 2000][..]);
        prop_oneof![
            4 => path.clone().prop_map(Op::Mkdir),
            3 => path.clone().prop_map(Op::Create),
            2 => (target, path.clone()).prop_map(|(t, p)| Op::Symlink(t, p)),
            2 => path.clone().prop_map(Op::Unlink),
            2 => path.clone().prop_map(Op::Rmdir),
            4 => (path.clone(), path.clone()).prop_map(|(a, b)| Op::Rename(a, b)),
            4 => (path.clone(), prop::sample::select(&[0o700u32, 0o710, 0o750, 0o755, 0o711, 0o701][..]))
                .prop_map(|(p, m)| Op::Chmod(p, m)),
            4 => (path.clone(), id.clone(), id).prop_map(|(p, u, g)| Op::Chown(p, u, g)),
            1 => path.clone().prop_map(Op::DenyAcl),
            1 => path.clone().prop_map(Op::Mount),
            1 => path.clone().prop_map(Op::Umount),
            1 => prop::sample::select(&["/", "/a", "/a/b", "/b"][..]).prop_map(Op::Chdir),
        ]
    }

    fn apply(t: &Task, op: &Op) -> Result<(), Errno> {
        let b = |s: &str| s.as_bytes().to_vec();
        match op {
            Op::Mkdir(p) => t.mkdir(&b(p), 0o755),
            Op::Create(p) => t.open(&b(p), OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).and_then(|fd| t.close(fd)),
            Op::Symlink(target, p) => t.symlink(&b(target), &b(p)),
            Op::Unlink(p) => t.unlink(&b(p)),
            Op::Rmdir(p) => t.rmdir(&b(p)),
            Op::Rename(a, c) => t.rename(&b(a), &b(c)),
            Op::Chmod(p, m) => t.fchmodat(DirFd::Cwd, &b(p), *m, AtFlags::empty()),
            Op::Chown(p, u, g) => t.fchownat(DirFd::Cwd, &b(p), Some(Uid(*u)), Some(Gid(*g)), AtFlags::empty()),
            Op::DenyAcl(p) => {
                t.set_acl(DirFd::Cwd, &b(p), AclType::Access, &super::naming(1000, 0, 5, 5), AtFlags::empty())
            }
            Op::Mount(p) => t.mount(MountSource::MemFs(Default::default()), &b(p), MountFlags::empty()),
            Op::Umount(p) => t.umount(&b(p)),
            Op::Chdir(p) => t.chdir(&b(p)),
        }
    }

    type Seen = Result<(u64, u32, u64, u32, u32, u32), Errno>;

    fn probe(t: &Task, p: &str, flags: AtFlags) -> Seen {
        t.fstatat(DirFd::Cwd, p.as_bytes(), flags).map(|s| (s.ino, s.mode, s.size, s.nlink, s.uid, s.gid))
    }

    /// Root, a user, and a member of group 1000; each a task of its own instance.
    fn tasks(v: &Vfs) -> Vec<Task> {
        let root = v.root_task();
        let user = root.with_credentials(Credentials::new(Uid(1000), Gid(1000), &[]));
        let member = root.with_credentials(Credentials::new(Uid(2000), Gid(2000), &[Gid(1000)]));
        vec![root, user, member]
    }

    /// What every sequence starts from: a tree the probes walk, with symlinks.
    const START: &[Op] = &[
        Op::Mkdir("/a"),
        Op::Mkdir("/b"),
        Op::Mkdir("/a/b"),
        Op::Mkdir("/b/a"),
        Op::Create("/a/b/c"),
        Op::Create("/b/a/c"),
        Op::Create("/a/c"),
        Op::Symlink("a", "/l"),
        Op::Symlink("/a/b", "/a/l"),
        Op::Symlink("..", "/a/b/l"),
    ];

    /// Where the two instances keep their trees.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Root {
        Memfs,
        /// Each its own host directory, trusted not to change (`HostChanges::Never`: no
        /// revalidation, so the lockless walk and the path cache answer there too, over
        /// dentries a miss caches from the host, negative ones included).
        Hostfs,
    }

    fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
        run_on(Root::Memfs, &ops)?;
        run_on(Root::Hostfs, &ops)
    }

    fn run_on(root: Root, ops: &[Op]) -> Result<(), TestCaseError> {
        let config = |fast| VfsConfig {
            fast_paths: fast,
            root_size_limit: Some(0),
            root_inode_limit: Some(0),
            ..VfsConfig::default()
        };
        let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let make = |fast, dir: &std::path::Path| match root {
            Root::Memfs => Vfs::new(config(fast)),
            Root::Hostfs => {
                use uvfs::fs::hostfs::{HostChanges, HostFs, HostFsOptions};
                let opts = HostFsOptions { changes: HostChanges::Never, ..HostFsOptions::default() };
                Vfs::with_root(config(fast), Box::new(HostFs::with_options(dir, opts).unwrap())).unwrap()
            }
        };
        let on = make(FastPaths::all(), dirs.0.path());
        let off = make(FastPaths::all() - FastPaths::PATH_CACHE, dirs.1.path());
        let (ton, toff) = (tasks(&on), tasks(&off));
        for op in START {
            apply(&ton[0], op).unwrap();
            apply(&toff[0], op).unwrap();
        }
        // The two host directories number their inodes apart: compared without them.
        let seen = |x: Seen| if root == Root::Hostfs { x.map(|s| (0, s.1, s.2, s.3, s.4, s.5)) } else { x };
        for (i, op) in ops.iter().enumerate() {
            // Every change is made by root; the working directory moves for every task.
            let (a, b) = (apply(&ton[0], op), apply(&toff[0], op));
            prop_assert_eq!(a, b, "{:?}, step {} {:?}", root, i, op);
            if let Op::Chdir(p) = op {
                for t in ton.iter().chain(&toff).skip(1) {
                    let _ = t.chdir(p.as_bytes());
                }
            }
            for (who, (x, y)) in ton.iter().zip(&toff).enumerate() {
                for p in PROBES {
                    for flags in [AtFlags::empty(), AtFlags::SYMLINK_NOFOLLOW] {
                        let want = seen(probe(y, p, flags));
                        for round in 0..2 {
                            let got = seen(probe(x, p, flags));
                            prop_assert_eq!(
                                &got,
                                &want,
                                "{:?}, after step {} {:?}: task {}, {} {:?}, round {}",
                                root,
                                i,
                                op,
                                who,
                                p,
                                flags,
                                round
                            );
                        }
                    }
                }
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn random_changes_answer_as_without_the_cache(ops in prop::collection::vec(op(), 1..40)) {
            run(ops)?;
        }
    }

    /// The three changes that must each mark the stamp for a group member's cached answer
    /// to go (a directory its group may search, then the group changing alone).
    #[test]
    fn a_group_change_alone() {
        run(vec![Op::Chmod("/a", 0o750), Op::Chown("/a", 0, 1000), Op::Chown("/a", 0, 0)]).unwrap();
    }
}

/// Groups a test flips: a member of group 100 or of none.
#[derive(Debug, Default)]
struct Flipping {
    member: std::sync::atomic::AtomicBool,
    asked: std::sync::atomic::AtomicU64,
}

impl uvfs::GroupSource for Flipping {
    fn contains(&self, gid: Gid) -> bool {
        self.asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        gid == Gid(100) && self.member.load(std::sync::atomic::Ordering::Relaxed)
    }
    fn list(&self) -> Vec<Gid> {
        if self.member.load(std::sync::atomic::Ordering::Relaxed) { vec![Gid(100)] } else { Vec::new() }
    }
}

/// Credentials whose groups a source gives when a check asks (a FUSE server's callers)
/// answer for whoever the source speaks for at that moment: a walk whose search check
/// asked them is never kept by the path cache, and a walk that asked nothing still is.
#[test]
fn answers_from_asked_groups_are_not_kept() {
    let v = vfs(FastPaths::all());
    let t = v.root_task();
    group_only_d3(&t);
    let src = std::sync::Arc::new(Flipping::default());
    let u = t.with_credentials(Credentials::with_group_source(Uid(1000), Gid(1000), src.clone()));
    let asked = || src.asked.load(std::sync::atomic::Ordering::Relaxed);
    // Nothing on the way asks while every directory lets every class search.
    t.fchmodat(DirFd::Cwd, b"/base/d1/d2/d3", 0o755, AtFlags::empty()).unwrap();
    let (h, f) = (hits(), fills());
    assert_eq!(size(&u, DEEP), Ok(5));
    assert_eq!(size(&u, DEEP), Ok(5));
    assert_eq!((hits() - h, fills() - f, asked()), (1, 1, 0), "a walk that asked no group is kept");
    // d3 searchable by its group only: each walk asks, and none is kept.
    t.fchmodat(DirFd::Cwd, b"/base/d1/d2/d3", 0o750, AtFlags::empty()).unwrap();
    src.member.store(true, std::sync::atomic::Ordering::Relaxed);
    let (h, f) = (hits(), fills());
    assert_eq!(size(&u, DEEP), Ok(5));
    assert_eq!(size(&u, DEEP), Ok(5));
    assert_eq!((hits() - h, fills() - f), (0, 0));
    assert!(asked() >= 2, "the search check asked the source each time: {}", asked());
    src.member.store(false, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(size(&u, DEEP), Err(Errno::EACCES), "the source's new answer holds at once");
    src.member.store(true, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(size(&u, DEEP), Ok(5));
    assert_eq!(&*u.credentials().groups(), &[Gid(100)]);
}

fn parent_hits() -> u64 {
    counters().path_cache_parent_hits
}

fn parent_fills() -> u64 {
    counters().path_cache_parent_fills
}

fn create(t: &Task, path: &[u8]) -> Result<(), Errno> {
    t.close(t.open(path, OpenFlags::CREAT | OpenFlags::WRONLY, 0o644)?)
}

/// The names in directory `dir`, but `.` and `..`.
fn names(t: &Task, dir: &[u8]) -> Vec<Vec<u8>> {
    let fd = t.open(dir, OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
    let mut all: Vec<Vec<u8>> = t.getdents(fd, 1000).unwrap().into_iter().map(|e| e.name).collect();
    t.close(fd).unwrap();
    all.retain(|n| n != b"." && n != b"..");
    all
}

/// `DEEP`'s directory and a name in it.
fn in_deep(name: &str) -> Vec<u8> {
    format!("/base/d1/d2/d3/d4/d5/d6/d7/d8/{name}").into_bytes()
}

#[test]
fn a_deep_create_is_walked_from_its_parent_in_the_cache() {
    let v = vfs(FastPaths::all());
    let t = v.root_task();
    tree(&t, b"x");
    let (h, f, l) = (parent_hits(), parent_fills(), counters().walk_locked);
    for i in 0..50 {
        create(&t, &in_deep(&format!("n{i}"))).unwrap();
    }
    assert_eq!((parent_hits() - h, parent_fills() - f), (50, 0), "the tree's own create learned the parent");
    assert_eq!(counters().walk_locked, l, "and no walk took a lock");
    for i in 0..50 {
        assert_eq!(size(&t, &in_deep(&format!("n{i}"))), Ok(0));
    }
    // O_EXCL on a name that is there, and through the parent's answer too.
    let e = t.open(&in_deep("n7"), OpenFlags::CREAT | OpenFlags::EXCL | OpenFlags::WRONLY, 0o644);
    assert_eq!(e.err(), Some(Errno::EEXIST));
    // A removal moves the names stamp: the next create learns the parent again, then hits.
    t.unlink(&in_deep("n0")).unwrap();
    let (h, f) = (parent_hits(), parent_fills());
    create(&t, &in_deep("m1")).unwrap();
    create(&t, &in_deep("m2")).unwrap();
    assert_eq!((parent_hits() - h, parent_fills() - f), (1, 1));
    // Short paths and parents one component away are walked: the cache is not asked.
    t.mkdir(b"/s", 0o755).unwrap();
    let (h, f) = (parent_hits(), parent_fills());
    for i in 0..5 {
        create(&t, format!("/s/{i}").as_bytes()).unwrap();
        create(&t, format!("/base/a-long-name-{i}").as_bytes()).unwrap();
    }
    assert_eq!((parent_hits() - h, parent_fills() - f), (0, 0));
}

#[test]
fn a_create_under_a_changed_path_goes_where_the_path_now_leads() {
    let v = vfs(FastPaths::all());
    let t = v.root_task();
    tree(&t, b"x");
    create(&t, &in_deep("a")).unwrap();
    // A directory on the way renamed away: the old path has no d3, the new one does.
    t.mkdir(b"/other", 0o755).unwrap();
    t.rename(b"/base/d1/d2/d3", b"/other/d3").unwrap();
    assert_eq!(create(&t, &in_deep("b")), Err(Errno::ENOENT));
    create(&t, b"/other/d3/d4/d5/d6/d7/d8/b").unwrap();
    create(&t, b"/other/d3/d4/d5/d6/d7/d8/c").unwrap();
    assert_eq!(size(&t, b"/other/d3/d4/d5/d6/d7/d8/c"), Ok(0));
    // Something else in the old place, shaped alike: creates go to it, not to the
    // directory the cache saw there.
    let mut p = b"/base/d1/d2/d3".to_vec();
    t.mkdir(&p, 0o755).unwrap();
    for i in 4..=8 {
        p.extend_from_slice(format!("/d{i}").as_bytes());
        t.mkdir(&p, 0o755).unwrap();
    }
    create(&t, &in_deep("new")).unwrap();
    create(&t, &in_deep("new2")).unwrap();
    assert_eq!(size(&t, b"/other/d3/d4/d5/d6/d7/d8/new2"), Err(Errno::ENOENT));
    assert_eq!(size(&t, &in_deep("new2")), Ok(0));
    // The parent itself removed and made again.
    t.unlink(&in_deep("new")).unwrap();
    t.unlink(&in_deep("new2")).unwrap();
    t.rmdir(b"/base/d1/d2/d3/d4/d5/d6/d7/d8").unwrap();
    assert_eq!(create(&t, &in_deep("gone")), Err(Errno::ENOENT));
    t.mkdir(b"/base/d1/d2/d3/d4/d5/d6/d7/d8", 0o755).unwrap();
    create(&t, &in_deep("again")).unwrap();
    assert_eq!(names(&t, b"/base/d1/d2/d3/d4/d5/d6/d7/d8"), vec![b"again".to_vec()]);
    // A symlink on the way replaced.
    t.mkdir(b"/flat", 0o755).unwrap();
    t.symlink(b"base/d1/d2/d3/d4/d5/d6/d7/d8", b"/link").unwrap();
    assert_eq!(create(&t, b"/link/x/../via-link"), Err(Errno::ENOENT), "no x yet");
    t.mkdir(b"/base/d1/d2/d3/d4/d5/d6/d7/d8/x", 0o755).unwrap();
    create(&t, b"/link/x/one").unwrap();
    create(&t, b"/link/x/two").unwrap();
    assert_eq!(size(&t, &in_deep("x/two")), Ok(0));
    t.unlink(b"/link").unwrap();
    t.mkdir(b"/flat/x", 0o755).unwrap();
    t.symlink(b"/flat", b"/link").unwrap();
    create(&t, b"/link/x/three").unwrap();
    assert_eq!(size(&t, b"/flat/x/three"), Ok(0));
    assert_eq!(size(&t, &in_deep("x/three")), Err(Errno::ENOENT));
    // A mount on the way: creates go into it; after the unmount, below it again.
    t.mount(MountSource::MemFs(Default::default()), b"/base/d1/d2/d3/d4", uvfs::MountFlags::empty()).unwrap();
    assert_eq!(create(&t, &in_deep("m")), Err(Errno::ENOENT));
    t.umount(b"/base/d1/d2/d3/d4").unwrap();
    create(&t, &in_deep("m")).unwrap();
    assert_eq!(size(&t, &in_deep("m")), Ok(0));
}

#[test]
fn a_create_under_a_directory_closed_to_the_caller_is_refused_at_once() {
    let v = vfs(FastPaths::all());
    let t = v.root_task();
    tree(&t, b"x");
    t.fchmodat(DirFd::Cwd, b"/base/d1/d2/d3/d4/d5/d6/d7/d8", 0o777, AtFlags::empty()).unwrap();
    let u = user(&t);
    create(&u, &in_deep("u1")).unwrap();
    let h = parent_hits();
    create(&u, &in_deep("u2")).unwrap();
    assert_eq!(parent_hits() - h, 1, "the user's creates hit too");
    // An ancestor closed to others: refused, for the cached parent as for a walk.
    t.fchmodat(DirFd::Cwd, b"/base/d1/d2/d3", 0o700, AtFlags::empty()).unwrap();
    assert_eq!(create(&u, &in_deep("u3")), Err(Errno::EACCES));
    assert_eq!(create(&u, &in_deep("u3")), Err(Errno::EACCES));
    create(&t, &in_deep("root-may")).unwrap();
    create(&t, &in_deep("root-may-2")).unwrap();
    assert_eq!(create(&u, &in_deep("u3")), Err(Errno::EACCES), "root's parent is root's alone");
    t.fchmodat(DirFd::Cwd, b"/base/d1/d2/d3", 0o755, AtFlags::empty()).unwrap();
    create(&u, &in_deep("u3")).unwrap();
    // The parent itself closed to writing: the last name's checks are the walk's own.
    t.fchmodat(DirFd::Cwd, b"/base/d1/d2/d3/d4/d5/d6/d7/d8", 0o755, AtFlags::empty()).unwrap();
    assert_eq!(create(&u, &in_deep("u4")), Err(Errno::EACCES));
    t.fchmodat(DirFd::Cwd, b"/base/d1/d2/d3/d4/d5/d6/d7/d8", 0o333, AtFlags::empty()).unwrap();
    create(&u, &in_deep("u5")).unwrap();
    t.fchmodat(DirFd::Cwd, b"/base/d1/d2/d3/d4/d5/d6/d7/d8", 0o666, AtFlags::empty()).unwrap();
    assert_eq!(create(&u, &in_deep("u6")), Err(Errno::EACCES), "no search on the parent");
}

/// A server's lookup (`Task::lookup_path`) is neither answered nor learned by the path
/// cache: the kernel that asked caches the answer itself, so the entry would only push out
/// one that is asked again. A walk of the same path by `fstatat` is.
#[test]
fn a_servers_lookup_is_not_kept() {
    let v = vfs(FastPaths::all());
    let t = v.root_task();
    tree(&t, b"x");
    let d8 = t.openat_file(DirFd::Cwd, b"/base/d1/d2/d3/d4/d5/d6/d7/d8", OpenFlags::PATH, 0).unwrap();
    let (h0, f0) = (hits(), fills());
    for _ in 0..3 {
        let (st, _) = t.lookup_path(DirFd::File(&d8), b"f", AtFlags::SYMLINK_NOFOLLOW, |_, _| true).unwrap();
        assert_eq!(st.size, 1);
    }
    assert_eq!((hits() - h0, fills() - f0), (0, 0), "lookup_path: path cache hits, fills");
    for _ in 0..3 {
        assert_eq!(t.fstatat(DirFd::File(&d8), b"f", AtFlags::SYMLINK_NOFOLLOW).unwrap().size, 1);
    }
    assert_eq!((hits() - h0, fills() - f0), (2, 1), "fstatat of the same name: hits, fills");
}
