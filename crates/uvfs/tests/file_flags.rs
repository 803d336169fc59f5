//! File flags (`FS_IOC_GETFLAGS`/`FS_IOC_SETFLAGS`, `chattr`/`lsattr`): what the
//! differential tests cannot generate (capability sets other than root's and none,
//! read-only mounts, hostfs, inheritance through `O_TMPFILE`, times, descriptors opened
//! before a flag was set). The errnos of every call on flagged files, as root and as a
//! user, are compared with the host kernel in `differential.rs`.

use uvfs::fs::hostfs::HostFs;
use uvfs::{
    AtFlags, Capabilities, CopyRangeFlags, Credentials, DirFd, Errno, FallocFlags, FsFlags, Gid, MountFlags,
    MountSource, OpenFlags, RwfFlags, TimeSpec, Uid, Vfs, VfsConfig,
};

const RW: OpenFlags = OpenFlags::RDWR;

fn creat(t: &uvfs::Task, path: &[u8]) {
    let fd = t.open(path, OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap();
    t.write(fd, b"abc").unwrap();
    t.close(fd).unwrap();
}

fn flags_of(t: &uvfs::Task, path: &[u8]) -> uvfs::Result<FsFlags> {
    let fd = t.open(path, OpenFlags::RDONLY, 0)?;
    let r = t.ioctl_getflags(fd);
    t.close(fd).unwrap();
    r
}

fn set(t: &uvfs::Task, path: &[u8], f: FsFlags) -> uvfs::Result<()> {
    let fd = t.open(path, OpenFlags::RDONLY, 0)?;
    let r = t.ioctl_setflags(fd, f);
    t.close(fd).unwrap();
    r
}

/// `CAP_LINUX_IMMUTABLE` alone decides the immutable and append-only flags; ownership
/// (or `CAP_FOWNER`) decides whether the caller may set flags at all.
#[test]
fn capabilities_decide_who_sets_what() {
    let vfs = Vfs::default();
    let root = vfs.root_task();
    creat(&root, b"/f");
    root.fchownat(DirFd::Cwd, b"/f", Some(Uid(1000)), Some(Gid(1000)), AtFlags::empty()).unwrap();
    let owner = root.with_credentials(Credentials::new(Uid(1000), Gid(1000), &[]));
    let other = root.with_credentials(Credentials::new(Uid(2000), Gid(2000), &[]));
    // The owner keeps the harmless flags, and may re-set what is already set.
    assert_eq!(set(&owner, b"/f", FsFlags::NODUMP | FsFlags::NOATIME), Ok(()));
    assert_eq!(set(&owner, b"/f", FsFlags::IMMUTABLE), Err(Errno::EPERM));
    assert_eq!(set(&owner, b"/f", FsFlags::APPEND | FsFlags::NODUMP), Err(Errno::EPERM));
    // The capability check comes before the filesystem's EOPNOTSUPP.
    assert_eq!(set(&owner, b"/f", FsFlags::IMMUTABLE | FsFlags::SYNC), Err(Errno::EPERM));
    assert_eq!(set(&owner, b"/f", FsFlags::SYNC), Err(Errno::EOPNOTSUPP));
    assert_eq!(set(&other, b"/f", FsFlags::empty()), Err(Errno::EPERM));
    assert_eq!(flags_of(&other, b"/f"), Ok(FsFlags::NODUMP | FsFlags::NOATIME));
    // CAP_LINUX_IMMUTABLE without CAP_FOWNER: the owner only.
    let imm =
        |uid| root.with_credentials(Credentials::new(Uid(uid), Gid(uid), &[]).with_caps(Capabilities::LINUX_IMMUTABLE));
    assert_eq!(set(&imm(2000), b"/f", FsFlags::IMMUTABLE), Err(Errno::EPERM));
    assert_eq!(set(&imm(1000), b"/f", FsFlags::IMMUTABLE), Ok(()));
    // An owner without the capability may change the rest while immutable stays set.
    assert_eq!(set(&owner, b"/f", FsFlags::IMMUTABLE), Ok(()));
    assert_eq!(set(&owner, b"/f", FsFlags::empty()), Err(Errno::EPERM));
    // CAP_FOWNER stands for the owner.
    let fowner = root.with_credentials(
        Credentials::new(Uid(2000), Gid(2000), &[]).with_caps(Capabilities::FOWNER | Capabilities::LINUX_IMMUTABLE),
    );
    assert_eq!(set(&fowner, b"/f", FsFlags::empty()), Ok(()));
    assert_eq!(flags_of(&root, b"/f"), Ok(FsFlags::empty()));
}

#[test]
fn descriptors_and_file_types() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    creat(&t, b"/f");
    t.mkdir(b"/d", 0o755).unwrap();
    t.symlink(b"f", b"/l").unwrap();
    // O_PATH descriptors are not ioctl targets.
    let p = t.open(b"/f", OpenFlags::PATH, 0).unwrap();
    assert_eq!(t.ioctl_getflags(p), Err(Errno::EBADF));
    assert_eq!(t.ioctl_setflags(p, FsFlags::empty()), Err(Errno::EBADF));
    let l = t.open(b"/l", OpenFlags::PATH | OpenFlags::NOFOLLOW, 0).unwrap();
    assert_eq!(t.ioctl_getflags(l), Err(Errno::EBADF));
    assert_eq!(t.ioctl_getflags(uvfs::Fd(99)), Err(Errno::EBADF));
    // Any open descriptor does, read-only ones too, and directories.
    let d = t.open(b"/d", OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
    t.ioctl_setflags(d, FsFlags::APPEND).unwrap();
    assert_eq!(t.ioctl_getflags(d), Ok(FsFlags::APPEND));
    // The file handles the FUSE server uses work the same.
    let f = t.openat_file(DirFd::Cwd, b"/f", OpenFlags::RDONLY, 0).unwrap();
    t.ioctl_setflags(&f, FsFlags::IMMUTABLE).unwrap();
    assert_eq!(t.ioctl_getflags(&f), Ok(FsFlags::IMMUTABLE));
    assert_eq!(f.inode().attr_flags(), FsFlags::IMMUTABLE);
    t.ioctl_setflags(&f, FsFlags::empty()).unwrap();
    assert_eq!(f.inode().attr_flags(), FsFlags::empty());
}

#[test]
fn setting_flags_changes_ctime_and_keeps_the_rest() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    creat(&t, b"/f");
    let old = uvfs::Timespec { sec: 1, nsec: 0 };
    t.utimensat(DirFd::Cwd, b"/f", Some([TimeSpec::At(old), TimeSpec::At(old)]), AtFlags::empty()).unwrap();
    let before = t.stat(b"/f").unwrap();
    set(&t, b"/f", FsFlags::NODUMP).unwrap();
    let after = t.stat(b"/f").unwrap();
    assert_eq!((after.mtime, after.atime, after.size, after.mode), (old, old, 3, before.mode));
    assert!(after.ctime >= before.ctime);
    // Setting the same flags again is a change of ctime all the same (as tmpfs).
    set(&t, b"/f", FsFlags::NODUMP).unwrap();
}

