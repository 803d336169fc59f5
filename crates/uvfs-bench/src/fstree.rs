//! `uvfs bench --case fstree` (seed 004, the inode-hash half): T threads, each with its
//! own tree of D directories x F empty files on a host directory, `stat` every file once
//! with cold caches. Mateusz Guzik's fstree benchmark (20 x 1000 x 1000 on ext4: 46.1 s
//! before the lockless inode-hash probe, 21.6 s after).
//!
//! Targets ([`FsTreeTarget::ALL`]):
//! - `kernel`: the same walk with direct `fstatat(AT_FDCWD, path)` calls.
//! - `uvfs`: a fresh instance whose root is a hostfs over the tree, so every dentry and
//!   inode is cold: each file costs a locked-tier lookup, one host `fstatat` and an
//!   inode-cache insert. The hostfs is built with `HostChanges::Never` (the host is
//!   promised not to change), so nothing but the inode-cache probe differs from
//!   `uvfs-no-inode-hash`.
//! - `uvfs-no-inode-hash`: the same with the inode-cache probe under its lock (the seed's
//!   comparison).
//! - `uvfs-revalidate`: every fast path, hostfs with its default `HostChanges::Revalidate
//!   { max_age: 0 }`: each cached directory name on the path is checked against the host
//!   (one `fstatat`) before use, which is what serving a host directory that may change
//!   costs.
//!
//! The host's own caches are warm after the tree is created (the kernel target is
//! therefore a warm-dcache kernel scan, unlike the seed's cache-busting ext4 run); uvfs's
//! caches are cold on every run. Runs are wall-clock seconds, lower is better.
//!
//! The tree is created once (with progress on stderr) under `--tmpfs` as
//! `uvfs-fstree-TxDxF` and reused by later runs; delete it to reclaim the space.

use std::ffi::CString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use uvfs::fs::hostfs::{HostChanges, HostFs, HostFsOptions};
use uvfs::{FastPaths, Vfs, VfsConfig};

/// Sizes of one fstree run.
#[derive(Clone, Copy, Debug)]
pub struct FsTreeSizes {
    /// Threads, each with its own tree.
    pub threads: usize,
    /// Directories per tree.
    pub dirs: usize,
    /// Files per directory.
    pub files: usize,
    /// Runs per target.
    pub runs: usize,
}

impl FsTreeSizes {
    /// The defaults for this machine: 2 x 1000 x 1000 (`--quick`: 2 x 50 x 200).
    pub fn new(threads: Option<usize>, quick: bool) -> FsTreeSizes {
        let threads = threads.unwrap_or(2);
        if quick {
            FsTreeSizes { threads, dirs: 50, files: 200, runs: 3 }
        } else {
            FsTreeSizes { threads, dirs: 1000, files: 1000, runs: 3 }
        }
    }
}

