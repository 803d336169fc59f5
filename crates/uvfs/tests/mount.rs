//! Mounts and scoped resolution (issue 5): the mount calls and their errnos, bind and
//! read-only mounts, stacking, unmount with users (EBUSY) and detached, per-mount flags,
//! mountinfo, EXDEV/EBUSY in the namespace calls, `openat2`'s `RESOLVE_*` flags, a race of
//! scoped walks against renames, symlink swaps and mount changes, and differential runs
//! against the host kernel in a private mount namespace.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use uvfs::{
    AccessMode, AtFlags, Credentials, DirFd, Errno, FastPaths, Fd, Gid, MountFlags, MountId, MountSource, OpenFlags,
    OpenHow, RenameFlags, ResolveFlags, Task, TimeSpec, Uid, UmountFlags, Vfs, VfsConfig, XattrFlags,
};

fn memfs() -> MountSource<'static> {
    MountSource::MemFs(Default::default())
}

fn bind(path: &[u8], recursive: bool) -> MountSource<'_> {
    MountSource::Bind { path, recursive }
}

fn new_vfs(fast: FastPaths) -> (Vfs, Task) {
    let vfs = Vfs::new(VfsConfig { fast_paths: fast, ..Default::default() });
    let t = vfs.root_task();
    (vfs, t)
}

fn creat(t: &Task, path: &str, content: &[u8]) -> u64 {
    let fd = t.open(path.as_bytes(), OpenFlags::CREAT | OpenFlags::WRONLY | OpenFlags::EXCL, 0o644).unwrap();
    t.write(fd, content).unwrap();
    let ino = t.fstat(fd).unwrap().ino;
    t.close(fd).unwrap();
    ino
}

fn read_all(t: &Task, path: &str) -> Vec<u8> {
    let fd = t.open(path.as_bytes(), OpenFlags::RDONLY, 0).unwrap();
    let mut buf = vec![0u8; 256];
    let n = t.read(fd, &mut buf).unwrap();
    t.close(fd).unwrap();
    buf.truncate(n);
    buf
}

fn user(vfs: &Vfs) -> Task {
    vfs.task(Credentials::new(Uid(1000), Gid(1000), &[]))
}

// ------------------------------------------------------------------ the mount calls

#[test]
fn memfs_mount_is_crossed_both_ways_and_unmounted() {
    for fast in [FastPaths::all(), FastPaths::empty()] {
        let (_vfs, t) = new_vfs(fast);
        t.mkdir(b"/mnt", 0o755).unwrap();
        creat(&t, "/mnt/under", b"covered");
        let root_dev = t.stat(b"/").unwrap().dev;
        t.mount(memfs(), b"/mnt", MountFlags::empty()).unwrap();
        let st = t.stat(b"/mnt").unwrap();
        assert_ne!(st.dev, root_dev, "the mount's root is another filesystem");
        assert_eq!(st.mode & 0o7777, 0o1777);
        assert_eq!(t.stat(b"/mnt/under"), Err(Errno::ENOENT), "the mount covers what was there");
        creat(&t, "/mnt/new", b"on top");
        assert_eq!(read_all(&t, "/mnt/new"), b"on top");
        // `..` climbs from the mount's root to the mountpoint's parent.
        assert_eq!(t.stat(b"/mnt/..").unwrap().ino, t.stat(b"/").unwrap().ino);
        assert_eq!(t.stat(b"/mnt/../mnt/new").unwrap().dev, st.dev);
        t.chdir(b"/mnt").unwrap();
        assert_eq!(t.getcwd().unwrap(), b"/mnt");
        assert_eq!(t.stat(b"..").unwrap().dev, root_dev);
        t.chdir(b"/").unwrap();
        t.umount(b"/mnt").unwrap();
        assert_eq!(read_all(&t, "/mnt/under"), b"covered");
        assert_eq!(t.stat(b"/mnt/new"), Err(Errno::ENOENT));
        assert_eq!(t.umount(b"/mnt"), Err(Errno::EINVAL), "nothing mounted any more");
    }
}

#[test]
fn bad_input_gets_linux_errnos() {
    let (vfs, t) = new_vfs(FastPaths::all());
    t.mkdir(b"/d", 0o755).unwrap();
    t.mkdir(b"/d2", 0o755).unwrap();
    creat(&t, "/f", b"");
    creat(&t, "/f2", b"");
    t.symlink(b"d", b"/ld").unwrap();
    assert_eq!(t.mount(memfs(), b"/missing", MountFlags::empty()), Err(Errno::ENOENT));
    assert_eq!(t.mount(memfs(), b"/missing/x", MountFlags::empty()), Err(Errno::ENOENT));
    assert_eq!(t.mount(memfs(), b"/f", MountFlags::empty()), Err(Errno::ENOTDIR), "a new fs needs a directory");
    assert_eq!(t.mount(memfs(), b"/f/x", MountFlags::empty()), Err(Errno::ENOTDIR));
    assert_eq!(t.mount(bind(b"/d", false), b"/f", MountFlags::empty()), Err(Errno::ENOTDIR));
    assert_eq!(t.mount(bind(b"/f", false), b"/d", MountFlags::empty()), Err(Errno::ENOTDIR));
    assert_eq!(t.mount(bind(b"/missing", false), b"/d", MountFlags::empty()), Err(Errno::ENOENT));
    assert_eq!(t.umount(b"/missing"), Err(Errno::ENOENT));
    assert_eq!(t.umount(b"/d"), Err(Errno::EINVAL), "not mounted");
    assert_eq!(t.umount(b"/f"), Err(Errno::EINVAL));
    assert_eq!(t.umount(b"/"), Err(Errno::EINVAL), "the root of the tree");
    assert_eq!(t.remount(b"/d", MountFlags::RDONLY), Err(Errno::EINVAL), "not a mount");
    assert_eq!(t.remount(b"/missing", MountFlags::RDONLY), Err(Errno::ENOENT));
    assert_eq!(t.umount2(b"/d", UmountFlags::from_bits_retain(0x100)), Err(Errno::EINVAL), "unknown flag");
    t.mount(memfs(), b"/d", MountFlags::empty()).unwrap();
    assert_eq!(t.umount2(b"/d", UmountFlags::EXPIRE | UmountFlags::DETACH), Err(Errno::EINVAL));
    assert_eq!(t.umount2(b"/d", UmountFlags::EXPIRE | UmountFlags::FORCE), Err(Errno::EINVAL));
    assert_eq!(t.umount(b"/d/."), Ok(()), "the path names the mount's root");
    // The symlink is followed, except with UMOUNT_NOFOLLOW.
    t.mount(memfs(), b"/d", MountFlags::empty()).unwrap();
    assert_eq!(t.umount2(b"/ld", UmountFlags::NOFOLLOW), Err(Errno::EINVAL));
    assert_eq!(t.umount(b"/ld"), Ok(()));
    // Unprivileged: EPERM, after the path is found (ENOENT first, as Linux).
    let u = user(&vfs);
    assert_eq!(u.mount(memfs(), b"/missing", MountFlags::empty()), Err(Errno::ENOENT));
    assert_eq!(u.mount(memfs(), b"/d", MountFlags::empty()), Err(Errno::EPERM));
    assert_eq!(u.mount(bind(b"/d", false), b"/d2", MountFlags::empty()), Err(Errno::EPERM));
    t.mount(memfs(), b"/d", MountFlags::empty()).unwrap();
    assert_eq!(u.umount(b"/d"), Err(Errno::EPERM));
    assert_eq!(u.umount(b"/d2"), Err(Errno::EPERM), "EPERM before EINVAL");
    assert_eq!(u.remount(b"/d", MountFlags::RDONLY), Err(Errno::EPERM));
    // A removed directory cannot be mounted on.
    t.mkdir(b"/gone", 0o755).unwrap();
    t.chdir(b"/gone").unwrap();
    t.rmdir(b"/gone").unwrap();
    assert_eq!(t.mount(memfs(), b".", MountFlags::empty()), Err(Errno::ENOENT));
    t.chdir(b"/").unwrap();
    // Bad input never leaves a mount behind.
    assert_eq!(t.mountinfo().len(), 2);
}

#[test]
fn bind_mounts_of_directories_and_files() {
    let (_vfs, t) = new_vfs(FastPaths::all());
    for d in ["/src", "/src/sub", "/dst", "/rec", "/flat"] {
        t.mkdir(d.as_bytes(), 0o755).unwrap();
    }
    let ino = creat(&t, "/src/sub/file", b"hello");
    t.mount(bind(b"/src/sub", false), b"/dst", MountFlags::empty()).unwrap();
    assert_eq!(t.stat(b"/dst/file").unwrap().ino, ino, "the same inode through the bind");
    creat(&t, "/dst/new", b"x");
    assert!(t.stat(b"/src/sub/new").is_ok(), "one filesystem, two views");
    // `..` at the bind's root goes to the mountpoint's parent, not to /src.
    assert_eq!(t.stat(b"/dst/..").unwrap().ino, t.stat(b"/").unwrap().ino);
    // Same filesystem, different mounts: rename and link are EXDEV.
    assert_eq!(t.rename(b"/dst/new", b"/src/sub/new2"), Err(Errno::EXDEV));
    assert_eq!(t.link(b"/dst/new", b"/src/sub/new2"), Err(Errno::EXDEV));
    assert_eq!(t.rename(b"/dst/new", b"/dst/new2"), Ok(()));

    // A file on a file.
    let other = creat(&t, "/other", b"other content");
    creat(&t, "/target", b"target content");
    t.mount(bind(b"/other", false), b"/target", MountFlags::empty()).unwrap();
    assert_eq!(t.stat(b"/target").unwrap().ino, other);
    assert_eq!(read_all(&t, "/target"), b"other content");
    assert_eq!(t.unlink(b"/target"), Err(Errno::EBUSY), "a mountpoint");
    assert_eq!(t.rename(b"/target", b"/t2"), Err(Errno::EBUSY));
    assert_eq!(t.rename(b"/other", b"/target"), Err(Errno::EBUSY), "replacing a mountpoint");
    t.umount(b"/target").unwrap();
    assert_eq!(read_all(&t, "/target"), b"target content");

    // Recursive or not: the submount is copied only by a recursive bind.
    t.mount(memfs(), b"/src/sub", MountFlags::empty()).unwrap();
    creat(&t, "/src/sub/in_submount", b"");
    t.mount(bind(b"/src", true), b"/rec", MountFlags::empty()).unwrap();
    t.mount(bind(b"/src", false), b"/flat", MountFlags::empty()).unwrap();
    assert!(t.stat(b"/rec/sub/in_submount").is_ok());
    assert_eq!(t.stat(b"/flat/sub/in_submount"), Err(Errno::ENOENT));
    assert_eq!(t.stat(b"/flat/sub/file").unwrap().ino, ino, "the directory under the submount");
    // The copy is a mount of its own: unmounting the original leaves it.
    assert_eq!(t.umount(b"/src/sub"), Ok(()));
    assert!(t.stat(b"/rec/sub/in_submount").is_ok());
    // A recursive bind of a tree into itself copies what was there before.
    t.mkdir(b"/loop", 0o755).unwrap();
    t.mkdir(b"/loop/inner", 0o755).unwrap();
    t.mount(bind(b"/loop", true), b"/loop/inner", MountFlags::empty()).unwrap();
    t.mount(bind(b"/loop", true), b"/loop/inner", MountFlags::empty()).unwrap();
    assert!(t.stat(b"/loop/inner/inner/inner").is_ok());
    assert_eq!(t.stat(b"/loop/inner/inner/inner/inner"), Err(Errno::ENOENT));
}

