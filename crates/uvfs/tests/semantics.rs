//! Behaviour that generated differential sequences reach poorly: directory streams under
//! churn, data of unlinked open files, descriptor sharing, getcwd, ENOSPC, bad input.

use std::collections::HashMap;

use uvfs::{AtFlags, DirFd, Errno, Fd, OpenFlags, Vfs, VfsConfig, Whence};

fn names(t: &uvfs::Task, fd: Fd, batch: usize, out: &mut Vec<Vec<u8>>) -> bool {
    let e = t.getdents(fd, batch).unwrap();
    if e.is_empty() {
        return false;
    }
    out.extend(e.into_iter().map(|e| e.name));
    true
}

/// An entry present for the whole listing appears exactly once, even while others are
/// added and removed between getdents calls.
#[test]
fn getdents_cursor_is_stable_under_churn() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    t.mkdir(b"/d", 0o755).unwrap();
    for i in 0..200 {
        t.mknodat(DirFd::Cwd, format!("/d/keep{i}").as_bytes(), 0o644, 0).unwrap();
    }
    let fd = t.open(b"/d", OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
    let mut seen = Vec::new();
    let mut round = 0;
    while names(&t, fd, 7, &mut seen) {
        // Churn for a while (entries added during a listing may be listed, so a listing
        // that never stops adding never ends): add new entries, remove earlier ones.
        if round >= 20 {
            continue;
        }
        for j in 0..5 {
            t.mknodat(DirFd::Cwd, format!("/d/churn{round}_{j}").as_bytes(), 0o644, 0).unwrap();
        }
        if round > 0 {
            for j in 0..5 {
                t.unlink(format!("/d/churn{}_{j}", round - 1).as_bytes()).unwrap();
            }
        }
        round += 1;
    }
    let mut count: HashMap<Vec<u8>, usize> = HashMap::new();
    for n in &seen {
        *count.entry(n.clone()).or_default() += 1;
    }
    for i in 0..200 {
        assert_eq!(count.get(format!("keep{i}").as_bytes()), Some(&1), "keep{i}");
    }
    assert_eq!(count.get(b".".as_slice()), Some(&1));
    assert_eq!(count.get(b"..".as_slice()), Some(&1));
    assert!(count.values().all(|&c| c == 1), "an entry appeared twice");
    // Rewind and list again: everything present now appears.
    t.lseek(fd, 0, Whence::Set).unwrap();
    let mut again = Vec::new();
    while names(&t, fd, 1000, &mut again) {}
    assert_eq!(again.len(), 2 + 200 + 5);
}

/// A directory big enough that its children table is mapped from the kernel rather than
/// allocated (some 16,000 entries and more; `core/dhash.rs`): every name is found while it
/// grows and after most are removed (the table rebuilt smaller, into allocated memory),
/// and a listing has each exactly once.
#[test]
fn a_huge_directory_through_its_growth_and_shrinking() {
    let vfs = Vfs::new(VfsConfig::default());
    let t = vfs.root_task();
    t.mkdir(b"/big", 0o755).unwrap();
    let n = 100_000;
    let path = |i: usize| format!("/big/entry-{i}").into_bytes();
    for i in 0..n {
        t.mknodat(DirFd::Cwd, &path(i), 0o100644, 0).unwrap();
        if i % 9973 == 0 {
            for j in (0..=i).step_by(997) {
                assert!(t.fstatat(DirFd::Cwd, &path(j), AtFlags::empty()).is_ok(), "entry {j} of {i}");
            }
        }
    }
    for i in (0..n).filter(|i| i % 50 != 0) {
        t.unlink(&path(i)).unwrap();
    }
    // A change after the removals lets the table rebuild into a small array.
    t.mknodat(DirFd::Cwd, b"/big/last", 0o100644, 0).unwrap();
    for i in 0..n {
        let r = t.fstatat(DirFd::Cwd, &path(i), AtFlags::empty());
        assert_eq!(r.is_ok(), i % 50 == 0, "entry {i}: {r:?}");
    }
    let fd = t.open(b"/big", OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
    let mut listed = Vec::new();
    while names(&t, fd, 1000, &mut listed) {}
    t.close(fd).unwrap();
    listed.sort();
    let mut want: Vec<Vec<u8>> = (0..n).filter(|i| i % 50 == 0).map(|i| path(i)[5..].to_vec()).collect();
    want.extend([b".".to_vec(), b"..".to_vec(), b"last".to_vec()]);
    want.sort();
    assert_eq!(listed, want);
}

#[test]
fn getdents64_layout() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    t.mkdir(b"/d", 0o755).unwrap();
    t.symlink(b"x", b"/d/ln").unwrap();
    let fd = t.open(b"/d", OpenFlags::RDONLY, 0).unwrap();
    let mut buf = [0u8; 4096];
    let n = t.getdents64(fd, &mut buf).unwrap();
    let mut off = 0;
    let mut got = Vec::new();
    while off < n {
        let reclen = u16::from_ne_bytes([buf[off + 16], buf[off + 17]]) as usize;
        assert_eq!(reclen % 8, 0);
        let name = &buf[off + 19..off + reclen];
        let name = &name[..name.iter().position(|&c| c == 0).unwrap()];
        got.push((name.to_vec(), buf[off + 18]));
        off += reclen;
    }
    assert_eq!(got, vec![(b".".to_vec(), 4), (b"..".to_vec(), 4), (b"ln".to_vec(), 10)]);
    assert_eq!(t.getdents64(fd, &mut buf).unwrap(), 0);
    // A buffer too small for one record.
    t.lseek(fd, 0, Whence::Set).unwrap();
    assert_eq!(t.getdents64(fd, &mut [0u8; 8]), Err(Errno::EINVAL));
}

