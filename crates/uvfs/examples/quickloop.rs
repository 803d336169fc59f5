//! A quick loop for a first figure: ns per cached stat of a 6-component path and per
//! failed open, in-process, one thread. `cargo run --release -p uvfs --example quickloop`.
//! The real measurements are `uvfs bench`.

use std::time::Instant;
use uvfs::{AtFlags, DirFd, OpenFlags, Vfs, VfsConfig};

fn main() {
    let vfs = Vfs::new(VfsConfig::default());
    let t = vfs.root_task();
    for p in ["/a", "/a/b", "/a/b/c", "/a/b/c/d", "/a/b/c/d/e"] {
        t.mkdir(p.as_bytes(), 0o755).unwrap();
    }
    let fd = t.open(b"/a/b/c/d/e/f", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap();
    t.close(fd).unwrap();
    let n = 2_000_000;
    let s = Instant::now();
    for _ in 0..n {
        std::hint::black_box(t.fstatat(DirFd::Cwd, b"/a/b/c/d/e/f", AtFlags::empty()).unwrap());
    }
    println!("stat of a 6-component path: {:.1} ns", s.elapsed().as_nanos() as f64 / n as f64);
    let s = Instant::now();
    for _ in 0..n {
        std::hint::black_box(t.openat(DirFd::Cwd, b"/a/b/c/d/e/missing", OpenFlags::RDONLY, 0).unwrap_err());
    }
    println!("failed open (ENOENT):       {:.1} ns", s.elapsed().as_nanos() as f64 / n as f64);
}
