//! Cached stats of a deep path, for instruction counts: `cargo build --release -p uvfs
//! --example deepstat`, then `valgrind --tool=callgrind target/release/examples/deepstat
//! 64 100000` and the same with depth 0; the difference over 64 x 100000 is the cost of
//! one component. A third argument `group` makes the directories 0750 and stats as a
//! member of their group (uid 1000, gid 0), whose every step the mode bits decide: the
//! walks the path cache does not serve. `missing` stats a name that does not exist there
//! (ENOENT, never cached). `nocache` switches the path cache off. Times are
//! `uvfs bench --case scale`'s job.

use uvfs::{AtFlags, Credentials, DirFd, FastPaths, Gid, OpenFlags, Uid, Vfs, VfsConfig};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: usize| args.get(i).map_or(d, |a| a.parse::<usize>().expect("a number"));
    let (depth, n) = (num(0, 64), num(1, 100_000));
    let group = args.iter().any(|a| a == "group");
    let mut fast = FastPaths::all();
    if args.iter().any(|a| a == "nocache") {
        fast.remove(FastPaths::PATH_CACHE);
    }
    let vfs = Vfs::new(VfsConfig { fast_paths: fast, ..VfsConfig::default() });
    let root = vfs.root_task();
    let mode = if group { 0o750 } else { 0o755 };
    root.mkdir(b"/base", mode).unwrap();
    let t = if group { root.with_credentials(Credentials::new(Uid(1000), Gid(0), &[])) } else { root.fork() };
    let t = &t;
    let mut dir = b"/base".to_vec();
    let mut rel = Vec::new();
    for _ in 0..depth {
        dir.extend_from_slice(b"/d");
        rel.extend_from_slice(b"d/");
        root.mkdir(&dir, mode).unwrap();
    }
    dir.extend_from_slice(b"/f");
    rel.push(b'f');
    root.close(root.open(&dir, OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap()).unwrap();
    let base = t.open(b"/base", OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
    if args.iter().any(|a| a == "missing") {
        rel.extend_from_slice(b"-missing");
        for _ in 0..n {
            std::hint::black_box(t.fstatat(DirFd::Fd(base), &rel, AtFlags::empty()).unwrap_err());
        }
        return;
    }
    for _ in 0..n {
        std::hint::black_box(t.fstatat(DirFd::Fd(base), &rel, AtFlags::empty()).unwrap());
    }
}
