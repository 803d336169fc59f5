//! Where a test makes its scratch directories. `scripts/runner` (cargo's runner in this
//! workspace) makes one of its own under `/tmp` (as `TMPDIR`), `/dev/shm` and `/var/tmp`,
//! all named by `UVFS_SCRATCH`, and removes them when the test binary ends, however it
//! ends (a killed test runs no `Drop`). Shared by the test crates (`#[path]`).

use std::path::{Path, PathBuf};

/// The directory to make scratch directories in on the filesystem of `base` (`/dev/shm`
/// for tmpfs, `/var/tmp` for the host's disk): the runner's one there, or `base` itself
/// for a test binary started without the runner.
#[allow(dead_code)]
pub fn scratch_in(base: &str) -> PathBuf {
    if let Some(id) = std::env::var_os("UVFS_SCRATCH") {
        let p = Path::new(base).join(id);
        if p.is_dir() {
            return p;
        }
    }
    PathBuf::from(base)
}
