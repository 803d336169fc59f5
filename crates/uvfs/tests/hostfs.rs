//! hostfs: passthrough to a host directory, the inode cache and its fast path, and the
//! escape-proof property.

mod scratch;

use std::os::unix::fs::{MetadataExt, symlink};

use uvfs::fs::hostfs::HostFs;
use uvfs::{AtFlags, DirFd, Errno, FastPaths, OpenFlags, Vfs, VfsConfig};

/// A fresh host directory under /dev/shm (a tmpfs), removed on drop.
pub fn tmp(tag: &str) -> tempfile::TempDir {
    // 0755, as a directory made by mkdir: unprivileged tasks walk through it.
    tempfile::Builder::new()
        .prefix(&format!("uvfs-hostfs-{tag}-"))
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .tempdir_in(scratch::scratch_in("/dev/shm"))
        .unwrap()
}

fn vfs_over(dir: &tempfile::TempDir, fast: FastPaths) -> Vfs {
    Vfs::with_root(VfsConfig { fast_paths: fast, ..VfsConfig::default() }, Box::new(HostFs::new(dir.path()).unwrap()))
        .unwrap()
}

#[test]
fn passthrough_basics() {
    let _serial = serial();
    let dir = tmp("basics");
    std::fs::create_dir(dir.path().join("a")).unwrap();
    std::fs::write(dir.path().join("a/f"), b"host data").unwrap();
    symlink("a/f", dir.path().join("l")).unwrap();
    let vfs = vfs_over(&dir, FastPaths::all());
    let t = vfs.root_task();
    // Host files are seen, with the host's attributes.
    let st = t.stat(b"/a/f").unwrap();
    let hm = std::fs::metadata(dir.path().join("a/f")).unwrap();
    assert_eq!((st.ino, st.size, st.mode, st.nlink as u64), (hm.ino(), hm.size(), hm.mode(), hm.nlink()));
    // Symlinks are followed by uvfs's walk.
    assert_eq!(t.stat(b"/l").unwrap().ino, hm.ino());
    let mut lb = [0u8; 16];
    let n = t.readlink(b"/l", &mut lb).unwrap();
    assert_eq!(&lb[..n], b"a/f");
    let fd = t.open(b"/l", OpenFlags::RDONLY, 0).unwrap();
    let mut buf = [0u8; 64];
    let n = t.read(fd, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"host data");
    t.close(fd).unwrap();
    // Misses ask the host once and leave a negative dentry.
    assert_eq!(t.stat(b"/a/nope"), Err(Errno::ENOENT));
    assert_eq!(t.stat(b"/a/nope"), Err(Errno::ENOENT));
    // Changes through uvfs land on the host.
    t.mkdir(b"/d", 0o750).unwrap();
    let fd = t.open(b"/d/new", OpenFlags::CREAT | OpenFlags::WRONLY, 0o640).unwrap();
    t.write(fd, b"from uvfs").unwrap();
    t.close(fd).unwrap();
    assert_eq!(std::fs::read(dir.path().join("d/new")).unwrap(), b"from uvfs");
    assert_eq!(std::fs::metadata(dir.path().join("d/new")).unwrap().mode() & 0o7777, 0o640);
    t.rename(b"/d/new", b"/a/moved").unwrap();
    assert!(dir.path().join("a/moved").exists() && !dir.path().join("d/new").exists());
    t.unlink(b"/a/moved").unwrap();
    assert!(!dir.path().join("a/moved").exists());
    t.rmdir(b"/d").unwrap();
    assert!(!dir.path().join("d").exists());
    let _ = (AtFlags::empty(), DirFd::Cwd);
}

/// The process's descriptor count is shared by the tests of this file, which run in
/// parallel threads, and one of them holds hundreds of host descriptors open: the tests
/// take turns, so the count `no_descriptor_leak` compares is its own.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Dropping the instance closes every host descriptor (no inode -> superblock -> cache
/// cycle).
#[test]
fn no_descriptor_leak() {
    let _serial = serial();
    let dir = tmp("leak");
    std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
    std::fs::write(dir.path().join("a/b/f"), b"x").unwrap();
    let before = open_fds();
    for _ in 0..20 {
        let vfs = vfs_over(&dir, FastPaths::all());
        let t = vfs.root_task();
        t.stat(b"/a/b/f").unwrap();
        t.mkdir(b"/a/c", 0o755).unwrap();
        t.rmdir(b"/a/c").unwrap();
    }
    assert!(open_fds() <= before + 2, "{} descriptors before, {} after", before, open_fds());
}

