//! Stats of random names in one huge directory, for cache-miss counts: `bigdir N M stat`
//! makes N empty files in `/big`, picks M of them at random, stats them, and exits
//! without tearing the tree down; without `stat` it does all but the stats. Under
//! `valgrind --tool=cachegrind --cache-sim=yes`, the difference of the two runs, over M,
//! is what one stat misses in the simulated caches (`D1mr`, `DLmr`: first- and last-level
//! data read misses). `bigdir N M stat dirs=D` spreads the N files over D directories of
//! `/big` instead (a tree of small directories, whose tables are cold when a stat comes
//! to them). Times are `uvfs bench --case scale`'s job.

use uvfs::{AtFlags, DirFd, OpenFlags, Vfs, VfsConfig};

/// mimalloc, the allocator of the `uvfs` binary: where an object lands relative to the
/// cache lines is the allocator's doing, so the counts are those of that allocator.
#[global_allocator]
static GLOBAL: uvfs_alloc::Mimalloc = uvfs_alloc::Mimalloc;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: usize| args.get(i).map_or(d, |a| a.parse::<usize>().expect("a number"));
    let (n, m) = (num(0, 1_000_000), num(1, 100_000));
    let stat = args.iter().any(|a| a == "stat");
    let dirs: usize = args.iter().find_map(|a| a.strip_prefix("dirs=")).map_or(0, |d| d.parse().expect("a number"));
    let vfs = Vfs::new(VfsConfig::default());
    let t = vfs.root_task();
    t.mkdir(b"/big", 0o755).unwrap();
    for d in 0..dirs {
        t.mkdir(format!("/big/d{d}").as_bytes(), 0o755).unwrap();
    }
    let name = |i: usize| {
        if dirs == 0 { format!("/big/file{i:07}") } else { format!("/big/d{}/file{i:07}", i % dirs) }.into_bytes()
    };
    for i in 0..n {
        t.close(t.open(&name(i), OpenFlags::CREAT | OpenFlags::EXCL | OpenFlags::WRONLY, 0o644).unwrap()).unwrap();
    }
    // The names to stat, made before the loop (xorshift: a fixed sample, no crate needed).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let picks: Vec<Vec<u8>> = (0..m)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            name(x as usize % n)
        })
        .collect();
    if stat {
        for p in &picks {
            std::hint::black_box(t.fstatat(DirFd::Cwd, p, AtFlags::empty()).unwrap());
        }
    }
    // No teardown: freeing a million files would swamp the difference.
    std::mem::forget(picks);
    std::mem::forget(t);
    std::mem::forget(vfs);
}
