//! Cached stats of a deep path, for instruction counts: `cargo build --release -p uvfs
//! --example deepstat`, then `valgrind --tool=callgrind target/release/examples/deepstat
//! 64 100000` and the same with depth 0; the difference over 64 x 100000 is the cost of
//! one component. Times are `uvfs bench --case scale`'s job.

use uvfs::{AtFlags, DirFd, OpenFlags, Vfs, VfsConfig};

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().expect("a number"));
    let depth = args.next().unwrap_or(64);
    let n = args.next().unwrap_or(100_000);
    let vfs = Vfs::new(VfsConfig::default());
    let t = vfs.root_task();
    t.mkdir(b"/base", 0o755).unwrap();
    let mut dir = b"/base".to_vec();
    let mut rel = Vec::new();
    for _ in 0..depth {
        dir.extend_from_slice(b"/d");
        rel.extend_from_slice(b"d/");
        t.mkdir(&dir, 0o755).unwrap();
    }
    dir.extend_from_slice(b"/f");
    rel.push(b'f');
    t.close(t.open(&dir, OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap()).unwrap();
    let base = t.open(b"/base", OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
    for _ in 0..n {
        std::hint::black_box(t.fstatat(DirFd::Fd(base), &rel, AtFlags::empty()).unwrap());
    }
}
