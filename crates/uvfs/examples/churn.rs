//! Creates and unlinks, for instruction counts: `churn N unlink` makes N empty files
//! (create + close) spread over 100 directories, then, with `unlink`, removes them. Under
//! `valgrind --tool=callgrind`, (N, unlink) minus (N, none) is the cost of N unlinks, and
//! (N, none) minus (0, none) that of N creates. Times are `uvfs bench --case scale`'s job.

use uvfs::{OpenFlags, Vfs, VfsConfig};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(100_000, |a| a.parse().expect("a number"));
    let unlink = args.next().as_deref() == Some("unlink");
    let vfs = Vfs::new(VfsConfig::default());
    let t = vfs.root_task();
    for d in 0..100 {
        t.mkdir(format!("/d{d}").as_bytes(), 0o755).unwrap();
    }
    let names: Vec<Vec<u8>> = (0..n).map(|i| format!("/d{}/file{i}", i % 100).into_bytes()).collect();
    for p in &names {
        t.close(t.open(p, OpenFlags::CREAT | OpenFlags::EXCL | OpenFlags::WRONLY, 0o644).unwrap()).unwrap();
    }
    if unlink {
        for p in &names {
            t.unlink(p).unwrap();
        }
    }
}
