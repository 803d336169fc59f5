//! Real programs on a memfs mount: git, tar (byte for byte), a C compiler, find,
//! getfacl/setfacl; plus in-process changes reaching a caching kernel, odd names, and a
//! handler panic that must not hang the mount. Needs root, /dev/fuse and the tools
//! (apt packages `git tar gcc findutils acl`); fails saying what is missing.

mod common;
#[path = "../../uvfs/tests/scratch/mod.rs"]
mod scratch;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Mounted, TempDir, require, run, sh, which};
use uvfs::{AtFlags, DirFd, OpenFlags};
use uvfs_fuse::MountOptions;

#[test]
fn git_init_add_commit_log() {
    require(&[("git", "git")]);
    let m = Mounted::new(MountOptions::default());
    let home = TempDir::new("home");
    let repo = m.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    let git = |args: &[&str]| {
        let out = run(Command::new("git")
            .args(["-c", "user.name=uvfs", "-c", "user.email=uvfs@example.invalid", "-c", "init.defaultBranch=main"])
            .args(args)
            .current_dir(&repo)
            .env("HOME", home.path())
            .env("GIT_CONFIG_NOSYSTEM", "1"));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    git(&["init", "-q"]);
    std::fs::write(repo.join("a.txt"), "first\n").unwrap();
    std::fs::create_dir(repo.join("sub")).unwrap();
    std::fs::write(repo.join("sub/b.txt"), "second\n").unwrap();
    std::os::unix::fs::symlink("a.txt", repo.join("link")).unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "one"]);
    std::fs::write(repo.join("a.txt"), "changed\n").unwrap();
    git(&["commit", "-q", "-a", "-m", "two"]);
    let log = git(&["log", "--format=%s"]);
    assert_eq!(log, "two\none\n");
    assert_eq!(git(&["status", "--porcelain"]), "");
    assert_eq!(git(&["show", "HEAD~1:a.txt"]), "first\n");
    git(&["fsck", "--strict"]);
}

#[test]
fn tar_round_trip_byte_for_byte() {
    require(&[("tar", "tar"), ("diff", "diffutils"), ("cmp", "diffutils")]);
    let host = TempDir::new("tar");
    let src = host.path().join("src");
    std::fs::create_dir_all(src.join("d/e")).unwrap();
    std::fs::write(src.join("plain"), "hello\n").unwrap();
    std::fs::write(src.join("d/binary"), (0..=255u8).cycle().take(300_000).collect::<Vec<u8>>()).unwrap();
    std::fs::write(src.join("d/e/empty"), "").unwrap();
    std::os::unix::fs::symlink("../plain", src.join("d/sym")).unwrap();
    std::os::unix::fs::symlink("dangling-target", src.join("dangling")).unwrap();
    std::fs::hard_link(src.join("plain"), src.join("d/e/hard")).unwrap();
    std::fs::set_permissions(src.join("d/binary"), std::fs::Permissions::from_mode(0o751)).unwrap();
    sh(host.path(), "touch -h -d '2001-02-03 04:05:06' src/d/sym; touch -d '2011-12-13 14:15:16' src/plain src/d");
    let tar_c = |dir: &std::path::Path, out: &std::path::Path| {
        run(Command::new("tar").args(["--sort=name", "--format=gnu", "-C"]).arg(dir).arg("-cf").arg(out).arg("."));
    };
    tar_c(&src, &host.path().join("host.tar"));

    let m = Mounted::new(MountOptions::default());
    let dst = m.path().join("dst");
    std::fs::create_dir(&dst).unwrap();
    run(Command::new("tar").arg("-C").arg(&dst).arg("-xpf").arg(host.path().join("host.tar")));
    // The hard link is one inode on the mount too.
    let a = std::fs::metadata(dst.join("plain")).unwrap();
    let b = std::fs::metadata(dst.join("d/e/hard")).unwrap();
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 2));
    tar_c(&dst, &host.path().join("mnt.tar"));
    run(Command::new("diff").arg("-r").arg("--no-dereference").arg(&src).arg(&dst));
    let list = |t: &str| sh(host.path(), &format!("tar --full-time -tvf {t}"));
    assert_eq!(list("host.tar"), list("mnt.tar"));
    run(Command::new("cmp").arg(host.path().join("host.tar")).arg(host.path().join("mnt.tar")));
}

