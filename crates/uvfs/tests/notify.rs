//! Watches: the same calls on a host tmpfs directory with the kernel's inotify and on uvfs
//! give the same event sequence (masks, names, cookie pairing, order, coalescing,
//! IN_IGNORED); limits and the fast path's counts are checked on uvfs alone.

mod scratch;

use std::ffi::CString;
use std::time::Duration;

use proptest::prelude::*;
use uvfs::{
    AtFlags, Credentials, DirFd, Errno, EventMask, FastPaths, Fd, InotifyEvent, InotifyFlags, OpenFlags, Vfs, VfsConfig,
};

#[derive(Clone, Debug)]
enum Op {
    Create(&'static str),
    Mkdir(&'static str),
    Write(&'static str),
    Read(&'static str),
    Chmod(&'static str, u32),
    Rename(&'static str, &'static str),
    Unlink(&'static str),
    Rmdir(&'static str),
    Link(&'static str, &'static str),
    Truncate(&'static str),
    Symlink(&'static str),
    Mkfifo(&'static str),
    /// `utimensat(path, NULL)`.
    Touch(&'static str),
    /// `chown(path, 1000, -1)`.
    Chown(&'static str),
    /// `setxattr(path, "user.x", ...)`, then (`false`) `removexattr`.
    Xattr(&'static str, bool),
    /// `renameat2(a, b, RENAME_EXCHANGE)`.
    Exchange(&'static str, &'static str),
    /// `open(O_WRONLY | O_TRUNC)` and close, nothing written.
    OpenTrunc(&'static str),
    /// `open(O_RDWR)`, `fallocate` of 4 KiB, close.
    Fallocate(&'static str),
    /// `open(O_PATH)` and close: no event.
    OpenPath(&'static str),
    /// `open(dir, O_TMPFILE | O_WRONLY)`, a write, `linkat(fd, "", name, AT_EMPTY_PATH)`
    /// (when the open succeeded), close.
    Tmpfile(&'static str, &'static str),
    /// `open(O_RDWR | O_NONBLOCK)`, the descriptor kept (the calls below act on the last
    /// one kept): events of a file open across unlinks and renames.
    Hold(&'static str),
    /// A 1-byte `write` through the last kept descriptor (EBADF if none).
    HeldWrite,
    /// `close` of the last kept descriptor (EBADF if none).
    HeldClose,
    /// Through the last kept descriptor: `pread` of a byte (`0`), `fchmod` 0600 (`1`),
    /// `ftruncate` to 2 (`2`), `futimens(NULL)` (`3`), `fsetxattr("user.h")` (`4`):
    /// which of their events a watch with `IN_EXCL_UNLINK` still gets after an unlink.
    HeldCall(u8),
    /// `inotify_add_watch(path, mask)` in the middle of the calls: a new watch, or
    /// one changed (`IN_MASK_ADD`, `IN_MASK_CREATE`), or refused (`IN_ONLYDIR`,
    /// `IN_DONT_FOLLOW` on a symlink); its descriptor is compared.
    Watch(&'static str, u32),
    /// `inotify_rm_watch(wd)`: IN_IGNORED, or EINVAL.
    Unwatch(i32),
}

const NAMES: &[&str] = &["a", "b", "d/a", "d/b", "e/a", "f", "d", "e", "g"];
const MASKS: &[u32] = &[
    0xfff,                // IN_ALL_EVENTS
    0x100 | 0x200 | 0xc0, // CREATE | DELETE | MOVE
    0x2 | 0x4 | 0x8,      // MODIFY | ATTRIB | CLOSE_WRITE
    0x20 | 0x1 | 0x10,    // OPEN | ACCESS | CLOSE_NOWRITE
    0xfff | 0x8000_0000,  // ALL | ONESHOT
    0xfff | 0x0400_0000,  // ALL | EXCL_UNLINK
    0x400 | 0x800 | 0x4,  // DELETE_SELF | MOVE_SELF | ATTRIB
];

fn op() -> impl Strategy<Value = Op> {
    let n = || prop::sample::select(NAMES);
    prop_oneof![
        n().prop_map(Op::Create),
        n().prop_map(Op::Mkdir),
        n().prop_map(Op::Write),
        n().prop_map(Op::Read),
        (n(), prop::sample::select(&[0o600u32, 0o644, 0o755][..])).prop_map(|(a, m)| Op::Chmod(a, m)),
        (n(), n()).prop_map(|(a, b)| Op::Rename(a, b)),
        n().prop_map(Op::Unlink),
        n().prop_map(Op::Rmdir),
        (n(), n()).prop_map(|(a, b)| Op::Link(a, b)),
        n().prop_map(Op::Truncate),
        n().prop_map(Op::Symlink),
        n().prop_map(Op::Mkfifo),
        n().prop_map(Op::Touch),
        n().prop_map(Op::Chown),
        (n(), any::<bool>()).prop_map(|(a, set)| Op::Xattr(a, set)),
        (n(), n()).prop_map(|(a, b)| Op::Exchange(a, b)),
        n().prop_map(Op::OpenTrunc),
        n().prop_map(Op::Fallocate),
        n().prop_map(Op::OpenPath),
        (prop::sample::select(&["", "d", "e", "f"][..]), n()).prop_map(|(d, b)| Op::Tmpfile(d, b)),
        n().prop_map(Op::Hold),
        Just(Op::HeldWrite),
        Just(Op::HeldClose),
        (0..5u8).prop_map(Op::HeldCall),
        (
            prop::sample::select(&["", "a", "d", "f", "d/a", "g"][..]),
            prop::sample::select(MASKS),
            prop::sample::select(
                &[0u32, 0, IN_DONT_FOLLOW, IN_ONLYDIR, IN_MASK_ADD, IN_MASK_CREATE, IN_MASK_ADD | IN_MASK_CREATE][..]
            ),
        )
            .prop_map(|(a, m, f)| Op::Watch(a, m | f)),
        (1..6i32).prop_map(Op::Unwatch),
    ]
}

const IN_DONT_FOLLOW: u32 = 0x0200_0000;
const IN_ONLYDIR: u32 = 0x0100_0000;
const IN_MASK_ADD: u32 = 0x2000_0000;
const IN_MASK_CREATE: u32 = 0x1000_0000;

/// An event with its cookie replaced by the order in which cookies first appear.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Ev {
    wd: i32,
    mask: u32,
    cookie: u32,
    name: Vec<u8>,
}

fn normalize(raw: Vec<(i32, u32, u32, Vec<u8>)>) -> Vec<Ev> {
    let mut seen = Vec::new();
    raw.into_iter()
        .map(|(wd, mask, cookie, name)| {
            let c = if cookie == 0 {
                0
            } else {
                match seen.iter().position(|&x| x == cookie) {
                    Some(i) => i as u32 + 1,
                    None => {
                        seen.push(cookie);
                        seen.len() as u32
                    }
                }
            };
            // An unnamed file's events carry "#" and its inode number (`d_tmpfile`).
            let name = if name.first() == Some(&b'#') && name[1..].iter().all(u8::is_ascii_digit) {
                b"#".to_vec()
            } else {
                name
            };
            Ev { wd, mask, cookie: c, name }
        })
        .collect()
}

// ---------------- host side ----------------

struct Host {
    dir: String,
    ifd: i32,
    /// Descriptors `Op::Hold` kept, closed in order at the end (`Host::close_held`).
    held: std::cell::RefCell<Vec<i32>>,
}

fn c(p: &str) -> CString {
    CString::new(p).unwrap()
}

impl Host {
    fn new() -> Host {
        let mut tmpl = format!("{}/uvfs-notify-XXXXXX\0", scratch::scratch_in("/dev/shm").display()).into_bytes();
        // SAFETY: a writable NUL-terminated template.
        let p = unsafe { libc::mkdtemp(tmpl.as_mut_ptr().cast()) };
        assert!(!p.is_null(), "mkdtemp failed");
        let dir = String::from_utf8(tmpl[..tmpl.len() - 1].to_vec()).unwrap();
        // SAFETY: plain syscall.
        let ifd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        assert!(ifd >= 0);
        Host { dir, ifd, held: Default::default() }
    }
    fn p(&self, name: &str) -> CString {
        c(&format!("{}/{}", self.dir, name))
    }
    fn errno<T: PartialOrd + Default>(r: T) -> Result<(), i32> {
        if r < T::default() { Err(std::io::Error::last_os_error().raw_os_error().unwrap()) } else { Ok(()) }
    }
    fn run(&self, op: &Op) -> Result<(), i32> {
        // SAFETY: plain syscalls on NUL-terminated paths and local buffers.
        unsafe {
            match *op {
                Op::Create(a) => {
                    let fd = libc::open(self.p(a).as_ptr(), libc::O_CREAT | libc::O_WRONLY | libc::O_EXCL, 0o644);
                    Self::errno(fd)?;
                    Self::errno(libc::close(fd))
                }
                Op::Mkdir(a) => Self::errno(libc::mkdir(self.p(a).as_ptr(), 0o755)),
                Op::Write(a) => {
                    // Without blocking: a fifo's open would wait for the other end.
                    let fd = libc::open(self.p(a).as_ptr(), libc::O_WRONLY | libc::O_NONBLOCK);
                    Self::errno(fd)?;
                    libc::write(fd, b"x".as_ptr().cast(), 1);
                    Self::errno(libc::close(fd))
                }
                Op::Read(a) => {
                    let fd = libc::open(self.p(a).as_ptr(), libc::O_RDONLY | libc::O_NONBLOCK);
                    Self::errno(fd)?;
                    let mut b = [0u8; 8];
                    libc::read(fd, b.as_mut_ptr().cast(), 8);
                    Self::errno(libc::close(fd))
                }
                Op::Chmod(a, m) => Self::errno(libc::chmod(self.p(a).as_ptr(), m)),
                Op::Rename(a, b) => Self::errno(libc::rename(self.p(a).as_ptr(), self.p(b).as_ptr())),
                Op::Unlink(a) => Self::errno(libc::unlink(self.p(a).as_ptr())),
                Op::Rmdir(a) => Self::errno(libc::rmdir(self.p(a).as_ptr())),
                Op::Link(a, b) => Self::errno(libc::link(self.p(a).as_ptr(), self.p(b).as_ptr())),
                Op::Truncate(a) => Self::errno(libc::truncate(self.p(a).as_ptr(), 3)),
                Op::Symlink(a) => Self::errno(libc::symlink(c("f").as_ptr(), self.p(a).as_ptr())),
                Op::Mkfifo(a) => Self::errno(libc::mknod(self.p(a).as_ptr(), libc::S_IFIFO | 0o644, 0)),
                Op::Touch(a) => Self::errno(libc::utimensat(libc::AT_FDCWD, self.p(a).as_ptr(), std::ptr::null(), 0)),
                Op::Chown(a) => Self::errno(libc::chown(self.p(a).as_ptr(), 1000, u32::MAX)),
                Op::Xattr(a, true) => {
                    Self::errno(libc::setxattr(self.p(a).as_ptr(), c("user.x").as_ptr(), b"v".as_ptr().cast(), 1, 0))
                }
                Op::Xattr(a, false) => Self::errno(libc::removexattr(self.p(a).as_ptr(), c("user.x").as_ptr())),
                Op::Exchange(a, b) => Self::errno(libc::syscall(
                    libc::SYS_renameat2,
                    libc::AT_FDCWD,
                    self.p(a).as_ptr(),
                    libc::AT_FDCWD,
                    self.p(b).as_ptr(),
                    libc::RENAME_EXCHANGE,
                )),
                Op::OpenTrunc(a) => {
                    let fd = libc::open(self.p(a).as_ptr(), libc::O_WRONLY | libc::O_TRUNC | libc::O_NONBLOCK);
                    Self::errno(fd)?;
                    Self::errno(libc::close(fd))
                }
                Op::Fallocate(a) => {
                    let fd = libc::open(self.p(a).as_ptr(), libc::O_RDWR | libc::O_NONBLOCK);
                    Self::errno(fd)?;
                    let r = libc::fallocate(fd, 0, 0, 4096);
                    libc::close(fd);
                    Self::errno(r)
                }
                Op::OpenPath(a) => {
                    let fd = libc::open(self.p(a).as_ptr(), libc::O_PATH);
                    Self::errno(fd)?;
                    Self::errno(libc::close(fd))
                }
                Op::Tmpfile(d, b) => {
                    let fd = libc::open(self.p(d).as_ptr(), libc::O_TMPFILE | libc::O_WRONLY, 0o600);
                    Self::errno(fd)?;
                    libc::write(fd, b"x".as_ptr().cast(), 1);
                    let r = libc::linkat(fd, c("").as_ptr(), libc::AT_FDCWD, self.p(b).as_ptr(), libc::AT_EMPTY_PATH);
                    libc::close(fd);
                    Self::errno(r)
                }
                Op::Hold(a) => {
                    let fd = libc::open(self.p(a).as_ptr(), libc::O_RDWR | libc::O_NONBLOCK);
                    Self::errno(fd)?;
                    self.held.borrow_mut().push(fd);
                    Ok(())
                }
                Op::HeldWrite => {
                    let fd = self.held.borrow().last().copied().ok_or(libc::EBADF)?;
                    Self::errno(libc::write(fd, b"x".as_ptr().cast(), 1))
                }
                Op::HeldClose => {
                    let fd = self.held.borrow_mut().pop().ok_or(libc::EBADF)?;
                    Self::errno(libc::close(fd))
                }
                Op::HeldCall(k) => {
                    let fd = self.held.borrow().last().copied().ok_or(libc::EBADF)?;
                    let mut b = [0u8; 1];
                    match k {
                        0 => Self::errno(libc::pread(fd, b.as_mut_ptr().cast(), 1, 0)),
                        1 => Self::errno(libc::fchmod(fd, 0o600)),
                        2 => Self::errno(libc::ftruncate(fd, 2)),
                        3 => Self::errno(libc::futimens(fd, std::ptr::null())),
                        _ => Self::errno(libc::fsetxattr(fd, c("user.h").as_ptr(), b"v".as_ptr().cast(), 1, 0)),
                    }
                }
                Op::Watch(..) | Op::Unwatch(_) => unreachable!("compare runs them"),
            }
        }
    }
    /// Closes what `Op::Hold` kept, oldest first.
    fn close_held(&self) {
        for fd in self.held.borrow_mut().drain(..) {
            // SAFETY: a descriptor this side opened and still owns.
            unsafe { libc::close(fd) };
        }
    }
    fn watch(&self, name: &str, mask: u32) -> Result<i32, i32> {
        // SAFETY: plain syscall.
        let wd = unsafe { libc::inotify_add_watch(self.ifd, self.p(name).as_ptr(), mask) };
        if wd < 0 { Err(std::io::Error::last_os_error().raw_os_error().unwrap()) } else { Ok(wd) }
    }
    fn events(&self) -> Vec<(i32, u32, u32, Vec<u8>)> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            // SAFETY: reading into a local buffer.
            let n = unsafe { libc::read(self.ifd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            let mut off = 0;
            while off < n as usize {
                let wd = i32::from_ne_bytes(buf[off..off + 4].try_into().unwrap());
                let mask = u32::from_ne_bytes(buf[off + 4..off + 8].try_into().unwrap());
                let cookie = u32::from_ne_bytes(buf[off + 8..off + 12].try_into().unwrap());
                let len = u32::from_ne_bytes(buf[off + 12..off + 16].try_into().unwrap()) as usize;
                let name = &buf[off + 16..off + 16 + len];
                let name = name[..name.iter().position(|&b| b == 0).unwrap_or(len)].to_vec();
                out.push((wd, mask, cookie, name));
                off += 16 + len;
            }
        }
        out
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // A failed comparison returns before the end's close.
        self.close_held();
        // SAFETY: closing our descriptor.
        unsafe { libc::close(self.ifd) };
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// ---------------- uvfs side ----------------

fn uvfs_run(t: &uvfs::Task, held: &mut Vec<Fd>, op: &Op) -> Result<(), i32> {
    let p = |a: &str| format!("/{a}").into_bytes();
    let r = match *op {
        Op::Create(a) => {
            t.open(&p(a), OpenFlags::CREAT | OpenFlags::WRONLY | OpenFlags::EXCL, 0o644).and_then(|fd| t.close(fd))
        }
        Op::Mkdir(a) => t.mkdir(&p(a), 0o755),
        Op::Write(a) => t.open(&p(a), OpenFlags::WRONLY | OpenFlags::NONBLOCK, 0).and_then(|fd| {
            let _ = t.write(fd, b"x");
            t.close(fd)
        }),
        Op::Read(a) => t.open(&p(a), OpenFlags::RDONLY | OpenFlags::NONBLOCK, 0).and_then(|fd| {
            let _ = t.read(fd, &mut [0u8; 8]);
            t.close(fd)
        }),
        Op::Chmod(a, m) => t.fchmodat(DirFd::Cwd, &p(a), m, AtFlags::empty()),
        Op::Rename(a, b) => t.rename(&p(a), &p(b)),
        Op::Unlink(a) => t.unlink(&p(a)),
        Op::Rmdir(a) => t.rmdir(&p(a)),
        Op::Link(a, b) => t.link(&p(a), &p(b)),
        Op::Truncate(a) => t.truncate(&p(a), 3),
        Op::Symlink(a) => t.symlink(b"f", &p(a)),
        Op::Mkfifo(a) => t.mknodat(DirFd::Cwd, &p(a), libc::S_IFIFO | 0o644, 0),
        Op::Touch(a) => t.utimensat(DirFd::Cwd, &p(a), None, AtFlags::empty()),
        Op::Chown(a) => t.fchownat(DirFd::Cwd, &p(a), Some(uvfs::Uid(1000)), None, AtFlags::empty()),
        Op::Xattr(a, true) => t.setxattr(&p(a), b"user.x", b"v", uvfs::XattrFlags::empty()),
        Op::Xattr(a, false) => t.removexattr(&p(a), b"user.x"),
        Op::Exchange(a, b) => t.renameat2(DirFd::Cwd, &p(a), DirFd::Cwd, &p(b), uvfs::RenameFlags::EXCHANGE),
        Op::OpenTrunc(a) => {
            t.open(&p(a), OpenFlags::WRONLY | OpenFlags::TRUNC | OpenFlags::NONBLOCK, 0).and_then(|fd| t.close(fd))
        }
        Op::Fallocate(a) => t.open(&p(a), OpenFlags::RDWR | OpenFlags::NONBLOCK, 0).and_then(|fd| {
            let r = t.fallocate(fd, uvfs::FallocFlags::empty(), 0, 4096);
            let _ = t.close(fd);
            r
        }),
        Op::OpenPath(a) => t.open(&p(a), OpenFlags::PATH, 0).and_then(|fd| t.close(fd)),
        Op::Hold(a) => t.open(&p(a), OpenFlags::RDWR | OpenFlags::NONBLOCK, 0).map(|fd| held.push(fd)),
        Op::HeldWrite => held.last().ok_or(Errno::EBADF).and_then(|&fd| t.write(fd, b"x")).map(drop),
        Op::HeldClose => held.pop().ok_or(Errno::EBADF).and_then(|fd| t.close(fd)),
        Op::HeldCall(k) => held.last().copied().ok_or(Errno::EBADF).and_then(|fd| match k {
            0 => t.pread(fd, &mut [0u8; 1], 0).map(drop),
            1 => t.fchmod(fd, 0o600),
            2 => t.ftruncate(fd, 2),
            3 => t.utimensat(DirFd::Fd(fd), b"", None, AtFlags::EMPTY_PATH),
            _ => t.fsetxattr(fd, b"user.h", b"v", uvfs::XattrFlags::empty()),
        }),
        Op::Watch(..) | Op::Unwatch(_) => unreachable!("compare runs them"),
        Op::Tmpfile(d, b) => {
            t.open(&p(d), OpenFlags::TMPFILE | OpenFlags::DIRECTORY | OpenFlags::WRONLY, 0o600).and_then(|fd| {
                let _ = t.write(fd, b"x");
                let r = t.linkat(DirFd::Fd(fd), b"", DirFd::Cwd, &p(b), AtFlags::EMPTY_PATH);
                let _ = t.close(fd);
                r
            })
        }
    };
    r.map_err(|e| e.raw())
}

fn uvfs_events(ino: &uvfs::Inotify) -> Vec<(i32, u32, u32, Vec<u8>)> {
    match ino.read_events(usize::MAX, None) {
        Ok(v) => {
            v.into_iter().map(|e: InotifyEvent| (e.wd, e.mask.bits(), e.cookie, e.name.unwrap_or_default())).collect()
        }
        Err(Errno::EAGAIN) => Vec::new(),
        Err(e) => panic!("read_events: {e:?}"),
    }
}

/// Where the uvfs side of [`compare`] keeps its tree.
#[derive(Clone, Copy, Debug)]
enum Root {
    Memfs,
    /// A host directory: a filesystem whose dentry cache is not complete, so a watch finds
    /// the children already cached in the directory's table, not in a readdir order.
    Hostfs,
}

fn compare(fast: FastPaths, root: Root, masks: [u32; 3], ops: &[Op]) -> Result<(), TestCaseError> {
    let host = Host::new();
    // On tmpfs, as the host side: an unnamed file's event names carry its inode number,
    // and ext4 gives a freed number to the next file, which makes two events the same
    // (and coalesced) where tmpfs's differ.
    let backing = tempfile::tempdir_in(scratch::scratch_in("/dev/shm")).unwrap();
    let config = VfsConfig { fast_paths: fast, ..Default::default() };
    let vfs = match root {
        Root::Memfs => Vfs::new(config),
        Root::Hostfs => {
            Vfs::with_root(config, Box::new(uvfs::fs::hostfs::HostFs::new(backing.path()).unwrap())).unwrap()
        }
    };
    let t = vfs.root_task();
    t.umask(0o022);
    let ino = t.inotify_init1(InotifyFlags::NONBLOCK).unwrap();
    // The same starting tree: dirs d, e and file f.
    let mut held = Vec::new();
    for op in [Op::Mkdir("d"), Op::Mkdir("e"), Op::Create("f")] {
        host.run(&op).unwrap();
        uvfs_run(&t, &mut held, &op).unwrap();
    }
    let targets = ["", "d", "f"];
    for (name, &m) in targets.iter().zip(masks.iter()) {
        let h = host.watch(name, m);
        let u = t
            .inotify_add_watch(&ino, format!("/{name}").as_bytes(), EventMask::from_bits_retain(m))
            .map_err(|e| e.raw());
        prop_assert_eq!(h, u, "add_watch {:?} {:#x}", name, m);
    }
    for op in ops {
        match *op {
            Op::Watch(name, m) => {
                let h = host.watch(name, m);
                let u = t
                    .inotify_add_watch(&ino, format!("/{name}").as_bytes(), EventMask::from_bits_retain(m))
                    .map_err(|e| e.raw());
                prop_assert_eq!(h, u, "add_watch {:?} {:#x}", name, m);
            }
            Op::Unwatch(wd) => {
                // SAFETY: plain syscall on this side's inotify descriptor.
                let h = unsafe { Host::errno(libc::inotify_rm_watch(host.ifd, wd)) };
                let u = t.inotify_rm_watch(&ino, wd).map_err(|e| e.raw());
                prop_assert_eq!(h, u, "rm_watch {}", wd);
            }
            _ => {
                let h = host.run(op);
                let u = uvfs_run(&t, &mut held, op);
                prop_assert_eq!(h, u, "result of {:?}", op);
            }
        }
    }
    // What is still held is closed, oldest first, on both sides: its events count too.
    host.close_held();
    for fd in held.drain(..) {
        t.close(fd).unwrap();
    }
    let (he, ue) = (normalize(host.events()), normalize(uvfs_events(&ino)));
    prop_assert_eq!(he, ue, "events after {:?} with masks {:x?}", ops, masks);
    Ok(())
}

proptest! {
    // PROPTEST_CASES overrides the count for a longer hunt.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn event_sequences_match_the_kernel(
        masks in [prop::sample::select(MASKS), prop::sample::select(MASKS), prop::sample::select(MASKS)],
        ops in prop::collection::vec(op(), 1..16),
    ) {
        compare(FastPaths::all(), Root::Memfs, masks, &ops)?;
        compare(FastPaths::all() - FastPaths::NOTIFY, Root::Memfs, masks, &ops)?;
        compare(FastPaths::all(), Root::Hostfs, masks, &ops)?;
    }
}

/// An `O_TRUNC` open reports OPEN before the truncation's MODIFY; an unnamed file's
/// events reach its directory's watch under "#" and its inode number, before and after
/// `linkat` names it (the name created is reported as any other); a fifo's writes report
/// nothing; a file written after its name went reports to its old directory (not with
/// `IN_EXCL_UNLINK`).
#[test]
fn truncating_opens_unnamed_files_and_fifos() {
    let ops = [
        Op::OpenTrunc("f"),
        Op::Tmpfile("d", "a"),
        Op::Tmpfile("", "b"),
        Op::Tmpfile("e", "f"),
        Op::Mkfifo("d/p"),
        Op::Hold("d/p"),
        Op::HeldWrite,
        Op::Hold("d/a"),
        Op::Unlink("d/a"),
        Op::HeldWrite,
    ];
    for masks in [[0xfff; 3], [0xfff | 0x0400_0000; 3]] {
        for (fast, root) in [
            (FastPaths::all(), Root::Memfs),
            (FastPaths::all() - FastPaths::NOTIFY, Root::Memfs),
            (FastPaths::all(), Root::Hostfs),
        ] {
            compare(fast, root, masks, &ops).unwrap();
        }
    }
}

/// A `MOVED_TO` right after one of the same name on the same watch folds into it although
/// the two moves' cookies differ (`inotify_merge` compares watch, mask and name only): a
/// rename onto `d/b` and then an exchange of another file with `d/b` report one
/// `MOVED_TO "b"` to `d`, then the exchange's `MOVED_FROM "b"`. uvfs compared the cookie
/// and reported both (found by `event_sequences_match_the_kernel`, 5,000 cases).
#[test]
fn a_moved_to_folds_into_the_same_one_of_another_move() {
    let ops = [Op::Mkfifo("e/a"), Op::Symlink("b"), Op::Rename("b", "d/b"), Op::Exchange("e/a", "d/b")];
    for (fast, root) in [
        (FastPaths::all(), Root::Memfs),
        (FastPaths::all() - FastPaths::NOTIFY, Root::Memfs),
        (FastPaths::all(), Root::Hostfs),
    ] {
        compare(fast, root, [0xfff; 3], &ops).unwrap();
    }
}

/// `IN_EXCL_UNLINK` after the name went: a watch of the directory and one of the file
/// itself still get the events Linux carries by dentry (a `fchmod`'s, `ftruncate`'s,
/// `futimens`'s and `fsetxattr`'s ATTRIB or MODIFY), not those it carries by path (a
/// write's MODIFY, a read's ACCESS, the close), checked on 6.18.
#[test]
fn events_of_an_unlinked_file_with_excl_unlink() {
    let mut ops = vec![Op::Hold("f"), Op::Hold("d/a"), Op::Unlink("f")];
    ops.extend([1, 2, 3, 4, 0].map(Op::HeldCall));
    ops.extend([Op::HeldWrite, Op::HeldClose, Op::HeldWrite, Op::HeldCall(0), Op::HeldCall(1)]);
    let ops = [vec![Op::Create("d/a")], ops].concat();
    for masks in [[0xfff | 0x0400_0000; 3], [0xfff; 3]] {
        for (fast, root) in [
            (FastPaths::all(), Root::Memfs),
            (FastPaths::all() - FastPaths::NOTIFY, Root::Memfs),
            (FastPaths::all(), Root::Hostfs),
        ] {
            compare(fast, root, masks, &ops).unwrap();
        }
    }
}

/// A watch added after its directory's children were cached reports their events: on a
/// host directory the children are in the table only (no readdir order), which the watch
/// once missed (a read of `f` under a watched root reported nothing).
#[test]
fn children_cached_before_the_watch_report_to_it() {
    let ops = [Op::Read("f"), Op::Write("f"), Op::Chmod("f", 0o600), Op::Create("d/a"), Op::Write("d/a")];
    for root in [Root::Memfs, Root::Hostfs] {
        compare(FastPaths::all(), root, [0xfff, 0xfff, 0x4], &ops).unwrap();
    }
}

#[test]
fn watch_errors_match_linux() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    t.mkdir(b"/d", 0o755).unwrap();
    t.open(b"/f", OpenFlags::CREAT | OpenFlags::WRONLY, 0o600).and_then(|fd| t.close(fd)).unwrap();
    let ino = t.inotify_init1(InotifyFlags::NONBLOCK).unwrap();
    assert_eq!(t.inotify_add_watch(&ino, b"/nope", EventMask::ALL_EVENTS), Err(Errno::ENOENT));
    assert_eq!(t.inotify_add_watch(&ino, b"/d", EventMask::empty()), Err(Errno::EINVAL));
    assert_eq!(
        t.inotify_add_watch(&ino, b"/d", EventMask::CREATE | EventMask::MASK_ADD | EventMask::MASK_CREATE),
        Err(Errno::EINVAL)
    );
    assert_eq!(t.inotify_add_watch(&ino, b"/f", EventMask::CREATE | EventMask::ONLYDIR), Err(Errno::ENOTDIR));
    let wd = t.inotify_add_watch(&ino, b"/d", EventMask::CREATE).unwrap();
    assert_eq!(t.inotify_add_watch(&ino, b"/d", EventMask::DELETE | EventMask::MASK_CREATE), Err(Errno::EEXIST));
    assert_eq!(t.inotify_add_watch(&ino, b"/d", EventMask::DELETE | EventMask::MASK_ADD), Ok(wd));
    // Permission: an unprivileged user cannot watch what it cannot read.
    let user = vfs.task(Credentials::new(uvfs::Uid(1000), uvfs::Gid(1000), &[]));
    assert_eq!(user.inotify_add_watch(&ino, b"/f", EventMask::ALL_EVENTS), Err(Errno::EACCES));
    assert_eq!(t.inotify_rm_watch(&ino, 999), Err(Errno::EINVAL));
    t.inotify_rm_watch(&ino, wd).unwrap();
    let ev = ino.read_events(10, None).unwrap();
    assert_eq!(ev.last().unwrap().mask, EventMask::IGNORED);
    ino.close().unwrap();
    assert_eq!(ino.read_events(1, None), Err(Errno::EBADF));
    assert_eq!(t.inotify_add_watch(&ino, b"/d", EventMask::CREATE), Err(Errno::EBADF));
    // Watch limit.
    let vfs = Vfs::new(VfsConfig { max_user_watches: 1, ..Default::default() });
    let t = vfs.root_task();
    t.mkdir(b"/a", 0o755).unwrap();
    t.mkdir(b"/b", 0o755).unwrap();
    let ino = t.inotify_init1(InotifyFlags::empty()).unwrap();
    t.inotify_add_watch(&ino, b"/a", EventMask::CREATE).unwrap();
    assert_eq!(t.inotify_add_watch(&ino, b"/b", EventMask::CREATE), Err(Errno::ENOSPC));
}

#[test]
fn queue_overflows_once_and_coalesces_identical_events() {
    let vfs = Vfs::new(VfsConfig { max_queued_events: 4, ..Default::default() });
    let t = vfs.root_task();
    let ino = t.inotify_init1(InotifyFlags::NONBLOCK).unwrap();
    let fd = t.open(b"/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o600).unwrap();
    t.inotify_add_watch(&ino, b"/", EventMask::MODIFY | EventMask::CREATE).unwrap();
    // Identical consecutive events coalesce.
    for _ in 0..10 {
        t.write(fd, b"x").unwrap();
    }
    assert_eq!(ino.pending(), 1);
    assert_eq!(ino.queued_total(), 1, "a merged event is not counted");
    for i in 0..10 {
        t.mknodat(DirFd::Cwd, format!("/n{i}").as_bytes(), 0o600, 0).unwrap();
    }
    assert_eq!(ino.queued_total(), 5, "three creates and the overflow event; the dropped ones not");
    let ev = ino.read_events(100, None).unwrap();
    assert_eq!(ino.queued_total(), 5, "reading does not change the count");
    assert_eq!(ev.len(), 5, "{ev:?}");
    assert_eq!(ev[4].mask, EventMask::Q_OVERFLOW);
    assert_eq!(ev[4].wd, -1);
    assert_eq!(ino.read_events(1, None), Err(Errno::EAGAIN));
    // Byte layout: names padded to 16.
    t.mknodat(DirFd::Cwd, b"/xyz", 0o600, 0).unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(ino.read(&mut buf[..20]), Err(Errno::EINVAL));
    let n = ino.read(&mut buf).unwrap();
    assert_eq!(n, 32);
    assert_eq!(u32::from_ne_bytes(buf[4..8].try_into().unwrap()), EventMask::CREATE.bits());
    assert_eq!(u32::from_ne_bytes(buf[12..16].try_into().unwrap()), 16);
    assert_eq!(&buf[16..20], b"xyz\0");
    t.close(fd).unwrap();
}

#[test]
fn blocking_read_wakes_on_event_and_readiness_fd_signals() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    let ino = t.inotify_init1(InotifyFlags::empty()).unwrap();
    t.inotify_add_watch(&ino, b"/", EventMask::CREATE).unwrap();
    assert_eq!(ino.read_events(1, Some(Duration::from_millis(1))), Err(Errno::EAGAIN));
    let rfd = ino.readiness_fd();
    let mut pfd = [rustix::event::PollFd::new(&rfd, rustix::event::PollFlags::IN)];
    assert_eq!(rustix::event::poll(&mut pfd, Some(&rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 })).unwrap(), 0);
    std::thread::scope(|s| {
        let t2 = vfs.root_task();
        s.spawn(move || t2.mkdir(b"/x", 0o755).unwrap());
        let ev = ino.read_events(1, None).unwrap();
        assert_eq!(ev[0].name.as_deref(), Some(&b"x"[..]));
        assert_eq!(ev[0].mask, EventMask::CREATE | EventMask::ISDIR);
    });
    t.mkdir(b"/y", 0o755).unwrap();
    let mut pfd = [rustix::event::PollFd::new(&rfd, rustix::event::PollFlags::IN)];
    assert_eq!(rustix::event::poll(&mut pfd, None).unwrap(), 1);
    ino.read_events(10, None).unwrap();
    let mut pfd = [rustix::event::PollFd::new(&rfd, rustix::event::PollFlags::IN)];
    assert_eq!(rustix::event::poll(&mut pfd, Some(&rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 })).unwrap(), 0);
}

#[test]
fn mount_and_filesystem_marks_report_paths() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    t.mkdir(b"/a", 0o755).unwrap();
    t.mkdir(b"/a/b", 0o755).unwrap();
    let ino = t.inotify_init1(InotifyFlags::NONBLOCK).unwrap();
    t.fanotify_mark(&ino, uvfs::MarkKind::Filesystem, b"/", EventMask::CREATE | EventMask::MODIFY).unwrap();
    let fd = t.open(b"/a/b/f", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap();
    t.write(fd, b"1").unwrap();
    t.close(fd).unwrap();
    let ev = ino.read_events(10, None).unwrap();
    let got: Vec<(EventMask, Vec<u8>)> = ev.into_iter().map(|e| (e.mask, e.path.unwrap())).collect();
    assert_eq!(got, vec![(EventMask::CREATE, b"/a/b/f".to_vec()), (EventMask::MODIFY, b"/a/b/f".to_vec())]);
}

/// A thread that muted an instance makes changes it does not hear of; other threads'
/// changes, and the thread's own once the guard is gone, are reported (marks on an inode,
/// a parent and the filesystem alike).
#[test]
fn a_muted_thread_is_not_reported_to_that_instance() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    t.mkdir(b"/d", 0o755).unwrap();
    let ino = t.inotify_init1(InotifyFlags::NONBLOCK).unwrap();
    let other = t.inotify_init1(InotifyFlags::NONBLOCK).unwrap();
    for i in [&ino, &other] {
        t.fanotify_mark(i, uvfs::MarkKind::Filesystem, b"/", EventMask::CREATE | EventMask::DELETE).unwrap();
        t.inotify_add_watch(i, b"/d", EventMask::CREATE | EventMask::DELETE).unwrap();
    }
    let names = |i: &uvfs::Inotify| -> Vec<Vec<u8>> {
        match i.read_events(64, None) {
            Ok(ev) => ev.into_iter().map(|e| e.path.or(e.name).unwrap()).collect(),
            Err(uvfs::Errno::EAGAIN) => Vec::new(),
            Err(e) => panic!("{e}"),
        }
    };
    {
        let _mute = ino.mute_this_thread();
        t.mknodat(uvfs::DirFd::Cwd, b"/d/quiet", 0o100644, 0).unwrap();
        // Another thread, while this one is muted: reported.
        std::thread::scope(|s| {
            s.spawn(|| vfs.root_task().mknodat(uvfs::DirFd::Cwd, b"/d/loud", 0o100644, 0).unwrap());
        });
    }
    assert_eq!(names(&ino), [b"loud".to_vec(), b"/d/loud".to_vec()]);
    assert_eq!(names(&other).len(), 4, "the other instance hears both");
    t.unlink(b"/d/quiet").unwrap();
    assert_eq!(names(&ino), [b"quiet".to_vec(), b"/d/quiet".to_vec()], "muting ends with the guard");
}

/// Seed 000: with nobody watching, and with a watch on an unrelated directory, write,
/// open and close take no notify lock, and the notify check allocates nothing.
#[test]
fn unwatched_io_takes_no_notify_lock() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    t.mkdir(b"/watched", 0o755).unwrap();
    t.mkdir(b"/work", 0o755).unwrap();
    let fd = t.open(b"/work/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
    t.pwrite(fd, b"x", 0).unwrap();
    let run = || {
        let before = uvfs::counters().notify_locks;
        for _ in 0..100 {
            t.pwrite(fd, b"x", 0).unwrap();
            let f2 = t.open(b"/work/f", OpenFlags::RDONLY, 0).unwrap();
            t.close(f2).unwrap();
        }
        uvfs::counters().notify_locks - before
    };
    assert_eq!(run(), 0, "no watcher anywhere");
    let ino = t.inotify_init1(InotifyFlags::NONBLOCK).unwrap();
    t.inotify_add_watch(&ino, b"/watched", EventMask::ALL_EVENTS).unwrap();
    assert_eq!(run(), 0, "one watcher on an unrelated directory");
    assert_eq!(ino.read_events(10, None), Err(Errno::EAGAIN));
    // The general path (switch off) sends every write to the dispatcher, which reads the
    // mount's and the filesystem's marks without a lock (Linux walks them under SRCU):
    // none where nothing is marked; a write that a mark hears is queued under its group's
    // lock, which the counter counts.
    let vfs = Vfs::new(VfsConfig { fast_paths: FastPaths::all() - FastPaths::NOTIFY, ..Default::default() });
    let t = vfs.root_task();
    let fd = t.open(b"/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
    let before = uvfs::counters().notify_locks;
    t.pwrite(fd, b"x", 0).unwrap();
    assert_eq!(uvfs::counters().notify_locks - before, 0, "no mark anywhere");
    let ino = t.inotify_init1(InotifyFlags::NONBLOCK).unwrap();
    t.fanotify_mark(&ino, uvfs::MarkKind::Filesystem, b"/", EventMask::MODIFY).unwrap();
    let before = uvfs::counters().notify_locks;
    t.pwrite(fd, b"x", 0).unwrap();
    assert!(uvfs::counters().notify_locks > before, "a heard write is queued under the group's lock");
    assert_eq!(ino.read_events(10, None).unwrap().len(), 1);
    let _ = Fd(0);
}

/// An event a directory's watch hears takes one notify lock: its group's, to queue it.
/// The marks are read under the event's guard, not copied under a lock of their own.
#[test]
fn a_heard_event_takes_only_its_groups_lock() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    t.mkdir(b"/d", 0o755).unwrap();
    let ino = t.inotify_init1(InotifyFlags::NONBLOCK).unwrap();
    t.inotify_add_watch(&ino, b"/d", EventMask::CREATE).unwrap();
    let before = uvfs::counters().notify_locks;
    for i in 0..20 {
        t.mknodat(uvfs::DirFd::Cwd, format!("/d/f{i}").as_bytes(), 0o100644, 0).unwrap();
    }
    assert_eq!(uvfs::counters().notify_locks - before, 20);
    assert_eq!(ino.read_events(100, None).unwrap().len(), 20);
}

/// A FUSE server's filesystem-wide mark, muted on the threads that make the kernel's
/// changes (`uvfs-fuse`'s invalidation watch): each of those changes reaches the mark and
/// is dropped there, without a lock (the marks are read under the walk's guard, not copied
/// under their list's lock).
#[test]
fn a_muted_filesystem_mark_costs_no_lock() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    t.mkdir(b"/d", 0o755).unwrap();
    let ino = t.inotify_init1(InotifyFlags::NONBLOCK).unwrap();
    let all = EventMask::CREATE | EventMask::DELETE | EventMask::MODIFY | EventMask::ATTRIB | EventMask::MOVE;
    t.fanotify_mark(&ino, uvfs::MarkKind::Filesystem, b"/", all).unwrap();
    t.fanotify_mark(&ino, uvfs::MarkKind::Mount, b"/", all).unwrap();
    {
        let _mute = ino.mute_this_thread();
        let before = uvfs::counters().notify_locks;
        for i in 0..50 {
            let name = format!("/d/f{i}");
            let fd = t.open(name.as_bytes(), OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
            t.pwrite(fd, b"x", 0).unwrap();
            t.fchmod(fd, 0o600).unwrap();
            t.close(fd).unwrap();
            t.rename(name.as_bytes(), format!("/d/g{i}").as_bytes()).unwrap();
            t.unlink(format!("/d/g{i}").as_bytes()).unwrap();
        }
        assert_eq!(uvfs::counters().notify_locks - before, 0);
    }
    assert_eq!(ino.read_events(10, None), Err(Errno::EAGAIN), "muted: nothing queued");
    // Unmuted, the same changes are heard, through both marks.
    let fd = t.open(b"/d/loud", OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
    t.close(fd).unwrap();
    assert_eq!(ino.read_events(10, None).unwrap().len(), 2);
}

/// `fsnotify_sb_delete`: unmounting a filesystem sends IN_UNMOUNT, then IN_IGNORED, to the
/// watches on its inodes; watches elsewhere are untouched.
#[test]
fn unmount_sends_unmount_then_ignored() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    t.mkdir(b"/mnt", 0o755).unwrap();
    t.mkdir(b"/other", 0o755).unwrap();
    t.mount(uvfs::MountSource::MemFs(uvfs::fs::memfs::MemFsLimits::default()), b"/mnt", uvfs::MountFlags::empty())
        .unwrap();
    t.mkdir(b"/mnt/d", 0o755).unwrap();
    let ino = t.inotify_init1(InotifyFlags::NONBLOCK).unwrap();
    let wd_in = t.inotify_add_watch(&ino, b"/mnt/d", EventMask::ALL_EVENTS).unwrap();
    let wd_out = t.inotify_add_watch(&ino, b"/other", EventMask::ALL_EVENTS).unwrap();
    t.umount(b"/mnt").unwrap();
    let ev: Vec<(i32, EventMask)> = ino.read_events(10, None).unwrap().into_iter().map(|e| (e.wd, e.mask)).collect();
    assert_eq!(ev, vec![(wd_in, EventMask::UNMOUNT), (wd_in, EventMask::IGNORED)]);
    assert_eq!(t.inotify_rm_watch(&ino, wd_in), Err(Errno::EINVAL));
    t.inotify_rm_watch(&ino, wd_out).unwrap();
}

/// A filesystem mark's events name their object (device, inode number) besides its path,
/// and the mark also hears an object's link count change that no path names: a file with
/// a second name, renamed over by another file (`fsnotify_move`: the names, then the
/// victim's `fsnotify_link_count`).
#[test]
fn a_filesystem_mark_names_the_object_and_hears_its_link_count() {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    t.close(t.open(b"/a", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap()).unwrap();
    t.close(t.open(b"/b", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap()).unwrap();
    t.link(b"/b", b"/b2").unwrap();
    let (a, b) = (t.stat(b"/a").unwrap(), t.stat(b"/b").unwrap());
    let ino = t.inotify_init1(InotifyFlags::NONBLOCK).unwrap();
    t.fanotify_mark(&ino, uvfs::MarkKind::Filesystem, b"/", EventMask::ATTRIB | EventMask::MOVE).unwrap();
    t.rename(b"/a", b"/b").unwrap();
    let ev = ino.read_events(10, None).unwrap();
    let seen: Vec<_> = ev.iter().map(|e| (e.mask, e.path.as_deref(), e.object)).collect();
    assert_eq!(
        seen,
        [
            (EventMask::MOVED_FROM, Some(&b"/a"[..]), Some((a.dev, a.ino))),
            (EventMask::MOVED_TO, Some(&b"/b"[..]), Some((a.dev, a.ino))),
            (EventMask::ATTRIB, None, Some((b.dev, b.ino))),
        ],
        "{ev:?}"
    );
}
