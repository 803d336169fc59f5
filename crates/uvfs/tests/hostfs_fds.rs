//! hostfs keeps a bounded number of host descriptors (`HostFsOptions::descriptor_limit`):
//! a tree of ten times the limit is created, written, read, listed, renamed and removed
//! with the process's descriptors within the limit throughout; closed descriptors are
//! reopened by name, checked to be the same inode and never through a host symlink; a
//! file open in uvfs keeps its data when its name goes (its descriptor is pinned), and
//! only while it is open. Its own test binary: the descriptor counts are process-wide, and
//! the tests take turns (`SERIAL`).

mod scratch;

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use uvfs::fs::hostfs::{HostChanges, HostFs, HostFsOptions};
use uvfs::{AtFlags, DirFd, Errno, OpenFlags, Vfs, VfsConfig};

/// The descriptor limit the tests set.
const LIMIT: usize = 64;

/// Descriptors besides the cache's that may be open at a sample: the root's, and the
/// one a test holds open.
const SLACK: usize = 4;

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A fresh host directory under /dev/shm (a tmpfs), removed on drop.
fn tmp(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("uvfs-hostfds-{tag}-"))
        .tempdir_in(scratch::scratch_in("/dev/shm"))
        .unwrap()
}

fn hostfs(dir: &Path, limit: usize, changes: HostChanges) -> Vfs {
    let opts = HostFsOptions { changes, descriptor_limit: Some(limit), ..HostFsOptions::default() };
    let fs = HostFs::with_options(dir, opts).unwrap();
    assert_eq!(fs.descriptor_limit(), limit);
    Vfs::with_root(VfsConfig::default(), Box::new(fs)).unwrap()
}

const STRICT: HostChanges = HostChanges::Revalidate { max_age: std::time::Duration::ZERO };

/// The process's open descriptors (the one reading the list included).
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// The host paths under `dir` the process holds descriptors of, as the kernel names them
/// (`" (deleted)"` appended for a removed one).
fn held_under(dir: &Path) -> Vec<String> {
    let dir = dir.to_string_lossy().into_owned();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|p| p.to_string_lossy().into_owned())
        .filter(|p| p.starts_with(&dir))
        .collect()
}

/// The removed host files (not directories: a removed directory holds no data, and its
/// descriptor is left to the cache) under `dir` the process holds descriptors of.
fn removed_files_held(dir: &Path) -> Vec<String> {
    let dir = dir.to_string_lossy().into_owned();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| {
            let fd = e.ok()?.path();
            let target = std::fs::read_link(&fd).ok()?.to_string_lossy().into_owned();
            let file = std::fs::metadata(&fd).ok()?.is_file();
            (file && target.starts_with(&dir) && target.ends_with(" (deleted)")).then_some(target)
        })
        .collect()
}

fn content(a: usize, b: usize, f: usize) -> Vec<u8> {
    format!("file {a}/{b}/{f} ").repeat(1 + (a * 7 + b * 3 + f) % 50).into_bytes()
}

fn write_file(t: &uvfs::Task, path: &str, data: &[u8]) {
    let fd = t.open(path.as_bytes(), OpenFlags::CREAT | OpenFlags::EXCL | OpenFlags::WRONLY, 0o644).unwrap();
    assert_eq!(t.write(fd, data).unwrap(), data.len(), "{path}");
    t.close(fd).unwrap();
}

fn read_file(t: &uvfs::Task, path: &str) -> Vec<u8> {
    let fd = t.open(path.as_bytes(), OpenFlags::RDONLY, 0).unwrap_or_else(|e| panic!("{path}: {e:?}"));
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = t.read(fd, &mut buf).unwrap();
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    t.close(fd).unwrap();
    out
}

