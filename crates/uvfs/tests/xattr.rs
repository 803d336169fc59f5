//! Extended attributes and ACLs where the host cannot be the oracle in the differential
//! tests: tmpfs's inode-budget ENOSPC (needs a small `nr_inodes`), read-only mounts, and
//! the typed ACL calls.

use uvfs::fs::memfs::MemFsLimits;
use uvfs::{
    Acl, AclEntry, AclTag, AclType, AtFlags, DirFd, Errno, FastPaths, MountFlags, MountSource, OpenFlags, Vfs,
    VfsConfig, XattrFlags,
};

fn rich_acl() -> Acl {
    Acl::new(vec![
        AclEntry::new(AclTag::UserObj, 7),
        AclEntry::new(AclTag::User(1002), 4),
        AclEntry::new(AclTag::GroupObj, 6),
        AclEntry::new(AclTag::Mask, 5),
        AclEntry::new(AclTag::Other, 0),
    ])
}

fn touch(t: &uvfs::Task, path: &[u8]) {
    let fd = t.open(path, OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap();
    t.close(fd).unwrap();
}

/// As tmpfs with `nr_inodes=3` (measured on Linux 6.18): the budget is 3 KiB, each inode
/// takes 1 KiB (the root too), each xattr 40 bytes plus name and value. A full budget
/// refuses new xattrs of every namespace and new inodes; a smaller replacement fits;
/// freeing the inode gives its xattrs' space back.
#[test]
fn xattrs_share_the_inode_budget() {
    let vfs = Vfs::new(VfsConfig { root_inode_limit: Some(3), ..Default::default() });
    let t = vfs.root_task();
    touch(&t, b"/f");
    let v = [b'v'; 100];
    for i in 0..6 {
        t.setxattr(b"/f", format!("user.x{i:02}").as_bytes(), &v, XattrFlags::empty()).unwrap();
    }
    assert_eq!(t.setxattr(b"/f", b"user.x06", &v, XattrFlags::empty()), Err(Errno::ENOSPC));
    assert_eq!(t.setxattr(b"/f", b"trusted.t", &v, XattrFlags::empty()), Err(Errno::ENOSPC));
    assert_eq!(t.setxattr(b"/f", b"security.t", &v, XattrFlags::empty()), Err(Errno::ENOSPC));
    assert_eq!(t.open(b"/g", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644), Err(Errno::ENOSPC));
    // The new value is charged before the old one is found (tmpfs's order).
    t.setxattr(b"/f", b"user.x00", &v[..10], XattrFlags::empty()).unwrap();
    assert_eq!(t.setxattr(b"/f", b"user.x00", &v[..10], XattrFlags::CREATE), Err(Errno::EEXIST));
    // ACLs are not charged.
    t.set_acl(DirFd::Cwd, b"/f", AclType::Access, &rich_acl(), AtFlags::empty()).unwrap();
    t.unlink(b"/f").unwrap();
    touch(&t, b"/g");
    touch(&t, b"/h");
    assert_eq!(t.setxattr(b"/h", b"user.a", &[0; 2000], XattrFlags::empty()), Err(Errno::ENOSPC));
}

/// A read-only mount refuses every change (EROFS, before the value is even parsed) and
/// allows every read.
#[test]
fn read_only_mount_is_erofs() {
    let vfs = Vfs::new(VfsConfig::default());
    let t = vfs.root_task();
    t.mkdir(b"/m", 0o755).unwrap();
    t.mount(MountSource::MemFs(MemFsLimits::default()), b"/m", MountFlags::empty()).unwrap();
    touch(&t, b"/m/f");
    t.setxattr(b"/m/f", b"user.a", b"1", XattrFlags::empty()).unwrap();
    t.set_acl(DirFd::Cwd, b"/m/f", AclType::Access, &rich_acl(), AtFlags::empty()).unwrap();
    t.remount(b"/m", MountFlags::RDONLY).unwrap();
    assert_eq!(t.setxattr(b"/m/f", b"user.b", b"1", XattrFlags::empty()), Err(Errno::EROFS));
    assert_eq!(t.setxattr(b"/m/f", b"system.posix_acl_access", b"junk", XattrFlags::empty()), Err(Errno::EROFS));
    assert_eq!(t.removexattr(b"/m/f", b"user.a"), Err(Errno::EROFS));
    assert_eq!(t.removexattr(b"/m/f", b"system.posix_acl_access"), Err(Errno::EROFS));
    assert_eq!(t.set_acl(DirFd::Cwd, b"/m/f", AclType::Access, &rich_acl(), AtFlags::empty()), Err(Errno::EROFS));
    assert_eq!(t.remove_acl(DirFd::Cwd, b"/m/f", AclType::Access, AtFlags::empty()), Err(Errno::EROFS));
    let fd = t.open(b"/m/f", OpenFlags::RDONLY, 0).unwrap();
    assert_eq!(t.fsetxattr(fd, b"user.b", b"1", XattrFlags::empty()), Err(Errno::EROFS));
    let mut buf = [0u8; 64];
    assert_eq!(t.fgetxattr(fd, b"user.a", &mut buf), Ok(1));
    assert_eq!(t.listxattr(b"/m/f", &mut buf), Ok(b"system.posix_acl_access\0user.a\0".len()));
    assert_eq!(t.get_acl(DirFd::Cwd, b"/m/f", AclType::Access, AtFlags::empty()), Ok(Some(rich_acl())));
}

/// The typed calls: a real ACL round-trips and sets the group bits to its mask; a minimal
/// one is stored as the mode only; chmod moves the mask; errors as the xattr calls.
#[test]
fn typed_acl_calls() {
    for fast in [FastPaths::all(), FastPaths::empty()] {
        let vfs = Vfs::new(VfsConfig { fast_paths: fast, ..Default::default() });
        let t = vfs.root_task();
        touch(&t, b"/f");
        t.mkdir(b"/d", 0o755).unwrap();
        t.symlink(b"f", b"/l").unwrap();
        let at = AtFlags::empty();
        t.set_acl(DirFd::Cwd, b"/f", AclType::Access, &rich_acl(), at).unwrap();
        assert_eq!(t.get_acl(DirFd::Cwd, b"/f", AclType::Access, at), Ok(Some(rich_acl())));
        assert_eq!(t.stat(b"/f").unwrap().mode & 0o7777, 0o750);
        t.fchmodat(DirFd::Cwd, b"/f", 0o705, at).unwrap();
        let mut moved = rich_acl();
        moved.entries[3].perm = 0;
        moved.entries[4].perm = 5;
        assert_eq!(t.get_acl(DirFd::Cwd, b"/f", AclType::Access, at), Ok(Some(moved)));
        let minimal = Acl::new(vec![
            AclEntry::new(AclTag::UserObj, 6),
            AclEntry::new(AclTag::GroupObj, 4),
            AclEntry::new(AclTag::Other, 0),
        ]);
        t.set_acl(DirFd::Cwd, b"/f", AclType::Access, &minimal, at).unwrap();
        assert_eq!(t.get_acl(DirFd::Cwd, b"/f", AclType::Access, at), Ok(None));
        assert_eq!(t.stat(b"/f").unwrap().mode & 0o7777, 0o640);
        assert_eq!(t.set_acl(DirFd::Cwd, b"/f", AclType::Default, &minimal, at), Err(Errno::EACCES));
        assert_eq!(t.remove_acl(DirFd::Cwd, b"/f", AclType::Default, at), Ok(()));
        t.set_acl(DirFd::Cwd, b"/d", AclType::Default, &minimal, at).unwrap();
        assert_eq!(t.get_acl(DirFd::Cwd, b"/d", AclType::Default, at), Ok(Some(minimal.clone())));
        assert_eq!(t.get_acl(DirFd::Cwd, b"/l", AclType::Access, AtFlags::SYMLINK_NOFOLLOW), Err(Errno::EOPNOTSUPP));
        assert_eq!(t.get_acl(DirFd::Cwd, b"/l", AclType::Access, at), Ok(None));
        let mut bad = rich_acl();
        bad.entries.remove(3);
        assert_eq!(t.set_acl(DirFd::Cwd, b"/f", AclType::Access, &bad, at), Err(Errno::EINVAL));
        assert_eq!(t.get_acl(DirFd::Cwd, b"/f", AclType::Access, AtFlags::REMOVEDIR), Err(Errno::EINVAL));
        // A file created in /d inherits: the default is minimal, so only the mode.
        touch(&t, b"/d/n");
        assert_eq!(t.get_acl(DirFd::Cwd, b"/d/n", AclType::Access, at), Ok(None));
        assert_eq!(t.stat(b"/d/n").unwrap().mode & 0o7777, 0o640);
    }
}

/// A directory removed while a task stands in it goes at the task's chdir away (its last
/// hold), giving its inode and xattr space back then. That eviction took memfs's xattr
/// lock under the task's own lock, against the lock order (debug builds' checker
/// panicked; found by `pathcache`'s random sequences): the hold now goes after the task's
/// lock, as Linux's `set_fs_pwd` puts the old path after unlocking.
#[test]
fn a_removed_working_directory_goes_at_the_chdir_away() {
    let vfs = Vfs::new(VfsConfig::default());
    let t = vfs.root_task();
    let free = |t: &uvfs::Task| t.statfs(b"/").unwrap().ffree;
    let before = free(&t);
    t.mkdir(b"/d", 0o755).unwrap();
    t.setxattr(b"/d", b"user.big", &[7u8; 8000], XattrFlags::empty()).unwrap();
    t.chdir(b"/d").unwrap();
    t.rmdir(b"/d").unwrap();
    assert!(free(&t) + 8 < before, "the directory's inode and xattr space went before its last hold");
    t.chdir(b"/").unwrap();
    assert_eq!(free(&t), before);
}