#[test]
fn unlinked_open_file_keeps_its_data_until_last_close() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    let fd = t.open(b"/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o600).unwrap();
    t.write(fd, b"still here").unwrap();
    let fd2 = t.dup(fd).unwrap();
    t.unlink(b"/f").unwrap();
    assert_eq!(t.stat(b"/f"), Err(Errno::ENOENT));
    t.close(fd).unwrap();
    let st = t.fstat(fd2).unwrap();
    assert_eq!((st.nlink, st.size), (0, 10));
    let mut buf = [0u8; 32];
    assert_eq!(t.pread(fd2, &mut buf, 0).unwrap(), 10);
    assert_eq!(&buf[..10], b"still here");
    t.close(fd2).unwrap();
    assert_eq!(t.close(fd2), Err(Errno::EBADF));
}

#[test]
fn descriptors_share_offsets_across_dup() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    let fd = t.open(b"/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o600).unwrap();
    let d = t.dup2(fd, Fd(10)).unwrap();
    assert_eq!(d, Fd(10));
    t.write(fd, b"ab").unwrap();
    t.write(d, b"cd").unwrap();
    assert_eq!(t.lseek(fd, 0, Whence::Cur).unwrap(), 4);
    assert_eq!(t.dup2(Fd(99), Fd(3)), Err(Errno::EBADF));
    assert_eq!(t.dup2(fd, fd), Ok(fd));
    assert_eq!(t.dup3(fd, fd, false), Err(Errno::EINVAL));
    assert_eq!(t.dup2(fd, Fd(-1)), Err(Errno::EBADF));
    let child = t.fork();
    let mut b = [0u8; 4];
    assert_eq!(child.pread(Fd(10), &mut b, 0).unwrap(), 4);
    assert_eq!(&b, b"abcd");
}

#[test]
fn getcwd_follows_renames_and_reports_removal() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    t.mkdir(b"/a", 0o755).unwrap();
    t.mkdir(b"/a/b", 0o755).unwrap();
    t.chdir(b"/a/b").unwrap();
    assert_eq!(t.getcwd().unwrap(), b"/a/b");
    t.rename(b"/a", b"/z").unwrap();
    assert_eq!(t.getcwd().unwrap(), b"/z/b");
    assert_eq!(t.stat(b"..").unwrap().ino, t.stat(b"/z").unwrap().ino);
    t.rmdir(b"/z/b").unwrap();
    assert_eq!(t.getcwd(), Err(Errno::ENOENT));
    assert_eq!(t.open(b"new", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644), Err(Errno::ENOENT));
    t.chdir(b"/").unwrap();
    assert_eq!(t.getcwd().unwrap(), b"/");
}

#[test]
fn chroot_confines_absolute_paths_and_dotdot() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    t.mkdir(b"/jail", 0o755).unwrap();
    t.mkdir(b"/jail/etc", 0o755).unwrap();
    t.mkdir(b"/etc", 0o755).unwrap();
    t.symlink(b"/etc", b"/jail/abs").unwrap();
    t.chroot(b"/jail").unwrap();
    t.chdir(b"/").unwrap();
    let inner = t.stat(b"/etc").unwrap().ino;
    assert_eq!(t.stat(b"/../../etc").unwrap().ino, inner);
    assert_eq!(t.stat(b"/abs").unwrap().ino, inner);
    assert_eq!(t.getcwd().unwrap(), b"/");
}