/// New entries take `NODUMP` and `NOATIME` from their directory, not the others.
#[test]
fn new_entries_inherit_nodump_and_noatime() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    t.mkdir(b"/d", 0o755).unwrap();
    set(&t, b"/d", FsFlags::NODUMP | FsFlags::NOATIME | FsFlags::APPEND).unwrap();
    creat(&t, b"/d/f");
    t.mkdir(b"/d/sub", 0o755).unwrap();
    let want = Ok(FsFlags::NODUMP | FsFlags::NOATIME);
    assert_eq!(flags_of(&t, b"/d/f"), want);
    assert_eq!(flags_of(&t, b"/d/sub"), want);
    let tmp = t.open(b"/d", OpenFlags::TMPFILE | OpenFlags::DIRECTORY | RW, 0o600).unwrap();
    assert_eq!(t.ioctl_getflags(tmp), want);
    assert_eq!(t.fstat(tmp).unwrap().nlink, 0);
    // And only when made: a later change of the directory's flags is not theirs.
    set(&t, b"/d", FsFlags::empty()).unwrap();
    assert_eq!(flags_of(&t, b"/d/f"), want);
}

#[test]
fn read_only_mount_and_hostfs() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    t.mkdir(b"/rw", 0o755).unwrap();
    t.mkdir(b"/ro", 0o755).unwrap();
    creat(&t, b"/rw/f");
    t.mount(MountSource::Bind { path: b"/rw", recursive: false }, b"/ro", MountFlags::RDONLY).unwrap();
    let fd = t.open(b"/ro/f", OpenFlags::RDONLY, 0).unwrap();
    assert_eq!(t.ioctl_getflags(fd), Ok(FsFlags::empty()));
    assert_eq!(t.ioctl_setflags(fd, FsFlags::IMMUTABLE), Err(Errno::EROFS));
    t.close(fd).unwrap();

    // hostfs keeps no flags (ENOTTY, as a filesystem without fileattr operations).
    let dir = std::env::temp_dir().join(format!("uvfs-flags-{}", std::process::id()));
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("h"), b"x").unwrap();
    let host = Vfs::with_root(VfsConfig::default(), Box::new(HostFs::new(&dir).unwrap())).unwrap();
    let ht = host.root_task();
    let fd = ht.open(b"/h", OpenFlags::RDONLY, 0).unwrap();
    assert_eq!(ht.ioctl_getflags(fd), Err(Errno::ENOTTY));
    assert_eq!(ht.ioctl_setflags(fd, FsFlags::IMMUTABLE), Err(Errno::ENOTTY));
    ht.close(fd).unwrap();
    drop(ht);
    drop(host);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// What a descriptor opened before the flag was set may still do (as on Linux, whose
