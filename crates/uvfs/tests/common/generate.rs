//! What the differential suites generate: the starting tree, call sequences over a few
//! names, and the proptest settings. Shared by `differential.rs` (uvfs in-process
//! against the host kernel) and `uvfs-fuse`'s `differential_mount.rs` (the same
//! sequences through a FUSE mount of uvfs against the host kernel).

use proptest::prelude::*;

use super::{D, GROUP, OTHER, Op, P, SUPP, T, Times, USER, W, p};

use libc::{
    AT_EACCESS, AT_EMPTY_PATH, AT_REMOVEDIR, AT_SYMLINK_FOLLOW, AT_SYMLINK_NOFOLLOW, O_APPEND, O_CREAT, O_DIRECTORY,
    O_EXCL, O_NOFOLLOW, O_PATH, O_RDONLY, O_RDWR, O_TRUNC, O_WRONLY, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFREG,
    S_IFSOCK,
};

pub const RENAME_NOREPLACE: u32 = 1;
pub const RENAME_EXCHANGE: u32 = 2;
pub const RENAME_WHITEOUT: u32 = 4;

/// The host must follow the `fs.protected_*` settings uvfs models: hard links protected
/// (uvfs follows `protected_hardlinks=1`), symlinks, fifos and regular files not.
pub fn check_host_sysctls() {
    for (name, want) in [
        ("protected_hardlinks", "1"),
        ("protected_symlinks", "0"),
        ("protected_fifos", "0"),
        ("protected_regular", "0"),
    ] {
        let v = std::fs::read_to_string(format!("/proc/sys/fs/{name}")).unwrap_or_default();
        assert_eq!(v.trim(), want, "the differential tests need fs.{name}={want} on the host (uvfs models that)");
    }
    // SAFETY: getuid has no preconditions.
    assert_eq!(unsafe { libc::getuid() }, 0, "the differential tests run as root (chroot, setresuid)");
}

// ---------------------------------------------------------------- the starting tree

pub fn creat(path: &str, mode: u32, bytes: usize, owner: (u32, u32)) -> Vec<Op> {
    vec![
        Op::Open(D::Cwd, p(path), O_CREAT | O_WRONLY, mode),
        Op::Write(0, bytes),
        Op::Close(0),
        Op::Fchownat(D::Cwd, p(path), Some(owner.0), Some(owner.1), 0),
        // chown clears setuid/setgid; set the mode last.
        Op::Fchmodat(D::Cwd, p(path), mode, 0),
    ]
}

pub fn mkdir(path: &str, mode: u32, owner: (u32, u32)) -> Vec<Op> {
    vec![
        Op::Mkdirat(D::Cwd, p(path), mode),
        Op::Fchownat(D::Cwd, p(path), Some(owner.0), Some(owner.1), 0),
        Op::Fchmodat(D::Cwd, p(path), mode, 0),
    ]
}

pub fn symlink(target: &str, path: &str, owner: (u32, u32)) -> Vec<Op> {
    vec![
        Op::Symlinkat(p(target), D::Cwd, p(path)),
        Op::Fchownat(D::Cwd, p(path), Some(owner.0), Some(owner.1), AT_SYMLINK_NOFOLLOW),
    ]
}

/// A small tree over the generated names with mixed owners and modes, so permission
/// errors (EACCES, EPERM, sticky directories, setuid/setgid rules) arise. Made by root
/// with umask 0.
pub fn base_tree() -> Vec<Op> {
    let root = (0, 0);
    let user = (USER, GROUP);
    let other = (OTHER, OTHER);
    [
        vec![Op::Umask(0)],
        mkdir("a", 0o755, root),
        creat("a/b", 0o644, 5, root),
        mkdir("a/c", 0o777, user),
        creat("a/c/a", 0o2775, 3, (USER, SUPP)),
        mkdir("a/c/b", 0o2775, (USER, SUPP)),
        symlink("../b", "a/l1", user),
        creat("b", 0o664, 4, (USER, SUPP)),
        mkdir("c", 0o1777, other),
        creat("c/a", 0o666, 2, other),
        mkdir("c/b", 0o755, user),
        mkdir("c/b/c", 0o700, other),
        creat("c/c", 0o4755, 1, (OTHER, GROUP)),
        symlink("/a", "c/l2", other),
        symlink("a", "l1", root),
        symlink("l1/c", "l2", root),
        old_times(),
        vec![Op::Umask(0o022)],
    ]
    .concat()
}

