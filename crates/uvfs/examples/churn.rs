//! Creates and unlinks, for instruction counts: `churn N [names|create|unlink]` makes the
//! paths of N empty files spread over 100 directories, then (`create`, the default) creates
//! them (create + close), then (`unlink`) removes them. Under `valgrind --tool=callgrind`,
//! (N, unlink) minus (N, create) is the cost of N unlinks, and (N, create) minus (N, names)
//! that of N creates (the program exits without tearing the tree down, which would count
//! as the creates'). Times are `uvfs bench --case scale`'s job.

use uvfs::{OpenFlags, Vfs, VfsConfig};

/// mimalloc, the allocator of the `uvfs` binary and so of `uvfs bench --case scale`.
#[global_allocator]
static GLOBAL: uvfs_alloc::Mimalloc = uvfs_alloc::Mimalloc;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(100_000, |a| a.parse().expect("a number"));
    let mode = args.next().unwrap_or_else(|| "create".into());
    let (create, unlink) = match mode.as_str() {
        "names" => (false, false),
        "create" => (true, false),
        "unlink" => (true, true),
        m => panic!("{m}: names, create or unlink"),
    };
    let vfs = Vfs::new(VfsConfig::default());
    let t = vfs.root_task();
    for d in 0..100 {
        t.mkdir(format!("/d{d}").as_bytes(), 0o755).unwrap();
    }
    let names: Vec<Vec<u8>> = (0..n).map(|i| format!("/d{}/file{i}", i % 100).into_bytes()).collect();
    if create {
        for p in &names {
            t.close(t.open(p, OpenFlags::CREAT | OpenFlags::EXCL | OpenFlags::WRONLY, 0o644).unwrap()).unwrap();
        }
    }
    if unlink {
        for p in &names {
            t.unlink(p).unwrap();
        }
    }
    // Exits without tearing the tree down: a teardown of what the creates left would be
    // counted as theirs (and not as the unlinks', which leave nothing).
    std::mem::forget(names);
    std::mem::forget(t);
    std::mem::forget(vfs);
}
