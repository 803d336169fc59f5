//! The `uvfs` binary's handling of bad input: one line naming the problem, exit 2, no
//! panic and no hang. These runs fail before anything is measured.

use std::process::{Command, Output};

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