/// Every object of [`base_tree`] given access and modification times in 2001, so that
/// the first access of each moves its access time on both sides, whenever the clock
/// ticks (see `Moved`).
fn old_times() -> Vec<Op> {
    let old = Times::Pair(T::At(1_000_000_000, 5), T::At(1_000_000_000, 5));
    [".", "a", "a/b", "a/c", "a/c/a", "a/c/b", "a/l1", "b", "c", "c/a", "c/b", "c/b/c", "c/c", "c/l2", "l1", "l2"]
        .iter()
        .map(|path| Op::Utimensat(D::Cwd, p(path), old, AT_SYMLINK_NOFOLLOW))
        .collect()
}

// ---------------------------------------------------------------- strategies

pub fn long_path(n: usize) -> P {
    // "././.../a" (or "./..././/a"): exactly n bytes naming "a".
    let mut s = "./".repeat((n - 1) / 2);
    if n.is_multiple_of(2) {
        s.push('/');
    }
    s.push('a');
    assert_eq!(s.len(), n);
    p(&s)
}

pub fn path() -> BoxedStrategy<P> {
    let comp = prop_oneof![4 => Just("a"), 3 => Just("b"), 3 => Just("c"), 2 => Just("l1"), 2 => Just("l2"), 1 => Just("."), 1 => Just("..")];
    let normal = (prop::bool::weighted(0.2), prop::collection::vec(comp, 1..=3), prop::bool::weighted(0.12)).prop_map(
        |(abs, cs, slash)| {
            let mut s = if abs { "/".to_string() } else { String::new() };
            s += &cs.join("/");
            if slash {
                s.push('/');
            }
            p(&s)
        },
    );
    prop_oneof![
        40 => normal,
        1 => Just(p("")),
        1 => Just(p("/")),
        1 => Just(p("//a//c/")),
        1 => Just(P(vec![b'x'; 256])),
        1 => Just(P(vec![b'x'; 255])),
        1 => Just(long_path(4095)),
        1 => Just(long_path(4096)),
    ]
    .boxed()
}

pub fn fd() -> BoxedStrategy<i32> {
    prop_oneof![20 => 0..6i32, 1 => Just(-1), 1 => Just(100)].boxed()
}

pub fn dirfd() -> BoxedStrategy<D> {
    prop_oneof![4 => Just(D::Cwd), 1 => (0..5i32).prop_map(D::Fd), 1 => Just(D::Fd(-1))].boxed()
}

pub fn mode() -> BoxedStrategy<u32> {
    prop::sample::select(vec![0, 0o644, 0o755, 0o700, 0o4755, 0o1777, 0o2775, 0o6777, 0o444, 0o070, 0o777]).boxed()
}

pub fn open_flags() -> BoxedStrategy<i32> {
    let acc = prop::sample::select(vec![O_RDONLY, O_RDONLY, O_WRONLY, O_RDWR, 3]);
    let bits = prop::collection::vec(
        prop::sample::select(vec![
            O_CREAT,
            O_CREAT,
            O_EXCL,
            O_TRUNC,
            O_APPEND,
            O_NOFOLLOW,
            O_DIRECTORY,
            O_PATH,
            libc::O_TMPFILE,
        ]),
        0..3,
    );
    (acc, bits).prop_map(|(a, b)| b.into_iter().fold(a, |x, y| x | y)).boxed()
}

/// `openat2`'s flags: `openat`'s, and now and then a bit no flag has (EINVAL there,
/// ignored by `openat`) or `O_CLOEXEC` (the one flag `O_PATH` may add).
pub fn open2_flags() -> BoxedStrategy<i32> {
    (open_flags(), prop::sample::select(vec![0, 0, 0, 0, 0o4, libc::O_CLOEXEC]))
        .prop_map(|(f, extra)| f | extra)
        .boxed()
}

/// `openat2`'s mode, which must be 0 unless the call creates: mostly 0, else a mode, or
/// a bit beyond `07777`.
pub fn open2_mode() -> BoxedStrategy<u32> {
    prop_oneof![3 => Just(0u32), 3 => mode(), 1 => Just(0o10644)].boxed()
}

/// `RESOLVE_*`: none, each one the generated tree can tell apart (no mount point or
/// magic link is in it, so `NO_XDEV` and `NO_MAGICLINKS` refuse nothing), pairs,
/// `BENEATH` with `IN_ROOT` (EINVAL), an unknown bit. Never `RESOLVE_CACHED`, whose
/// EAGAIN depends on what each side has cached.
pub fn resolve() -> BoxedStrategy<u64> {
    prop::sample::select(vec![0u64, 0x8, 0x8, 0x10, 0x10, 0x4, 0x1, 0x2, 0xc, 0x14, 0x9, 0x11, 0x18, 0x40]).boxed()
}