#[test]
fn full_filesystem_is_enospc_and_loses_nothing() {
    let vfs = Vfs::new(VfsConfig { root_size_limit: Some(8 * 4096), root_inode_limit: Some(5), ..Default::default() });
    let t = vfs.root_task();
    let fd = t.open(b"/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o600).unwrap();
    assert_eq!(t.write(fd, &[7u8; 8 * 4096]).unwrap(), 8 * 4096);
    assert_eq!(t.write(fd, b"x"), Err(Errno::ENOSPC));
    assert_eq!(t.fstat(fd).unwrap().size, 8 * 4096);
    // Free it: space comes back at once, without waiting for reclamation.
    t.close(fd).unwrap();
    t.unlink(b"/f").unwrap();
    let fd = t.open(b"/g", OpenFlags::CREAT | OpenFlags::RDWR, 0o600).unwrap();
    assert_eq!(t.write(fd, &[1u8; 4096]).unwrap(), 4096);
    // Inode limit (the root counts as one).
    for i in 0..3 {
        t.mkdir(format!("/d{i}").as_bytes(), 0o755).unwrap();
    }
    assert_eq!(t.mkdir(b"/d9", 0o755), Err(Errno::ENOSPC));
    assert_eq!(t.stat(b"/d9"), Err(Errno::ENOENT));
    // fallocate reserves against the same limit: all or nothing, and copies (pages
    // shared, but counted as tmpfs counts them) too.
    let before = t.fstat(fd).unwrap();
    assert_eq!(t.fallocate(fd, uvfs::FallocFlags::empty(), 0, 16 * 4096), Err(Errno::ENOSPC));
    assert_eq!(t.fallocate(fd, uvfs::FallocFlags::KEEP_SIZE, 4096, 16 * 4096), Err(Errno::ENOSPC));
    let after = t.fstat(fd).unwrap();
    assert_eq!((after.size, after.blocks), (before.size, before.blocks));
    assert_eq!(t.fallocate(fd, uvfs::FallocFlags::KEEP_SIZE, 4096, 6 * 4096), Ok(()));
    assert_eq!(t.fstat(fd).unwrap().blocks, 7 * 8);
    let (mut a, mut b) = (0i64, 4096i64);
    let cp = t.copy_file_range(fd, Some(&mut a), fd, Some(&mut b), 4096, uvfs::CopyRangeFlags::empty());
    assert_eq!(cp, Ok(4096), "into a page already reserved");
    let h = t.open(b"/h", OpenFlags::CREAT | OpenFlags::RDWR, 0o600);
    assert_eq!(h, Err(Errno::ENOSPC), "the inode limit");
}

#[test]
fn bad_input_gets_an_errno() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    let long = vec![b'x'; 256];
    assert_eq!(t.mkdir(&long, 0o755), Err(Errno::ENAMETOOLONG));
    assert_eq!(t.stat(&long), Err(Errno::ENAMETOOLONG));
    let ok = vec![b'y'; 255];
    t.mkdir(&ok, 0o755).unwrap();
    let path = vec![b'a'; 4096];
    assert_eq!(t.stat(&path), Err(Errno::ENAMETOOLONG));
    assert_eq!(t.stat(b"a\0b"), Err(Errno::EINVAL));
    assert_eq!(t.stat(b""), Err(Errno::ENOENT));
    assert_eq!(t.fstat(Fd(1234)), Err(Errno::EBADF));
    assert_eq!(t.fstatat(DirFd::Fd(Fd(-3)), b"x", AtFlags::empty()), Err(Errno::EBADF));
    assert_eq!(t.fstatat(DirFd::Cwd, b"/", AtFlags::REMOVEDIR), Err(Errno::EINVAL));
    let mut buf = [0u8; 0];
    assert_eq!(t.readlink(b"/", &mut buf), Err(Errno::EINVAL));
    // Symlink loops: 40 links followed, then ELOOP.
    t.symlink(b"loop2", b"/loop1").unwrap();
    t.symlink(b"loop1", b"/loop2").unwrap();
    assert_eq!(t.stat(b"/loop1"), Err(Errno::ELOOP));
    let mut prev = b"/target".to_vec();
    t.mkdir(&prev, 0o755).unwrap();
    for i in 0..41 {
        let name = format!("/chain{i}").into_bytes();
        t.symlink(&prev, &name).unwrap();
        prev = name;
    }
    assert!(t.stat(b"/chain39").is_ok(), "40 links are followed");
    assert_eq!(t.stat(b"/chain40"), Err(Errno::ELOOP));
    // Nothing changed by the failures above.
    assert_eq!(t.stat(b"/x"), Err(Errno::ENOENT));
}