/// Creates the trees under `base` unless a previous run completed them.
pub fn ensure_tree(base: &Path, s: FsTreeSizes) -> Result<(), String> {
    let done = base.join(".complete");
    if done.exists() {
        return Ok(());
    }
    std::fs::create_dir_all(base).map_err(|e| format!("{}: {e}", base.display()))?;
    let total = s.threads * s.dirs;
    let made = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    std::thread::scope(|sc| -> Result<(), String> {
        let workers: Vec<_> = (0..s.threads)
            .map(|t| {
                let made = made.clone();
                sc.spawn(move || -> Result<(), String> {
                    for d in 0..s.dirs {
                        let dir = base.join(format!("t{t}/d{d}"));
                        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                        for f in 0..s.files {
                            let p = dir.join(format!("f{f}"));
                            std::fs::File::create(&p).map_err(|e| format!("{}: {e}", p.display()))?;
                        }
                        let n = made.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                        if t == 0 && (n.is_multiple_of(20) || n == total) {
                            eprint!(
                                "\rfstree: creating {} x {} x {} under {}: {n}/{total} dirs ({:.0} s)",
                                s.threads,
                                s.dirs,
                                s.files,
                                base.display(),
                                start.elapsed().as_secs_f64()
                            );
                            let _ = std::io::stderr().flush();
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for w in workers {
            w.join().map_err(|_| "tree creation panicked".to_string())??;
        }
        Ok(())
    })?;
    eprintln!();
    std::fs::write(&done, b"").map_err(|e| format!("{}: {e}", done.display()))?;
    Ok(())
}

/// Which walk a run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsTreeTarget {
    /// Direct host syscalls.
    Kernel,
    /// uvfs over a hostfs of the tree.
    Uvfs {
        /// The instance's fast paths.
        fast: FastPaths,
        /// The hostfs's promise about host changes.
        changes: HostChanges,
    },
}

/// Revalidation of every cached name on every use: hostfs's default.
const REVALIDATE: HostChanges = HostChanges::Revalidate { max_age: std::time::Duration::ZERO };

impl FsTreeTarget {
    /// Every target, in the order run and printed.
    pub const ALL: [FsTreeTarget; 4] = [
        FsTreeTarget::Kernel,
        FsTreeTarget::Uvfs { fast: FastPaths::all(), changes: HostChanges::Never },
        FsTreeTarget::Uvfs { fast: FastPaths::all().difference(FastPaths::INODE_HASH), changes: HostChanges::Never },
        FsTreeTarget::Uvfs { fast: FastPaths::all(), changes: REVALIDATE },
    ];

    /// As printed: `uvfs`, then `-no-inode-hash` without the lockless probe and
    /// `-revalidate` when the host may change.
    pub fn name(self) -> &'static str {
        match self {
            FsTreeTarget::Kernel => "kernel",
            FsTreeTarget::Uvfs { fast, changes } => {
                match (fast.contains(FastPaths::INODE_HASH), changes == HostChanges::Never) {
                    (true, true) => "uvfs",
                    (false, true) => "uvfs-no-inode-hash",
                    (true, false) => "uvfs-revalidate",
                    (false, false) => "uvfs-no-inode-hash-revalidate",
                }
            }
        }
    }

    /// The JSON form of the target's settings: `host_changes` (`"never"` or
    /// `"revalidate"`, with `max_age_ns`) and `inode_hash` for the uvfs targets.
    fn json(self) -> serde_json::Value {
        match self {
            FsTreeTarget::Kernel => serde_json::json!({ "target": self.name() }),
            FsTreeTarget::Uvfs { fast, changes } => {
                let changes = match changes {
                    HostChanges::Never => serde_json::json!({ "mode": "never" }),
                    HostChanges::Revalidate { max_age } => {
                        serde_json::json!({ "mode": "revalidate", "max_age_ns": max_age.as_nanos() as u64 })
                    }
                };
                serde_json::json!({
                    "target": self.name(),
                    "inode_hash": fast.contains(FastPaths::INODE_HASH),
                    "host_changes": changes,
                })
            }
        }
    }
}

/// One run: every thread stats every file of its tree; wall seconds.
pub fn run_once(base: &Path, s: FsTreeSizes, target: FsTreeTarget) -> Result<f64, String> {
    let vfs = match target {
        FsTreeTarget::Kernel => None,
        FsTreeTarget::Uvfs { fast, changes } => {
            let fs = HostFs::with_options(base, HostFsOptions { changes, ..HostFsOptions::default() })
                .map_err(|e| format!("hostfs {}: {e:?}", base.display()))?;
            Some(
                Vfs::with_root(VfsConfig { fast_paths: fast, ..VfsConfig::default() }, Box::new(fs))
                    .map_err(|e| format!("hostfs root: {e:?}"))?,
            )
        }
    };
    let start = Instant::now();
    std::thread::scope(|sc| -> Result<(), String> {
        let workers: Vec<_> = (0..s.threads)
            .map(|t| {
                let vfs = vfs.clone();
                sc.spawn(move || -> Result<(), String> {
                    match vfs {
                        None => {
                            let root = base.to_string_lossy().into_owned();
                            for d in 0..s.dirs {
                                for f in 0..s.files {
                                    let p = CString::new(format!("{root}/t{t}/d{d}/f{f}")).unwrap();
                                    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
                                    // SAFETY: a NUL-terminated path and a buffer of the right size.
                                    let rc = unsafe { libc::fstatat(libc::AT_FDCWD, p.as_ptr(), st.as_mut_ptr(), 0) };
                                    if rc != 0 {
                                        return Err(format!("stat {p:?}: {}", std::io::Error::last_os_error()));
                                    }
                                }
                            }
                        }
                        Some(vfs) => {
                            let task = vfs.root_task();
                            for d in 0..s.dirs {
                                for f in 0..s.files {
                                    let p = format!("/t{t}/d{d}/f{f}");
                                    task.stat(p.as_bytes()).map_err(|e| format!("uvfs stat {p}: {e:?}"))?;
                                }
                            }
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for w in workers {
            w.join().map_err(|_| "worker panicked".to_string())??;
        }
        Ok(())
    })?;
    let secs = start.elapsed().as_secs_f64();
    // Tearing the instance down is not part of the scan.
    drop(vfs);
    Ok(secs)
}

/// `uvfs bench --case fstree`: creates the tree if needed, runs every target `runs`
/// times (interleaved), prints a table. Exit status 0, or 1 on an error.
pub fn main(tmpfs: &Path, threads: Option<usize>, quick: bool, json: bool) -> std::process::ExitCode {
    let s = FsTreeSizes::new(threads, quick);
    let base: PathBuf = tmpfs.join(format!("uvfs-fstree-{}x{}x{}", s.threads, s.dirs, s.files));
    if let Err(e) = ensure_tree(&base, s) {
        eprintln!("uvfs bench: fstree: {e}");
        return std::process::ExitCode::from(1);
    }
    let mut results: Vec<(FsTreeTarget, Vec<f64>)> = FsTreeTarget::ALL.iter().map(|&t| (t, Vec::new())).collect();
    for run in 0..s.runs {
        for (t, v) in results.iter_mut() {
            if !json {
                eprint!("\rfstree: run {}/{} {:<20}", run + 1, s.runs, t.name());
            }
            match run_once(&base, s, *t) {
                Ok(secs) => v.push(secs),
                Err(e) => {
                    eprintln!("\nuvfs bench: fstree {}: {e}", t.name());
                    return std::process::ExitCode::from(1);
                }
            }
        }
    }
    let files = s.threads * s.dirs * s.files;
    if json {
        let rows: Vec<serde_json::Value> = results
            .iter()
            .map(|(t, v)| {
                let mut row = t.json();
                row["seconds"] = serde_json::json!(v);
                row
            })
            .collect();
        let out = serde_json::json!({
            "case": "fstree", "threads": s.threads, "dirs": s.dirs, "files": s.files, "runs": rows,
        });
        println!("{out}");
    } else {
        eprintln!();
        println!(
            "fstree (seed 004): {} threads x {} dirs x {} files = {files} stats, cold uvfs caches, {} runs",
            s.threads, s.dirs, s.files, s.runs
        );
        println!("{:<20} {:>10} {:>10} {:>14}   runs (s)", "target", "median s", "min s", "stats/s");
        for (t, v) in &results {
            let mut sorted = v.clone();
            sorted.sort_by(f64::total_cmp);
            let med = sorted[sorted.len() / 2];
            let runs: Vec<String> = v.iter().map(|x| format!("{x:.3}")).collect();
            println!(
                "{:<20} {:>10.3} {:>10.3} {:>14.0}   {}",
                t.name(),
                med,
                sorted[0],
                files as f64 / med,
                runs.join(" ")
            );
        }
    }
    std::process::ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_and_names() {
        let names: Vec<&str> = FsTreeTarget::ALL.iter().map(|t| t.name()).collect();
        assert_eq!(names, ["kernel", "uvfs", "uvfs-no-inode-hash", "uvfs-revalidate"]);
        // The seed's pair differs only in the inode-cache probe, with trusted caches.
        for t in &FsTreeTarget::ALL[1..3] {
            assert!(matches!(t, FsTreeTarget::Uvfs { changes: HostChanges::Never, .. }), "{t:?}");
        }
        assert!(matches!(
            FsTreeTarget::ALL[3],
            FsTreeTarget::Uvfs { fast, changes: HostChanges::Revalidate { .. } } if fast == FastPaths::all()
        ));
        let j = FsTreeTarget::ALL[3].json();
        assert_eq!(j["target"], "uvfs-revalidate");
        assert_eq!(j["inode_hash"], true);
        assert_eq!(j["host_changes"]["mode"], "revalidate");
        assert_eq!(j["host_changes"]["max_age_ns"], 0);
        assert_eq!(FsTreeTarget::ALL[1].json()["host_changes"]["mode"], "never");
    }

    #[test]
    fn every_target_scans_a_small_tree() {
        let base = std::env::temp_dir().join(format!("uvfs-fstree-test-{}", std::process::id()));
        let s = FsTreeSizes { threads: 2, dirs: 3, files: 4, runs: 1 };
        ensure_tree(&base, s).unwrap();
        assert!(base.join("t1/d2/f3").exists());
        for t in FsTreeTarget::ALL {
            let secs = run_once(&base, s, t).unwrap_or_else(|e| panic!("{}: {e}", t.name()));
            assert!(secs >= 0.0);
        }
        std::fs::remove_dir_all(&base).unwrap();
    }
}