pub fn id() -> BoxedStrategy<Option<u32>> {
    prop::sample::select(vec![None, None, Some(0), Some(USER), Some(SUPP), Some(OTHER)]).boxed()
}

pub fn at_flags(choices: Vec<i32>) -> BoxedStrategy<i32> {
    prop::sample::select(choices).boxed()
}

pub fn time() -> BoxedStrategy<T> {
    prop_oneof![Just(T::Now), Just(T::Omit), Just(T::At(1_000_000_000, 5)), Just(T::At(0, 1_000_000_000))].boxed()
}

pub fn len() -> BoxedStrategy<usize> {
    prop::sample::select(vec![0, 1, 3, 7, 100, 4097, 70_001]).boxed()
}

pub fn off() -> BoxedStrategy<i64> {
    prop::sample::select(vec![-1, 0, 2, 4096, 10_000, i64::MAX - 1, i64::MAX]).boxed()
}

/// Buffer lengths of a vectored call: none, empty ones, a few small ones.
pub fn iov_lens() -> BoxedStrategy<Vec<usize>> {
    prop::collection::vec(prop::sample::select(vec![0usize, 1, 3, 10, 100]), 0..4).boxed()
}

/// `RWF_*` flags worth trying: none mostly, each known one (0x100 is `RWF_NOSIGNAL`), a
/// combination the kernel refuses, an unknown bit.
pub fn rwf() -> BoxedStrategy<u32> {
    prop::sample::select(vec![0u32, 0, 0, 0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x30, 0x100, 0x1000]).boxed()
}

/// An `fcntl` descriptor or status-flag command with an argument worth trying.
pub fn fcntl_cmd() -> BoxedStrategy<(i32, i64)> {
    let setfl = vec![
        0,
        libc::O_APPEND,
        libc::O_NONBLOCK,
        libc::O_NOATIME,
        libc::O_APPEND | libc::O_RDWR | libc::O_TRUNC | libc::O_CREAT,
        libc::O_DIRECT,
    ];
    prop_oneof![
        (
            prop::sample::select(vec![libc::F_DUPFD, libc::F_DUPFD_CLOEXEC]),
            prop::sample::select(vec![0i64, 3, 10, -1, 1 << 30])
        ),
        (Just(libc::F_GETFD), Just(0i64)),
        (Just(libc::F_SETFD), prop::sample::select(vec![0i64, 1, 3])),
        (Just(libc::F_GETFL), Just(0i64)),
        (Just(libc::F_SETFL), prop::sample::select(setfl).prop_map(i64::from)),
    ]
    .boxed()
}