/// A full descriptor table (EMFILE) stops an open before it does anything it could not
/// undo, as Linux's `get_unused_fd_flags` comes first: `O_CREAT` creates nothing, `O_TRUNC`
/// truncates nothing; and nothing leaks (the inode of a file unlinked meanwhile is freed:
/// a filesystem with room for two files takes two new ones afterwards).
#[test]
fn emfile_before_any_side_effect() {
    // The root and two files.
    let vfs = Vfs::new(VfsConfig { root_inode_limit: Some(3), ..VfsConfig::default() });
    let t = vfs.root_task();
    let fd = t.open(b"/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
    t.write(fd, b"keep me").unwrap();
    t.set_nofile_limit(4).unwrap();
    let mut fds = vec![fd];
    while let Ok(d) = t.dup(fd) {
        fds.push(d);
    }
    assert_eq!(fds.len(), 4);
    assert_eq!(t.dup(fd), Err(Errno::EMFILE));
    assert_eq!(t.open(b"/new", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644), Err(Errno::EMFILE));
    assert_eq!(t.stat(b"/new"), Err(Errno::ENOENT));
    assert_eq!(t.open(b"/f", OpenFlags::WRONLY | OpenFlags::TRUNC, 0), Err(Errno::EMFILE));
    assert_eq!(t.stat(b"/f").unwrap().size, 7);
    assert_eq!(t.open(b"/f", OpenFlags::RDONLY, 0), Err(Errno::EMFILE));
    // A failed walk still answers its own error (uvfs walks before it reserves, so that a
    // failed open takes no lock; Linux would say EMFILE).
    assert_eq!(t.open(b"/missing", OpenFlags::RDONLY, 0), Err(Errno::ENOENT));
    t.unlink(b"/f").unwrap();
    for d in fds {
        t.close(d).unwrap();
    }
    // The unlinked file is gone, and nothing was created: room for two files again.
    t.set_nofile_limit(64).unwrap();
    let g = t.open(b"/g", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap();
    assert_eq!(g, Fd(0));
    t.mknodat(DirFd::Cwd, b"/h", 0o644, 0).unwrap();
    assert_eq!(t.mknodat(DirFd::Cwd, b"/i", 0o644, 0), Err(Errno::ENOSPC));
    t.close(g).unwrap();
}

/// Files held outside the descriptor table (`openat_file`): walked from, read and written,
/// listed, kept across an unlink, announced open and closed like a descriptor's, and
/// taking no descriptor.
#[test]
fn files_held_without_a_descriptor() {
    use uvfs::{EventMask, FileRef, InotifyFlags};
    let vfs = Vfs::default();
    let t = vfs.root_task();
    t.mkdir(b"/d", 0o755).unwrap();
    let dir = t.openat_file(DirFd::Cwd, b"/d", OpenFlags::PATH | OpenFlags::DIRECTORY, 0).unwrap();
    let ino = t.inotify_init1(InotifyFlags::NONBLOCK).unwrap();
    t.inotify_add_watch(&ino, b"/d", EventMask::OPEN | EventMask::CLOSE_WRITE | EventMask::CLOSE_NOWRITE).unwrap();
    // Relative to the held directory, as with a descriptor.
    let f = t.openat_file(DirFd::File(&dir), b"f", OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
    assert_eq!(t.pwrite(&f, b"hello", 0), Ok(5));
    assert_eq!(t.fstat(&f).unwrap().size, 5);
    assert_eq!(t.fstatat(DirFd::File(&dir), b"f", AtFlags::empty()).unwrap().size, 5);
    // No descriptor was taken: the first one is still free.
    let fd = t.open(b"/d", OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
    assert_eq!(fd, Fd(0));
    t.close(fd).unwrap();
    // An O_PATH handle does no I/O; a reopened one does.
    assert_eq!(t.getdents(FileRef::File(&dir), 10).map(|_| ()), Err(Errno::EBADF));
    let listing = t.reopen_file(&dir, OpenFlags::RDONLY | OpenFlags::DIRECTORY).unwrap();
    let names: Vec<Vec<u8>> = t.getdents(&listing, 10).unwrap().into_iter().map(|e| e.name).collect();
    assert!(names.contains(&b"f".to_vec()), "{names:?}");
    drop(listing);
    // The data stays with the held file after its last name goes.
    t.unlink(b"/d/f").unwrap();
    let mut buf = [0u8; 5];
    assert_eq!(t.pread(&f, &mut buf, 0), Ok(5));
    assert_eq!(&buf, b"hello");
    drop(f);
    let events: Vec<(u32, Option<Vec<u8>>)> =
        ino.read_events(usize::MAX, None).unwrap().into_iter().map(|e| (e.mask.bits(), e.name)).collect();
    let dirmask = (EventMask::ISDIR).bits();
    assert_eq!(
        events,
        vec![
            (EventMask::OPEN.bits(), Some(b"f".to_vec())),
            (EventMask::OPEN.bits() | dirmask, None),
            (EventMask::CLOSE_NOWRITE.bits() | dirmask, None),
            (EventMask::OPEN.bits() | dirmask, None),
            (EventMask::CLOSE_NOWRITE.bits() | dirmask, None),
            (EventMask::CLOSE_WRITE.bits(), Some(b"f".to_vec())),
        ]
    );
}

/// A memfs reports what a tmpfs mounted with default options reports (size limit half of
/// RAM, the inode limit tmpfs computes from it), and what statfs says it has left is what
/// writes can use: `df` sees a real filesystem, and ENOSPC comes where it says.
#[test]
fn statfs_is_tmpfs_s() {
    // SAFETY: getuid has no preconditions.
    assert_eq!(unsafe { libc::getuid() }, 0, "mounts a tmpfs to compare with (root)");
    struct Tmpfs(tempfile::TempDir);
    impl Drop for Tmpfs {
        fn drop(&mut self) {
            let c = std::ffi::CString::new(self.0.path().as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: valid C string.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let c = std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: valid C strings; a fresh private tmpfs with default options.
    let r = unsafe { libc::mount(c"tmpfs".as_ptr(), c.as_ptr(), c"tmpfs".as_ptr(), 0, std::ptr::null()) };
    assert_eq!(r, 0, "mount tmpfs: {}", std::io::Error::last_os_error());
    let tmp = Tmpfs(dir);
    // SAFETY: a zeroed statfs is a valid out-parameter.
    let mut host: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid path and out-parameter.
    assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut host) }, 0);
    drop(tmp);

    let vfs = Vfs::default();
    let t = vfs.root_task();
    let st = t.statfs(b"/").unwrap();
    assert_eq!(st.fs_type, host.f_type as u64);
    assert_eq!(st.bsize, host.f_bsize as u64);
    assert_eq!((st.blocks, st.bfree, st.bavail), (host.f_blocks, host.f_bfree, host.f_bavail));
    assert_eq!((st.files, st.ffree), (host.f_files, host.f_ffree));
    assert_eq!(st.namelen, host.f_namelen as u64);
    let fd = t.open(b"/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o600).unwrap();
    t.write(fd, &[1u8; 3 * 4096 + 1]).unwrap();
    let after = t.fstatfs(fd).unwrap();
    assert_eq!((after.bfree, after.ffree), (st.bfree - 4, st.ffree - 1));

    // With limits, what is left is what can be written; unlimited reports zeros.
    let vfs = Vfs::new(VfsConfig { root_size_limit: Some(8 * 4096), root_inode_limit: Some(5), ..Default::default() });
    let t = vfs.root_task();
    let st = t.statfs(b"/").unwrap();
    assert_eq!((st.blocks, st.bfree, st.files, st.ffree), (8, 8, 5, 4));
    let fd = t.open(b"/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o600).unwrap();
    assert_eq!(t.write(fd, &vec![7u8; st.bavail as usize * 4096]), Ok(8 * 4096));
    assert_eq!(t.statfs(b"/").unwrap().bavail, 0);
    assert_eq!(t.write(fd, b"x"), Err(Errno::ENOSPC));
    let vfs = Vfs::new(VfsConfig { root_size_limit: Some(0), root_inode_limit: Some(0), ..Default::default() });
    let st = vfs.root_task().statfs(b"/").unwrap();
    assert_eq!((st.blocks, st.files), (0, 0));
}

/// A panic inside an attribute change (a filesystem's code runs there) leaves the inode
/// readable: the sequence count ends the section on unwind instead of staying odd, which
/// made every later stat of the inode spin forever. (The receive timeout only turns such a
/// hang into a failure; nothing here measures time.)
#[test]
fn a_panic_inside_an_attribute_change_stalls_nobody() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    let fd = t.open(b"/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
    let file = t.file(fd).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        file.inode().update(|w| {
            w.set_size(7);
            panic!("a filesystem bug");
        })
    }));
    assert!(r.is_err());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send((t.stat(b"/f").map(|s| s.size), t.fstat(fd).map(|s| s.size)));
    });
    let got = rx.recv_timeout(std::time::Duration::from_secs(120)).expect("stat hung after the panic");
    assert_eq!(got, (Ok(7), Ok(7)));
}

/// `fcntl`'s descriptor and status-flag commands (issue 13; also generated against the
/// host kernel by tests/differential.rs): what changes, what does not, and the errnos.
#[test]
fn fcntl_descriptor_and_status_flags() {
    use uvfs::{Credentials, FcntlCmd, FdFlags, Gid, Uid};
    let vfs = Vfs::default();
    let t = vfs.root_task();
    let fd = t.open(b"/f", OpenFlags::CREAT | OpenFlags::WRONLY | OpenFlags::TRUNC, 0o666).unwrap();
    t.write(fd, b"abc").unwrap();
    // F_GETFL: no creation flags, O_LARGEFILE forced.
    let fl = t.fcntl(fd, FcntlCmd::GetFl).unwrap() as u32;
    assert_eq!(OpenFlags::from_bits_retain(fl), OpenFlags::WRONLY | OpenFlags::LARGEFILE);
    // F_SETFL O_APPEND: later writes go to the end; the access mode does not change.
    t.lseek(fd, 0, Whence::Set).unwrap();
    t.fcntl(fd, FcntlCmd::SetFl(OpenFlags::APPEND | OpenFlags::RDWR | OpenFlags::TRUNC)).unwrap();
    t.write(fd, b"de").unwrap();
    let fl = OpenFlags::from_bits_retain(t.fcntl(fd, FcntlCmd::GetFl).unwrap() as u32);
    assert_eq!(fl, OpenFlags::WRONLY | OpenFlags::APPEND | OpenFlags::LARGEFILE);
    t.fcntl(fd, FcntlCmd::SetFl(OpenFlags::empty())).unwrap();
    t.pwrite(fd, b"X", 0).unwrap();
    let mut buf = [0u8; 8];
    let r = t.open(b"/f", OpenFlags::RDONLY, 0).unwrap();
    let n = t.read(r, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"Xbcde");
    // F_DUPFD: lowest free >= the argument; F_DUPFD_CLOEXEC sets FD_CLOEXEC.
    let d = t.fcntl(fd, FcntlCmd::DupFd(Fd(10))).unwrap();
    assert_eq!(d, 10);
    assert_eq!(t.fcntl(fd, FcntlCmd::DupFd(Fd(10))).unwrap(), 11);
    assert_eq!(t.fcntl(Fd(11), FcntlCmd::GetFd).unwrap(), 0);
    let c = t.fcntl(fd, FcntlCmd::DupFdCloexec(Fd(0))).unwrap();
    assert_eq!(t.fcntl(Fd(c), FcntlCmd::GetFd).unwrap(), FdFlags::CLOEXEC.bits() as i32);
    t.fcntl(Fd(c), FcntlCmd::SetFd(FdFlags::empty())).unwrap();
    assert!(!t.cloexec(Fd(c)).unwrap());
    assert_eq!(t.fcntl(fd, FcntlCmd::DupFd(Fd(-1))), Err(Errno::EINVAL));
    assert_eq!(t.fcntl(fd, FcntlCmd::DupFd(Fd(1 << 30))), Err(Errno::EINVAL));
    assert_eq!(t.fcntl(Fd(99), FcntlCmd::GetFl), Err(Errno::EBADF));
    assert_eq!(t.fcntl(Fd(-1), FcntlCmd::GetFd), Err(Errno::EBADF));
    // O_PATH: F_GETFL shows only what O_PATH honours; F_SETFL is EBADF.
    let p = t.open(b"/f", OpenFlags::PATH | OpenFlags::NOFOLLOW, 0).unwrap();
    let fl = OpenFlags::from_bits_retain(t.fcntl(p, FcntlCmd::GetFl).unwrap() as u32);
    assert_eq!(fl, OpenFlags::PATH | OpenFlags::NOFOLLOW);
    assert_eq!(t.fcntl(p, FcntlCmd::SetFl(OpenFlags::APPEND)), Err(Errno::EBADF));
    // O_NOATIME only for the owner: another user gets EPERM, the owner may.
    let u = t.with_credentials(Credentials::new(Uid(1000), Gid(1000), &[]));
    let ufd = u.open(b"/f", OpenFlags::RDONLY, 0).unwrap();
    assert_eq!(u.fcntl(ufd, FcntlCmd::SetFl(OpenFlags::NOATIME)), Err(Errno::EPERM));
    assert_eq!(u.fcntl(ufd, FcntlCmd::SetFl(OpenFlags::NONBLOCK)), Ok(0));
    assert_eq!(t.fcntl(r, FcntlCmd::SetFl(OpenFlags::NOATIME)), Ok(0));
}

/// `may_create_in_sticky`: `O_CREAT` of an existing file that neither the caller nor the
/// sticky world-writable directory's owner owns is EACCES, root included, except for
/// regular files and fifos (`fs.protected_regular`/`protected_fifos` = 0, the kernel's
/// default); the differential sequences found the symlink case against the host.
#[test]
fn o_creat_of_someone_elses_file_in_a_sticky_directory() {
    use uvfs::{Credentials, Gid, Uid};
    let vfs = Vfs::default();
    let t = vfs.root_task();
    t.mkdir(b"/s", 0o1777).unwrap();
    t.fchmodat(DirFd::Cwd, b"/s", 0o1777, AtFlags::empty()).unwrap();
    let other = t.with_credentials(Credentials::new(Uid(2000), Gid(2000), &[]));
    other.symlink(b"/", b"/s/l").unwrap();
    other.mknodat(DirFd::Cwd, b"/s/f", 0o666, 0).unwrap();
    let creat_nofollow = OpenFlags::CREAT | OpenFlags::NOFOLLOW | OpenFlags::RDONLY;
    assert_eq!(t.open(b"/s/l", creat_nofollow, 0o644), Err(Errno::EACCES));
    // Regular files are exempt.
    let fd = t.open(b"/s/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
    t.close(fd).unwrap();
    // The directory's owner owning the file, or the caller owning it, lifts the rule.
    assert_eq!(other.open(b"/s/l", creat_nofollow, 0o644), Err(Errno::ELOOP));
    t.fchownat(DirFd::Cwd, b"/s", Some(Uid(2000)), None, AtFlags::empty()).unwrap();
    assert_eq!(t.open(b"/s/l", creat_nofollow, 0o644), Err(Errno::ELOOP));
    // Not sticky: no rule.
    t.fchownat(DirFd::Cwd, b"/s", Some(Uid(0)), None, AtFlags::empty()).unwrap();
    t.fchmodat(DirFd::Cwd, b"/s", 0o777, AtFlags::empty()).unwrap();
    assert_eq!(t.open(b"/s/l", creat_nofollow, 0o644), Err(Errno::ELOOP));
}

/// `renameat2(RENAME_WHITEOUT)` (what overlay filesystems use): the old name becomes a
/// whiteout, a character device 0/0 with mode 0 owned by the caller, which needs no
/// privilege since Linux 5.8 (nor does `mknod` of one); `EXCHANGE` with it is EINVAL.
#[test]
fn rename_whiteout_leaves_a_whiteout() {
    use uvfs::{Credentials, FileType, Gid, RenameFlags, Uid};
    let vfs = Vfs::default();
    let t = vfs.root_task();
    t.mkdir(b"/d", 0o777).unwrap();
    t.fchmodat(DirFd::Cwd, b"/d", 0o777, AtFlags::empty()).unwrap();
    let u = t.with_credentials(Credentials::new(Uid(1000), Gid(1000), &[]));
    u.mknodat(DirFd::Cwd, b"/d/a", 0o644, 0).unwrap();
    u.renameat2(DirFd::Cwd, b"/d/a", DirFd::Cwd, b"/d/b", RenameFlags::WHITEOUT).unwrap();
    let w = t.stat(b"/d/a").unwrap();
    assert_eq!(w.mode, FileType::CharDevice.mode_bits());
    assert_eq!((w.rdev, w.uid, w.gid), (0, 1000, 1000));
    assert_eq!(t.stat(b"/d/b").unwrap().mode & 0o170000, FileType::Regular.mode_bits());
    assert_eq!(
        u.renameat2(DirFd::Cwd, b"/d/b", DirFd::Cwd, b"/d/a", RenameFlags::WHITEOUT | RenameFlags::EXCHANGE),
        Err(Errno::EINVAL)
    );
    // Over an existing name (the whiteout itself), with NOREPLACE refused.
    assert_eq!(
        u.renameat2(DirFd::Cwd, b"/d/b", DirFd::Cwd, b"/d/a", RenameFlags::WHITEOUT | RenameFlags::NOREPLACE),
        Err(Errno::EEXIST)
    );
    u.renameat2(DirFd::Cwd, b"/d/b", DirFd::Cwd, b"/d/a", RenameFlags::WHITEOUT).unwrap();
    assert_eq!(t.stat(b"/d/a").unwrap().mode & 0o170000, FileType::Regular.mode_bits());
    assert_eq!(t.stat(b"/d/b").unwrap().mode, FileType::CharDevice.mode_bits());
    // mknod of a whiteout needs no privilege; another device node does.
    u.mknodat(DirFd::Cwd, b"/d/w", FileType::CharDevice.mode_bits(), 0).unwrap();
    assert_eq!(
        u.mknodat(DirFd::Cwd, b"/d/n", FileType::CharDevice.mode_bits(), uvfs::makedev(1, 3)),
        Err(Errno::EPERM)
    );
}

/// Vectored I/O (also generated against the host by tests/differential.rs): a `writev`
/// is one write (gathered), `RWF_APPEND`/`RWF_NOAPPEND` change this call only, offset -1
/// is the file position, and the limits are Linux's.
#[test]
fn vectored_reads_and_writes() {
    use uvfs::RwfFlags;
    let vfs = Vfs::default();
    let t = vfs.root_task();
    let fd = t.open(b"/v", OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
    assert_eq!(t.writev(fd, &[b"ab", b"", b"cde"]).unwrap(), 5);
    assert_eq!(t.lseek(fd, 0, Whence::Cur).unwrap(), 5);
    // At an offset: the position stays.
    assert_eq!(t.pwritev2(fd, &[b"X"], 0, RwfFlags::empty()).unwrap(), 1);
    assert_eq!(t.lseek(fd, 0, Whence::Cur).unwrap(), 5);
    // RWF_APPEND: at the end whatever the offset says.
    t.pwritev2(fd, &[b"!"], 1, RwfFlags::APPEND).unwrap();
    let (mut a, mut b) = ([0u8; 2], [0u8; 10]);
    assert_eq!(t.preadv2(fd, &mut [&mut a, &mut b], 0, RwfFlags::HIPRI).unwrap(), 6);
    assert_eq!((&a, &b[..4]), (b"Xb", &b"cde!"[..]));
    // O_APPEND file, RWF_NOAPPEND: at the offset, this once.
    let ap = t.open(b"/v", OpenFlags::WRONLY | OpenFlags::APPEND, 0).unwrap();
    t.pwritev2(ap, &[b"Y"], 0, RwfFlags::NOAPPEND).unwrap();
    t.writev(ap, &[b"Z"]).unwrap();
    let mut all = [0u8; 16];
    t.lseek(fd, 0, Whence::Set).unwrap();
    let n = t.readv(fd, &mut [&mut all]).unwrap();
    assert_eq!(&all[..n], b"Ybcde!Z");
    assert_eq!(t.lseek(fd, 0, Whence::Cur).unwrap(), 7);
    // Errnos.
    let many: Vec<&[u8]> = vec![b"x"; uvfs::UIO_MAXIOV + 1];
    assert_eq!(t.writev(fd, &many), Err(Errno::EINVAL));
    assert_eq!(t.pwritev2(fd, &[b"x"], -2, RwfFlags::empty()), Err(Errno::EINVAL));
    assert_eq!(t.pwritev2(fd, &[b"x"], 0, RwfFlags::APPEND | RwfFlags::NOAPPEND), Err(Errno::EINVAL));
    assert_eq!(t.pwritev2(fd, &[b"x"], 0, RwfFlags::NOWAIT), Err(Errno::EOPNOTSUPP));
    assert_eq!(t.pwritev2(fd, &[b"x"], 0, RwfFlags::from_bits_retain(0x1000)), Err(Errno::EOPNOTSUPP));
    // Nothing to transfer: 0, whatever the flags say.
    assert_eq!(t.pwritev2(fd, &[], 0, RwfFlags::from_bits_retain(0x1000)), Ok(0));
    let r = t.open(b"/v", OpenFlags::RDONLY, 0).unwrap();
    assert_eq!(t.writev(r, &[b"x"]), Err(Errno::EBADF));
    assert_eq!(t.readv(Fd(77), &mut [&mut all]), Err(Errno::EBADF));
}

/// Multigrain timestamps (Linux 6.13, tmpfs's): a change made after a `stat` shows in the
/// next `stat` however soon it comes, on the file (contents, attributes) and on its
/// directory, though changes are stamped with the coarse clock (4 ms a tick).
#[test]
fn a_change_after_a_stat_shows_however_soon() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    t.mkdir(b"/d", 0o755).unwrap();
    let fd = t.open(b"/d/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
    let mut last = t.fstat(fd).unwrap();
    let mut dir = t.stat(b"/d").unwrap();
    for i in 0..1000u64 {
        t.pwrite(fd, b"x", i as i64).unwrap();
        let s = t.fstat(fd).unwrap();
        assert!(s.mtime > last.mtime && s.ctime > last.ctime, "write {i}: {last:?} then {s:?}");
        t.fchmod(fd, if i % 2 == 0 { 0o600 } else { 0o644 }).unwrap();
        let s2 = t.fstat(fd).unwrap();
        assert!(s2.ctime > s.ctime && s2.mtime == s.mtime, "chmod {i}: {s:?} then {s2:?}");
        t.mknodat(DirFd::Cwd, format!("/d/n{i}").as_bytes(), 0o644, 0).unwrap();
        let d = t.stat(b"/d").unwrap();
        assert!(d.mtime > dir.mtime && d.ctime > dir.ctime, "create {i}: {dir:?} then {d:?}");
        t.utimensat(DirFd::Cwd, b"/d/f", None, AtFlags::empty()).unwrap();
        let s3 = t.fstat(fd).unwrap();
        assert!(s3.ctime > s2.ctime && s3.mtime == s3.ctime && s3.atime == s3.ctime, "touch {i}: {s2:?} then {s3:?}");
        (last, dir) = (s3, d);
    }
}

/// A fine-grained stamp raises the floor under the coarse ones: a file changed after
/// another is never stamped earlier (what `make` compares), though only the first was
/// looked at.
#[test]
fn a_later_change_is_never_stamped_earlier() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    let fd = t.open(b"/a", OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
    for i in 0..1000u64 {
        t.fstat(fd).unwrap();
        t.pwrite(fd, b"x", i as i64).unwrap();
        let a = t.fstat(fd).unwrap();
        let name = format!("/b{i}");
        let b = t.open(name.as_bytes(), OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap();
        t.close(b).unwrap();
        let b = t.stat(name.as_bytes()).unwrap();
        assert!(b.mtime >= a.mtime && b.ctime >= a.ctime, "{i}: /a {a:?}, then /b {b:?}");
    }
}

/// Changes nobody has looked at read the coarse clock only: creates, writes and unlinks
/// of files that no `stat` saw take no fine-grained stamp (their directory was not
/// looked at either), and a `statx` that asks for neither `mtime` nor `ctime` does not
/// count as looking.
#[test]
fn unseen_changes_take_no_fine_stamp() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    t.mkdir(b"/d", 0o755).unwrap();
    let f0 = uvfs::counters().fine_stamps;
    for i in 0..200 {
        let p = format!("/d/f{i}");
        let fd = t.open(p.as_bytes(), OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap();
        t.write(fd, b"data").unwrap();
        t.fchmod(fd, 0o600).unwrap();
        t.statx(DirFd::Cwd, p.as_bytes(), AtFlags::empty(), uvfs::StatxMask::SIZE).unwrap();
        t.write(fd, b"more").unwrap();
        t.close(fd).unwrap();
        t.unlink(p.as_bytes()).unwrap();
    }
    assert_eq!(uvfs::counters().fine_stamps - f0, 0);
    // Looked at, then changed at once: fine stamps, one a change at most.
    let fd = t.open(b"/d/g", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap();
    let f1 = uvfs::counters().fine_stamps;
    for _ in 0..100 {
        t.fstat(fd).unwrap();
        t.write(fd, b"x").unwrap();
    }
    let fine = uvfs::counters().fine_stamps - f1;
    assert!(fine > 0 && fine <= 100, "{fine} fine stamps for 100 writes after a stat each");
}

/// Every new descriptor is the lowest free one (>= the asked minimum for `F_DUPFD`), among
/// thousands open and with holes anywhere: opens, `dup`, `F_DUPFD`, `dup2` past the end,
/// closes and failed opens, against a model of the table.
#[test]
fn new_descriptors_are_the_lowest_free_among_thousands() {
    use std::collections::BTreeSet;
    let vfs = Vfs::default();
    let t = vfs.root_task();
    t.mknodat(DirFd::Cwd, b"/f", 0o644, 0).unwrap();
    // A new task's table is empty (no standard descriptors).
    let mut open: BTreeSet<i32> = BTreeSet::new();
    let lowest = |open: &BTreeSet<i32>, min: i32| (min..).find(|i| !open.contains(i)).unwrap();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut rand = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % m) as i32
    };
    let first = t.open(b"/f", OpenFlags::RDONLY, 0).unwrap();
    assert_eq!(first.0, lowest(&open, 0));
    open.insert(first.0);
    for round in 0..20_000 {
        let got = match rand(10) {
            0..=3 => Some((t.open(b"/f", OpenFlags::RDONLY, 0).unwrap(), 0)),
            4 => Some((t.dup(first).unwrap(), 0)),
            5 => {
                let min = rand(6000);
                Some((Fd(t.fcntl(first, uvfs::FcntlCmd::DupFd(Fd(min))).unwrap()), min))
            }
            6 => {
                let at = rand(7000);
                if at != first.0 {
                    t.dup2(first, Fd(at)).unwrap();
                    open.insert(at);
                }
                None
            }
            7 => {
                assert_eq!(t.open(b"/missing", OpenFlags::RDONLY, 0), Err(Errno::ENOENT));
                None
            }
            _ => {
                // Close one at random (not the one the others are duplicated from).
                if let Some(&fd) = open.range(rand(7000)..).find(|&&f| f != first.0) {
                    t.close(Fd(fd)).unwrap();
                    open.remove(&fd);
                }
                None
            }
        };
        if let Some((fd, min)) = got {
            assert_eq!(fd.0, lowest(&open, min), "round {round}");
            open.insert(fd.0);
        }
    }
    assert!(open.len() > 2000, "the table held {} descriptors at the end", open.len());
}