/// checks are at open and on names): write an immutable file, truncate it; write an
/// append-only file at its offset; but not truncate it, nor drop `O_APPEND`.
#[test]
fn descriptors_opened_before() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    creat(&t, b"/i");
    creat(&t, b"/a");
    let wi = t.open(b"/i", OpenFlags::WRONLY, 0).unwrap();
    let wa = t.open(b"/a", OpenFlags::WRONLY, 0).unwrap();
    let aa = t.open(b"/a", OpenFlags::WRONLY | OpenFlags::APPEND, 0).unwrap();
    set(&t, b"/i", FsFlags::IMMUTABLE).unwrap();
    set(&t, b"/a", FsFlags::APPEND).unwrap();
    assert_eq!(t.pwrite(wi, b"zz", 0), Ok(2));
    assert_eq!(t.ftruncate(wi, 1), Ok(()));
    // But no fallocate and no copy_file_range into it (sendfile, a write, may).
    assert_eq!(t.fallocate(wi, FallocFlags::KEEP_SIZE, 0, 10), Err(Errno::EPERM));
    let src = t.open(b"/a", OpenFlags::RDONLY, 0).unwrap();
    assert_eq!(t.copy_file_range(src, Some(&mut 0), wi, Some(&mut 0), 1, CopyRangeFlags::empty()), Err(Errno::EPERM));
    assert_eq!(t.sendfile(wi, src, Some(&mut 0), 1), Ok(1));
    // An append-only file reserves space, nothing else.
    assert_eq!(t.fallocate(wa, FallocFlags::KEEP_SIZE, 0, 8192), Ok(()));
    assert_eq!(t.fallocate(wa, FallocFlags::PUNCH_HOLE | FallocFlags::KEEP_SIZE, 0, 1), Err(Errno::EPERM));
    assert_eq!(t.pwrite(wa, b"zz", 0), Ok(2));
    assert_eq!(t.ftruncate(wa, 1), Err(Errno::EPERM));
    assert_eq!(t.ftruncate(aa, 1), Err(Errno::EPERM));
    assert_eq!(t.fcntl(aa, uvfs::FcntlCmd::SetFl(OpenFlags::empty())), Err(Errno::EPERM));
    assert_eq!(t.fcntl(wa, uvfs::FcntlCmd::SetFl(OpenFlags::APPEND)), Err(Errno::EPERM));
    assert_eq!(t.fcntl(aa, uvfs::FcntlCmd::SetFl(OpenFlags::APPEND | OpenFlags::NONBLOCK)), Ok(0));
    assert_eq!(t.pwritev2(aa, &[b"q"], 0, RwfFlags::NOAPPEND), Err(Errno::EPERM));
    assert_eq!(t.pwritev2(wa, &[b"q"], 0, RwfFlags::NOAPPEND), Ok(1));
    assert_eq!(t.pwrite(aa, b"end", 0), Ok(3));
    let mut buf = [0u8; 16];
    let n = t.pread(wi, &mut buf, 0).err();
    assert_eq!(n, Some(Errno::EBADF), "write-only");
    let r = t.open(b"/a", OpenFlags::RDONLY, 0).unwrap();
    let n = t.pread(r, &mut buf, 0).unwrap();
    assert_eq!(&buf[..n], b"qzcend");
}