/// Every name under `path` (recursively, by getdents), and a stat of each.
fn walk(t: &uvfs::Task, path: &str, out: &mut Vec<String>) {
    let fd = t.open(path.as_bytes(), OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
    let mut names = Vec::new();
    loop {
        let batch = t.getdents(fd, 64).unwrap();
        if batch.is_empty() {
            break;
        }
        names.extend(batch.into_iter().map(|e| String::from_utf8(e.name).unwrap()));
    }
    t.close(fd).unwrap();
    for n in names.into_iter().filter(|n| n != "." && n != "..") {
        let p = format!("{}/{n}", path.trim_end_matches('/'));
        let st = t.stat(p.as_bytes()).unwrap();
        out.push(p.clone());
        if st.mode & 0o170000 == 0o040000 {
            walk(t, &p, out);
        }
    }
}

/// A tree of ten times the limit (24 x 3 directories, 720 files), through every kind of
/// call, with the process's descriptors sampled after each: never more than the limit
/// plus the root and what the test holds, and the limit is approached (the bound is what
/// kept it there). Afterwards no descriptor of a removed file is left.
#[test]
fn a_tree_ten_times_the_limit() {
    let _serial = serial();
    const A: usize = 24;
    const B: usize = 3;
    const F: usize = 10;
    let dir = tmp("tree");
    let base = open_fds();
    let vfs = hostfs(dir.path(), LIMIT, STRICT);
    let t = vfs.root_task();
    let mut peak = 0;
    let mut sample = || peak = peak.max(open_fds());

    for a in 0..A {
        t.mkdir(format!("/a{a}").as_bytes(), 0o755).unwrap();
        for b in 0..B {
            t.mkdir(format!("/a{a}/b{b}").as_bytes(), 0o755).unwrap();
            for f in 0..F {
                write_file(&t, &format!("/a{a}/b{b}/f{f}"), &content(a, b, f));
                sample();
            }
        }
    }
    // Read back through uvfs and on the host, stat, list.
    for a in 0..A {
        for b in 0..B {
            for f in 0..F {
                let p = format!("/a{a}/b{b}/f{f}");
                let want = content(a, b, f);
                assert_eq!(t.stat(p.as_bytes()).unwrap().size, want.len() as u64, "{p}");
                assert_eq!(read_file(&t, &p), want, "{p}");
                assert_eq!(std::fs::read(dir.path().join(&p[1..])).unwrap(), want, "{p}");
                sample();
            }
        }
    }
    let mut names = Vec::new();
    walk(&t, "/", &mut names);
    sample();
    assert_eq!(names.len(), A + A * B + A * B * F);
    // Rename every file in its directory, and move every second-level directory to
    // another top-level one (its files are then reached through the moved directory,
    // whose descriptor may have to be reopened under its new name).
    for a in 0..A {
        for b in 0..B {
            for f in 0..F {
                t.rename(format!("/a{a}/b{b}/f{f}").as_bytes(), format!("/a{a}/b{b}/g{f}").as_bytes()).unwrap();
                sample();
            }
            t.rename(format!("/a{a}/b{b}").as_bytes(), format!("/a{}/m{a}_{b}", (a + 1) % A).as_bytes()).unwrap();
            sample();
        }
    }
    for a in 0..A {
        for b in 0..B {
            for f in 0..F {
                let p = format!("/a{}/m{a}_{b}/g{f}", (a + 1) % A);
                assert_eq!(read_file(&t, &p), content(a, b, f), "{p}");
                assert!(dir.path().join(&p[1..]).is_file(), "{p}");
                sample();
            }
        }
    }
    // Remove it all.
    for a in 0..A {
        for b in 0..B {
            let d = format!("/a{}/m{a}_{b}", (a + 1) % A);
            for f in 0..F {
                t.unlink(format!("{d}/g{f}").as_bytes()).unwrap();
                sample();
            }
            t.rmdir(d.as_bytes()).unwrap();
            sample();
        }
    }
    for a in 0..A {
        t.rmdir(format!("/a{a}").as_bytes()).unwrap();
        sample();
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    eprintln!("{base} descriptors before the instance, peak {peak} (limit {LIMIT})");
    assert!(peak <= base + LIMIT + SLACK, "{peak} descriptors open, {base} before, limit {LIMIT}");
    assert!(peak >= base + LIMIT / 2, "the limit was never approached: peak {peak}, base {base}");
    let deleted = removed_files_held(dir.path());
    assert!(deleted.is_empty(), "descriptors of removed files still open: {deleted:?}");
    drop(t);
    drop(vfs);
    assert!(open_fds() <= base, "descriptors left: {base} -> {}", open_fds());
}

/// Makes `n` directories with a file each under `/churn{round}` and reads the files: more
/// descriptors than the limit, so the least recently used are closed meanwhile.
fn churn(t: &uvfs::Task, round: usize, n: usize) {
    let top = format!("/churn{round}");
    t.mkdir(top.as_bytes(), 0o755).unwrap();
    for i in 0..n {
        t.mkdir(format!("{top}/d{i}").as_bytes(), 0o755).unwrap();
        write_file(t, &format!("{top}/d{i}/f"), b"churn");
        assert_eq!(read_file(t, &format!("{top}/d{i}/f")), b"churn");
    }
}

/// A file open in uvfs keeps its data when its name is removed, on the host or through
/// uvfs, while the cache closes descriptors around it (its own is pinned); it is counted
/// against the limit, not closed by it; and it is closed when the last open goes, not
/// kept by the cache.
#[test]
fn open_files_keep_their_data_while_the_cache_evicts() {
    let _serial = serial();
    let dir = tmp("pinned");
    let base = open_fds();
    let vfs = hostfs(dir.path(), LIMIT, STRICT);
    let t = vfs.root_task();
    t.mkdir(b"/keep", 0o755).unwrap();
    write_file(&t, "/keep/by-host", b"removed on the host");
    write_file(&t, "/keep/by-uvfs", b"removed through uvfs");
    let a = t.open(b"/keep/by-host", OpenFlags::RDWR, 0).unwrap();
    let b = t.open(b"/keep/by-uvfs", OpenFlags::RDONLY, 0).unwrap();
    std::fs::remove_file(dir.path().join("keep/by-host")).unwrap();
    t.unlink(b"/keep/by-uvfs").unwrap();
    assert_eq!(t.stat(b"/keep/by-host"), Err(Errno::ENOENT));
    assert_eq!(t.stat(b"/keep/by-uvfs"), Err(Errno::ENOENT));
    let mut peak = 0;
    for round in 0..4 {
        churn(&t, round, 3 * LIMIT);
        peak = peak.max(open_fds());
        let mut buf = [0u8; 64];
        let n = t.pread(a, &mut buf, 0).unwrap();
        assert_eq!(&buf[..n], b"removed on the host", "round {round}");
        let n = t.pread(b, &mut buf, 0).unwrap();
        assert_eq!(&buf[..n], b"removed through uvfs", "round {round}");
    }
    // Still writable, and its attributes are the host's (no name left).
    assert_eq!(t.pwrite(a, b"!", 19).unwrap(), 1);
    let st = t.fstat(a).unwrap();
    assert_eq!((st.size, st.nlink), (20, 0));
    // The two deleted files' descriptors are what keeps them: held by the opens, not
    // more than the limit altogether.
    let deleted = || removed_files_held(dir.path()).len();
    assert_eq!(deleted(), 2);
    assert!(peak <= base + LIMIT + SLACK, "{peak} descriptors open, {base} before, limit {LIMIT}");
    t.close(a).unwrap();
    assert_eq!(deleted(), 1, "closing the last open of a removed file closes its host descriptor");
    t.close(b).unwrap();
    assert_eq!(deleted(), 0);
}

/// A directory whose descriptor was closed is reopened by its name, checked: after the
/// host renamed it (revalidating: found under its new name), after the host replaced it
/// with another directory (trusting the cache: ESTALE, then ENOENT as the stale name is
/// forgotten; never the other directory's contents, and no endless retry), or with a
/// symlink to `/` (never followed: an error, never the host's root).
#[test]
fn reopened_directories_are_checked() {
    let _serial = serial();
    // Revalidating: a rename on the host is followed through a fresh lookup.
    let dir = tmp("moved");
    let vfs = hostfs(dir.path(), LIMIT, STRICT);
    let t = vfs.root_task();
    t.mkdir(b"/x", 0o755).unwrap();
    write_file(&t, "/x/f", b"in x");
    churn(&t, 0, 3 * LIMIT);
    assert!(held_under(dir.path()).iter().all(|p| !p.ends_with("/x")), "x's descriptor was not closed");
    std::fs::rename(dir.path().join("x"), dir.path().join("y")).unwrap();
    assert_eq!(read_file(&t, "/y/f"), b"in x");
    assert_eq!(t.stat(b"/x/f"), Err(Errno::ENOENT));
    write_file(&t, "/y/g", b"new");
    assert_eq!(std::fs::read(dir.path().join("y/g")).unwrap(), b"new");

    // Trusting the cache: the name now names another directory, or a symlink to `/`.
    for replacement in ["dir", "symlink"] {
        let dir = tmp("swapped");
        let vfs = hostfs(dir.path(), LIMIT, HostChanges::Never);
        let t = vfs.root_task();
        t.mkdir(b"/x", 0o755).unwrap();
        write_file(&t, "/x/f", b"in x");
        churn(&t, 0, 3 * LIMIT);
        assert!(held_under(dir.path()).iter().all(|p| !p.ends_with("/x")), "x's descriptor was not closed");
        std::fs::rename(dir.path().join("x"), dir.path().join("x-old")).unwrap();
        match replacement {
            "dir" => {
                std::fs::create_dir(dir.path().join("x")).unwrap();
                std::fs::write(dir.path().join("x/other"), b"other").unwrap();
            }
            _ => symlink("/", dir.path().join("x")).unwrap(),
        }
        let first = t.open(b"/x/new", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644);
        match replacement {
            "dir" => assert_eq!(first, Err(Errno::ESTALE)),
            _ => assert!(matches!(first, Err(Errno::ELOOP | Errno::ENOTDIR)), "{first:?}"),
        }
        // Then the stale name is forgotten (ENOENT), or still not followed.
        for _ in 0..2 {
            match t.open(b"/x", OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0) {
                Err(Errno::ENOENT | Errno::ELOOP | Errno::ENOTDIR) => {}
                r => panic!("{replacement}: {r:?}"),
            }
        }
        assert!(!dir.path().join("x-old/new").exists() && !Path::new("/new").exists());
        assert!(!dir.path().join("x/new").exists());
    }
}

/// Threads creating, reading, renaming and removing in shared and own directories with a
/// limit of 16: the cache closes descriptors other threads are using or reopening, and
/// every answer is still right.
#[test]
fn eviction_races_use() {
    let _serial = serial();
    let dir = tmp("race");
    let vfs = hostfs(dir.path(), 16, STRICT);
    let t = vfs.root_task();
    for s in 0..4 {
        t.mkdir(format!("/s{s}").as_bytes(), 0o755).unwrap();
    }
    std::thread::scope(|sc| {
        for k in 0..3usize {
            let vfs = vfs.clone();
            sc.spawn(move || {
                let t = vfs.root_task();
                for i in 0..300usize {
                    let s = (i + k) % 4;
                    let d = format!("/s{s}/t{k}-{i}");
                    t.mkdir(d.as_bytes(), 0o755).unwrap();
                    let data = format!("{k} {i}").into_bytes();
                    write_file(&t, &format!("{d}/f"), &data);
                    let fd = t.open(format!("{d}/f").as_bytes(), OpenFlags::RDONLY, 0).unwrap();
                    t.rename(format!("{d}/f").as_bytes(), format!("{d}/g").as_bytes()).unwrap();
                    assert_eq!(read_file(&t, &format!("{d}/g")), data);
                    t.unlink(format!("{d}/g").as_bytes()).unwrap();
                    let mut buf = [0u8; 32];
                    let n = t.pread(fd, &mut buf, 0).unwrap();
                    assert_eq!(&buf[..n], &data[..]);
                    t.close(fd).unwrap();
                    if i % 3 == 0 {
                        t.rmdir(d.as_bytes()).unwrap();
                    }
                }
            });
        }
    });
    let mut names = Vec::new();
    walk(&t, "/", &mut names);
    assert_eq!(names.len(), 4 + 3 * 200);
    let deleted = removed_files_held(dir.path());
    assert!(deleted.is_empty(), "{deleted:?}");
}

/// The default bound is a quarter of the soft `RLIMIT_NOFILE` (16 to 65,536); a bound of
/// 0 is EINVAL.
#[test]
fn default_limit_and_bad_limit() {
    let dir = tmp("default");
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(u64::MAX);
    assert_eq!(HostFs::new(dir.path()).unwrap().descriptor_limit() as u64, (soft / 4).clamp(16, 65_536));
    let opts = HostFsOptions { descriptor_limit: Some(0), ..HostFsOptions::default() };
    assert!(matches!(HostFs::with_options(dir.path(), opts), Err(Errno::EINVAL)));
}

/// A file whose descriptors are closed keeps working under its other name when the name
/// hostfs last saw it by is unlinked through uvfs (a hard link's first name removed, as
/// `tar` and `git` do): chmod and open find it by a name it still has, also after the
/// removed name's directory is gone.
#[test]
fn unlinking_the_known_name_of_a_hard_link_leaves_the_other_usable() {
    let _serial = serial();
    let dir = tmp("unlink-link");
    std::fs::create_dir(dir.path().join("d")).unwrap();
    std::fs::write(dir.path().join("d/a"), b"data").unwrap();
    std::fs::hard_link(dir.path().join("d/a"), dir.path().join("b")).unwrap();
    let vfs = hostfs(dir.path(), 1, HostChanges::Never);
    let t = vfs.root_task();
    // Looked up as /b, then as /d/a: hostfs knows it by d/a now.
    assert_eq!(t.stat(b"/b").unwrap().nlink, 2);
    assert_eq!(t.stat(b"/d/a").unwrap().nlink, 2);
    t.unlink(b"/d/a").unwrap();
    assert_eq!(t.stat(b"/b").unwrap().nlink, 1);
    t.fchmodat(DirFd::Cwd, b"/b", 0o600, AtFlags::empty()).unwrap();
    assert_eq!(std::fs::metadata(dir.path().join("b")).unwrap().permissions().mode() & 0o7777, 0o600);
    let fd = t.open(b"/b", OpenFlags::RDONLY, 0).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(t.read(fd, &mut buf).unwrap(), 4);
    t.close(fd).unwrap();
    t.rmdir(b"/d").unwrap();
    t.fchmodat(DirFd::Cwd, b"/b", 0o640, AtFlags::empty()).unwrap();
    assert_eq!(std::fs::metadata(dir.path().join("b")).unwrap().permissions().mode() & 0o7777, 0o640);
}