pub fn op() -> BoxedStrategy<Op> {
    let nofollow_empty =
        || at_flags(vec![0, 0, AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH, AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH, 0x1]);
    prop_oneof![
        12 => (dirfd(), path(), open_flags(), mode()).prop_map(|(d, p, f, m)| Op::Open(d, p, f, m)),
        4 => (dirfd(), path(), open2_flags(), open2_mode(), resolve())
            .prop_map(|(d, p, f, m, r)| Op::Openat2(d, p, f, m, r)),
        3 => fd().prop_map(Op::Close),
        1 => fd().prop_map(Op::Dup),
        1 => (fd(), fd()).prop_map(|(a, b)| Op::Dup2(a, b)),
        2 => (fd(), len()).prop_map(|(f, n)| Op::Read(f, n)),
        3 => (fd(), len()).prop_map(|(f, n)| Op::Write(f, n)),
        1 => (fd(), len(), off()).prop_map(|(f, n, o)| Op::Pread(f, n, o)),
        1 => (fd(), len(), off()).prop_map(|(f, n, o)| Op::Pwrite(f, n, o)),
        3 => (fd(), prop::sample::select(vec![-10i64, -1, 0, 1, 7, 4096, 5000, i64::MAX]), prop::sample::select(vec![W::Set, W::Cur, W::End, W::Data, W::Hole]))
            .prop_map(|(f, o, w)| Op::Lseek(f, o, w)),
        2 => fd().prop_map(Op::Fstat),
        4 => (dirfd(), path(), nofollow_empty()).prop_map(|(d, p, f)| Op::Fstatat(d, p, f)),
        // which times each call moves: often, so that most calls are looked at before and
        // after.
        10 => (dirfd(), path(), nofollow_empty()).prop_map(|(d, p, f)| Op::Since(d, p, f)),
        3 => (dirfd(), path(), 0..8i32, at_flags(vec![0, 0, AT_EACCESS, AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH, 0x1]))
            .prop_map(|(d, p, m, f)| Op::Faccessat(d, p, m, f)),
        4 => (dirfd(), path(), mode()).prop_map(|(d, p, m)| Op::Mkdirat(d, p, m)),
        2 => (dirfd(), path(), prop::sample::select(vec![0, S_IFREG, S_IFIFO, S_IFSOCK, S_IFCHR, S_IFDIR, S_IFLNK, 0o170000]), mode())
            .prop_map(|(d, p, t, m)| Op::Mknodat(d, p, t | m, if t == S_IFCHR { libc::makedev(1, 3) } else { 0 })),
        4 => (dirfd(), path(), at_flags(vec![0, AT_REMOVEDIR, 0x1])).prop_map(|(d, p, f)| Op::Unlinkat(d, p, f)),
        5 => (dirfd(), path(), dirfd(), path(), prop::sample::select(vec![0, 0, RENAME_NOREPLACE, RENAME_EXCHANGE, RENAME_NOREPLACE | RENAME_EXCHANGE, 8, RENAME_WHITEOUT, RENAME_WHITEOUT | RENAME_NOREPLACE, RENAME_WHITEOUT | RENAME_EXCHANGE]))
            .prop_map(|(d1, p1, d2, p2, f)| Op::Renameat2(d1, p1, d2, p2, f)),
        3 => (dirfd(), path(), dirfd(), path(), at_flags(vec![0, 0, AT_SYMLINK_FOLLOW, AT_EMPTY_PATH, 0x1]))
            .prop_map(|(d1, p1, d2, p2, f)| Op::Linkat(d1, p1, d2, p2, f)),
        3 => (path(), dirfd(), path()).prop_map(|(t, d, p)| Op::Symlinkat(t, d, p)),
        2 => (dirfd(), path(), prop::sample::select(vec![1usize, 4, 256])).prop_map(|(d, p, n)| Op::Readlinkat(d, p, n)),
        3 => (dirfd(), path(), mode(), nofollow_empty()).prop_map(|(d, p, m, f)| Op::Fchmodat(d, p, m, f)),
        1 => (fd(), mode()).prop_map(|(f, m)| Op::Fchmod(f, m)),
        3 => (dirfd(), path(), id(), id(), nofollow_empty()).prop_map(|(d, p, u, g, f)| Op::Fchownat(d, p, u, g, f)),
        2 => (dirfd(), path(), prop_oneof![Just(Times::Null), (time(), time()).prop_map(|(a, m)| Times::Pair(a, m))], nofollow_empty())
            .prop_map(|(d, p, t, f)| Op::Utimensat(d, p, t, f)),
        2 => (path(), prop::sample::select(vec![-1i64, 0, 3, 5000, 1 << 40])).prop_map(|(p, l)| Op::Truncate(p, l)),
        1 => (fd(), prop::sample::select(vec![-1i64, 0, 3, 5000])).prop_map(|(f, l)| Op::Ftruncate(f, l)),
        2 => fd().prop_map(Op::Getdents),
        1 => fd().prop_map(Op::Fsync),
        2 => path().prop_map(Op::Chdir),
        1 => fd().prop_map(Op::Fchdir),
        1 => Just(Op::Getcwd),
        // locks (issue 13): one task, never a waiting request (the two-task sequences are
        // in differential_locks.rs).
        1 => (fd(), prop::sample::select(vec![1u32 | 4, 2 | 4, 8, 0, 3])).prop_map(|(f, o)| Op::Flock(f, o)),
        // vectored I/O (issue 13): readv/writev are the -1 offset without flags.
        2 => (fd(), iov_lens(), prop::sample::select(vec![-1i64, -1, 0, 3, -2]), rwf())
            .prop_map(|(f, l, o, fl)| Op::Preadv2(f, l, o, fl)),
        3 => (fd(), iov_lens(), prop::sample::select(vec![-1i64, -1, 0, 3, -2]), rwf())
            .prop_map(|(f, l, o, fl)| Op::Pwritev2(f, l, o, fl)),
        // fcntl's descriptor and status-flag commands (issue 13).
        2 => (fd(), fcntl_cmd()).prop_map(|(f, (c, a))| Op::FcntlFd(f, c, a)),
        2 => (fd(), prop::sample::select(vec![5, 6, 36, 37]), lock_range()).prop_map(|(f, c, l)| Op::Fcntl(f, c, l)),
        // space, copies and statx (issue 13).
        3 => (fd(), falloc_mode(), space_off(), space_len()).prop_map(|(f, m, o, l)| Op::Fallocate(f, m, o, l)),
        3 => (fd(), copy_off(), fd(), copy_off(), copy_len(), prop::sample::select(vec![0u32, 0, 0, 1]))
            .prop_map(|(a, oa, b, ob, l, fl)| Op::CopyFileRange(a, oa, b, ob, l, fl)),
        2 => (fd(), fd(), copy_off(), copy_len()).prop_map(|(o, i, off, l)| Op::Sendfile(o, i, off, l)),
        3 => (dirfd(), path(), at_flags(vec![0, 0, AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH, 0x2000, 0x4000, 0x6000, 0x1]), statx_mask())
            .prop_map(|(d, p, f, m)| Op::Statx(d, p, f, m)),
        // file flags (issue 13): lsattr and chattr, and then every call above on what
        // they flagged.
        1 => fd().prop_map(Op::GetFlags),
        3 => (fd(), fs_flags()).prop_map(|(f, v)| Op::SetFlags(f, v)),
    ]
    .boxed()
}

