//! `uvfs run` (issue 14) as an unprivileged user: the command runs with a copy-on-write
//! view of a base directory over the host as its root; what it writes it sees, the host
//! and the base are unchanged afterwards, its exit status comes through, and the `--export`
//! tar applied to a copy of the base reproduces the tree the command saw. Needs root (to
//! make the user and to open `/dev/fuse` to it for the test's length, as a desktop's udev
//! rule does) and `setpriv` (util-linux).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

mod fuse_open;
use fuse_open::FuseOpen;

fn sh(dir: &Path, script: &str) -> String {
    let out = Command::new("sh").arg("-ec").arg(script).current_dir(dir).output().expect("sh");
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What the test compares: every path under `data` with its type, mode, size (not of
/// directories, which each filesystem sizes its way) and link target, and each file's
/// bytes.
const LIST: &str = "cd data && { find . -type d -printf '%p d %m\\n'; find . ! -type d -printf '%p %y %m %s %l\\n'; } \
                    | sort && find . -type f | sort | xargs cat";

#[test]
fn run_as_a_user_writes_in_memory_and_exports_the_changes() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir(&base).unwrap();
    sh(
        &base,
        "mkdir -p data/keep data/gone data/emptied && echo one > data/f && echo two > data/keep/g \
         && echo three > data/gone/h && echo four > data/emptied/i && ln -s f data/link && chmod -R a+rX .",
    );
    let before = sh(&base, LIST);
    // Where the user may write its export.
    let out_dir = tmp.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    rustix::fs::chown(&out_dir, Some(rustix::fs::Uid::from_raw(1000)), Some(rustix::fs::Gid::from_raw(1000))).unwrap();
    let tar = out_dir.join("changes.tar");
    let script = format!(
        "echo appended >> /data/f && rm -r /data/gone && rm /data/emptied/i && rmdir /data/emptied \
         && mkdir /data/emptied && echo new > /data/emptied/n && mkdir -p /data/new/deep \
         && echo deep > /data/new/deep/x && ln -s ../f /data/new/up && chmod 600 /data/keep/g \
         && echo probe > /etc/uvfs-run-probe && cat /etc/uvfs-run-probe >&2 && cd / && {LIST}; exit 5"
    );
    let _fuse = FuseOpen::new();
    let out = Command::new("setpriv")
        .args(["--reuid=1000", "--regid=1000", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_uvfs"))
        .arg("run")
        .arg("--overlay")
        .arg(&base)
        .args(["--overlay", "/", "--summary", "--export"])
        .arg(&tar)
        .args(["--", "sh", "-c", &script])
        .current_dir(tmp.path())
        .output()
        .expect("run uvfs run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "the command's status comes through: {err}");
    assert!(err.contains("probe\n"), "a write is seen inside: {err}");
    // What the sandbox's mount cannot have (io_uring, a larger readahead window) goes
    // unsaid: the command's own output is what the user reads.
    assert!(!err.contains("uvfs mount:"), "{err}");
    for line in ["M /data/f", "D /data/gone", "M /data/emptied", "A /data/new", "A /etc/uvfs-run-probe"] {
        assert!(err.lines().any(|l| l == line), "summary lacks {line:?}: {err}");
    }
    let inside = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(inside.contains("appended"), "{inside}");

    // The host and the base are as they were.
    assert!(!Path::new("/etc/uvfs-run-probe").exists());
    assert_eq!(sh(&base, LIST), before);

    // The export, applied to a copy of the base as an image tool applies a layer.
    let copy = tmp.path().join("copy");
    sh(tmp.path(), "cp -a base copy");
    let listing = sh(tmp.path(), "tar -tf out/changes.tar");
    for member in listing.lines() {
        let (dir, name) = member.rsplit_once('/').unwrap_or(("", member));
        if name == ".wh..wh..opq" {
            sh(&copy.join(dir), "find . -mindepth 1 -maxdepth 1 -exec rm -rf {} +");
        } else if let Some(gone) = name.strip_prefix(".wh.") {
            let p = copy.join(dir).join(gone);
            std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p)).unwrap();
        }
    }
    sh(tmp.path(), "tar -xpf out/changes.tar -C copy --exclude='.wh.*'");
    assert_eq!(sh(&copy, LIST), inside, "the exported changes over the base give the tree the command saw");
}

#[test]
fn run_says_what_is_missing_in_one_line() {
    let out = Command::new(env!("CARGO_BIN_EXE_uvfs"))
        .args(["run", "--overlay", "/nonexistent", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("uvfs run: --overlay /nonexistent:"), "{err}");
}