/// Seed 004, hash half: on a cold scan every inode-cache probe misses; the lockless probe
/// takes the cache lock once per new inode (the insert), the locked probe twice.
#[test]
fn inode_hash_probe_takes_no_lock() {
    let _serial = serial();
    const N: u64 = 200;
    let dir = tmp("icache");
    std::fs::create_dir(dir.path().join("d")).unwrap();
    for i in 0..N {
        std::fs::write(dir.path().join(format!("d/f{i}")), b"").unwrap();
    }
    let scan = |fast: FastPaths| {
        let vfs = vfs_over(&dir, fast);
        let t = vfs.root_task();
        t.stat(b"/d").unwrap();
        let before = uvfs::counters().locks;
        for i in 0..N {
            t.stat(format!("/d/f{i}").as_bytes()).unwrap();
        }
        uvfs::counters().locks - before
    };
    let with = scan(FastPaths::all());
    let without = scan(FastPaths::all() - FastPaths::INODE_HASH);
    assert_eq!(without - with, N, "locks with the lockless probe {with}, without {without}");
    // Warm: the second stat of each file is answered by the dcache, no lock at all.
    let vfs = vfs_over(&dir, FastPaths::all());
    let t = vfs.root_task();
    t.stat(b"/d/f0").unwrap();
    let before = uvfs::counters().locks;
    t.stat(b"/d/f0").unwrap();
    assert_eq!(uvfs::counters().locks - before, 0);
}