/// A `fallocate` mode: tmpfs's (allocate, keep size, punch a hole), the ones it refuses,
/// invalid combinations and an unknown bit.
pub fn falloc_mode() -> BoxedStrategy<i32> {
    prop::sample::select(vec![0, 0, 1, 1, 3, 3, 2, 0x10, 0x11, 0x8, 0x20, 0x40, 0x80, 0x4, 0x13, 0x100]).boxed()
}

/// Offsets around page boundaries, and invalid ones.
pub fn space_off() -> BoxedStrategy<i64> {
    prop::sample::select(vec![0i64, 0, 100, 4096, 5000, 8192, -1, i64::MAX - 10]).boxed()
}

/// Lengths around page boundaries, and invalid ones.
pub fn space_len() -> BoxedStrategy<i64> {
    prop::sample::select(vec![1i64, 100, 4096, 4096, 8000, 12288, 0, -1]).boxed()
}

/// A copy's offset: the file position (`None`), page-aligned ones (memfs shares pages
/// there), unaligned and invalid ones.
pub fn copy_off() -> BoxedStrategy<Option<i64>> {
    prop::sample::select(vec![None, None, Some(0), Some(0), Some(4096), Some(100), Some(-1), Some(i64::MAX - 1)])
        .boxed()
}

pub fn copy_len() -> BoxedStrategy<usize> {
    prop::sample::select(vec![0usize, 1, 100, 4096, 8192, 10_000, usize::MAX]).boxed()
}

/// A `statx` mask: nothing, the basic stats, single fields, birth time, the mount ids,
/// everything, the reserved bit.
pub fn statx_mask() -> BoxedStrategy<u32> {
    prop::sample::select(vec![
        0u32,
        0x7ff,
        0x7ff,
        0x1,
        0x40,
        0x800,
        0xfff,
        0x1000,
        0x4000,
        0x2000,
        0x7fff_ffff,
        0x8000_0000,
    ])
    .boxed()
}

/// `FS_*_FL` values for `SETFLAGS`: none, immutable, append-only, both, the harmless
/// ones tmpfs keeps, and ones it refuses (secure deletion, casefold, with immutable).
pub fn fs_flags() -> BoxedStrategy<u32> {
    prop::sample::select(vec![0u32, 0, 0x10, 0x10, 0x20, 0x20, 0x30, 0x40, 0x80, 0xc0, 0x1, 0x11, 0x4000_0000]).boxed()
}

/// A `struct flock` for the generated `fcntl` lock calls.
pub fn lock_range() -> BoxedStrategy<super::Fl> {
    let ty = prop::sample::select(vec![0i16, 1, 2, 7]);
    let whence = prop::sample::select(vec![0i16, 0, 1, 2, 5]);
    let start = prop::sample::select(vec![0i64, 0, 4, 100, -2]);
    let len = prop::sample::select(vec![0i64, 1, 10, -1, i64::MAX]);
    (ty, whence, start, len).prop_map(|(ty, whence, start, len)| super::Fl { ty, whence, start, len, pid: 0 }).boxed()
}

pub fn umask() -> BoxedStrategy<u32> {
    prop::sample::select(vec![0o022, 0o002, 0, 0o077]).boxed()
}

pub fn config(cases: u32) -> ProptestConfig {
    // No regression files: the interesting cases found so far are the hand-written ones
    // below.
    // PROPTEST_CASES overrides the count for a longer hunt.
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(cases);
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}
