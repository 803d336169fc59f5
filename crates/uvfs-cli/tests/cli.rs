//! The `uvfs` binary's handling of bad input: one line naming the problem, exit 2, no
//! panic and no hang. These runs fail before anything is measured.

use std::process::{Command, Output};

mod fuse_open;
use fuse_open::FuseOpen;

fn uvfs(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_uvfs")).args(args).current_dir(std::env::temp_dir()).output().expect("run uvfs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn unknown_case_is_one_line_and_exit_2() {
    let o = uvfs(&["bench", "--case", "nonexistent"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("unknown case 'nonexistent'"), "{err}");
    assert!(o.stdout.is_empty());
}

#[test]
fn unknown_target_is_one_line_and_exit_2() {
    let o = uvfs(&["bench", "--target", "zfs"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("unknown target 'zfs'"), "{err}");
}

#[test]
fn unavailable_named_targets_and_cases_exit_2() {
    // (`--target fuse` and `--case fstree` were here while FUSE and hostfs did not exist.)
    for (args, needle) in [
        (&["bench", "--target", "kernel", "--tmpfs", "/nonexistent-dir"][..], "/nonexistent-dir"),
        (&["bench", "--target", "kernel", "--tmpfs", "/proc"], "not a tmpfs"),
    ] {
        let o = uvfs(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = stderr(&o);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn bad_numbers_exit_2() {
    for args in [
        &["bench", "--threads", "0"][..],
        &["bench", "--threads", "-3"],
        &["bench", "--threads", "lots"],
        &["bench", "--seconds", "0"],
        &["bench", "--samples", "0"],
        &["bench", "--seconds", "-1"],
    ] {
        let o = uvfs(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = stderr(&o);
        assert!(err.starts_with("error:"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn help_documents_profiling() {
    let o = uvfs(&["bench", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("perf record -g -- target/release/uvfs bench"), "{out}");
    assert!(out.contains("--quick"));
}

#[test]
fn mount_host_unchanged_is_documented_and_needs_a_host_dir() {
    let o = uvfs(&["mount", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("--host-unchanged"), "{out}");
    // Refused before anything is mounted (the mount point is never looked at).
    let o = uvfs(&["mount", "/nonexistent-mnt", "--host-unchanged"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("--host-unchanged needs --fs host:DIR"), "{err}");
}

#[test]
fn mount_transport_is_documented_and_checked() {
    let o = uvfs(&["mount", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("--transport"), "{out}");
    assert!(out.contains("io_uring"), "{out}");
    // A bad value is refused by the parser, before anything is mounted.
    let o = uvfs(&["mount", "/nonexistent-mnt", "--transport", "carrier-pigeon"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("carrier-pigeon"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Sets the `fuse` module's `enable_uring` to N while alive; puts the old value back.
struct UringOff(Option<String>);

impl Drop for UringOff {
    fn drop(&mut self) {
        if let Some(old) = self.0.take() {
            let _ = std::fs::write("/sys/module/fuse/parameters/enable_uring", old.trim());
        }
    }
}

/// Unmounts on drop (a failed assertion must not leave the mount behind) and waits until
/// the daemon serving it has exited (bounded generously, only so a bug cannot hang).
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let needle = self.0.as_os_str().as_encoded_bytes().to_vec();
        let serving = || {
            std::fs::read_dir("/proc").into_iter().flatten().flatten().any(|e| {
                std::fs::read(e.path().join("cmdline"))
                    .is_ok_and(|c| c.windows(needle.len()).any(|w| w == needle.as_slice()))
            })
        };
        let start = std::time::Instant::now();
        while serving() && start.elapsed() < std::time::Duration::from_secs(20) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

#[test]
fn mount_without_uring_says_so_in_one_line_and_serves() {
    let p = "/sys/module/fuse/parameters/enable_uring";
    let old = std::fs::read_to_string(p).expect("the fuse module with io_uring support (Linux 6.14+)");
    std::fs::write(p, "N").expect("set enable_uring: run as root");
    let _restore = UringOff(Some(old));
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().to_str().unwrap();
    let o = uvfs(&["mount", mnt, "--daemon", "--transport", "uring"]);
    let _umount = Unmount(dir.path().to_path_buf());
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(err, "uvfs mount: FUSE over io_uring not available (enable_uring is off): using /dev/fuse\n");
    std::fs::write(dir.path().join("f"), b"served").unwrap();
    assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), b"served");
}

/// A user's mount (through `fusermount3`) cannot raise its readahead window, whose
/// `read_ahead_kb` only root may write: a missing speed-up is one line saying so, never a
/// failed mount (issue 17), and the mount serves.
#[test]
fn a_users_mount_says_in_one_line_that_its_readahead_window_stays() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mnt = dir.path().join("m");
    std::fs::create_dir(&mnt).unwrap();
    rustix::fs::chown(&mnt, Some(rustix::fs::Uid::from_raw(1000)), Some(rustix::fs::Gid::from_raw(1000))).unwrap();
    let as_user = || {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=1000", "--regid=1000", "--clear-groups"]);
        c
    };
    let _fuse = FuseOpen::new();
    let o = as_user()
        .arg(env!("CARGO_BIN_EXE_uvfs"))
        .args(["mount", mnt.to_str().unwrap(), "--daemon", "--transport", "dev"])
        .output()
        .expect("run uvfs mount as a user (setpriv, util-linux)");
    let _umount = Unmount(mnt.clone());
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.lines().all(|l| l.starts_with("uvfs mount: ")), "{err}");
    let notice = err.lines().filter(|l| l.contains("readahead window not available")).count();
    assert_eq!(notice, 1, "{err}");
    // The mount is the user's alone (no allow_other): the user writes and reads through it.
    let f = mnt.join("f");
    let io = as_user().args(["sh", "-c", &format!("echo served > {0} && cat {0}", f.display())]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&io.stdout), "served\n", "{}", String::from_utf8_lossy(&io.stderr));
}

/// `uvfs mount --fs overlay:host:DIR --export FILE` (issue 14): writes through the mount
/// land in memory (the host directory is unchanged), and when the mount ends the changes
/// are a layer tar: the new and changed files and a whiteout for the removed one.
#[test]
fn overlay_mount_exports_its_changes() {
    let dir = tempfile::tempdir().unwrap();
    let (lower, mnt) = (dir.path().join("lower"), dir.path().join("mnt"));
    std::fs::create_dir_all(lower.join("sub")).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    std::fs::write(lower.join("sub/f"), b"base\n").unwrap();
    std::fs::write(lower.join("gone"), b"x").unwrap();
    let tar = dir.path().join("changes.tar");
    let fs = format!("overlay:host:{}", lower.display());
    let o = uvfs(&["mount", mnt.to_str().unwrap(), "--daemon", "--fs", &fs, "--export", tar.to_str().unwrap()]);
    let unmount = Unmount(mnt.clone());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mut f = std::fs::OpenOptions::new().append(true).open(mnt.join("sub/f")).unwrap();
    std::io::Write::write_all(&mut f, b"more\n").unwrap();
    drop(f);
    std::fs::remove_file(mnt.join("gone")).unwrap();
    std::fs::write(mnt.join("new"), b"hi").unwrap();
    assert_eq!(std::fs::read(mnt.join("sub/f")).unwrap(), b"base\nmore\n");
    assert_eq!(std::fs::read(lower.join("sub/f")).unwrap(), b"base\n", "the lower directory is untouched");
    assert!(lower.join("gone").exists());
    drop(unmount);
    let list = Command::new("tar").arg("-tf").arg(&tar).output().unwrap();
    let mut names: Vec<String> = String::from_utf8_lossy(&list.stdout).lines().map(str::to_string).collect();
    names.sort();
    assert_eq!(names, ["./", ".wh.gone", "new", "sub", "sub/f"]);
    let out = Command::new("tar").arg("-xOf").arg(&tar).arg("sub/f").output().unwrap();
    assert_eq!(out.stdout, b"base\nmore\n");
    assert_eq!(uvfs(&["mount", "/tmp", "--export", "/dev/null"]).status.code(), Some(2), "--export needs an overlay");
}

/// Whether `dir` is a FUSE mount point now (`/proc/self/mountinfo`).
fn fuse_mounted(dir: &std::path::Path) -> bool {
    let want = dir.to_str().unwrap();
    std::fs::read_to_string("/proc/self/mountinfo").unwrap().lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let fuse = f.iter().position(|&x| x == "-").and_then(|i| f.get(i + 1)).is_some_and(|t| t.starts_with("fuse"));
        fuse && f.get(4) == Some(&want)
    })
}

/// Waits (at most 20 s, only so a bug cannot hang) until `cond` holds; returns whether it
/// did.
fn eventually(cond: impl Fn() -> bool) -> bool {
    let start = std::time::Instant::now();
    while !cond() {
        if start.elapsed() > std::time::Duration::from_secs(20) {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    true
}

/// A server killed with its whole process group (`kill -KILL -- -PGID`, as `timeout -s
/// KILL` or a job control kill does; Ctrl-C and `timeout` send their signal to the group
/// too) leaves no dead mount behind: its guardian is in a session of its own. It was in
/// the server's group, and died with it.
#[test]
fn a_server_killed_with_its_process_group_leaves_no_mount_behind() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let mut server = Command::new(env!("CARGO_BIN_EXE_uvfs"))
        .args(["mount", dir.path().to_str().unwrap(), "--transport", "dev"])
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .expect("run uvfs mount");
    let _umount = Unmount(dir.path().to_path_buf());
    assert!(eventually(|| fuse_mounted(dir.path())), "uvfs mount never mounted");
    let pgid = server.id() as i32;
    // SAFETY: a signal to the group this test made for the server.
    assert_eq!(unsafe { libc::kill(-pgid, libc::SIGKILL) }, 0);
    server.wait().unwrap();
    assert!(eventually(|| !fuse_mounted(dir.path())), "the killed group's mount is still there");
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

/// A server killed outright (SIGKILL: no handler, no destructor runs) leaves no dead mount
/// behind: its guardian unmounts once the process is gone. Without one, the kernel keeps
/// the mount ("Transport endpoint is not connected") until someone unmounts it.
#[test]
fn a_killed_server_leaves_no_mount_behind() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Command::new(env!("CARGO_BIN_EXE_uvfs"))
        .args(["mount", dir.path().to_str().unwrap(), "--transport", "dev"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run uvfs mount");
    let _umount = Unmount(dir.path().to_path_buf());
    assert!(eventually(|| fuse_mounted(dir.path())), "uvfs mount never mounted");
    std::fs::write(dir.path().join("f"), b"served").unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(eventually(|| !fuse_mounted(dir.path())), "the killed server's mount is still there");
    // The directory is a plain directory again.
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

/// A binary killed with its process group (Ctrl-C at `cargo test`, `timeout`, `kill --
/// -PGID`) runs no destructor, so its tempdirs stayed. `scripts/runner`, which cargo runs
/// every binary of this workspace through, removes the scratch directories it gave the
/// binary (`TMPDIR`, and one in /dev/shm and /var/tmp) once the binary and what it
/// started are gone: here one holding a FUSE mount, which its guardian unmounts first.
#[test]
fn the_runner_removes_a_killed_binarys_scratch_directories() {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let runner = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/runner");
    let script = r#"s="$TMPDIR /dev/shm/$UVFS_SCRATCH /var/tmp/$UVFS_SCRATCH"
for d in $s; do echo kept > "$d/f" || exit 1; done
mkdir "$TMPDIR/m" && echo $s && exec "$0" mount "$TMPDIR/m" --transport dev"#;
    let mut bin = Command::new(runner)
        .args(["sh", "-c", script, env!("CARGO_BIN_EXE_uvfs")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .expect("run scripts/runner");
    let mut line = String::new();
    std::io::BufReader::new(bin.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let dirs: Vec<std::path::PathBuf> = line.split_whitespace().map(Into::into).collect();
    assert_eq!(dirs.len(), 3, "the runner's directories: {line:?}");
    assert!(dirs[0].starts_with("/tmp") && dirs[1].starts_with("/dev/shm") && dirs[2].starts_with("/var/tmp"));
    let m = dirs[0].join("m");
    assert!(eventually(|| fuse_mounted(&m)), "uvfs mount never mounted");
    assert!(dirs.iter().all(|d| std::fs::read(d.join("f")).unwrap() == b"kept\n"));
    // SAFETY: a signal to the group this test made for the runner's binary.
    assert_eq!(unsafe { libc::kill(-(bin.id() as i32), libc::SIGKILL) }, 0);
    bin.wait().unwrap();
    assert!(eventually(|| !fuse_mounted(&m)), "the killed binary's mount is still there");
    assert!(eventually(|| dirs.iter().all(|d| !d.exists())), "left behind: {dirs:?}");
}
