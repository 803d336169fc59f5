//! Targets: what a case is measured against.
//!
//! Every case runs the same loop on several targets in one run: the host `kernel`, `uvfs`
//! with all fast paths on, and `uvfs-no-*` with one fast path switched off (forcing the
//! general path, see `uvfs::FastPaths`), and `fuse`: the kernel's syscalls on a fresh
//! memfs served through FUSE by `uvfs-fuse` in-process, kernel caching off, for the cases
//! where it applies (see `run::fuse_blocker`). Adding a target is one entry in [`TARGETS`] and one arm where backends are
//! made (`cases::run_target`).
//!
//! **Baselines.** `uvfs` and `fuse` are compared with `kernel` (uvfs against the host);
//! each `uvfs-no-*` is compared with `uvfs` (what the fast path is worth). `kernel` has
//! no baseline.

use uvfs::FastPaths;

/// How a target is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetKind {
    /// Real syscalls on a tmpfs directory.
    Kernel,
    /// uvfs in-process with these fast paths switched *off*.
    Uvfs {
        /// Fast paths removed from the default (all on).
        off: FastPaths,
    },
    /// Kernel syscalls through a FUSE mount of uvfs (caching off).
    Fuse,
}

/// A named target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// The name used on the command line, in tables and in JSON.
    pub name: &'static str,
    /// How it is made.
    pub kind: TargetKind,
    /// The target this one is compared with.
    pub baseline: Option<&'static str>,
}

impl Target {
    /// The fast paths in force for a uvfs target.
    pub fn fast_paths(&self) -> Option<FastPaths> {
        match self.kind {
            TargetKind::Uvfs { off } => Some(FastPaths::all() - off),
            _ => None,
        }
    }
}

const fn uvfs_off(name: &'static str, off: FastPaths) -> Target {
    Target { name, kind: TargetKind::Uvfs { off }, baseline: Some("uvfs") }
}

/// Every target, in table order.
pub const TARGETS: &[Target] = &[
    Target { name: "kernel", kind: TargetKind::Kernel, baseline: None },
    Target { name: "uvfs", kind: TargetKind::Uvfs { off: FastPaths::empty() }, baseline: Some("kernel") },
    Target { name: "fuse", kind: TargetKind::Fuse, baseline: Some("kernel") },
    uvfs_off("uvfs-no-lockless", FastPaths::LOCKLESS_WALK),
    uvfs_off("uvfs-no-failed-open", FastPaths::FAILED_OPEN),
    uvfs_off("uvfs-no-symlink-cache", FastPaths::SYMLINK_CACHE),
    uvfs_off("uvfs-no-acl", FastPaths::ACL),
    uvfs_off("uvfs-no-notify", FastPaths::NOTIFY),
    uvfs_off("uvfs-no-inode-hash", FastPaths::INODE_HASH),
    uvfs_off("uvfs-no-path-cache", FastPaths::PATH_CACHE),
];

/// Looks a target up by name.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// The `uvfs-no-*` target that switches off `fp`.
pub fn switch_target(fp: FastPaths) -> &'static Target {
    TARGETS
        .iter()
        .find(|t| matches!(t.kind, TargetKind::Uvfs { off } if off == fp))
        .expect("every fast path has a uvfs-no-* target")
}

/// Names of all targets, comma separated (for messages and help).
pub fn target_names() -> String {
    TARGETS.iter().map(|t| t.name).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_baselines_exist() {
        for (i, t) in TARGETS.iter().enumerate() {
            assert!(TARGETS[i + 1..].iter().all(|u| u.name != t.name), "{}", t.name);
            if let Some(b) = t.baseline {
                assert!(target(b).is_some(), "{} baseline {b}", t.name);
                // Baselines come first so tables read top-down.
                assert!(TARGETS.iter().position(|u| u.name == b).unwrap() < i);
            }
        }
    }

    #[test]
    fn every_fast_path_has_an_off_switch() {
        for fp in FastPaths::all().iter() {
            let t = switch_target(fp);
            assert_eq!(t.fast_paths(), Some(FastPaths::all() - fp));
            assert_eq!(t.baseline, Some("uvfs"));
        }
        assert_eq!(target("uvfs").unwrap().fast_paths(), Some(FastPaths::all()));
        assert_eq!(target("kernel").unwrap().fast_paths(), None);
        assert_eq!(target("nope"), None);
    }
}