#[test]
fn compile_and_run_c() {
    require(&[("cc", "gcc")]);
    let m = Mounted::new(MountOptions::default());
    let dir = m.path().join("c");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(
        dir.join("hello.c"),
        "#include <stdio.h>\nint main(int c, char **v) { (void)v; printf(\"hello from uvfs %d\\n\", c); return 3; }\n",
    )
    .unwrap();
    sh(&dir, "cc -O1 -c hello.c -o hello.o && cc hello.o -o hello");
    let out = Command::new(dir.join("hello")).arg("x").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello from uvfs 2\n");
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn find_newer_and_perm() {
    require(&[("find", "findutils"), ("touch", "coreutils")]);
    let m = Mounted::new(MountOptions::default());
    let out = sh(
        m.path(),
        "mkdir t && cd t && touch -d '2020-01-01' old && touch -d '2021-01-01' ref && touch -d '2022-01-01' new \
         && mkdir dir && touch -d '2023-01-01' dir/newest && chmod 0750 new && chmod 0604 old && chmod 0755 dir \
         && echo newer: && find . -newer ref | sort && echo perm: && find . -type f -perm 0750 \
         && echo any: && find . -perm /o+x | sort && echo all: && find . -type f -perm -u+r,o+r | sort",
    );
    assert_eq!(
        out,
        "newer:\n.\n./dir\n./dir/newest\n./new\nperm:\n./new\nany:\n.\n./dir\nall:\n./dir/newest\n./old\n./ref\n"
    );
}

#[test]
fn getfacl_setfacl_round_trip() {
    require(&[("getfacl", "acl"), ("setfacl", "acl")]);
    let m = Mounted::new(MountOptions::default());
    let out = sh(
        m.path(),
        "mkdir d && touch d/f d/g && setfacl -m u:nobody:rw-,g:nogroup:r--,m::rw- d/f \
         && getfacl -c d/f > f.acl && setfacl --set-file=f.acl d/g && getfacl -c d/g \
         && setfacl -d -m u:nobody:rwx d && touch d/new && mkdir d/sub && echo new: && getfacl -c d/new \
         && echo sub: && getfacl -c -d d/sub && setfacl -b d/g && echo stripped: && getfacl -c d/g",
    );
    assert_eq!(
        out,
        "user::rw-\nuser:nobody:rw-\ngroup::r--\ngroup:nogroup:r--\nmask::rw-\nother::r--\n\n\
         new:\nuser::rw-\nuser:nobody:rwx\t#effective:rw-\ngroup::r-x\t#effective:r--\nmask::rw-\nother::r--\n\n\
         sub:\nuser::rwx\nuser:nobody:rwx\ngroup::r-x\nmask::rwx\nother::r-x\n\n\
         stripped:\nuser::rw-\ngroup::r--\nother::r--\n\n"
    );
    // The ACL is uvfs's: the in-process API sees it.
    let t = m.vfs.root_task();
    let acl = t.get_acl(DirFd::Cwd, b"/d/f", uvfs::AclType::Access, AtFlags::empty()).unwrap();
    assert!(acl.is_some());
    // And it decides: nobody may write d/f through the named entry, not read-only g.
    let status = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "sh", "-c"])
        .arg("echo x >> d/f && ! (echo x >> d/g) 2>/dev/null")
        .current_dir(m.path())
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits (up to a generous bound, only so a bug fails instead of hanging) until `f` holds.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(20), "never happened: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn in_process_changes_reach_a_caching_kernel() {
    require(&[]);
    // The default mount: caches that would outlive the test (a day) and every default
    // lever (pages kept across opens, symlinks and listings cached, no OPENDIR): only
    // invalidations can show the changes. (Statahead is for host directories only.)
    let m = Mounted::new(MountOptions::default());
    let levers = uvfs_fuse::Levers::DEFAULT - uvfs_fuse::Levers::STATAHEAD;
    assert!(m.handle.as_ref().unwrap().levers().contains(levers));
    let t = m.vfs.root_task();
    let p = m.path();
    // A cached miss, then the name is created in-process.
    assert!(std::fs::metadata(p.join("late")).is_err());
    let fd = t.open(b"/late", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap();
    t.write(fd, b"abc").unwrap();
    t.close(fd).unwrap();
    eventually("created name visible", || std::fs::metadata(p.join("late")).is_ok());
    assert_eq!(std::fs::read(p.join("late")).unwrap(), b"abc");
    // Data and size change in-process.
    let fd = t.open(b"/late", OpenFlags::WRONLY | OpenFlags::APPEND, 0).unwrap();
    t.write(fd, b"defgh").unwrap();
    t.close(fd).unwrap();
    eventually("new size visible", || std::fs::metadata(p.join("late")).is_ok_and(|m| m.len() == 8));
    assert_eq!(std::fs::read(p.join("late")).unwrap(), b"abcdefgh");
    // Same-size overwrite in-process: only the page invalidation can show it.
    let fd = t.open(b"/late", OpenFlags::WRONLY, 0).unwrap();
    t.pwrite(fd, b"ABCDEFGH", 0).unwrap();
    t.close(fd).unwrap();
    eventually("new data visible", || std::fs::read(p.join("late")).unwrap() == b"ABCDEFGH");
    // A listing the kernel cached, then a name created in-process in that directory.
    t.mkdir(b"/d", 0o755).unwrap();
    t.close(t.open(b"/d/one", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap()).unwrap();
    let names = |p: &std::path::Path| {
        let mut v: Vec<_> = std::fs::read_dir(p.join("d")).unwrap().map(|e| e.unwrap().file_name()).collect();
        v.sort();
        v
    };
    assert_eq!(names(p), ["one"]);
    assert_eq!(names(p), ["one"]);
    t.close(t.open(b"/d/two", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap()).unwrap();
    eventually("listing shows the new name", || names(p) == ["one", "two"]);
    // A cached symlink replaced in-process.
    t.symlink(b"one", b"/d/link").unwrap();
    eventually("symlink visible", || std::fs::read_link(p.join("d/link")).is_ok());
    assert_eq!(std::fs::read_link(p.join("d/link")).unwrap(), std::path::Path::new("one"));
    t.unlink(b"/d/link").unwrap();
    t.symlink(b"two", b"/d/link").unwrap();
    eventually("new symlink target visible", || {
        std::fs::read_link(p.join("d/link")).is_ok_and(|l| l == std::path::Path::new("two"))
    });
    // Mode change, rename and unlink in-process.
    t.fchmodat(DirFd::Cwd, b"/late", 0o600, AtFlags::empty()).unwrap();
    eventually("mode visible", || {
        std::fs::metadata(p.join("late")).is_ok_and(|m| m.permissions().mode() & 0o777 == 0o600)
    });
    t.rename(b"/late", b"/moved").unwrap();
    eventually("rename visible", || std::fs::metadata(p.join("late")).is_err());
    assert_eq!(std::fs::read(p.join("moved")).unwrap(), b"ABCDEFGH");
    t.unlink(b"/moved").unwrap();
    eventually("unlink visible", || std::fs::metadata(p.join("moved")).is_err());
    // A change made through the mount is not invalidated under the kernel's feet: a
    // process whose cwd is a directory made through the mount keeps a working getcwd.
    let out = sh(p, "mkdir -p w/x && cd w/x && touch f && sleep 0.3 && pwd -P && ls");
    assert!(out.ends_with("/w/x\nf\n"), "{out}");
}

#[test]
fn odd_names_and_a_panicking_handler() {
    require(&[]);
    let m = Mounted::new(MountOptions { panic_on_lookup: Some(b"boom".to_vec()), ..MountOptions::uncached() });
    let p = m.path();
    use std::os::unix::ffi::OsStrExt;
    let odd: &[&[u8]] = &[b"\xff\xfe", b"new\nline", b" ", b"-", &[b'x'; 255], b"\x01\x7f"];
    for n in odd {
        let f = p.join(std::ffi::OsStr::from_bytes(n));
        std::fs::write(&f, n).unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), *n);
    }
    let long = p.join(std::ffi::OsStr::from_bytes(&[b'y'; 256]));
    assert_eq!(std::fs::write(&long, b"").unwrap_err().raw_os_error(), Some(libc::ENAMETOOLONG));
    let listed = std::fs::read_dir(p).unwrap().count();
    assert_eq!(listed, odd.len());
    // The handler panics: the caller gets EIO, the daemon keeps serving.
    for _ in 0..3 {
        let e = std::fs::metadata(p.join("boom")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
    }
    std::fs::write(p.join("after"), b"ok").unwrap();
    assert_eq!(std::fs::read(p.join("after")).unwrap(), b"ok");
}

#[test]
fn lookup_counts_return_to_zero() {
    require(&[]);
    let mut m = Mounted::new(MountOptions::uncached());
    sh(
        m.path(),
        "mkdir -p a/b && for i in 1 2 3 4 5; do echo $i > a/b/f$i; ln a/b/f$i a/h$i; done && ls -lR >/dev/null",
    );
    assert!(m.handle.as_ref().unwrap().nodes() > 1);
    // Dropping the kernel's caches makes it forget every node.
    std::fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
    let h = m.handle.as_ref().unwrap();
    eventually("forgets reach the server", || h.nodes() == 1);
    m.handle.take().unwrap().unmount().unwrap();
}

/// A running program's file cannot be opened for writing or truncated (ETXTBSY, which only
/// the kernel can know), and a refused `O_TRUNC` leaves it whole: the kernel must check
/// before uvfs truncates (no `FUSE_ATOMIC_O_TRUNC`, whose OPEN carried the truncation
/// ahead of the check; the program then often died of SIGBUS). Both permission modes.
#[test]
fn running_program_is_text_busy() {
    require(&[("sleep", "coreutils")]);
    let sleep = std::path::PathBuf::from(
        String::from_utf8(run(Command::new("sh").args(["-c", "command -v sleep"])).stdout).unwrap().trim(),
    );
    let len = std::fs::metadata(&sleep).unwrap().len();
    for perm in [uvfs_fuse::Permissions::Kernel, uvfs_fuse::Permissions::Uvfs] {
        let m = Mounted::new(MountOptions { permissions: perm, ..MountOptions::default() });
        let exe = m.path().join("busy");
        std::fs::copy(&sleep, &exe).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        for round in 0..20 {
            // Another test's fork may briefly hold our copy's write descriptor (inherited
            // until its child execs), and exec then fails with ETXTBSY: try again.
            let mut child = (0..100)
                .find_map(|_| match Command::new(&exe).arg("30").spawn() {
                    Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                        std::thread::sleep(Duration::from_millis(10));
                        None
                    }
                    r => Some(r.unwrap()),
                })
                .expect("exec kept failing with ETXTBSY");
            let path = std::ffi::CString::new(exe.as_os_str().as_encoded_bytes()).unwrap();
            for flags in [libc::O_WRONLY, libc::O_RDWR, libc::O_RDONLY | libc::O_TRUNC] {
                // SAFETY: a NUL-terminated path; a descriptor it returns is closed at once.
                let fd = unsafe { libc::open(path.as_ptr(), flags) };
                let err = std::io::Error::last_os_error();
                if fd >= 0 {
                    // SAFETY: the descriptor just opened.
                    unsafe { libc::close(fd) };
                }
                assert!(fd < 0, "{perm:?} round {round} flags {flags:o}: opened");
                assert_eq!(err.raw_os_error(), Some(libc::ETXTBSY), "{perm:?} round {round} flags {flags:o}");
            }
            assert_eq!(std::fs::metadata(&exe).unwrap().len(), len, "{perm:?} round {round}: truncated");
            // Still running: nothing took its text away.
            assert!(child.try_wait().unwrap().is_none(), "{perm:?} round {round}: the program died");
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }
}

/// Sparse files and copies through the mount as on tmpfs (issue 13): `fallocate(1)`
/// (reserve, keep size, punch a hole), `cp --sparse=always` (which finds holes with
/// `SEEK_DATA`/`SEEK_HOLE`), a plain `cp` (`copy_file_range`), sizes and blocks; the same
/// script on a host tmpfs directory gives the same output.
#[test]
fn sparse_files_and_copies_as_on_tmpfs() {
    require(&[("fallocate", "util-linux"), ("cp", "coreutils"), ("stat", "coreutils"), ("cmp", "diffutils")]);
    let script = "yes abcdefgh | head -c 20000 > f
        fallocate -l 16384 a && stat -c 'a %s %b' a
        fallocate -n -o 16384 -l 8192 a && stat -c 'a keep %s %b' a
        fallocate --punch-hole --offset 4096 --length 8192 f && stat -c 'f punched %s %b' f
        od -An -c -j 4094 -N 4 f
        cp --sparse=always f g && stat -c 'g %s %b' g && cmp f g
        truncate -s 1M h && cp --sparse=always h i && stat -c 'i %s %b' i && cmp h i
        cp f plain && stat -c 'plain %s %b' plain && cmp f plain
        cp --reflink=never --sparse=never f full && stat -c 'full %s %b' full && cmp f full";
    let shm = TempDir::new_in(scratch::scratch_in("/dev/shm"), "sparse");
    let expected = sh(shm.path(), script);
    assert!(expected.contains("f punched 20000 24"), "tmpfs itself: {expected}");
    let m = Mounted::new(MountOptions::default());
    let dir = m.path().join("sparse");
    std::fs::create_dir(&dir).unwrap();
    assert_eq!(sh(&dir, script), expected);
}

/// A tar archive mounted read-only without unpacking it (issue 14): `diff -r` finds the
/// mount equal to what `tar -x` makes of the archive, `tar -c` of the mount lists the same
/// members, and writes are refused with EROFS.
#[test]
fn a_tar_archive_mounted_as_its_extraction() {
    require(&[("tar", "tar"), ("diff", "diffutils")]);
    let host = TempDir::new("tarfs");
    sh(
        host.path(),
        "mkdir -p src/d/e && echo hello > src/d/hello && ln -s d/hello src/link && ln src/d/hello src/hard \
         && head -c 100000 /dev/urandom > src/d/e/rand && chmod 0750 src/d/e && tar -C src -cf t.tar . \
         && mkdir out && tar -C out -xpf t.tar",
    );
    let fs = uvfs::fs::tarfs::TarFs::open(host.path().join("t.tar")).unwrap();
    let vfs = uvfs::Vfs::with_root(uvfs::VfsConfig::default(), Box::new(fs)).unwrap();
    let mnt = TempDir::new("tarfsmnt");
    let (handle, _uring) = common::spawn(&vfs, mnt.path(), MountOptions::default());
    run(Command::new("diff").arg("-r").arg("--no-dereference").arg(host.path().join("out")).arg(mnt.path()));
    let list = |dir: &std::path::Path| sh(dir, "tar --sort=name -cf - . | tar -tvf - | sort");
    assert_eq!(list(mnt.path()), list(&host.path().join("out")));
    let err = std::fs::write(mnt.path().join("new"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    handle.unmount().unwrap();
}

/// `chattr` and `lsattr` (e2fsprogs) on the mount give what they give on tmpfs: the same
/// transcript (every command's output, errors and exit status) of setting and clearing
/// the immutable, append-only and nodump flags of a file and a directory and of what each
/// then refuses, as root and as a user (who may set none of the two), in both permission
/// modes. The kernel enforces no flag of a FUSE inode: uvfs refuses these calls itself,
/// opens included, so the server must see the opens (`--disable no-open`; what the
/// default `NO_OPEN` lever changes is checked in `tests/no_open.rs`).
#[test]
fn chattr_and_lsattr_as_on_tmpfs() {
    require(&[("chattr", "e2fsprogs"), ("lsattr", "e2fsprogs"), ("setpriv", "util-linux")]);
    const SCRIPT: &str = r#"
        t() { "$@" 2>&1; echo "[$?] $*"; }
        echo hello > f; mkdir d; touch d/x; chown 1000:1000 f
        t lsattr f
        t chattr +i f
        t lsattr f
        t rm -f f
        t sh -c 'echo x > f'
        t sh -c 'echo x >> f'
        t mv f g
        t ln f h
        t chmod 600 f
        t chown 0 f
        t touch f
        t truncate -s 0 f
        t setfattr -n user.x -v 1 f
        t cat f
        t setpriv --reuid=1000 --regid=1000 --clear-groups chattr -i f
        t chattr -i f
        t chattr +a f
        t lsattr f
        t sh -c 'echo x >> f'
        t sh -c 'echo x > f'
        t truncate -s 0 f
        t touch f
        t touch -d 2001-01-01 f
        t rm f
        t cat f
        t setpriv --reuid=1000 --regid=1000 --clear-groups chattr +d f
        t setpriv --reuid=1000 --regid=1000 --clear-groups chattr -a f
        t lsattr f
        t chattr -a f
        t chattr +i d
        t lsattr -d d
        t touch d/y
        t mkdir d/sub
        t rm d/x
        t chattr -i +a d
        t touch d/y
        t rm d/y
        t mv d/x d/z
        t lsattr d/x d/y
        t chattr -a d
        t chattr +s f
        t chattr +c f
        t lsattr -d . d f
        t rm -r d f
        t ls
    "#;
    let setfattr = which("setfattr").is_some();
    let script = if setfattr { SCRIPT.to_string() } else { SCRIPT.replace("t setfattr", "true") };
    // tmpfs, the oracle: a fresh directory on /dev/shm, flags cleared before it goes.
    let shm = scratch::scratch_in("/dev/shm").join(format!("uvfs-fuse-chattr-{}", std::process::id()));
    std::fs::create_dir(&shm).unwrap();
    let host = Command::new("sh").arg("-c").arg(&script).current_dir(&shm).output().unwrap();
    let _ = Command::new("chattr").args(["-R", "-i", "-a"]).arg(&shm).output();
    std::fs::remove_dir_all(&shm).unwrap();
    let want = String::from_utf8_lossy(&host.stdout).into_owned() + &String::from_utf8_lossy(&host.stderr);
    assert!(want.contains("[0] chattr +i f") && want.contains("----i-"), "tmpfs transcript:\n{want}");
    for perm in [uvfs_fuse::Permissions::Kernel, uvfs_fuse::Permissions::Uvfs] {
        let levers = uvfs_fuse::Levers::DEFAULT - uvfs_fuse::Levers::NO_OPEN;
        let m = Mounted::new(MountOptions { permissions: perm, levers, ..MountOptions::default() });
        let dir = m.path().join("w");
        std::fs::create_dir(&dir).unwrap();
        let out = Command::new("sh").arg("-c").arg(&script).current_dir(&dir).output().unwrap();
        let got = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        if got != want {
            let diff: Vec<String> = want
                .lines()
                .zip(got.lines())
                .filter(|(w, g)| w != g)
                .map(|(w, g)| format!("tmpfs: {w}\nmount: {g}"))
                .collect();
            panic!("{perm:?}: the mount differs from tmpfs:\n{}\n\nwhole mount transcript:\n{got}", diff.join("\n"));
        }
    }
}
