//! What the wire protocol must carry right, checked through a mount and against the host
//! kernel (tmpfs in /dev/shm): times before 1970 with a fraction of a second, and
//! directory entries with their inode numbers (".", "..", and entries the caller cannot
//! look up). Needs root, /dev/fuse, python3, setpriv and the `tests` user.

mod common;
#[path = "../../uvfs/tests/scratch/mod.rs"]
mod scratch;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use common::{Mounted, TempDir, require, run, sh};
use uvfs_fuse::MountOptions;

/// A scratch directory on tmpfs (the host kernel's answers to compare with).
fn tmpfs_dir(tag: &str) -> TempDir {
    let p = scratch::scratch_in("/dev/shm").join(format!("uvfs-wire-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir(&p).unwrap();
    TempDir(p)
}

fn utimensat(path: &Path, sec: i64, nsec: i64) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let ts = [libc::timespec { tv_sec: sec, tv_nsec: nsec }, libc::timespec { tv_sec: sec, tv_nsec: nsec }];
    // SAFETY: a NUL-terminated path and two timespecs.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), ts.as_ptr(), 0) };
    assert_eq!(r, 0, "utimensat {}: {}", path.display(), std::io::Error::last_os_error());
}

#[test]
fn times_before_1970_keep_their_fraction() {
    require(&[("touch", "coreutils"), ("stat", "coreutils"), ("tar", "tar"), ("cp", "coreutils")]);
    let m = Mounted::new(MountOptions::uncached());
    let host = tmpfs_dir("times");
    // -1.499999968 s: seconds -2, nanoseconds 500000032 that add.
    for dir in [m.path(), host.path()] {
        let f = dir.join("f");
        std::fs::write(&f, b"x").unwrap();
        utimensat(&f, -2, 500_000_032);
        let md = std::fs::metadata(&f).unwrap();
        assert_eq!((md.mtime(), md.mtime_nsec()), (-2, 500_000_032), "{}", dir.display());
        assert_eq!((md.atime(), md.atime_nsec()), (-2, 500_000_032), "{}", dir.display());
    }
    // touch -d with a fraction before the epoch, as on tmpfs.
    let script = "TZ=UTC touch -d '1969-12-31 23:59:58.500000032' g && TZ=UTC stat -c '%x|%y' g";
    assert_eq!(sh(m.path(), script), sh(host.path(), script));
    assert_eq!(sh(m.path(), "stat -c %Y g"), "-2\n");
    // A tree with such times keeps them through cp -a and tar.
    let src = host.path().join("src");
    sh(
        host.path(),
        "mkdir -p src/d && echo a > src/d/a && ln -s a src/d/l \
         && TZ=UTC touch -h -d '1969-12-31 23:59:58.500000032' src/d/a src/d/l \
         && TZ=UTC touch -d '1960-06-01 12:00:00.999999999' src/d src",
    );
    let list = |dir: &Path| sh(dir, "find . | sort | TZ=UTC xargs stat -c '%n %y'");
    let want = list(&src);
    run(Command::new("cp").arg("-a").arg(&src).arg(m.path().join("cp")));
    assert_eq!(list(&m.path().join("cp")), want);
    let tarball = host.path().join("t.tar");
    run(Command::new("tar").args(["--format=posix", "-C"]).arg(&src).arg("-cf").arg(&tarball).arg("."));
    std::fs::create_dir(m.path().join("tar")).unwrap();
    run(Command::new("tar").arg("-C").arg(m.path().join("tar")).arg("-xpf").arg(&tarball));
    assert_eq!(list(&m.path().join("tar")), want);
}

#[test]
fn dot_entries_carry_their_inode_numbers() {
    require(&[("ls", "coreutils")]);
    let m = Mounted::new(MountOptions::default());
    sh(m.path(), "mkdir -p a/b && touch a/b/f");
    let dir = m.path().join("a/b");
    let out = String::from_utf8(run(Command::new("ls").arg("-ai1").arg(&dir)).stdout).unwrap();
    let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
    let mut got: Vec<(String, u64)> = out
        .lines()
        .map(|l| {
            let (n, name) = l.trim().split_once(' ').unwrap();
            (name.to_string(), n.parse().unwrap())
        })
        .collect();
    got.sort();
    let want = vec![
        (".".to_string(), ino(&dir)),
        ("..".to_string(), ino(&m.path().join("a"))),
        ("f".to_string(), ino(&dir.join("f"))),
    ];
    assert_eq!(got, want, "{out}");
    assert!(got.iter().all(|(_, i)| *i != 0));
}

/// As an unprivileged user: a directory with read but no search permission lists its
/// names (glibc and Python skip entries with inode number 0, so it listed as empty), and
/// Python's rmtree and TemporaryDirectory clean such trees up, as on tmpfs.
#[test]
fn unsearchable_directory_lists_and_is_removed_as_non_root() {
    require(&[("setpriv", "util-linux"), ("ls", "coreutils")]);
    assert!(Path::new("/usr/bin/python3").exists(), "missing /usr/bin/python3: apt-get install python3");
    let m = Mounted::new(MountOptions::default());
    let host = tmpfs_dir("rmtree");
    let script = r#"
import os, shutil, subprocess, sys, tempfile
base = sys.argv[1]
d = os.path.join(base, "d")
os.mkdir(d)
for n in ("a", "b"):
    open(os.path.join(d, n), "w").close()
os.chmod(d, 0o400)
print("listdir", sorted(os.listdir(d)))
print("inos", sorted(e.inode() != 0 for e in os.scandir(d)))
print("ls", subprocess.run(["ls", "-a", d], capture_output=True, text=True).stdout.split())
os.chmod(d, 0o700)
shutil.rmtree(d)
print("rmtree", os.path.exists(d))
with tempfile.TemporaryDirectory(dir=base) as t:
    os.mkdir(os.path.join(t, "sub"))
    open(os.path.join(t, "sub", "f"), "w").close()
    os.chmod(os.path.join(t, "sub"), 0o400)
print("tempdir", os.listdir(base))
"#;
    let run_as_tests = |dir: &Path| {
        std::fs::create_dir(dir.join("w")).unwrap();
        run(Command::new("chown").arg("tests:tests").arg(dir.join("w")));
        let out = run(Command::new("setpriv")
            .args(["--reuid=tests", "--regid=tests", "--clear-groups", "/usr/bin/python3", "-c", script])
            .arg(dir.join("w"))
            .current_dir("/"));
        String::from_utf8(out.stdout).unwrap()
    };
    let on_mount = run_as_tests(m.path());
    let on_tmpfs = run_as_tests(host.path());
    assert_eq!(on_mount, on_tmpfs);
    assert!(on_mount.contains("listdir ['a', 'b']"), "{on_mount}");
    assert!(on_mount.contains("ls ['.', '..', 'a', 'b']"), "{on_mount}");
    assert!(on_mount.contains("rmtree False"), "{on_mount}");
    assert!(on_mount.contains("tempdir []"), "{on_mount}");
}

/// `statfs` through the mount reports what the memfs reports in-process, and that is what
/// a tmpfs mounted with default options reports: `df` sees a filesystem of half of RAM,
/// not one of 0 blocks and 0 inodes that programs checking free space refuse to write to.
#[test]
fn statfs_through_the_mount_is_tmpfs_s() {
    let m = Mounted::new(MountOptions::default());
    let host = tmpfs_dir("statfs");
    // A fresh default tmpfs to compare with: /dev/shm may be mounted with other limits.
    let c = CString::new(host.path().as_os_str().as_bytes()).unwrap();
    // SAFETY: valid C strings; a private tmpfs with default options, unmounted below.
    let r = unsafe { libc::mount(c"tmpfs".as_ptr(), c.as_ptr(), c"tmpfs".as_ptr(), 0, std::ptr::null()) };
    assert_eq!(r, 0, "mount tmpfs: {}", std::io::Error::last_os_error());
    let statvfs = |p: &Path| {
        let c = CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: a zeroed statvfs is a valid out-parameter; a valid path.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0, "{}", p.display());
        (st.f_blocks, st.f_bfree, st.f_files, st.f_ffree, st.f_bsize, st.f_namemax)
    };
    let (mine, tmpfs) = (statvfs(m.path()), statvfs(host.path()));
    // SAFETY: valid C string.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    assert!(mine.0 > 0 && mine.2 > 0, "blocks and inodes: {mine:?}");
    assert_eq!((mine.0, mine.4, mine.5), (tmpfs.0, tmpfs.4, tmpfs.5), "uvfs {mine:?}, tmpfs {tmpfs:?}");
    assert_eq!(mine.2, tmpfs.2, "inode limit: uvfs {mine:?}, tmpfs {tmpfs:?}");
    // df agrees with statvfs (and sees no empty filesystem).
    let df = sh(m.path(), "df -P . | tail -1");
    assert!(!df.split_whitespace().nth(1).unwrap_or("0").starts_with('0'), "{df}");
}
