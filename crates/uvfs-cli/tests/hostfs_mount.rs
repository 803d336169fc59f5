//! `uvfs mount --fs host:DIR` with a descriptor limit of 256 (soft and hard, so raising
//! the soft one does not help): a tree of ten times that many files is copied on with
//! `cp -a`, walked with `find`, read back and compared, and removed with `rm -rf`, all
//! through the mount. Before hostfs bounded its host descriptors, the server held one per
//! cached directory and file and failed with EMFILE after about 250 files. The `uvfs`
//! binary runs as a child (its limit is set between fork and exec); the mount is
//! unmounted and the child reaped on drop, also when the test fails.

#[path = "../../uvfs/tests/scratch/mod.rs"]
mod scratch;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The child's `RLIMIT_NOFILE`, soft and hard.
const NOFILE: u64 = 256;

/// Fails clearly (never skips) unless the test can mount through FUSE and has its tools.
fn require() {
    // SAFETY: no preconditions.
    assert!(unsafe { libc::geteuid() } == 0, "this test mounts through FUSE: run it as root");
    assert!(Path::new("/dev/fuse").exists(), "/dev/fuse is missing: load the fuse module (modprobe fuse)");
    for tool in ["cp", "find", "rm", "bash", "wc", "umount"] {
        let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .chain([PathBuf::from("/usr/bin"), PathBuf::from("/bin")])
            .any(|d| d.join(tool).is_file());
        assert!(found, "missing tool `{tool}` (coreutils, findutils, bash, mount)");
    }
}

/// Whether `p` (canonical) is a FUSE mount point, from `/proc/self/mountinfo`.
fn fuse_mounted(p: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = p.to_string_lossy();
    info.lines().any(|l| {
        let fields: Vec<&str> = l.split(' ').collect();
        let fstype = l.split(" - ").nth(1).and_then(|r| r.split(' ').next()).unwrap_or("");
        fields.get(4).is_some_and(|m| m.replace("\\040", " ") == want) && fstype.starts_with("fuse")
    })
}

/// A `uvfs mount` child serving a host directory; on drop: SIGTERM (the server unmounts
/// and exits), SIGKILL if it does not exit in time, a lazy unmount if the mount is still
/// there, then the mount point is removed.
struct Served {
    child: Option<Child>,
    /// Canonical mount point.
    mnt: PathBuf,
    /// The server's stderr.
    log: PathBuf,
    /// Holds the mount point and the log; removed last.
    _dir: tempfile::TempDir,
}