/// A listing read to its end keeps its host directory stream for the call that continues
/// there: the VFS's last, empty batch and a new description seeked to the end offset
/// (FUSE's call that completes the kernel's cached listing) open nothing on the host.
/// A removed directory's stream is closed with it.
#[test]
fn a_listing_continues_from_its_end() {
    let _serial = serial();
    let dir = tmp("streams");
    for i in 0..10 {
        std::fs::write(dir.path().join(format!("f{i}")), b"").unwrap();
    }
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let vfs = vfs_over(&dir, FastPaths::all());
    let t = vfs.root_task();
    let opened = || uvfs::counters().host_dir_streams_opened;
    let names = |v: Vec<uvfs::DirEntry>| v.into_iter().map(|e| e.name).collect::<Vec<_>>();

    let fd = t.open(b"/", OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
    let before = opened();
    let all = t.getdents(fd, 1000).unwrap();
    assert_eq!(all.len(), 13, "{:?}", names(all));
    let end = all.last().unwrap().next;
    assert!(t.getdents(fd, 1000).unwrap().is_empty());
    let again = t.open(b"/", OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
    t.lseek(again, end as i64, uvfs::Whence::Set).unwrap();
    assert!(t.getdents(again, 1000).unwrap().is_empty());
    assert_eq!(opened() - before, 1, "one stream for the listing and both calls at its end");

    // A name added after the end: continuing there lists nothing more, as the host's own
    // stream does (tmpfs's last cookie is its end-of-directory mark); a listing from the
    // start opens a stream of its own and has it.
    t.mknodat(DirFd::Cwd, b"/late", 0o100644, 0).unwrap();
    assert!(t.getdents(fd, 1000).unwrap().is_empty());
    t.lseek(again, 0, uvfs::Whence::Set).unwrap();
    let fresh = names(t.getdents(again, 1000).unwrap());
    assert!(fresh.len() == 14 && fresh.contains(&b"late".to_vec()), "{fresh:?}");
    assert_eq!(opened() - before, 2);
    // Read in batches that stop short of the end, a listing opens a stream per batch and
    // gives every name once.
    t.lseek(again, 0, uvfs::Whence::Set).unwrap();
    let mut batched = Vec::new();
    loop {
        let b = t.getdents(again, 4).unwrap();
        if b.is_empty() {
            break;
        }
        batched.extend(names(b));
    }
    batched.sort();
    batched.dedup();
    assert_eq!(batched.len(), 14);
    t.close(fd).unwrap();
    t.close(again).unwrap();

    // The kept stream of a removed directory is closed at the rmdir: a directory listed to
    // its end holds one host descriptor more than one only opened, and no more once both
    // are removed (the descriptor the cache holds for either goes when its inode does).
    // (By the link's text: a removed directory's reads "<path> (deleted)".)
    let held = |name: &str| {
        let path = dir.path().join(name).to_string_lossy().into_owned();
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
            .filter(|l| l.to_string_lossy().starts_with(&path))
            .count()
    };
    for d in ["/listed", "/opened"] {
        t.mkdir(d.as_bytes(), 0o755).unwrap();
        let fd = t.open(d.as_bytes(), OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
        if d == "/listed" {
            assert_eq!(t.getdents(fd, 1000).unwrap().len(), 2);
        }
        t.close(fd).unwrap();
    }
    assert_eq!(held("listed"), held("opened") + 1);
    t.rmdir(b"/listed").unwrap();
    t.rmdir(b"/opened").unwrap();
    assert_eq!(held("listed"), held("opened"));
}

/// Where nothing changes the host behind uvfs's back (`HostChanges::Never`), a listing
/// read whole is kept and served again without the host (`hostfs/listing.rs`): the same
/// entries and cookies as the host's, whole or in batches; every change of the directory
/// through uvfs drops it, and the next listing is the host's again.
#[test]
fn a_listing_is_kept_where_the_host_does_not_change() {
    use uvfs::fs::hostfs::{HostChanges, HostFsOptions};
    let dir = tmp("kept");
    for i in 0..10 {
        std::fs::write(dir.path().join(format!("f{i}")), b"").unwrap();
    }
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/x"), b"").unwrap();
    let opts = HostFsOptions { changes: HostChanges::Never, ..HostFsOptions::default() };
    let vfs = Vfs::with_root(VfsConfig::default(), Box::new(HostFs::with_options(dir.path(), opts).unwrap())).unwrap();
    let t = vfs.root_task();
    // The host's own listing, through a hostfs that keeps none.
    let plain = vfs_over(&dir, FastPaths::all());
    let pt = plain.root_task();
    let opened = || uvfs::counters().host_dir_streams_opened;
    type Ent = (u64, u64, u8, Vec<u8>);
    let list = |t: &uvfs::Task, path: &[u8], batch: usize| -> Vec<Ent> {
        let fd = t.open(path, OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
        let mut all = Vec::new();
        loop {
            let b = t.getdents(fd, batch).unwrap();
            if b.is_empty() {
                break;
            }
            all.extend(b.into_iter().map(|e| (e.ino, e.next, e.dtype, e.name)));
        }
        t.close(fd).unwrap();
        all
    };
    let names = |v: &[Ent]| {
        let mut n: Vec<Vec<u8>> = v.iter().map(|e| e.3.clone()).collect();
        n.sort();
        n
    };
    let host_names = |rel: &str| {
        let mut n: Vec<Vec<u8>> = std::fs::read_dir(dir.path().join(rel))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_encoded_bytes())
            .chain([b".".to_vec(), b"..".to_vec()])
            .collect();
        n.sort();
        n
    };

    let before = opened();
    let first = list(&t, b"/", 1000);
    assert_eq!(opened() - before, 1);
    assert_eq!(names(&first), host_names(""));
    // Again, whole and in batches of 3 (each batch goes on from the last cookie): the
    // same entries and cookies, and no host stream.
    let before = opened();
    assert_eq!(list(&t, b"/", 1000), first);
    assert_eq!(list(&t, b"/", 3), first);
    assert_eq!(opened() - before, 0, "a kept listing went to the host");
    // What the host itself lists, in the same order with the same cookies.
    assert_eq!(list(&pt, b"/", 1000), first);

    // Each change through uvfs drops the listing of the directories it changes: the next
    // listing is read from the host (one stream) and shows the change, the one after is
    // kept again.
    type Change<'a> = (&'a str, Box<dyn Fn() + 'a>);
    let changes: Vec<Change> = vec![
        ("mknod", Box::new(|| t.mknodat(DirFd::Cwd, b"/late", 0o100644, 0).unwrap())),
        ("unlink", Box::new(|| t.unlink(b"/f0").unwrap())),
        ("rename out", Box::new(|| t.rename(b"/f1", b"/sub/f1").unwrap())),
        ("rename in", Box::new(|| t.rename(b"/sub/x", b"/x").unwrap())),
        ("rename over", Box::new(|| t.rename(b"/f2", b"/f3").unwrap())),
        ("mkdir", Box::new(|| t.mkdir(b"/d", 0o755).unwrap())),
        ("symlink", Box::new(|| t.symlink(b"f4", b"/sub/l").unwrap())),
        ("link", Box::new(|| t.link(b"/f5", b"/sub/h").unwrap())),
        ("rmdir", Box::new(|| t.rmdir(b"/d").unwrap())),
    ];
    for (what, change) in changes {
        list(&t, b"/sub", 1000);
        change();
        for (path, rel) in [(&b"/"[..], ""), (&b"/sub"[..], "sub")] {
            let before = opened();
            let now = list(&t, path, 1000);
            assert_eq!(list(&t, path, 2), now, "after {what}: {rel} in batches");
            assert!(opened() - before <= 1, "after {what}: {rel}: more than one host stream");
            assert_eq!(names(&now), host_names(rel), "after {what}: {rel}");
            assert_eq!(list(&pt, path, 1000), now, "after {what}: {rel}, the host's listing");
        }
    }
    // A removed directory, its listing kept before: ENOENT, as Linux's `getdents64` of a
    // removed directory (glibc's `readdir` takes it as the end).
    t.mkdir(b"/gone", 0o755).unwrap();
    let fd = t.open(b"/gone", OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
    assert_eq!(t.getdents(fd, 100).unwrap().len(), 2);
    t.rmdir(b"/gone").unwrap();
    t.lseek(fd, 0, uvfs::Whence::Set).unwrap();
    assert_eq!(t.getdents(fd, 100).unwrap_err(), Errno::ENOENT);
    t.close(fd).unwrap();

    // Bounded: an instance whose listings may hold fewer entries than the directory has
    // keeps none of it, and every listing is the host's.
    let opts = HostFsOptions { changes: HostChanges::Never, listing_limit: 5, ..HostFsOptions::default() };
    let small =
        Vfs::with_root(VfsConfig::default(), Box::new(HostFs::with_options(dir.path(), opts).unwrap())).unwrap();
    let st = small.root_task();
    let before = opened();
    let whole = list(&st, b"/", 1000);
    assert!(whole.len() > 5);
    assert_eq!(list(&st, b"/", 1000), whole);
    assert_eq!(opened() - before, 2);
    // While a directory of 5 entries (its 3 names, "." and "..") fits.
    let before = opened();
    assert_eq!(list(&st, b"/sub", 1000).len(), 5);
    assert_eq!(list(&st, b"/sub", 1000).len(), 5);
    assert_eq!(opened() - before, 1);
}

/// A listing read from the host while uvfs changes the directory is not kept: each round
/// lists a big directory in one thread while another creates or removes a name in it
/// during that listing's host read, and the listing after both is the host's (a listing
/// read before the change and kept after it would miss the new name or show the removed
/// one; `hostfs/listing.rs`'s generation).
#[test]
fn a_listing_read_during_a_change_is_not_kept() {
    use uvfs::fs::hostfs::{HostChanges, HostFsOptions};
    let dir = tmp("keptrace");
    std::fs::create_dir(dir.path().join("d")).unwrap();
    // Big enough that its host read takes far longer than a create or an unlink.
    for i in 0..20_000 {
        std::fs::write(dir.path().join(format!("d/f{i}")), b"").unwrap();
    }
    let opts = HostFsOptions { changes: HostChanges::Never, ..HostFsOptions::default() };
    let vfs = Vfs::with_root(VfsConfig::default(), Box::new(HostFs::with_options(dir.path(), opts).unwrap())).unwrap();
    let names = |t: &uvfs::Task| {
        let fd = t.open(b"/d", OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
        let mut n: Vec<Vec<u8>> = Vec::new();
        loop {
            let b = t.getdents(fd, 1000).unwrap();
            if b.is_empty() {
                break;
            }
            n.extend(b.into_iter().map(|e| e.name));
        }
        t.close(fd).unwrap();
        n.sort();
        n
    };
    let host = || {
        let mut n: Vec<Vec<u8>> = std::fs::read_dir(dir.path().join("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_encoded_bytes())
            .chain([b".".to_vec(), b"..".to_vec()])
            .collect();
        n.sort();
        n
    };
    for i in 0..40 {
        let reading = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                let t = vfs.root_task();
                reading.wait();
                names(&t)
            });
            let t = vfs.root_task();
            reading.wait();
            let p = format!("/d/n{}", i / 2);
            if i % 2 == 0 {
                t.mknodat(DirFd::Cwd, p.as_bytes(), 0o100644, 0).unwrap();
            } else {
                t.unlink(p.as_bytes()).unwrap();
            }
        });
        assert_eq!(names(&vfs.root_task()), host(), "round {i}");
    }
}

/// Two names of one host file (a hard link) are one inode in uvfs, found through the
/// inode cache by (device, inode number).
#[test]
fn hard_links_share_an_inode() {
    let _serial = serial();
    let dir = tmp("links");
    std::fs::write(dir.path().join("a"), b"1").unwrap();
    std::fs::hard_link(dir.path().join("a"), dir.path().join("b")).unwrap();
    let vfs = vfs_over(&dir, FastPaths::all());
    let t = vfs.root_task();
    let fd = t.open(b"/a", OpenFlags::WRONLY, 0).unwrap();
    t.write(fd, b"22").unwrap();
    t.close(fd).unwrap();
    // The write's new size is seen through the other name without asking the host.
    assert_eq!(t.stat(b"/b").unwrap().size, 2);
    assert_eq!(t.stat(b"/a").unwrap().ino, t.stat(b"/b").unwrap().ino);
}

/// A host-side race that keeps swapping a directory with a symlink to `/` while uvfs
/// walks through it never yields a file outside the given directory: the host never
/// follows the symlink (every call is relative to a directory descriptor, with
/// `O_NOFOLLOW`), and uvfs follows it in its own namespace, where `/` is the hostfs root.
#[test]
fn host_rename_race_cannot_escape() {
    let _serial = serial();
    let dir = tmp("escape");
    std::fs::create_dir_all(dir.path().join("a/inside")).unwrap();
    symlink("/", dir.path().join("s")).unwrap();
    let inside = std::fs::metadata(dir.path().join("a/inside")).unwrap().ino();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, a, s) = (stop.clone(), dir.path().join("a"), dir.path().join("s"));
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                rustix::fs::renameat_with(rustix::fs::CWD, &a, rustix::fs::CWD, &s, rustix::fs::RenameFlags::EXCHANGE)
                    .unwrap();
                swaps += 1;
            }
            swaps
        })
    };
    // Names that exist in the host's `/` but not in the given directory.
    let outside: [&[u8]; 4] = [b"/a/etc", b"/a/proc/self", b"/s/etc", b"/a/inside/../../etc"];
    let mut seen_inside = 0;
    for _ in 0..300 {
        // A fresh instance each time: cold caches, so each walk asks the host.
        let vfs = vfs_over(&dir, FastPaths::all());
        let t = vfs.root_task();
        for p in outside {
            match t.stat(p) {
                Err(Errno::ENOENT | Errno::ESTALE | Errno::ENOTDIR) => {}
                r => panic!("{}: {r:?}", String::from_utf8_lossy(p)),
            }
        }
        for p in [&b"/a/inside"[..], b"/s/inside"] {
            match t.stat(p) {
                Ok(st) => {
                    assert_eq!(st.ino, inside, "{}", String::from_utf8_lossy(p));
                    seen_inside += 1;
                }
                Err(Errno::ENOENT | Errno::ESTALE | Errno::ENOTDIR) => {}
                Err(e) => panic!("{}: {e:?}", String::from_utf8_lossy(p)),
            }
        }
        // Listing the swapped name shows the directory's entries, or (through the
        // symlink, followed by uvfs) those of the given directory itself.
        if let Ok(fd) = t.open(b"/a", OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0) {
            let names: Vec<Vec<u8>> = t.getdents(fd, 1000).unwrap().into_iter().map(|e| e.name).collect();
            let ok: [&[u8]; 5] = [b".", b"..", b"inside", b"a", b"s"];
            assert!(names.iter().all(|n| ok.contains(&&n[..])), "{names:?}");
            t.close(fd).unwrap();
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(swapper.join().unwrap() > 0);
    assert!(seen_inside > 0);
}

// The bounded caches at full size (1M files, limits of 100k) are tests/hostfs_memory.rs.

/// Eviction while other threads walk: with tiny limits, every walk still answers right
/// (an eviction overlapping a walk makes it walk again, as a rename does).
#[test]
fn eviction_races_walks() {
    let _serial = serial();
    let dir = tmp("evict-race");
    for d in 0..8 {
        let p = dir.path().join(format!("d{d}/e"));
        std::fs::create_dir_all(&p).unwrap();
        for f in 0..50 {
            std::fs::File::create(p.join(format!("f{f}"))).unwrap();
        }
    }
    let config = VfsConfig { dentry_limit: 16, negative_dentry_limit: 4, ..VfsConfig::default() };
    let vfs = Vfs::with_root(config, Box::new(HostFs::new(dir.path()).unwrap())).unwrap();
    std::thread::scope(|s| {
        for k in 0..3usize {
            let vfs = vfs.clone();
            s.spawn(move || {
                let t = vfs.root_task();
                for i in 0..3000usize {
                    let (d, f) = ((i * 7 + k) % 8, (i * 13 + k * 5) % 50);
                    let p = format!("/d{d}/e/f{f}");
                    assert!(t.stat(p.as_bytes()).is_ok(), "{p}");
                    let q = format!("/d{d}/e/../e/nope{f}");
                    assert_eq!(t.stat(q.as_bytes()), Err(Errno::ENOENT), "{q}");
                }
            });
        }
    });
    // Under contention a pass may be skipped (its locks are only tried); the next walk
    // alone brings the caches back within their limits, give or take what evicted
    // dentries wait for: the collector frees them (and the counts drop) batch by batch,
    // 64 retirements per thread, and a retired file still holds its parent directory,
    // which may have been evicted once the file left its map (so, at most, every one of
    // the tree's 16 directories besides).
    let t = vfs.root_task();
    assert_eq!(t.stat(b"/d0/e/last"), Err(Errno::ENOENT));
    let (pos, neg) = vfs.dcache_counts();
    assert!(pos <= 16 + 4 * 64 + 16 && neg <= 4 + 4 * 64, "{pos} {neg}");
}

/// The locked tier a cold lookup falls back to still finds cached names without their
/// directory's lock (Linux's ref-walk `lookup_fast`): a cold file two cached directories
/// deep takes two directory locks fewer than with the lockless walk switched off, where
/// every step locks.
#[test]
fn cold_lookup_locks_only_the_missing_step() {
    let _serial = serial();
    const N: u64 = 100;
    let dir = tmp("fastlocked");
    std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
    for i in 0..N {
        std::fs::write(dir.path().join(format!("a/b/f{i}")), b"").unwrap();
    }
    let scan = |fast: FastPaths| {
        let vfs = vfs_over(&dir, fast);
        let t = vfs.root_task();
        t.stat(b"/a/b").unwrap();
        let before = uvfs::counters();
        for i in 0..N {
            t.stat(format!("/a/b/f{i}").as_bytes()).unwrap();
        }
        let after = uvfs::counters();
        assert_eq!(after.walk_locked - before.walk_locked, N, "every cold stat reaches the locked tier");
        after.locks - before.locks
    };
    let with = scan(FastPaths::all());
    let without = scan(FastPaths::all() - FastPaths::LOCKLESS_WALK);
    assert_eq!(without - with, 2 * N, "locks with cached steps lockless {with}, all steps locked {without}");
}

/// An inode limit below the dentry limit is what bounds the cache: a cold walk of many
/// host files keeps the live inodes (and so the positive dentries holding them) within it,
/// and a cache over its limits only because its entries are in use (open files) does not
/// make every walk rescan it.
#[test]
fn inode_limit_bounds_the_cache() {
    let _serial = serial();
    const FILES: usize = 3000;
    const INODES: usize = 500;
    let dir = tmp("inolimit");
    std::fs::create_dir(dir.path().join("d")).unwrap();
    for f in 0..FILES {
        std::fs::File::create(dir.path().join(format!("d/f{f}"))).unwrap();
    }
    let config = VfsConfig { dentry_limit: 100_000, inode_limit: INODES, ..VfsConfig::default() };
    let vfs = Vfs::with_root(config, Box::new(HostFs::new(dir.path()).unwrap())).unwrap();
    let t = vfs.root_task();
    let mut peak = 0;
    for f in 0..FILES {
        t.stat(format!("/d/f{f}").as_bytes()).unwrap();
        peak = peak.max(vfs.cached_inodes());
    }
    // Freed inodes wait for the collector's batch (64 retirements per thread).
    assert!(peak <= INODES + 64 + 4, "inodes peaked at {peak}");
    assert!(peak >= INODES - INODES / 16, "the limit was never reached: {peak}");
    assert!(vfs.dcache_counts().0 <= INODES + 64 + 4);
    // Now pin more than the limit with open files: the cache cannot get under it, and
    // walks do not pay a scan each (the pass is retried only after growth).
    let fds: Vec<_> =
        (0..INODES + 100).map(|f| t.open(format!("/d/f{f}").as_bytes(), OpenFlags::RDONLY, 0).unwrap()).collect();
    let before = uvfs::counters().dcache_scanned;
    for f in 0..50 {
        assert_eq!(t.stat(format!("/d/missing{f}").as_bytes()), Err(Errno::ENOENT));
    }
    let scanned = uvfs::counters().dcache_scanned - before;
    // One pass over the queue at most (it holds about INODES + 100 entries), not one per walk.
    assert!(scanned < 2 * (INODES as u64 + 100) + 200, "eviction looked at {scanned} entries for 50 walks");
    for fd in fds {
        t.close(fd).unwrap();
    }
}

/// A change after a `stat` shows on a host directory too, however soon, in both change
/// modes: hostfs applies the host's own (fine-grained) times after a call, and uvfs's
/// stamp of the same change, from the coarse clock, must not take the time back below
/// them (pjdfstest's `open_trunc` and `ftruncate::update_ctime_success` caught it).
#[test]
fn a_change_after_a_stat_shows_on_a_host_directory() {
    let _serial = serial();
    for changes in [uvfs::fs::hostfs::HostChanges::Never, uvfs::fs::hostfs::HostFsOptions::default().changes] {
        let dir = tmp("stamps");
        let opts = uvfs::fs::hostfs::HostFsOptions { changes, ..Default::default() };
        let vfs =
            Vfs::with_root(VfsConfig::default(), Box::new(HostFs::with_options(dir.path(), opts).unwrap())).unwrap();
        let t = vfs.root_task();
        let fd = t.open(b"/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
        let mut last = t.fstat(fd).unwrap();
        for i in 0..300 {
            t.ftruncate(fd, i % 7).unwrap();
            let s = t.fstat(fd).unwrap();
            assert!(s.ctime > last.ctime && s.mtime > last.mtime, "truncate {i}: {last:?} then {s:?}");
            t.pwrite(fd, b"x", 3).unwrap();
            let s2 = t.fstat(fd).unwrap();
            assert!(s2.ctime > s.ctime && s2.mtime > s.mtime, "write {i}: {s:?} then {s2:?}");
            t.fchmod(fd, if i % 2 == 0 { 0o600 } else { 0o644 }).unwrap();
            let s3 = t.fstat(fd).unwrap();
            assert!(s3.ctime > s2.ctime, "chmod {i}: {s2:?} then {s3:?}");
            last = s3;
        }
        t.close(fd).unwrap();
    }
}

/// A write or a new name after a `stat` shows in the next `stat` however soon it comes, on
/// a host directory on tmpfs and on ext4, as it does on the host itself (both have
/// multigrain times since Linux 6.13: a change after a `stat` of the host's own is stamped
/// with its fine clock). uvfs answers the `stat`s itself, so the host never saw one, and
/// hostfs does not read back the times of an attribute change (the VFS stamped it): a
/// write after a `touch` and a `stat` got the host's coarse time, below the `touch`'s, and
/// showed no change, until hostfs showed the host a `stat` before each change that follows
/// one. (A removal is left out: tmpfs stamps the directory with the removed file's new
/// change time, which no `stat` saw, so even on the host a removal after a `stat` of the
/// directory may not show.)
#[test]
fn a_write_or_a_name_after_a_stat_shows_on_a_host_directory() {
    let _serial = serial();
    let ns = |m: &std::fs::Metadata| m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128;
    for base in ["/dev/shm", "/var/tmp"] {
        // The host's own guarantee, which this test is about keeping.
        let host = tempfile::tempdir_in(scratch::scratch_in(base)).unwrap();
        let f = std::fs::File::create(host.path().join("f")).unwrap();
        let (mut file, mut dir) = (ns(&f.metadata().unwrap()), ns(&std::fs::metadata(host.path()).unwrap()));
        for i in 0..200u64 {
            std::os::unix::fs::FileExt::write_at(&f, b"x", i).unwrap();
            let now = ns(&f.metadata().unwrap());
            assert!(now > file, "{base}: the host's own times are not multigrain (Linux 6.13+)");
            std::fs::File::create(host.path().join(format!("n{i}"))).unwrap();
            let d = ns(&std::fs::metadata(host.path()).unwrap());
            assert!(d > dir, "{base}: the host's own directory times are not multigrain (Linux 6.13+)");
            (file, dir) = (now, d);
        }
        for changes in [uvfs::fs::hostfs::HostChanges::Never, uvfs::fs::hostfs::HostFsOptions::default().changes] {
            let host = tempfile::tempdir_in(scratch::scratch_in(base)).unwrap();
            let opts = uvfs::fs::hostfs::HostFsOptions { changes, ..Default::default() };
            let vfs = Vfs::with_root(VfsConfig::default(), Box::new(HostFs::with_options(host.path(), opts).unwrap()))
                .unwrap();
            let t = vfs.root_task();
            t.mkdir(b"/d", 0o755).unwrap();
            let fd = t.open(b"/d/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
            let (mut last, mut dir) = (t.fstat(fd).unwrap(), t.stat(b"/d").unwrap());
            let at = |what: &str, i: u64| format!("{base} {changes:?}, {what} {i}");
            for i in 0..500u64 {
                t.pwrite(fd, b"x", i as i64).unwrap();
                let s = t.fstat(fd).unwrap();
                assert!(s.mtime > last.mtime && s.ctime > last.ctime, "{}: {last:?} then {s:?}", at("write", i));
                t.fchmod(fd, if i % 2 == 0 { 0o600 } else { 0o644 }).unwrap();
                let s2 = t.fstat(fd).unwrap();
                assert!(s2.ctime > s.ctime, "{}: {s:?} then {s2:?}", at("chmod", i));
                t.mknodat(DirFd::Cwd, format!("/d/n{i}").as_bytes(), 0o644, 0).unwrap();
                let d = t.stat(b"/d").unwrap();
                assert!(d.mtime > dir.mtime && d.ctime > dir.ctime, "{}: {dir:?} then {d:?}", at("create", i));
                t.utimensat(DirFd::Cwd, b"/d/f", None, AtFlags::empty()).unwrap();
                let s3 = t.fstat(fd).unwrap();
                assert!(s3.ctime > s2.ctime, "{}: {s2:?} then {s3:?}", at("touch", i));
                (last, dir) = (s3, d);
            }
            t.close(fd).unwrap();
        }
    }
}