#[test]
fn mounts_stack_on_mounts() {
    let (_vfs, t) = new_vfs(FastPaths::all());
    t.mkdir(b"/m", 0o755).unwrap();
    t.mount(memfs(), b"/m", MountFlags::empty()).unwrap();
    creat(&t, "/m/lower", b"");
    t.mount(memfs(), b"/m", MountFlags::empty()).unwrap();
    assert_eq!(t.stat(b"/m/lower"), Err(Errno::ENOENT), "the top mount is what /m names");
    creat(&t, "/m/upper", b"");
    assert_eq!(t.stat(b"/m/..").unwrap().ino, t.stat(b"/").unwrap().ino, "`..` climbs the whole stack");
    let info = t.mountinfo();
    assert_eq!(info.len(), 3);
    assert_eq!(info[2].parent_id, info[1].id, "stacked on the first mount's root");
    assert_eq!(info[2].mount_point, b"/m");
    t.umount(b"/m").unwrap();
    assert!(t.stat(b"/m/lower").is_ok());
    assert_eq!(t.stat(b"/m/upper"), Err(Errno::ENOENT));
    t.umount(b"/m").unwrap();
    assert_eq!(t.stat(b"/m/lower"), Err(Errno::ENOENT));
}

#[test]
fn read_only_mounts_refuse_every_write() {
    let (vfs, t) = new_vfs(FastPaths::all());
    for d in ["/rw", "/rw/dir", "/ro"] {
        t.mkdir(d.as_bytes(), 0o777).unwrap();
    }
    creat(&t, "/rw/f", b"data");
    t.mount(bind(b"/rw", false), b"/ro", MountFlags::RDONLY).unwrap();
    // A descriptor opened before... (read-only; a writable one would make this EBUSY).
    let before = t.open(b"/ro/f", OpenFlags::RDONLY, 0).unwrap();
    let e = Some(Errno::EROFS);
    assert_eq!(t.open(b"/ro/f", OpenFlags::WRONLY, 0).err(), e);
    assert_eq!(t.open(b"/ro/f", OpenFlags::RDWR, 0).err(), e);
    assert_eq!(t.open(b"/ro/f", OpenFlags::RDONLY | OpenFlags::TRUNC, 0).err(), e);
    assert_eq!(t.open(b"/ro/new", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).err(), e);
    assert_eq!(t.open(b"/ro", OpenFlags::TMPFILE | OpenFlags::DIRECTORY | OpenFlags::RDWR, 0o644).err(), e);
    assert_eq!(t.mkdir(b"/ro/d", 0o755).err(), e);
    assert_eq!(t.mknodat(DirFd::Cwd, b"/ro/fifo", 0o10644, 0).err(), e);
    assert_eq!(t.symlink(b"x", b"/ro/l").err(), e);
    assert_eq!(t.unlink(b"/ro/f").err(), e);
    assert_eq!(t.rmdir(b"/ro/dir").err(), e);
    assert_eq!(t.rename(b"/ro/f", b"/ro/g").err(), e);
    assert_eq!(t.renameat2(DirFd::Cwd, b"/ro/f", DirFd::Cwd, b"/ro/dir", RenameFlags::EXCHANGE).err(), e);
    assert_eq!(t.link(b"/ro/f", b"/ro/g").err(), e);
    assert_eq!(t.fchmodat(DirFd::Cwd, b"/ro/f", 0o600, AtFlags::empty()).err(), e);
    assert_eq!(t.fchownat(DirFd::Cwd, b"/ro/f", Some(Uid(1)), None, AtFlags::empty()).err(), e);
    assert_eq!(t.utimensat(DirFd::Cwd, b"/ro/f", None, AtFlags::empty()).err(), e);
    assert_eq!(t.truncate(b"/ro/f", 0).err(), e);
    assert_eq!(t.faccessat(DirFd::Cwd, b"/ro/f", AccessMode::W_OK, AtFlags::empty()).err(), e);
    // ... refuses the write-type calls Linux checks with `mnt_want_write_file`.
    assert_eq!(t.fchmod(before, 0o600).err(), e);
    assert_eq!(t.fchown(before, Some(Uid(1)), None).err(), e);
    assert_eq!(t.futimens(before, Some([TimeSpec::Now, TimeSpec::Now])).err(), e);
    assert_eq!(t.fsetxattr(before, b"user.k", b"v", XattrFlags::empty()).err(), e);
    assert_eq!(t.fremovexattr(before, b"user.k").err(), e);
    assert_eq!(t.setxattr(b"/ro/f", b"user.k", b"v", XattrFlags::empty()).err(), e);
    assert_eq!(t.removexattr(b"/ro/f", b"user.k").err(), e);
    // Reads work; the same file through the writable mount is writable.
    assert_eq!(read_all(&t, "/ro/f"), b"data");
    assert!(t.faccessat(DirFd::Cwd, b"/ro/f", AccessMode::R_OK, AtFlags::empty()).is_ok());
    let w = t.open(b"/rw/f", OpenFlags::WRONLY | OpenFlags::APPEND, 0).unwrap();
    t.write(w, b"+").unwrap();
    assert_eq!(read_all(&t, "/ro/f"), b"data+");
    // Remounting the writable mount read-only while a file is open for writing there:
    // EBUSY (`mnt_make_readonly`); a read-only descriptor does not count.
    t.mount(memfs(), b"/rw/dir", MountFlags::empty()).unwrap();
    let wd = t.open(b"/rw/dir/x", OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
    let rd = t.open(b"/rw/dir/x", OpenFlags::RDONLY, 0).unwrap();
    assert_eq!(t.remount(b"/rw/dir", MountFlags::RDONLY), Err(Errno::EBUSY));
    t.write(wd, b"still writable").unwrap();
    t.close(wd).unwrap();
    t.remount(b"/rw/dir", MountFlags::RDONLY).unwrap();
    assert_eq!(t.fchmod(rd, 0o600).err(), e, "opened before the remount");
    assert_eq!(t.open(b"/rw/dir/x", OpenFlags::WRONLY, 0).err(), e);
    // And back.
    t.remount(b"/rw/dir", MountFlags::empty()).unwrap();
    assert!(t.fchmod(rd, 0o600).is_ok());
    let wd = t.open(b"/rw/dir/x", OpenFlags::WRONLY, 0).unwrap();
    t.close(wd).unwrap();
    for fd in [rd, w, before] {
        t.close(fd).unwrap();
    }
    // A bind of a read-only mount is read-only; remount makes it writable.
    t.mkdir(b"/rw/again", 0o755).unwrap();
    t.mount(bind(b"/ro", false), b"/rw/again", MountFlags::empty()).unwrap();
    assert_eq!(t.mkdir(b"/rw/again/x", 0o755).err(), e);
    t.remount(b"/rw/again", MountFlags::empty()).unwrap();
    assert_eq!(t.mkdir(b"/rw/again/x", 0o755), Ok(()));
    let _ = vfs;
}

#[test]
fn per_mount_flags_nodev_noexec_and_the_rest_shown() {
    let (_vfs, t) = new_vfs(FastPaths::all());
    t.mkdir(b"/m", 0o755).unwrap();
    t.mount(memfs(), b"/m", MountFlags::NODEV | MountFlags::NOEXEC | MountFlags::NOSUID | MountFlags::NOATIME).unwrap();
    // mknod of a device node works on nodev (as Linux); opening it is EACCES.
    t.mknodat(DirFd::Cwd, b"/m/null", 0o20666, 0x103).unwrap();
    assert_eq!(t.open(b"/m/null", OpenFlags::RDONLY, 0), Err(Errno::EACCES));
    creat(&t, "/m/prog", b"#!");
    t.fchmodat(DirFd::Cwd, b"/m/prog", 0o755, AtFlags::empty()).unwrap();
    assert_eq!(t.access(b"/m/prog", AccessMode::X_OK), Err(Errno::EACCES));
    assert!(t.access(b"/m", AccessMode::X_OK).is_ok(), "directories are still searchable");
    let text = String::from_utf8(t.mountinfo_text()).unwrap();
    let line = text.lines().nth(1).unwrap();
    assert!(line.contains(" / /m rw,nosuid,nodev,noexec,noatime - tmpfs "), "{line}");
    t.remount(b"/m", MountFlags::RDONLY).unwrap();
    let line = |t: &Task| String::from_utf8(t.mountinfo_text()).unwrap().lines().nth(1).unwrap().to_string();
    // A remount that names no access-time mode keeps the mount's (Linux's `path_mount`).
    assert!(line(&t).contains(" / /m ro,noatime - tmpfs "), "{}", line(&t));
    assert!(t.access(b"/m/prog", AccessMode::X_OK).is_ok(), "remount replaced the flags");
    t.remount(b"/m", MountFlags::RELATIME).unwrap();
    assert!(line(&t).contains(" / /m rw,relatime - tmpfs "), "{}", line(&t));
    t.remount(b"/m", MountFlags::STRICTATIME | MountFlags::NOATIME | MountFlags::NODIRATIME).unwrap();
    assert!(line(&t).contains(" / /m rw,nodiratime - tmpfs "), "strictatime wins: {}", line(&t));
    t.remount(b"/m", MountFlags::NOSUID).unwrap();
    assert!(line(&t).contains(" / /m rw,nosuid,nodiratime - tmpfs "), "{}", line(&t));
}

#[test]
fn mountinfo_lists_the_tree_as_the_task_sees_it() {
    let (_vfs, t) = new_vfs(FastPaths::all());
    for d in ["/a", "/a/b c", "/a/sub", "/x"] {
        t.mkdir(d.as_bytes(), 0o755).unwrap();
    }
    t.mount(memfs(), b"/a/b c", MountFlags::empty()).unwrap();
    t.mount(bind(b"/a/sub", false), b"/x", MountFlags::RDONLY).unwrap();
    let info = t.mountinfo();
    assert_eq!(info.len(), 3);
    assert_eq!((info[0].id, info[0].parent_id, &info[0].mount_point[..]), (MountId(1), MountId(1), &b"/"[..]));
    assert_eq!(info[1].mount_point, b"/a/b c");
    assert_eq!(info[2].root, b"/a/sub", "a bind shows its root within the filesystem");
    assert_eq!(info[2].dev, info[0].dev);
    assert!(info[2].flags.contains(MountFlags::RDONLY));
    let text = String::from_utf8(t.mountinfo_text()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(lines[0].starts_with("1 1 0:"), "{}", lines[0]);
    assert!(lines[1].contains(" / /a/b\\040c rw,relatime - tmpfs tmpfs rw"), "{}", lines[1]);
    assert!(lines[2].contains(" /a/sub /x ro,relatime - "), "{}", lines[2]);
    // After chroot, only what is below the new root, relative to it.
    t.chroot(b"/a").unwrap();
    let info = t.mountinfo();
    assert_eq!(info.len(), 1);
    assert_eq!(info[0].mount_point, b"/b c");
}

// ------------------------------------------------------------------ unmount and its users

#[test]
fn umount_is_busy_while_used_and_detach_leaves_users_working() {
    let (vfs, t) = new_vfs(FastPaths::all());
    t.mkdir(b"/m", 0o755).unwrap();
    t.mkdir(b"/m2", 0o755).unwrap();
    t.mount(memfs(), b"/m", MountFlags::empty()).unwrap();
    // An open file.
    let fd = t.open(b"/m/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
    assert_eq!(t.umount(b"/m"), Err(Errno::EBUSY));
    let dup = t.dup(fd).unwrap();
    t.close(fd).unwrap();
    assert_eq!(t.umount(b"/m"), Err(Errno::EBUSY), "a dup keeps the file open");
    t.close(dup).unwrap();
    // An O_PATH descriptor counts too.
    let pfd = t.open(b"/m", OpenFlags::PATH, 0).unwrap();
    assert_eq!(t.umount(b"/m"), Err(Errno::EBUSY));
    t.close(pfd).unwrap();
    // The working directory, of this task or another one (forked).
    t.chdir(b"/m").unwrap();
    assert_eq!(t.umount(b"/m"), Err(Errno::EBUSY));
    let child = t.fork();
    t.chdir(b"/").unwrap();
    assert_eq!(t.umount(b"/m"), Err(Errno::EBUSY), "the child's cwd");
    drop(child);
    // A root.
    let jail = vfs.root_task();
    jail.chroot(b"/m").unwrap();
    assert_eq!(t.umount(b"/m"), Err(Errno::EBUSY));
    drop(jail);
    // A submount.
    t.mkdir(b"/m/sub", 0o755).unwrap();
    t.mount(memfs(), b"/m/sub", MountFlags::empty()).unwrap();
    assert_eq!(t.umount(b"/m"), Err(Errno::EBUSY));
    t.umount(b"/m/sub").unwrap();
    // MNT_EXPIRE: a first call marks, a second unmounts, a use in between clears the mark.
    assert_eq!(t.umount2(b"/m", UmountFlags::EXPIRE), Err(Errno::EAGAIN));
    let fd = t.open(b"/m/f", OpenFlags::RDONLY, 0).unwrap();
    assert_eq!(t.umount2(b"/m", UmountFlags::EXPIRE), Err(Errno::EBUSY));
    t.close(fd).unwrap();
    assert_eq!(t.umount2(b"/m", UmountFlags::EXPIRE), Err(Errno::EAGAIN));
    assert_eq!(t.umount2(b"/m", UmountFlags::EXPIRE), Ok(()));
    assert_eq!(t.stat(b"/m/f"), Err(Errno::ENOENT));

    // Detach: the mount leaves the tree at once, with its submounts; users keep working.
    t.mount(memfs(), b"/m", MountFlags::empty()).unwrap();
    t.mkdir(b"/m/sub", 0o755).unwrap();
    t.mount(memfs(), b"/m/sub", MountFlags::empty()).unwrap();
    creat(&t, "/m/sub/deep", b"deep");
    let fd = t.open(b"/m/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
    let dirfd = t.open(b"/m", OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
    let worker = vfs.root_task();
    worker.chdir(b"/m").unwrap();
    t.umount2(b"/m", UmountFlags::DETACH).unwrap();
    assert_eq!(t.stat(b"/m/f"), Err(Errno::ENOENT));
    assert_eq!(t.mountinfo().len(), 1, "the whole subtree left the table");
    assert_eq!(t.write(fd, b"still here"), Ok(10));
    assert_eq!(t.fstat(fd).unwrap().size, 10);
    // Descriptor-relative calls still work inside the detached tree; the submount was
    // detached from it, so its mountpoint is a plain directory again.
    assert!(t.fstatat(DirFd::Fd(dirfd), b"f", AtFlags::empty()).is_ok());
    assert_eq!(t.fstatat(DirFd::Fd(dirfd), b"sub/deep", AtFlags::empty()), Err(Errno::ENOENT));
    // `..` at the root of a detached mount stays there.
    assert_eq!(t.fstatat(DirFd::Fd(dirfd), b"../../f", AtFlags::empty()).unwrap().ino, t.fstat(fd).unwrap().ino);
    assert!(worker.stat(b"f").is_ok());
    assert_eq!(worker.getcwd().unwrap(), b"(unreachable)/");
    // Cannot mount on, bind from, or remount what is not in the tree.
    assert_eq!(worker.mount(memfs(), b".", MountFlags::empty()), Err(Errno::EINVAL));
    assert_eq!(t.mount(bind(b".", false), b"/m2", MountFlags::empty()).ok(), Some(()), "cwd of t is /");
    t.umount(b"/m2").unwrap();
    assert_eq!(worker.mount(bind(b".", false), b"/m2", MountFlags::empty()), Err(Errno::EINVAL));
    assert_eq!(worker.remount(b".", MountFlags::RDONLY), Err(Errno::EINVAL));
    assert_eq!(worker.umount(b"."), Err(Errno::EINVAL));
    // The mount goes with its last user (nothing to observe but that nothing breaks).
    t.close(fd).unwrap();
    t.close(dirfd).unwrap();
    drop(worker);
    t.mkdir(b"/m/again", 0o755).unwrap();
}

#[test]
fn namespace_calls_across_mounts_are_exdev_and_on_mountpoints_ebusy() {
    let (_vfs, t) = new_vfs(FastPaths::all());
    for d in ["/m", "/other", "/m2"] {
        t.mkdir(d.as_bytes(), 0o755).unwrap();
    }
    creat(&t, "/rootfile", b"");
    t.mount(memfs(), b"/m", MountFlags::empty()).unwrap();
    t.mount(memfs(), b"/m2", MountFlags::empty()).unwrap();
    creat(&t, "/m/f", b"");
    t.mkdir(b"/m/d", 0o755).unwrap();
    assert_eq!(t.rename(b"/m/f", b"/f"), Err(Errno::EXDEV));
    assert_eq!(t.rename(b"/rootfile", b"/m/rootfile"), Err(Errno::EXDEV));
    assert_eq!(t.rename(b"/m/d", b"/m2/d"), Err(Errno::EXDEV));
    assert_eq!(t.renameat2(DirFd::Cwd, b"/m/f", DirFd::Cwd, b"/rootfile", RenameFlags::EXCHANGE), Err(Errno::EXDEV));
    assert_eq!(t.link(b"/m/f", b"/f"), Err(Errno::EXDEV));
    assert_eq!(t.link(b"/rootfile", b"/m/rootfile"), Err(Errno::EXDEV));
    assert_eq!(t.rmdir(b"/m"), Err(Errno::EBUSY));
    assert_eq!(t.rename(b"/m", b"/moved"), Err(Errno::EBUSY));
    assert_eq!(t.rename(b"/other", b"/m"), Err(Errno::EBUSY), "replacing a mountpoint");
    assert_eq!(t.renameat2(DirFd::Cwd, b"/other", DirFd::Cwd, b"/m", RenameFlags::EXCHANGE), Err(Errno::EBUSY));
    // The mount's root itself: rmdir of "/m/." is EINVAL, of "/m/" EBUSY as Linux.
    assert_eq!(t.rmdir(b"/m/."), Err(Errno::EINVAL));
    assert_eq!(t.rmdir(b"/m/"), Err(Errno::EBUSY));
    assert_eq!(t.rename(b"/m/", b"/x"), Err(Errno::EBUSY));
    // Within one mount everything works.
    assert_eq!(t.rename(b"/m/f", b"/m/d/f"), Ok(()));
    assert_eq!(t.link(b"/m/d/f", b"/m/g"), Ok(()));
    t.umount(b"/m").unwrap();
    assert_eq!(t.rmdir(b"/m"), Ok(()));
}

// ------------------------------------------------------------------ openat2

fn how(flags: OpenFlags, resolve: ResolveFlags) -> OpenHow {
    OpenHow { flags, mode: 0, resolve }
}

/// The inode number of what `openat2(O_PATH)` opens, or its errno.
fn o2(t: &Task, dirfd: DirFd, path: &str, resolve: ResolveFlags) -> Result<u64, Errno> {
    let fd = t.openat2(dirfd, path.as_bytes(), &how(OpenFlags::PATH, resolve))?;
    let ino = t.fstat(fd).unwrap().ino;
    t.close(fd).unwrap();
    Ok(ino)
}

/// /scope (the scope), /scope/in/t, /scope/dir, /secret, symlinks in /scope.
fn scope_tree(t: &Task) -> (Fd, u64, u64, u64) {
    for d in ["/scope", "/scope/in", "/scope/dir", "/scope/mnt"] {
        t.mkdir(d.as_bytes(), 0o755).unwrap();
    }
    let inner = creat(t, "/scope/in/t", b"");
    let secret = creat(t, "/secret", b"");
    let decoy = creat(t, "/scope/secret", b"");
    for (body, name) in [
        ("in/t", "rel"),
        ("../secret", "up"),
        ("/secret", "abs"),
        ("/in/t", "absin"),
        ("dir/../in/t", "dotdot_in"),
        ("mnt", "tomnt"),
    ] {
        t.symlink(body.as_bytes(), format!("/scope/{name}").as_bytes()).unwrap();
    }
    let dirfd = t.open(b"/scope", OpenFlags::PATH | OpenFlags::DIRECTORY, 0).unwrap();
    (dirfd, inner, secret, decoy)
}

#[test]
fn openat2_resolve_flags() {
    for fast in [FastPaths::all(), FastPaths::all() - FastPaths::LOCKLESS_WALK] {
        let (_vfs, t) = new_vfs(fast);
        let (s, inner, secret, decoy) = scope_tree(&t);
        let s = DirFd::Fd(s);
        let none = ResolveFlags::empty();
        let b = ResolveFlags::BENEATH;
        let r = ResolveFlags::IN_ROOT;
        // Plain openat2 is openat.
        assert_eq!(o2(&t, s, "up", none), Ok(secret));
        assert_eq!(o2(&t, s, "../secret", none), Ok(secret));
        // BENEATH: leaving is EXDEV, staying below is fine even through `..`.
        assert_eq!(o2(&t, s, "in/t", b), Ok(inner));
        assert_eq!(o2(&t, s, "in/../in/./t", b), Ok(inner));
        assert_eq!(o2(&t, s, "rel", b), Ok(inner));
        assert_eq!(o2(&t, s, "dotdot_in", b), Ok(inner));
        assert_eq!(o2(&t, s, "..", b), Err(Errno::EXDEV));
        assert_eq!(o2(&t, s, "../secret", b), Err(Errno::EXDEV));
        assert_eq!(o2(&t, s, "in/../../secret", b), Err(Errno::EXDEV));
        assert_eq!(o2(&t, s, "up", b), Err(Errno::EXDEV));
        assert_eq!(o2(&t, s, "abs", b), Err(Errno::EXDEV));
        assert_eq!(o2(&t, s, "absin", b), Err(Errno::EXDEV), "any absolute symlink");
        assert_eq!(o2(&t, s, "/scope/in/t", b), Err(Errno::EXDEV), "an absolute path");
        assert_eq!(o2(&t, DirFd::Cwd, "scope/in/t", b), Ok(inner), "the cwd as the start");
        assert_eq!(o2(&t, DirFd::Cwd, "scope/../secret", b), Ok(secret), "still below the cwd");
        // IN_ROOT: the start directory is the root.
        assert_eq!(o2(&t, s, "..", r), Ok(t.stat(b"/scope").unwrap().ino));
        assert_eq!(o2(&t, s, "../../secret", r), Ok(decoy));
        assert_eq!(o2(&t, s, "up", r), Ok(decoy));
        assert_eq!(o2(&t, s, "abs", r), Ok(decoy));
        assert_eq!(o2(&t, s, "absin", r), Ok(inner));
        assert_eq!(o2(&t, s, "/in/t", r), Ok(inner), "an absolute path starts at the scope");
        // NO_SYMLINKS: any symlink to follow is ELOOP; one not followed is fine.
        let ns = ResolveFlags::NO_SYMLINKS;
        assert_eq!(o2(&t, s, "rel", ns), Err(Errno::ELOOP));
        assert_eq!(o2(&t, s, "tomnt/", ns), Err(Errno::ELOOP));
        let fd = t.openat2(s, b"rel", &how(OpenFlags::PATH | OpenFlags::NOFOLLOW, ns)).unwrap();
        assert_eq!(t.fstat(fd).unwrap().mode & 0o170000, 0o120000);
        t.close(fd).unwrap();
        assert_eq!(o2(&t, s, "in/t", ns), Ok(inner));
        // NO_XDEV: crossing a mount point down, up, or by an absolute symlink.
        t.mount(memfs(), b"/scope/mnt", MountFlags::empty()).unwrap();
        creat(&t, "/scope/mnt/m", b"");
        let nx = ResolveFlags::NO_XDEV;
        assert_eq!(o2(&t, s, "mnt/m", nx), Err(Errno::EXDEV));
        assert_eq!(o2(&t, s, "tomnt", nx), Err(Errno::EXDEV));
        assert_eq!(o2(&t, s, "in/t", nx), Ok(inner));
        assert_eq!(o2(&t, s, "mnt", nx), Err(Errno::EXDEV), "the mount root is across");
        let m = t.open(b"/scope/mnt", OpenFlags::PATH | OpenFlags::DIRECTORY, 0).unwrap();
        assert!(o2(&t, DirFd::Fd(m), "m", nx).is_ok());
        assert_eq!(o2(&t, DirFd::Fd(m), "..", nx), Err(Errno::EXDEV));
        assert_eq!(o2(&t, DirFd::Fd(m), "../in/t", b), Err(Errno::EXDEV), "`..` at the scope root");
        assert_eq!(o2(&t, s, "mnt/../in/t", b), Ok(inner), "up through a mount root, inside");
        // Linux compares the symlink's mount with the walk's root, which it sets only
        // for an absolute path, a scope or a `..`: before that, an absolute symlink is
        // EXDEV even on one mount (checked on 6.18; differential.rs compares it too).
        assert_eq!(o2(&t, s, "abs", nx), Err(Errno::EXDEV), "an absolute symlink before the root is set");
        assert_eq!(o2(&t, s, "../scope/abs", nx), Ok(secret), "after a `..` set it, on the same mount");
        assert_eq!(o2(&t, s, "/scope/abs", nx), Ok(secret), "after an absolute start set it");
        t.mkdir(b"/scope/mnt/sub", 0o755).unwrap();
        t.symlink(b"/secret", b"/scope/mnt/sub/abs").unwrap();
        assert_eq!(o2(&t, DirFd::Fd(m), "sub/abs", nx), Err(Errno::EXDEV));
        t.close(m).unwrap();
        // CACHED: answered from the cache or EAGAIN, never by creating or truncating.
        let c = ResolveFlags::CACHED;
        if fast.contains(FastPaths::LOCKLESS_WALK) {
            assert_eq!(o2(&t, s, "in/t", c), Ok(inner));
            assert_eq!(o2(&t, s, "in/missing", c), Err(Errno::ENOENT), "a cached miss");
        } else {
            assert_eq!(o2(&t, s, "in/t", c), Err(Errno::EAGAIN), "no lockless walk: nothing is cached-only");
        }
        let fl = [OpenFlags::CREAT | OpenFlags::WRONLY, OpenFlags::TRUNC | OpenFlags::WRONLY];
        for f in fl {
            let h = OpenHow { flags: f, mode: if f.contains(OpenFlags::CREAT) { 0o644 } else { 0 }, resolve: c };
            assert_eq!(t.openat2(s, b"in/t", &h), Err(Errno::EAGAIN));
        }
        // Creating under a scope.
        let h = OpenHow { flags: OpenFlags::CREAT | OpenFlags::WRONLY, mode: 0o600, resolve: b };
        let fd = t.openat2(s, b"in/created", &h).unwrap();
        t.close(fd).unwrap();
        assert!(t.stat(b"/scope/in/created").is_ok());
        assert_eq!(t.openat2(s, b"../created", &h), Err(Errno::EXDEV));
        let tmp =
            OpenHow { flags: OpenFlags::TMPFILE | OpenFlags::DIRECTORY | OpenFlags::RDWR, mode: 0o600, resolve: b };
        assert_eq!(t.openat2(s, b"..", &tmp), Err(Errno::EXDEV));
        let fd = t.openat2(s, b"in", &tmp).unwrap();
        t.close(fd).unwrap();
        // Bad combinations and unknown bits.
        let e = Some(Errno::EINVAL);
        assert_eq!(t.openat2(s, b"in/t", &how(OpenFlags::RDONLY, b | r)).err(), e);
        assert_eq!(t.openat2(s, b"in/t", &how(OpenFlags::RDONLY, ResolveFlags::from_bits_retain(0x40))).err(), e);
        assert_eq!(t.openat2(s, b"in/t", &how(OpenFlags::from_bits_retain(0o40000000), none)).err(), e);
        assert_eq!(t.openat2(s, b"in/t", &OpenHow { flags: OpenFlags::RDONLY, mode: 0o644, resolve: none }).err(), e);
        let h = OpenHow { flags: OpenFlags::CREAT | OpenFlags::WRONLY, mode: 0o170644, resolve: none };
        assert_eq!(t.openat2(s, b"in/x", &h).err(), e);
        assert_eq!(t.openat2(s, b"in/t", &how(OpenFlags::PATH | OpenFlags::RDWR, none)).err(), e);
        assert_eq!(t.openat2(s, b"in", &how(OpenFlags::DIRECTORY | OpenFlags::CREAT, none)).err(), e);
        assert_eq!(t.openat2(s, b"in", &how(OpenFlags::TMPFILE | OpenFlags::RDONLY, none)).err(), e);
        // NO_MAGICLINKS refuses nothing: uvfs has no magic links.
        assert_eq!(o2(&t, s, "rel", ResolveFlags::NO_MAGICLINKS), Ok(inner));
    }
}

// ------------------------------------------------------------------ the race

fn iters(default: usize) -> usize {
    std::env::var("UVFS_STRESS_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A reader's observation: writer generation before and after, path index, scope, answer.
type Observation = (u64, u64, usize, ResolveFlags, Result<u64, Errno>);

/// Depth of the chain of directories in the moving directory: the longer a walk spends
/// inside it, the likelier a rename lands in the middle of the walk.
const CHAIN: usize = 24;

/// One thread moves a directory in and out of the scope, swaps a symlink among bodies that
/// point inside and outside, and mounts and unmounts on a directory inside, while another
/// resolves paths designed to escape with `RESOLVE_BENEATH` and `RESOLVE_IN_ROOT`: down
/// into the moving directory, then up with exactly as many `..` as lead to `/` once it
/// has moved out, then down to `/secret`. The reader never gets a file outside the scope:
/// never `/secret`, never the moving directory's file during a window in which that
/// directory was outside throughout. The reader runs a fixed number of rounds, the writer
/// until the reader is done; nothing is asserted about timing or how often anything
/// happened. (Checked against mutations: without the rename-sequence validation and the
/// final below-the-root check, this finds an escape within a few thousand rounds.)
fn scope_race(fast: FastPaths) {
    let (_vfs, t) = new_vfs(fast);
    for d in ["/scope", "/scope/in", "/outside", "/scope/d", "/scope/mp", "/scope/outside"] {
        t.mkdir(d.as_bytes(), 0o755).unwrap();
    }
    let mut chain = String::from("/scope/d");
    for _ in 0..CHAIN {
        chain.push_str("/x");
        t.mkdir(chain.as_bytes(), 0o755).unwrap();
    }
    let secret = creat(&t, "/secret", b"");
    let osecret = creat(&t, "/outside/secret", b"");
    let decoy = creat(&t, "/scope/secret", b"");
    let odecoy = creat(&t, "/scope/outside/secret", b"");
    let inner = creat(&t, "/scope/in/t", b"");
    let mover = creat(&t, "/scope/d/t2", b"");
    let down = "x/".repeat(CHAIN);
    // From the bottom of the chain, CHAIN + 1 `..` reach d's parent, CHAIN + 2 its
    // grandparent: `/` once d is in /outside.
    let up = "../".repeat(CHAIN + 2);
    let escape = format!("d/{down}{up}secret");
    let escape_out = format!("d/{down}{up}outside/secret");
    let mover_path = format!("d/{down}{}t2", "../".repeat(CHAIN));
    let inner_path = format!("d/{down}{}in/t", "../".repeat(CHAIN + 1));
    let bodies: Vec<String> =
        vec!["d/t2".into(), "../secret".into(), "/secret".into(), escape.clone(), escape_out.clone()];
    t.symlink(bodies[0].as_bytes(), b"/scope/link").unwrap();
    let dirfd = t.open(b"/scope", OpenFlags::PATH | OpenFlags::DIRECTORY, 0).unwrap();
    let paths: Vec<String> = vec![
        escape.clone(),
        escape_out,
        format!("mp/../{escape}"),
        "d/../../secret".into(),
        mover_path,
        inner_path,
        "link".into(),
    ];
    let forbidden: HashSet<u64> =
        [secret, osecret, t.stat(b"/").unwrap().ino, t.stat(b"/outside").unwrap().ino].into_iter().collect();
    let mut allowed_always: HashSet<u64> = [decoy, odecoy, inner, t.stat(b"/scope").unwrap().ino].into_iter().collect();
    allowed_always.extend([t.stat(b"/scope/d").unwrap().ino]);

    let rounds = iters(20000);
    // gen: odd while step (g-1)/2 runs; inside[k]: /scope/d is in the scope after k steps.
    let generation = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let started = AtomicBool::new(false);
    let mut inside = vec![true];
    let mut obs: Vec<Observation> = Vec::new();
    std::thread::scope(|sc| {
        let writer = sc.spawn(|| {
            let t = t.fork();
            let mut inside = vec![true];
            let mut now_inside = true;
            while !started.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            let mut i = 0usize;
            while !done.load(Ordering::SeqCst) {
                generation.store(2 * i as u64 + 1, Ordering::SeqCst);
                match i % 8 {
                    3 => {
                        let body = &bodies[(i / 8) % bodies.len()];
                        t.symlink(body.as_bytes(), b"/scope/link.new").unwrap();
                        t.rename(b"/scope/link.new", b"/scope/link").unwrap();
                    }
                    7 => {
                        if (i / 8).is_multiple_of(2) {
                            t.mount(memfs(), b"/scope/mp", MountFlags::empty()).unwrap();
                        } else {
                            t.umount2(b"/scope/mp", UmountFlags::DETACH).unwrap();
                        }
                    }
                    _ => {
                        let (from, to) =
                            if now_inside { ("/scope/d", "/outside/d") } else { ("/outside/d", "/scope/d") };
                        t.rename(from.as_bytes(), to.as_bytes()).unwrap();
                        now_inside = !now_inside;
                    }
                }
                inside.push(now_inside);
                generation.store(2 * i as u64 + 2, Ordering::SeqCst);
                i += 1;
            }
            inside
        });
        let reader = sc.spawn(|| {
            let mut obs = Vec::new();
            started.store(true, Ordering::SeqCst);
            for k in 0..rounds {
                for (pi, p) in paths.iter().enumerate() {
                    let resolve = if (k + pi) % 2 == 0 { ResolveFlags::BENEATH } else { ResolveFlags::IN_ROOT };
                    let g1 = generation.load(Ordering::SeqCst);
                    let got = o2(&t, DirFd::Fd(dirfd), p, resolve);
                    let g2 = generation.load(Ordering::SeqCst);
                    obs.push((g1, g2, pi, resolve, got));
                }
            }
            done.store(true, Ordering::SeqCst);
            obs
        });
        obs = reader.join().unwrap();
        inside = writer.join().unwrap();
    });
    for (g1, g2, pi, resolve, got) in obs {
        let (lo, hi) = ((g1 / 2) as usize, (g2.div_ceil(2) as usize).min(inside.len() - 1));
        let what = format!("{resolve:?} path {pi} during writer steps {lo}..={hi}");
        match got {
            Ok(ino) => {
                assert!(!forbidden.contains(&ino), "{what}: escaped the scope (inode {ino})");
                if ino == mover {
                    assert!(
                        inside[lo..=hi].iter().any(|&i| i),
                        "{what}: the moving directory's file while it was outside throughout"
                    );
                } else {
                    assert!(allowed_always.contains(&ino), "{what}: unexpected inode {ino}");
                }
            }
            Err(e) => assert!(matches!(e, Errno::ENOENT | Errno::EXDEV), "{what}: {e:?}"),
        }
    }
}

#[test]
fn scoped_resolution_never_escapes_under_renames_lockless_walk() {
    scope_race(FastPaths::all());
}

#[test]
fn scoped_resolution_never_escapes_under_renames_locked_walk() {
    scope_race(FastPaths::all() - FastPaths::LOCKLESS_WALK);
}

/// Mounts and unmounts racing opens and chdirs: a non-lazy umount either fails with EBUSY
/// or leaves no user behind (every open that succeeded is of a mount still attached when
/// it was counted, so the umount that follows its close succeeds).
#[test]
fn umount_races_opens_without_losing_users() {
    let (_vfs, t) = new_vfs(FastPaths::all());
    t.mkdir(b"/m", 0o755).unwrap();
    let steps = iters(3000) as u64;
    let done = AtomicBool::new(false);
    // Forked before the loop: a fork taken while the loop has its file open copies that
    // descriptor, whose mount then stays busy for the child's life (as on Linux), and the
    // umount below would retry forever (about one run in a hundred did).
    let child = t.fork();
    std::thread::scope(|sc| {
        let opener = sc.spawn(|| {
            let t = child;
            while !done.load(Ordering::SeqCst) {
                if let Ok(fd) = t.open(b"/m/f", OpenFlags::RDONLY, 0) {
                    // Whatever it opened, its mount is still in use until the close.
                    t.close(fd).unwrap();
                }
                if t.chdir(b"/m").is_ok() {
                    t.chdir(b"/").unwrap();
                }
            }
        });
        for _ in 0..steps {
            t.mount(memfs(), b"/m", MountFlags::empty()).unwrap();
            let fd = t.open(b"/m/f", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap();
            t.close(fd).unwrap();
            loop {
                match t.umount(b"/m") {
                    Ok(()) => break,
                    Err(Errno::EBUSY) => std::thread::yield_now(),
                    Err(e) => panic!("umount: {e:?}"),
                }
            }
        }
        done.store(true, Ordering::SeqCst);
        opener.join().unwrap();
    });
    assert_eq!(t.mountinfo().len(), 1);
    assert_eq!(t.stat(b"/m/f"), Err(Errno::ENOENT));
}

// ------------------------------------------------------------------ host differential

mod host {
    use std::ffi::CString;

    use super::common::{Op, Out, P, Who, host_become, host_op, p, uvfs_creds, uvfs_op};
    use uvfs::{AtFlags, DirFd, MountFlags, MountSource, StatxMask, Task, UmountFlags, Vfs, VfsConfig};

    /// A step: a filesystem call of the common harness, or a mount call.
    #[derive(Clone, Debug)]
    pub enum M {
        Fs(Op),
        /// `mount("none", path, "tmpfs", flags, NULL)`.
        Tmpfs(P, u32),
        /// `mount(src, dst, NULL, MS_BIND [| MS_REC], NULL)`.
        Bind(P, P, bool),
        /// `mount(NULL, path, NULL, MS_REMOUNT | MS_BIND | flags, NULL)`.
        Remount(P, u32),
        /// `umount2(path, flags)`.
        Umount(P, i32),
        /// `/proc/thread-self/mountinfo` (the host's, read with the chroot as root) or
        /// [`Task::mountinfo_text`]: the mounts below the root, ids and devices as
        /// positions in the listing ([`normalize`]).
        Mountinfo,
        /// `statx(path, STATX_MNT_ID)`'s mount id, as the position of its line in the
        /// mountinfo read right after it.
        MntId(P),
        /// `statfs(path)`'s `f_flags`: the flags of the mount it reached and of its
        /// filesystem.
        StatfsFlags(P),
    }

    pub fn fs(op: Op) -> M {
        M::Fs(op)
    }
    pub fn tmpfs(s: &str) -> M {
        M::Tmpfs(p(s), 0)
    }
    pub fn bind(a: &str, b: &str, rec: bool) -> M {
        M::Bind(p(a), p(b), rec)
    }
    pub fn remount(s: &str, flags: u32) -> M {
        M::Remount(p(s), flags)
    }
    pub fn umount(s: &str, flags: i32) -> M {
        M::Umount(p(s), flags)
    }

    /// Setup and call results.
    type Outs = (Vec<Out>, Vec<Out>);

    fn cs(p: &P) -> CString {
        CString::new(p.0.clone()).unwrap()
    }

    fn unit(rc: i32) -> Out {
        if rc < 0 { Out::Err(std::io::Error::last_os_error().raw_os_error().unwrap()) } else { Out::Unit }
    }

    fn host_m(m: &M) -> Out {
        // SAFETY (whole function): plain syscalls with NUL-terminated strings that outlive
        // them, in this thread's private mount namespace.
        unsafe {
            match m {
                M::Fs(op) => host_op(op),
                M::Tmpfs(path, flags) => unit(libc::mount(
                    c"none".as_ptr(),
                    cs(path).as_ptr(),
                    c"tmpfs".as_ptr(),
                    *flags as libc::c_ulong,
                    std::ptr::null(),
                )),
                M::Bind(a, b, rec) => {
                    let f = libc::MS_BIND | if *rec { libc::MS_REC } else { 0 };
                    unit(libc::mount(cs(a).as_ptr(), cs(b).as_ptr(), std::ptr::null(), f, std::ptr::null()))
                }
                M::Remount(path, flags) => unit(libc::mount(
                    std::ptr::null(),
                    cs(path).as_ptr(),
                    std::ptr::null(),
                    libc::MS_REMOUNT | libc::MS_BIND | *flags as libc::c_ulong,
                    std::ptr::null(),
                )),
                M::Umount(path, flags) => unit(libc::umount2(cs(path).as_ptr(), *flags)),
                M::Mountinfo => Out::Bytes(host_mountinfo()),
                M::MntId(path) => {
                    let mut st: libc::statx = std::mem::zeroed();
                    let rc = libc::statx(libc::AT_FDCWD, cs(path).as_ptr(), 0, libc::STATX_MNT_ID, &mut st);
                    if rc < 0 {
                        unit(rc)
                    } else {
                        Out::Nums([vec![st.stx_mnt_id as i64], listed_ids(&host_mountinfo())].concat())
                    }
                }
                M::StatfsFlags(path) => {
                    // glibc's `statvfs` is `statfs` with `f_flags` as `f_flag` (less
                    // `ST_VALID`, put back here).
                    let mut st: libc::statvfs = std::mem::zeroed();
                    match libc::statvfs(cs(path).as_ptr(), &mut st) {
                        0 => Out::Num((st.f_flag | 32) as i64),
                        rc => unit(rc),
                    }
                }
            }
        }
    }

    /// The host thread's mountinfo, as it sees it from its chroot.
    fn host_mountinfo() -> Vec<u8> {
        use std::io::Read;
        use std::os::fd::FromRawFd;
        // SAFETY: a plain syscall on a descriptor of this thread and a NUL-terminated name.
        let fd = unsafe { libc::openat(PROC_FD, c"mountinfo".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        assert!(fd >= 0, "mountinfo: {}", std::io::Error::last_os_error());
        // SAFETY: `fd` was just opened and is owned by nothing else.
        let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
        let mut text = Vec::new();
        f.read_to_end(&mut text).expect("reading mountinfo");
        text
    }

    /// Where the host side keeps its `/proc/thread-self` (opened before the chroot), out of
    /// the way of the descriptors the sequences number from 0.
    const PROC_FD: i32 = 1000;

    fn uvfs_m(t: &Task, m: &M) -> Out {
        let unit = |r: uvfs::Result<()>| match r {
            Ok(()) => Out::Unit,
            Err(e) => Out::Err(e.raw()),
        };
        match m {
            M::Fs(op) => uvfs_op(t, op),
            M::Tmpfs(path, flags) => {
                unit(t.mount(MountSource::MemFs(Default::default()), &path.0, MountFlags::from_bits_retain(*flags)))
            }
            M::Bind(a, b, rec) => {
                unit(t.mount(MountSource::Bind { path: &a.0, recursive: *rec }, &b.0, MountFlags::empty()))
            }
            M::Remount(path, flags) => unit(t.remount(&path.0, MountFlags::from_bits_retain(*flags))),
            M::Umount(path, flags) => unit(t.umount2(&path.0, UmountFlags::from_bits_retain(*flags as u32))),
            M::Mountinfo => Out::Bytes(t.mountinfo_text()),
            M::MntId(path) => match t.statx(DirFd::Cwd, &path.0, AtFlags::empty(), StatxMask::MNT_ID) {
                Ok(st) => Out::Nums([vec![st.mnt_id as i64], listed_ids(&t.mountinfo_text())].concat()),
                Err(e) => Out::Err(e.raw()),
            },
            M::StatfsFlags(path) => match t.statfs(&path.0) {
                Ok(s) => Out::Num(s.flags.bits() as i64),
                Err(e) => Out::Err(e.raw()),
            },
        }
    }

    /// One side's mount ids and devices, which differ in value between the sides, as
    /// positions: in a `Mountinfo`, each mount by its line (a parent outside the listing,
    /// or the root's own, is "out"), each device by its first line; a `MntId` by the line
    /// of the listing read right after it. Positions, not ids kept across calls: Linux
    /// hands out the lowest free mount id and anonymous device system-wide (other tests'
    /// mounts take them too), uvfs never reuses one.
    fn normalize(m: &M, out: Out) -> Out {
        match (m, out) {
            (M::MntId(_), Out::Nums(v)) => {
                let listed: Vec<i64> = v[1..].to_vec();
                Out::Num(listed.iter().position(|&i| i == v[0]).map_or(-1, |i| i as i64))
            }
            (M::Mountinfo, Out::Bytes(text)) => {
                let text = String::from_utf8(text).expect("mountinfo is text");
                let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
                let listed: Vec<&Vec<&str>> = lines.iter().collect();
                let mut devs: Vec<&str> = Vec::new();
                let mut norm = String::new();
                for f in &listed {
                    let parent = listed
                        .iter()
                        .position(|g| g[0] == f[1] && f[0] != f[1])
                        .map_or("out".to_string(), |i| i.to_string());
                    let dev = devs.iter().position(|d| *d == f[2]).unwrap_or_else(|| {
                        devs.push(f[2]);
                        devs.len() - 1
                    });
                    // parent, device, root, mount point, per-mount options.
                    norm += &format!("{parent} {dev} {} {} {}\n", f[3], f[4], f[5]);
                }
                Out::Bytes(norm.into_bytes())
            }
            (_, out) => out,
        }
    }

    /// The ids of the mounts a mountinfo text lists.
    fn listed_ids(text: &[u8]) -> Vec<i64> {
        let text = std::str::from_utf8(text).expect("mountinfo is text");
        text.lines().map(|l| l.split(' ').next().and_then(|n| n.parse().ok()).expect("an id")).collect()
    }

    /// Runs `setup` as root and `ops` as `who` in a thread with a private mount namespace
    /// (`unshare(CLONE_NEWNS)`, all mounts made private so nothing propagates to the
    /// host), chrooted into a fresh directory on tmpfs. `None` if the host refuses a
    /// private mount namespace (no `CAP_SYS_ADMIN`).
    fn host_run(who: Who, setup: &[M], ops: &[M]) -> Option<Outs> {
        let tmpl =
            CString::new(format!("{}/uvfs-mnt-XXXXXX", crate::common::scratch_in("/dev/shm").display())).unwrap();
        let mut raw = tmpl.into_bytes_with_nul();
        // SAFETY: a writable NUL-terminated template.
        let dir = unsafe { libc::mkdtemp(raw.as_mut_ptr().cast()) };
        assert!(!dir.is_null(), "mkdtemp: {}", std::io::Error::last_os_error());
        raw.pop();
        let root = String::from_utf8(raw).unwrap();
        std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
        let (setup, ops, r) = (setup.to_vec(), ops.to_vec(), root.clone());
        let res = std::thread::spawn(move || -> Result<Option<Outs>, String> {
            // SAFETY: these affect only this thread once it has its own fs context, file
            // table and mount namespace.
            unsafe {
                if libc::unshare(libc::CLONE_FS | libc::CLONE_FILES | libc::CLONE_NEWNS) != 0 {
                    return Ok(None);
                }
                if libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) != 0
                {
                    return Err(format!("making mounts private: {}", std::io::Error::last_os_error()));
                }
                // The root a mount of its own, as uvfs's root: a remount or bind of "/"
                // then acts on it, and the binds of its directories have their roots in it.
                let c = CString::new(r.clone()).unwrap();
                if libc::mount(c"none".as_ptr(), c.as_ptr(), c"tmpfs".as_ptr(), 0, std::ptr::null()) != 0 {
                    return Err(format!("tmpfs on the root: {}", std::io::Error::last_os_error()));
                }
                // Before the chroot, which hides /proc; mountinfo opened through it later
                // shows the mounts as the (chrooted) thread sees them.
                let proc = libc::open(c"/proc/thread-self".as_ptr(), libc::O_PATH | libc::O_DIRECTORY);
                if proc < 0 || libc::dup2(proc, PROC_FD) != PROC_FD {
                    return Err(format!("/proc/thread-self: {}", std::io::Error::last_os_error()));
                }
                libc::close(proc);
                let c = CString::new(r).unwrap();
                if libc::chroot(c.as_ptr()) != 0 || libc::chdir(c"/".as_ptr()) != 0 {
                    return Err(format!("chroot: {}", std::io::Error::last_os_error()));
                }
                if libc::syscall(libc::SYS_close_range, 0u32, (PROC_FD - 1) as u32, 0u32) != 0 {
                    return Err(format!("close_range: {}", std::io::Error::last_os_error()));
                }
                libc::umask(0o022);
            }
            let s: Vec<Out> = setup.iter().map(host_m).collect();
            host_become(who)?;
            let o: Vec<Out> = ops.iter().map(host_m).collect();
            Ok(Some((s, o)))
        })
        .join()
        .expect("host thread panicked")
        .unwrap_or_else(|e| panic!("host setup failed: {e}"));
        // The thread's namespace, and with it every mount made in it, is gone with the
        // thread.
        std::fs::remove_dir_all(&root).unwrap_or_else(|e| panic!("removing {root}: {e}"));
        res
    }

    fn uvfs_run(who: Who, setup: &[M], ops: &[M]) -> (Vec<Out>, Vec<Out>) {
        let vfs = Vfs::new(VfsConfig::default());
        let t = vfs.root_task();
        t.umask(0o022);
        let s = setup.iter().map(|m| uvfs_m(&t, m)).collect();
        t.set_credentials(uvfs_creds(who));
        let o = ops.iter().map(|m| uvfs_m(&t, m)).collect();
        (s, o)
    }

    /// One side's results with its ids as positions ([`normalize`]).
    fn normalized(setup: &[M], ops: &[M], s: Vec<Out>, o: Vec<Out>) -> Outs {
        let s = setup.iter().zip(s).map(|(m, out)| normalize(m, out)).collect();
        let o = ops.iter().zip(o).map(|(m, out)| normalize(m, out)).collect();
        (s, o)
    }

    /// Runs the sequence on both sides; panics with a report at the first difference.
    /// Returns false if the host cannot run it (reported on stderr).
    pub fn same(who: Who, setup: &[M], ops: &[M]) -> bool {
        let Some((hs, ho)) = host_run(who, setup, ops) else {
            eprintln!("host refuses a private mount namespace: differential mount test not run");
            return false;
        };
        let (hs, ho) = normalized(setup, ops, hs, ho);
        for (i, (m, h)) in setup.iter().zip(&hs).enumerate() {
            assert!(!matches!(h, Out::Err(_)), "setup step {i} {m:?} failed on the host: {h:?}");
        }
        let (us, uo) = uvfs_run(who, setup, ops);
        let (us, uo) = normalized(setup, ops, us, uo);
        assert_eq!(hs, us, "setup");
        if let Some(bad) = ho.iter().zip(&uo).position(|(h, u)| h != u) {
            let mut msg = format!("{who:?}: call {bad} differs\n");
            for (i, m) in ops.iter().enumerate() {
                let mark = if i == bad { ">>" } else { "  " };
                let show = |o: &Out| match o {
                    // A table in full, a line each.
                    Out::Bytes(b) if matches!(m, M::Mountinfo) => {
                        format!("\n{}", String::from_utf8_lossy(b).replace('\n', "\n        "))
                    }
                    o => format!("{o:?}"),
                };
                msg += &format!("{mark}{i:3} {m:?}\n      host {}\n      uvfs {}\n", show(&ho[i]), show(&uo[i]));
            }
            panic!("{msg}");
        }
        true
    }
}

mod diff {
    use super::common::{D, Op, Times, Who, p};
    use super::host::{M, bind, fs, remount, same, tmpfs, umount};

    const RDONLY: u32 = 1;
    const NODEV: u32 = 4;
    const NOEXEC: u32 = 8;
    const MNT_DETACH: i32 = 2;
    const MNT_EXPIRE: i32 = 4;
    const MNT_FORCE: i32 = 1;
    const UMOUNT_NOFOLLOW: i32 = 8;
    const O_RDONLY: i32 = 0;
    const O_WRONLY: i32 = 1;
    const O_RDWR: i32 = 2;
    const O_CREAT: i32 = 0o100;
    const O_PATH: i32 = 0o10000000;
    const O_DIRECTORY: i32 = 0o200000;
    const O_TRUNC: i32 = 0o1000;
    const AT_REMOVEDIR: i32 = 0x200;
    const RENAME_EXCHANGE: u32 = 2;

    fn mkdir(s: &str) -> M {
        fs(Op::Mkdirat(D::Cwd, p(s), 0o755))
    }
    fn open(s: &str, flags: i32) -> M {
        fs(Op::Open(D::Cwd, p(s), flags, 0o644))
    }
    fn close(fd: i32) -> M {
        fs(Op::Close(fd))
    }
    fn stat(s: &str) -> M {
        fs(Op::Fstatat(D::Cwd, p(s), 0))
    }
    fn rename(a: &str, b: &str, flags: u32) -> M {
        fs(Op::Renameat2(D::Cwd, p(a), D::Cwd, p(b), flags))
    }
    fn link(a: &str, b: &str) -> M {
        fs(Op::Linkat(D::Cwd, p(a), D::Cwd, p(b), 0))
    }
    fn unlink(s: &str, flags: i32) -> M {
        fs(Op::Unlinkat(D::Cwd, p(s), flags))
    }

    /// /a (with /a/f, /a/sub), /b, /m, /c: what every sequence starts from.
    fn base() -> Vec<M> {
        vec![
            mkdir("/a"),
            mkdir("/a/sub"),
            mkdir("/b"),
            mkdir("/c"),
            mkdir("/m"),
            open("/a/f", O_CREAT | O_WRONLY),
            fs(Op::Write(0, 5)),
            close(0),
        ]
    }

    #[test]
    fn tmpfs_mount_exdev_ebusy_and_umount() {
        same(
            Who::Root,
            &base(),
            &[
                tmpfs("/m"),
                stat("/m"),
                open("/m/x", O_CREAT | O_RDWR),
                rename("/m/x", "/x", 0),
                rename("/a/f", "/m/f", 0),
                rename("/m/x", "/a/f", RENAME_EXCHANGE),
                link("/m/x", "/x"),
                link("/a/f", "/m/f"),
                unlink("/m", AT_REMOVEDIR),
                unlink("/m/", AT_REMOVEDIR),
                unlink("/m/.", AT_REMOVEDIR),
                rename("/m", "/n", 0),
                rename("/c", "/m", 0),
                rename("/m", "/c", RENAME_EXCHANGE),
                umount("/m", 0),
                close(0),
                fs(Op::Chdir(p("/m"))),
                umount("/m", 0),
                fs(Op::Chdir(p("/"))),
                open("/m", O_PATH),
                umount("/m", 0),
                close(0),
                umount("/m/.", 0),
                stat("/m/x"),
                umount("/m", 0),
                // Not umount("/"): the host's root here is a mount on a directory of
                // /dev/shm (see `mount_sequences`); `bad_input_gets_linux_errnos` has it.
                umount("/missing", 0),
                umount("/a/f", 0),
                umount("/m", 0x100),
            ],
        );
    }

    #[test]
    fn bind_and_read_only_remount() {
        same(
            Who::Root,
            &base(),
            &[
                bind("/a", "/b", false),
                stat("/b/f"),
                remount("/b", RDONLY),
                open("/b/f", O_WRONLY),
                open("/b/f", O_RDONLY | O_TRUNC),
                open("/b/new", O_CREAT | O_WRONLY),
                open("/a/f", O_WRONLY),
                fs(Op::Write(0, 3)),
                close(0),
                mkdir("/b/d"),
                unlink("/b/f", 0),
                unlink("/b/sub", AT_REMOVEDIR),
                rename("/b/f", "/b/g", 0),
                rename("/a/f", "/b/g", 0),
                link("/b/f", "/b/g"),
                fs(Op::Symlinkat(p("x"), D::Cwd, p("/b/l"))),
                fs(Op::Mknodat(D::Cwd, p("/b/fifo"), 0o10644, 0)),
                fs(Op::Fchmodat(D::Cwd, p("/b/f"), 0o600, 0)),
                fs(Op::Fchownat(D::Cwd, p("/b/f"), Some(1), None, 0)),
                fs(Op::Utimensat(D::Cwd, p("/b/f"), Times::Null, 0)),
                fs(Op::Truncate(p("/b/f"), 0)),
                fs(Op::Faccessat(D::Cwd, p("/b/f"), 2, 0)),
                fs(Op::Faccessat(D::Cwd, p("/b/f"), 4, 0)),
                open("/b/f", O_RDONLY),
                fs(Op::Read(0, 10)),
                fs(Op::Fchmod(0, 0o600)),
                fs(Op::Utimensat(D::Fd(0), p(""), Times::Null, 0x1000)),
                remount("/b", 0),
                fs(Op::Fchmod(0, 0o640)),
                close(0),
                open("/b/f", O_RDWR),
                remount("/b", RDONLY),
                fs(Op::Write(0, 2)),
                close(0),
                remount("/b", RDONLY),
                remount("/b/sub", RDONLY),
                umount("/b", 0),
                stat("/b/f"),
            ],
        );
    }

    #[test]
    fn file_binds_stacks_and_recursive_binds() {
        same(
            Who::Root,
            &base(),
            &[
                open("/c/g", O_CREAT | O_WRONLY),
                close(0),
                bind("/a/f", "/c/g", false),
                stat("/c/g"),
                open("/c/g", O_RDONLY),
                fs(Op::Read(0, 10)),
                close(0),
                unlink("/c/g", 0),
                rename("/c/g", "/c/h", 0),
                bind("/a/f", "/c", false),
                bind("/a", "/c/g", false),
                umount("/c/g", 0),
                stat("/c/g"),
                // Stacked tmpfs mounts.
                tmpfs("/m"),
                open("/m/lower", O_CREAT | O_WRONLY),
                close(0),
                tmpfs("/m"),
                stat("/m/lower"),
                stat("/m/.."),
                umount("/m", 0),
                stat("/m/lower"),
                umount("/m", 0),
                // Recursive or not.
                tmpfs("/a/sub"),
                open("/a/sub/x", O_CREAT | O_WRONLY),
                close(0),
                bind("/a", "/b", true),
                bind("/a", "/c", false),
                stat("/b/sub/x"),
                stat("/c/sub/x"),
                umount("/a", 0),
                umount("/b", 0),
                umount("/b/sub", 0),
                umount("/b", 0),
                umount("/c", 0),
            ],
        );
    }

    #[test]
    fn detach_expire_and_bad_input() {
        same(
            Who::Root,
            &base(),
            &[
                tmpfs("/missing"),
                tmpfs("/a/f"),
                tmpfs("/a/f/x"),
                bind("/a", "/a/f", false),
                bind("/a/f", "/b", false),
                bind("/nope", "/b", false),
                remount("/a", RDONLY),
                remount("/nope", RDONLY),
                fs(Op::Symlinkat(p("m"), D::Cwd, p("/lm"))),
                tmpfs("/lm"),
                umount("/lm", UMOUNT_NOFOLLOW),
                umount("/lm", MNT_EXPIRE | MNT_DETACH),
                umount("/lm", MNT_EXPIRE | MNT_FORCE),
                umount("/lm", MNT_EXPIRE),
                umount("/lm", MNT_EXPIRE),
                stat("/m/."),
                tmpfs("/m"),
                open("/m/x", O_CREAT | O_RDWR),
                open("/m", O_RDONLY | O_DIRECTORY),
                umount("/m", MNT_DETACH),
                fs(Op::Write(0, 4)),
                fs(Op::Fstat(0)),
                fs(Op::Fstatat(D::Fd(1), p("x"), 0)),
                fs(Op::Fstatat(D::Fd(1), p("../x"), 0)),
                stat("/m/x"),
                umount("/m", 0),
                tmpfs("/m"),
                umount("/m", MNT_FORCE),
                remount("/m", RDONLY),
                tmpfs("/m"),
                remount("/m", NODEV | NOEXEC),
                fs(Op::Mknodat(D::Cwd, p("/m/null"), 0o20666, 0x103)),
                open("/m/null", O_RDONLY),
                open("/m/prog", O_CREAT | O_WRONLY),
                fs(Op::Fchmod(2, 0o755)),
                close(2),
                fs(Op::Faccessat(D::Cwd, p("/m/prog"), 1, 0)),
            ],
        );
    }

    /// What the generated sequences below found, each a difference from Linux fixed.
    #[test]
    fn what_generated_mount_sequences_found() {
        const STRICTATIME: u32 = 1 << 24;
        let setup = base();
        // A file bind-mounted and then replaced at its source reads as it was (its
        // contents were freed with its last name, and opening it spun on ESTALE).
        same(
            Who::Root,
            &setup,
            &[
                bind("/a/f", "/c", false),
                open("/b/new", O_CREAT | O_WRONLY),
                close(0),
                rename("/b/new", "/a/f", 0),
                open("/c", O_RDONLY),
                fs(Op::Read(0, 10)),
                fs(Op::Fstat(0)),
            ],
        );
        // A directory removed while it is the working directory opens as ".", lists as
        // ENOENT; a bind of a directory removed since opens, shows "//deleted" in
        // mountinfo, and cannot be bound again (ENOENT), nor a tree that shows it at its
        // top; a tree with it further down is copied with it.
        same(
            Who::Root,
            &setup,
            &[
                bind("/c", "/m", false),
                unlink("/c", AT_REMOVEDIR),
                open("/m", O_RDONLY),
                fs(Op::Getdents(0)),
                bind("/m", "/b", false),
                bind("/m", "/b", true),
                M::Mountinfo,
                fs(Op::Chdir(p("/a/sub"))),
                unlink("/a/sub", AT_REMOVEDIR),
                fs(Op::Open(D::Cwd, p("."), O_RDONLY, 0)),
                fs(Op::Fstat(1)),
                fs(Op::Getdents(1)),
                fs(Op::Getcwd),
            ],
        );
        same(
            Who::Root,
            &setup,
            &[
                bind("/c", "/a", false),
                bind("/b", "/", false),
                bind("/m", "/", false),
                unlink("/c", AT_REMOVEDIR),
                unlink("/m", AT_REMOVEDIR),
                bind("/", "/b", true),
                M::Mountinfo,
                mkdir("/m"),
                bind("/", "/m", true),
                M::Mountinfo,
            ],
        );
        // A filesystem mounted read-only stays so through a remount of its mount; a
        // remount without an access-time flag keeps the mount's; strictatime shows none.
        same(
            Who::Root,
            &setup,
            &[
                M::Tmpfs(p("/m"), RDONLY | STRICTATIME),
                M::Remount(p("/m"), 0),
                M::Mountinfo,
                mkdir("/m/d"),
                M::Remount(p("/m"), RDONLY | NODEV),
                M::Mountinfo,
            ],
        );
        // A recursive bind copies depth first (mountinfo's order); a stat under a mount
        // clears MNT_EXPIRE's mark.
        same(
            Who::Root,
            &setup,
            &[
                bind("/", "/b", false),
                bind("/", "/m", false),
                tmpfs("/b"),
                bind("/", "/a/sub", true),
                M::Mountinfo,
                umount("/m", MNT_EXPIRE),
                stat("/m/a"),
                umount("/m", MNT_EXPIRE),
                M::MntId(p("/m")),
                umount("/m", MNT_EXPIRE),
                M::Mountinfo,
            ],
        );
    }

    /// Generated sequences of mount calls (new filesystems, binds recursive or not of
    /// directories and files, remounts, unmounts with each flag) among the calls that
    /// meet mounts (creates, renames, links and removals across and onto them, opens,
    /// `chdir`, `..` from a mount's root, listings), with the mount table and mount ids
    /// read along the way.
    mod generated {
        use super::super::common::P;
        use super::super::common::generate::config;
        use super::*;
        use proptest::prelude::*;

        const NOSUID: u32 = 2;
        const NOSYMFOLLOW: u32 = 256;
        const NOATIME: u32 = 1024;
        const NODIRATIME: u32 = 2048;
        const RELATIME: u32 = 1 << 21;
        const STRICTATIME: u32 = 1 << 24;
        const RENAME_NOREPLACE: u32 = 1;

        /// Directories (some only once made), files, and names that are neither.
        const PATHS: &[&str] = &[
            "/",
            "/a",
            "/a/sub",
            "/a/f",
            "/a/sub/x",
            "/b",
            "/b/sub",
            "/b/f",
            "/c",
            "/c/g",
            "/m",
            "/m/d",
            "/m/x",
            "/m/d/y",
            "/a/sub/..",
            "/m/.",
            "/lm",
            "/lm/x",
        ];

        fn path() -> BoxedStrategy<P> {
            prop::sample::select(PATHS).prop_map(p).boxed()
        }

        fn fd() -> BoxedStrategy<i32> {
            (0..3).boxed()
        }

        fn step() -> BoxedStrategy<M> {
            let flags = || {
                prop::sample::select(vec![
                    0,
                    0,
                    RDONLY,
                    NOSUID | NODEV,
                    NOEXEC,
                    RDONLY | NOEXEC,
                    NOATIME,
                    NODIRATIME,
                    RELATIME,
                    STRICTATIME,
                    NOATIME | STRICTATIME,
                    NOATIME | NODIRATIME | RDONLY,
                    NOSYMFOLLOW,
                    NOSYMFOLLOW | NOEXEC,
                ])
            };
            let umount_flags =
                prop::sample::select(vec![0, 0, MNT_DETACH, MNT_EXPIRE, UMOUNT_NOFOLLOW, MNT_DETACH | UMOUNT_NOFOLLOW]);
            let open_flags = prop::sample::select(vec![O_CREAT | O_WRONLY, O_RDONLY, O_RDONLY | O_DIRECTORY, O_PATH]);
            prop_oneof![
                3 => (path(), flags()).prop_map(|(a, f)| M::Tmpfs(a, f)),
                4 => (path(), path(), any::<bool>()).prop_map(|(a, b, r)| M::Bind(a, b, r)),
                3 => (path(), flags()).prop_map(|(a, f)| M::Remount(a, f)),
                4 => (path(), umount_flags).prop_map(|(a, f)| M::Umount(a, f)),
                2 => Just(M::Mountinfo),
                2 => path().prop_map(M::MntId),
                2 => path().prop_map(M::StatfsFlags),
                2 => path().prop_map(|a| fs(Op::Mkdirat(D::Cwd, a, 0o755))),
                3 => (path(), open_flags).prop_map(|(a, f)| fs(Op::Open(D::Cwd, a, f, 0o644))),
                2 => fd().prop_map(|f| fs(Op::Close(f))),
                2 => path().prop_map(|a| fs(Op::Fstatat(D::Cwd, a, 0))),
                2 => (path(), path(), prop::sample::select(vec![0, RENAME_EXCHANGE, RENAME_NOREPLACE]))
                    .prop_map(|(a, b, f)| fs(Op::Renameat2(D::Cwd, a, D::Cwd, b, f))),
                1 => (path(), path()).prop_map(|(a, b)| fs(Op::Linkat(D::Cwd, a, D::Cwd, b, 0))),
                2 => (path(), prop::sample::select(vec![0, AT_REMOVEDIR]))
                    .prop_map(|(a, f)| fs(Op::Unlinkat(D::Cwd, a, f))),
                1 => path().prop_map(|a| fs(Op::Chdir(a))),
                1 => fd().prop_map(|f| fs(Op::Fchdir(f))),
                1 => Just(fs(Op::Getcwd)),
                1 => fd().prop_map(|f| fs(Op::Getdents(f))),
                1 => (fd(), prop::sample::select(vec!["..", ".", "x", "f"]))
                    .prop_map(|(f, n)| fs(Op::Fstatat(D::Fd(f), p(n), 0))),
                1 => fd().prop_map(|f| fs(Op::Write(f, 5))),
            ]
            .boxed()
        }

        fn setup() -> Vec<M> {
            let mut s = base();
            s.push(fs(Op::Symlinkat(p("m"), D::Cwd, p("/lm"))));
            s
        }

        /// Mounts a user meets: a tmpfs, a read-only bind, a bind of a file.
        fn user_setup() -> Vec<M> {
            let mut s = setup();
            s.extend([
                M::Tmpfs(p("/m"), 0),
                fs(Op::Mkdirat(D::Cwd, p("/m/d"), 0o777)),
                M::Bind(p("/a"), p("/b"), true),
                M::Remount(p("/b"), RDONLY),
                fs(Op::Open(D::Cwd, p("/c/g"), O_CREAT | O_WRONLY, 0o666)),
                fs(Op::Close(0)),
                M::Bind(p("/a/f"), p("/c/g"), false),
            ]);
            s
        }

        proptest! {
            #![proptest_config(config(1000))]

            #[test]
            fn mount_sequences_as_a_user(ops in prop::collection::vec(step(), 1..30)) {
                let mut ops = ops;
                ops.push(M::Mountinfo);
                same(Who::User, &user_setup(), &ops);
            }

            #[test]
            fn mount_sequences(ops in prop::collection::vec(step(), 1..30)) {
                let mut ops = ops;
                // No unmount of "/": uvfs's root mount is the namespace's root, which has no
                // parent (EINVAL, as Linux's for its namespace root), while the host's
                // chroot is a mount on a directory of /dev/shm (MNT_DETACH detaches it).
                // And Linux's `umount` of the task's root without MNT_DETACH remounts its
                // filesystem read-only (`do_umount_root`); uvfs has no read-only state of
                // a whole filesystem (README, deliberate differences).
                ops.retain(|m| !matches!(m, M::Umount(path, _) if path.0 == b"/"));
                // The table as it is left, and the descriptors closed (a detached mount
                // they hold goes with them).
                ops.push(M::Mountinfo);
                same(Who::Root, &setup(), &ops);
            }
        }
    }

    #[test]
    fn unprivileged_mount_calls_are_eperm() {
        let mut setup = base();
        setup.push(tmpfs("/m"));
        same(
            Who::User,
            &setup,
            &[
                tmpfs("/c"),
                tmpfs("/missing"),
                bind("/a", "/c", false),
                remount("/m", RDONLY),
                umount("/m", 0),
                umount("/c", 0),
                umount("/missing", 0),
                umount("/m", MNT_DETACH),
            ],
        );
    }
}

// ------------------------------------------------------------------ misc

#[test]
fn getcwd_and_dotdot_through_mount_roots_and_binds() {
    let (_vfs, t) = new_vfs(FastPaths::all());
    for d in ["/a", "/a/b", "/x"] {
        t.mkdir(d.as_bytes(), 0o755).unwrap();
    }
    t.mount(bind(b"/a/b", false), b"/x", MountFlags::empty()).unwrap();
    t.mkdir(b"/x/deeper", 0o755).unwrap();
    t.chdir(b"/x/deeper").unwrap();
    assert_eq!(t.getcwd().unwrap(), b"/x/deeper");
    t.chdir(b"../..").unwrap();
    assert_eq!(t.getcwd().unwrap(), b"/");
    // A directory renamed out of a bind's subtree is unreachable through it.
    t.chdir(b"/x/deeper").unwrap();
    t.rename(b"/a/b/deeper", b"/a/deeper").unwrap();
    let cwd = t.getcwd().unwrap();
    assert!(cwd.starts_with(b"(unreachable)"), "{}", String::from_utf8_lossy(&cwd));
    t.chdir(b"/").unwrap();
    t.umount(b"/x").unwrap();
}

#[test]
fn users_are_counted_exactly() {
    let (vfs, t) = new_vfs(FastPaths::all());
    t.mkdir(b"/m", 0o755).unwrap();
    t.mount(memfs(), b"/m", MountFlags::empty()).unwrap();
    let m = || {
        let fd = t.open(b"/m", OpenFlags::PATH, 0).unwrap();
        let m = t.file(fd).unwrap().mount().clone();
        t.close(fd).unwrap();
        m
    };
    let mnt = m();
    assert_eq!(mnt.users(), 0);
    // A failed open (EMFILE is not reachable cheaply; EROFS after File::new is) leaves none.
    t.remount(b"/m", MountFlags::RDONLY).unwrap();
    assert_eq!(t.open(b"/m/x", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644), Err(Errno::EROFS));
    t.remount(b"/m", MountFlags::empty()).unwrap();
    let tasks: Vec<Task> = (0..3).map(|_| vfs.root_task()).collect();
    for (i, task) in tasks.iter().enumerate() {
        task.chdir(b"/m").unwrap();
        assert_eq!(mnt.users(), i + 1);
    }
    let forked = tasks[0].fork();
    assert_eq!(mnt.users(), 4);
    drop(forked);
    drop(tasks);
    assert_eq!(mnt.users(), 0);
    let fd = t.open(b"/m/f", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap();
    let d1 = t.dup(fd).unwrap();
    let child = t.fork();
    assert_eq!(mnt.users(), 1, "one open file description");
    t.close(fd).unwrap();
    t.close(d1).unwrap();
    assert_eq!(mnt.users(), 1, "the child's table still has it");
    drop(child);
    assert_eq!(mnt.users(), 0);
    t.umount(b"/m").unwrap();
}

/// A mount's access-time mode, as Linux 6.18's (`touch_atime`, `path_mount`; checked on
/// a bind mount of a tmpfs directory): `relatime` (the default) moves an old access time at a read and a
/// listing; `noatime` moves none (a remount naming no access-time flag keeps it, one
/// naming any does not: `path_mount`); `nodiratime` keeps directories'; `strictatime` moves
/// even an access time ahead of the clock; a read-only mount moves none. A fifo's read
/// moves its access time and its write its modification time (`pipe_read`, `pipe_write`).
#[test]
fn access_times_follow_the_mount() {
    let (_vfs, t) = new_vfs(FastPaths::all());
    t.mkdir(b"/m", 0o755).unwrap();
    t.mount(memfs(), b"/m", MountFlags::empty()).unwrap();
    creat(&t, "/m/f", b"hello");
    t.mkdir(b"/m/d", 0o755).unwrap();
    let at = |sec: i64| TimeSpec::At(uvfs::Timespec { sec, nsec: 0 });
    // Sets the access time to `sec`, runs `f`, says whether the access time moved.
    let moved = |path: &str, sec: i64, f: &dyn Fn()| {
        t.utimensat(DirFd::Cwd, path.as_bytes(), Some([at(sec), TimeSpec::Omit]), AtFlags::empty()).unwrap();
        let before = t.stat(path.as_bytes()).unwrap().atime;
        f();
        t.stat(path.as_bytes()).unwrap().atime != before
    };
    let read = || drop(read_all(&t, "/m/f"));
    let list = || {
        let fd = t.open(b"/m/d", OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
        t.getdents(fd, 10).unwrap();
        t.close(fd).unwrap();
    };
    const OLD: i64 = 1_000_000_000;
    let future = t.stat(b"/m/f").unwrap().ctime.sec + 3600;
    assert!(moved("/m/f", OLD, &read), "relatime: an old access time moves");
    assert!(moved("/m/d", OLD, &list), "relatime: a listing moves it");
    assert!(!moved("/m/f", future, &read), "relatime: one after the change time stays");

    t.remount(b"/m", MountFlags::NOATIME).unwrap();
    assert!(!moved("/m/f", OLD, &read), "noatime");
    assert!(!moved("/m/d", OLD, &list), "noatime");
    t.remount(b"/m", MountFlags::empty()).unwrap();
    assert!(!moved("/m/f", OLD, &read), "a remount naming no access-time flag keeps noatime");
    t.remount(b"/m", MountFlags::NODIRATIME).unwrap();
    assert!(moved("/m/f", OLD, &read), "nodiratime (relatime again): files move");
    assert!(!moved("/m/d", OLD, &list), "nodiratime: directories stay");
    t.remount(b"/m", MountFlags::STRICTATIME).unwrap();
    assert!(moved("/m/f", future, &read), "strictatime: any access time moves");
    assert!(moved("/m/d", OLD, &list), "strictatime drops nodiratime");
    t.remount(b"/m", MountFlags::RDONLY).unwrap();
    let before = t.stat(b"/m/f").unwrap().atime;
    read();
    list();
    assert_eq!(t.stat(b"/m/f").unwrap().atime, before, "a read-only mount moves no access time");
    t.remount(b"/m", MountFlags::empty()).unwrap();

    // A fifo, opened for both ends.
    t.mknodat(DirFd::Cwd, b"/m/p", libc::S_IFIFO | 0o644, 0).unwrap();
    let fd = t.open(b"/m/p", OpenFlags::RDWR, 0).unwrap();
    t.utimensat(DirFd::Cwd, b"/m/p", Some([at(OLD), at(OLD)]), AtFlags::empty()).unwrap();
    t.write(fd, b"x").unwrap();
    let st = t.stat(b"/m/p").unwrap();
    assert_ne!(st.mtime.sec, OLD, "a fifo's write moves its modification time");
    assert_eq!(st.atime.sec, OLD, "but not its access time");
    let mut b = [0u8; 1];
    assert_eq!(t.read(fd, &mut b).unwrap(), 1);
    assert_ne!(t.stat(b"/m/p").unwrap().atime.sec, OLD, "a fifo's read moves its access time");
    t.close(fd).unwrap();
}

/// `MS_NOSYMFOLLOW` (Linux 5.10): a walk does not follow a symlink on the mount (ELOOP,
/// also for the last component of an open or `stat`), `lstat` and `readlink` still see
/// it, a symlink on another mount still leads into this one, and mountinfo says
/// `nosymfollow` after the access-time mode. The generated mount sequences compare it
/// with the kernel.
#[test]
fn nosymfollow_mounts_refuse_to_follow_symlinks() {
    let (_vfs, t) = new_vfs(FastPaths::all());
    t.mkdir(b"/m", 0o755).unwrap();
    t.mount(memfs(), b"/m", MountFlags::NOSYMFOLLOW).unwrap();
    creat(&t, "/m/f", b"x");
    t.symlink(b"f", b"/m/l").unwrap();
    t.symlink(b"/m/f", b"/out").unwrap();
    assert_eq!(t.stat(b"/m/l").map(|_| ()), Err(Errno::ELOOP));
    assert_eq!(t.open(b"/m/l", OpenFlags::RDONLY, 0).map(|_| ()), Err(Errno::ELOOP));
    assert_eq!(t.lstat(b"/m/l").unwrap().mode & libc::S_IFMT, libc::S_IFLNK);
    let mut buf = [0u8; 8];
    assert_eq!(t.readlink(b"/m/l", &mut buf), Ok(1));
    assert_eq!(t.stat(b"/out").unwrap().size, 1, "a link elsewhere leads in");
    let info = String::from_utf8(t.mountinfo_text()).unwrap();
    assert!(info.lines().any(|l| l.contains(" /m ") && l.contains("rw,relatime,nosymfollow")), "{info}");
    t.remount(b"/m", MountFlags::empty()).unwrap();
    assert_eq!(t.stat(b"/m/l").unwrap().size, 1, "a remount without it follows again");
}