impl Served {
    fn start(host: &Path) -> Served {
        let dir = tempfile::Builder::new().prefix("uvfs-cli-hostmnt-").tempdir().unwrap();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let mnt = mnt.canonicalize().unwrap();
        let log = dir.path().join("server.log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_uvfs"));
        cmd.arg("mount")
            .arg(&mnt)
            .arg("--fs")
            .arg(format!("host:{}", host.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        // SAFETY: between fork and exec only setrlimit runs (async-signal-safe, no
        // allocation).
        unsafe {
            cmd.pre_exec(|| {
                let lim = libc::rlimit { rlim_cur: NOFILE, rlim_max: NOFILE };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("run uvfs mount");
        let mut s = Served { child: Some(child), mnt, log, _dir: dir };
        let start = Instant::now();
        while !fuse_mounted(&s.mnt) {
            if let Some(status) = s.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("uvfs mount exited before mounting ({status}): {}", s.log());
            }
            assert!(start.elapsed() < Duration::from_secs(30), "not mounted after 30 s: {}", s.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The server's open descriptors now.
    fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid())).map(|d| d.count()).unwrap_or(0)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: signals our own child, which has not been reaped yet.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let start = Instant::now();
            while child.try_wait().ok().flatten().is_none() {
                if start.elapsed() > Duration::from_secs(20) {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if fuse_mounted(&self.mnt) {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
    }
}

fn run(cmd: &str, args: &[&Path]) -> Output {
    Command::new("bash").arg("-c").arg(cmd).arg("bash").args(args).output().expect("run bash")
}

fn ok(what: &str, o: &Output, served: &Served) {
    assert!(
        o.status.success(),
        "{what}: {}\nstderr: {}\nserver: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr).lines().take(20).collect::<Vec<_>>().join("\n"),
        served.log()
    );
}

/// The source tree: 20 x 4 directories of 33 files each (2,640 files, 10x the limit),
/// sizes from 0 to 16 KiB, a symlink and a hard link in each directory.
fn make_tree(root: &Path) -> usize {
    let mut files = 0;
    for a in 0..20 {
        for b in 0..4 {
            let d = root.join(format!("d{a}/s{b}"));
            std::fs::create_dir_all(&d).unwrap();
            for f in 0..33 {
                let len = (a * 977 + b * 131 + f * 499) % 16384;
                let data: Vec<u8> = (0..len).map(|i| (i * 31 + a + b * 7 + f * 13) as u8).collect();
                std::fs::write(d.join(format!("f{f}")), data).unwrap();
                files += 1;
            }
            std::os::unix::fs::symlink("f0", d.join("link")).unwrap();
            std::fs::hard_link(d.join("f1"), d.join("hard")).unwrap();
        }
    }
    files
}

/// Every path under `root` (relative), depth first.
fn paths(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(root.join(rel)).unwrap() {
        let e = e.unwrap();
        let r = rel.join(e.file_name());
        out.push(r.clone());
        if e.file_type().unwrap().is_dir() {
            paths(root, &r, out);
        }
    }
}

#[test]
fn ten_times_the_descriptor_limit_through_the_mount() {
    require();
    let src = tempfile::Builder::new().prefix("uvfs-cli-src-").tempdir_in(scratch::scratch_in("/dev/shm")).unwrap();
    let host = tempfile::Builder::new().prefix("uvfs-cli-host-").tempdir_in(scratch::scratch_in("/dev/shm")).unwrap();
    let files = make_tree(src.path());
    assert!(files as u64 >= 10 * NOFILE);
    let served = Served::start(host.path());
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", served.pid())).unwrap();
    let nofile = limits.lines().find(|l| l.starts_with("Max open files")).unwrap().to_string();
    assert_eq!(nofile.split_whitespace().nth(3), Some("256"), "{nofile}");
    assert_eq!(nofile.split_whitespace().nth(4), Some("256"), "{nofile}");
    let copy = served.mnt.join("copy");

    let o = run("cp -a \"$1\" \"$2\"", &[src.path(), &copy]);
    ok("cp -a", &o, &served);
    let after_copy = served.fds();

    let o = run("set -o pipefail; find \"$1\" | wc -l", &[&copy]);
    ok("find | wc -l", &o, &served);
    let mut want = Vec::new();
    paths(src.path(), Path::new(""), &mut want);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), (want.len() + 1).to_string());

    for rel in &want {
        let (s, m, h) = (src.path().join(rel), copy.join(rel), host.path().join("copy").join(rel));
        let meta = std::fs::symlink_metadata(&s).unwrap();
        if meta.is_symlink() {
            assert_eq!(std::fs::read_link(&m).unwrap(), std::fs::read_link(&s).unwrap(), "{}", rel.display());
        } else if meta.is_file() {
            let data = std::fs::read(&s).unwrap();
            assert!(
                std::fs::read(&m).unwrap_or_else(|e| panic!("{}: {e}", rel.display())) == data,
                "{}",
                rel.display()
            );
            assert!(std::fs::read(&h).unwrap() == data, "{} on the host", rel.display());
        } else {
            assert!(std::fs::metadata(&m).unwrap().is_dir(), "{}", rel.display());
        }
    }
    let after_read = served.fds();
    // The mount's cache takes three quarters of the limit (192 here), the rest is left to
    // the channels and calls in progress: a tree bigger than a quarter stays open between
    // two reads of it.
    assert!(
        after_read as u64 > NOFILE / 2 && (after_read as u64) < NOFILE,
        "{after_read} descriptors after reading back"
    );

    let o = run("rm -rf \"$1\"", &[&copy]);
    ok("rm -rf", &o, &served);
    assert!(!copy.exists());
    assert_eq!(std::fs::read_dir(host.path()).unwrap().count(), 0);
    eprintln!(
        "{} files: server descriptors {after_copy} after cp -a, {after_read} after reading back, {} after rm -rf \
         (limit {NOFILE})",
        files,
        served.fds()
    );
}
