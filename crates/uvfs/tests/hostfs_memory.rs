//! The bounded caches at full size (issue 8's memory test): a cold walk of 1M host files
//! with limits of 100k dentries keeps dentries, hostfs inodes and heap bytes within the
//! limits, and after the churn memory goes back to its base (heap bytes, inodes, host
//! descriptors). Its own test binary: the heap is measured by a counting allocator, which
//! no other test may disturb.

use std::alloc::{GlobalAlloc, Layout, System};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicIsize, Ordering};

use uvfs::hostfs::HostFs;
use uvfs::{Errno, Vfs, VfsConfig};

/// Counts live heap bytes.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let n = LIVE.fetch_add(l.size() as isize, Ordering::Relaxed) + l.size() as isize;
        PEAK.fetch_max(n, Ordering::Relaxed);
        // SAFETY: the caller's layout contract is passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: `p` came from `alloc` with this layout.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let n = LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed) + new as isize - l.size() as isize;
        PEAK.fetch_max(n, Ordering::Relaxed);
        // SAFETY: as `dealloc` and `alloc`.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const DIRS: usize = 1000;
const FILES: usize = 1000;
const LIMIT: usize = 100_000;
const NEG_LIMIT: usize = 10_000;

struct Tree(PathBuf);

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// 1000 directories x 1000 empty files, made with `mknodat` on directory descriptors
/// (one call per file), two threads.
fn make_tree() -> Tree {
    let root = std::env::temp_dir().join(format!("uvfs-hostfs-1m-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir(&root).unwrap();
    let tree = Tree(root.clone());
    std::thread::scope(|s| {
        for half in 0..2 {
            let root = &root;
            s.spawn(move || {
                for d in (half..DIRS).step_by(2) {
                    let p = root.join(format!("d{d}"));
                    std::fs::create_dir(&p).unwrap();
                    let dfd: OwnedFd =
                        rustix::fs::open(&p, rustix::fs::OFlags::DIRECTORY, rustix::fs::Mode::empty()).unwrap();
                    for f in 0..FILES {
                        rustix::fs::mknodat(
                            &dfd,
                            format!("f{f}").as_str(),
                            rustix::fs::FileType::RegularFile,
                            rustix::fs::Mode::from_raw_mode(0o644),
                            0,
                        )
                        .unwrap();
                    }
                }
            });
        }
    });
    tree
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn a_million_files_within_limits_of_100k() {
    let tree = make_tree();
    let fds_before = open_fds();
    let base = LIVE.load(Ordering::Relaxed);
    let fs = HostFs::new(&tree.0).unwrap();
    let live = fs.live_inodes();
    let config = VfsConfig { dentry_limit: LIMIT, negative_dentry_limit: NEG_LIMIT, ..VfsConfig::default() };
    let vfs = Vfs::with_root(config, Box::new(fs)).unwrap();
    let t = vfs.root_task();
    // Dentries in use by the walk itself (the directory being scanned and its parent)
    // may exceed a limit by that much; freed inodes wait for the collector's batch.
    let slack = 4;
    let (mut max_pos, mut max_neg, mut max_inodes, mut max_bytes) = (0, 0, 0, 0);
    for d in 0..DIRS {
        for f in 0..FILES {
            t.stat(format!("/d{d}/f{f}").as_bytes()).unwrap();
            if f % 10 == 0 {
                assert_eq!(t.stat(format!("/d{d}/missing{f}").as_bytes()), Err(Errno::ENOENT));
            }
        }
        let (pos, neg) = vfs.dcache_counts();
        max_pos = max_pos.max(pos);
        max_neg = max_neg.max(neg);
        max_inodes = max_inodes.max(live.load(Ordering::Relaxed));
        max_bytes = max_bytes.max(LIVE.load(Ordering::Relaxed) - base);
    }
    let peak = PEAK.load(Ordering::Relaxed) - base;
    eprintln!(
        "1M files, limits {LIMIT}/{NEG_LIMIT}: peaks {max_pos} positive, {max_neg} negative dentries, \
         {max_inodes} inodes, {max_bytes} heap bytes at directory ends, {peak} overall"
    );
    assert!(max_pos <= LIMIT + slack, "positive dentries peaked at {max_pos}");
    assert!(max_neg <= NEG_LIMIT + slack, "negative dentries peaked at {max_neg}");
    // The limits were reached (the bound did something).
    assert!(max_pos >= LIMIT - FILES && max_neg >= NEG_LIMIT - FILES / 10, "peaks {max_pos}, {max_neg}");
    // Inodes: one per positive dentry plus the root, and a collector batch per thread.
    assert!(max_inodes <= LIMIT + slack + 1 + 1024, "inodes peaked at {max_inodes}");
    // Heap: bounded by the limits, not by the million files: at most 2 KiB per cached
    // name (dentry, inode, hostfs data, map slot, LRU entry, name bytes).
    assert!(peak <= ((LIMIT + NEG_LIMIT) * 2048) as isize, "heap peaked at {peak} bytes");
    // Everything still answers right after eviction.
    assert!(t.stat(b"/d0/f0").is_ok());
    assert_eq!(t.stat(b"/d0/nope"), Err(Errno::ENOENT));
    drop(t);
    drop(vfs);
    // Back to the base: no inode, no descriptor, and the heap within a page or two of
    // where it started (thread-local collector state).
    assert_eq!(live.load(Ordering::Relaxed), 0, "inodes left after the instance");
    assert!(open_fds() <= fds_before, "descriptors left: {} -> {}", fds_before, open_fds());
    let left = LIVE.load(Ordering::Relaxed) - base;
    assert!(left <= 16 << 10, "{left} heap bytes left after the instance");
}
