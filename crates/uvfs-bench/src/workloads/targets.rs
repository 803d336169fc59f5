//! The targets of the workloads and the directory each round runs in (a [`Site`]).
//!
//! | target | where the workloads run | cold step |
//! |---|---|---|
//! | `tmpfs` | a fresh directory on `--tmpfs` (`/dev/shm`): the physical limit | none (n/a) |
//! | `hostdir` | a fresh directory on `--hostdir` (`/var/tmp`, the host disk) | `drop_caches` |
//! | `uvfs-memfs` | `uvfs mount` (memfs) on a fresh mount point | `drop_caches` (the kernel's side; memfs keeps its data) |
//! | `uvfs-hostfs` | `uvfs mount --fs host:DIR`, DIR fresh on `--hostdir` | remount + `drop_caches` |
//! | `uvfs-hostfs-unchanged` | the same with `--host-unchanged` | remount + `drop_caches` |
//! | `--target-cmd NAME=CMD` | CMD with `{mnt}` (and `{src}`, a fresh host directory) | remount + `drop_caches` with `{src}`, `drop_caches` without |
//!
//! Every `uvfs mount` gets the `--mount-opt` arguments. `drop_caches` (`sync; echo 3 >
//! /proc/sys/vm/drop_caches`) needs root; without it only the remount is left.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::cleanup::ScratchDir;
use super::daemon::{Daemon, Requests};

/// What a uvfs mount serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    /// memfs.
    Memfs,
    /// A host directory through hostfs; `unchanged`: `--host-unchanged`.
    Host {
        /// `--host-unchanged`.
        unchanged: bool,
    },
}

/// How a target is made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A directory on a tmpfs.
    Tmpfs,
    /// A directory on the host disk.
    HostDir,
    /// `uvfs mount` as a separate process.
    Uvfs(Served),
    /// A peer FUSE server started with this shell command.
    Peer(String),
}

/// A target of the workloads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// As on the command line and in tables.
    pub name: String,
    /// How it is made.
    pub kind: Kind,
}

/// The built-in targets, in table order.
pub const BUILTIN: [&str; 5] = ["tmpfs", "hostdir", "uvfs-memfs", "uvfs-hostfs", "uvfs-hostfs-unchanged"];

/// How the caches of a target are made cold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cold {
    /// There are no caches apart from the data (tmpfs).
    NotApplicable,
    /// `drop_caches`.
    DropCaches,
    /// Restart the server, then `drop_caches` (where allowed).
    Remount,
}

impl Target {
    /// A built-in target by name.
    pub fn builtin(name: &str) -> Option<Target> {
        let kind = match name {
            "tmpfs" => Kind::Tmpfs,
            "hostdir" => Kind::HostDir,
            "uvfs-memfs" => Kind::Uvfs(Served::Memfs),
            "uvfs-hostfs" => Kind::Uvfs(Served::Host { unchanged: false }),
            "uvfs-hostfs-unchanged" => Kind::Uvfs(Served::Host { unchanged: true }),
            _ => return None,
        };
        Some(Target { name: name.to_string(), kind })
    }

    /// Parses `--target-cmd NAME=CMD`: NAME of letters, digits, `-`, `_`, `.`, not a
    /// built-in; CMD with `{mnt}`.
    pub fn peer(spec: &str) -> Result<Target, String> {
        let (name, cmd) = spec.split_once('=').ok_or_else(|| format!("--target-cmd '{spec}': expected NAME=CMD"))?;
        let (name, cmd) = (name.trim(), cmd.trim());
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            return Err(format!("--target-cmd '{spec}': NAME must be letters, digits, '-', '_' or '.'"));
        }
        if BUILTIN.contains(&name) {
            return Err(format!("--target-cmd '{spec}': {name} is a built-in target"));
        }
        if !cmd.contains("{mnt}") {
            return Err(format!("--target-cmd '{spec}': CMD must contain {{mnt}} (where to mount)"));
        }
        Ok(Target { name: name.to_string(), kind: Kind::Peer(cmd.to_string()) })
    }

    /// Whether a FUSE server process serves it.
    pub fn is_mount(&self) -> bool {
        matches!(self.kind, Kind::Uvfs(_) | Kind::Peer(_))
    }

    /// Whether its data ends up in a host directory (compared with `hostdir` too).
    pub fn host_backed(&self) -> bool {
        match &self.kind {
            Kind::HostDir | Kind::Uvfs(Served::Host { .. }) => true,
            Kind::Peer(cmd) => cmd.contains("{src}"),
            Kind::Tmpfs | Kind::Uvfs(Served::Memfs) => false,
        }
    }

    /// How its caches are made cold.
    pub fn cold(&self) -> Cold {
        match &self.kind {
            Kind::Tmpfs => Cold::NotApplicable,
            Kind::HostDir | Kind::Uvfs(Served::Memfs) => Cold::DropCaches,
            Kind::Uvfs(Served::Host { .. }) => Cold::Remount,
            Kind::Peer(_) if self.host_backed() => Cold::Remount,
            Kind::Peer(_) => Cold::DropCaches,
        }
    }

    /// The cold step in words, for tables and JSON (`can_drop`: `drop_caches` allowed).
    pub fn cold_words(&self, can_drop: bool) -> &'static str {
        match (self.cold(), can_drop) {
            (Cold::NotApplicable, _) => "n/a",
            (Cold::DropCaches, true) => "drop_caches",
            (Cold::DropCaches, false) => "n/a (drop_caches needs root)",
            (Cold::Remount, true) => "remount + drop_caches",
            (Cold::Remount, false) => "remount",
        }
    }

    /// The server's command line, for a mount target.
    fn command(&self, env: &Env, mnt: &Path, src: Option<&Path>) -> Option<Command> {
        match &self.kind {
            Kind::Tmpfs | Kind::HostDir => None,
            Kind::Uvfs(served) => {
                let mut c = Command::new(&env.uvfs_bin);
                c.arg("mount");
                match (served, src) {
                    (Served::Host { unchanged }, Some(src)) => {
                        c.arg("--fs").arg(format!("host:{}", src.display()));
                        if *unchanged {
                            c.arg("--host-unchanged");
                        }
                    }
                    _ => {
                        c.args(["--fs", "memfs"]);
                    }
                }
                if env.counts {
                    c.arg("--stats");
                }
                c.args(&env.mount_opts).arg(mnt);
                Some(c)
            }
            Kind::Peer(cmd) => {
                let mut line = cmd.replace("{mnt}", &mnt.to_string_lossy());
                if let Some(src) = src {
                    line = line.replace("{src}", &src.to_string_lossy());
                }
                let mut c = Command::new("sh");
                c.arg("-c").arg(line);
                Some(c)
            }
        }
    }

    /// The command line in words (JSON, the log).
    pub fn command_words(&self, env: &Env) -> Option<String> {
        let c = self.command(env, Path::new("{mnt}"), Some(Path::new("{src}")))?;
        let mut w = vec![c.get_program().to_string_lossy().into_owned()];
        w.extend(c.get_args().map(|a| a.to_string_lossy().into_owned()));
        Some(w.join(" "))
    }
}

/// How many empty round trips [`Site::round_trip_us`] times.
pub const RTT_CALLS: u64 = 2000;

/// What every round of a run shares.
#[derive(Debug)]
pub struct Env {
    /// Scratch space on the tmpfs (stage, tar, logs, the tmpfs target).
    pub tmp: ScratchDir,
    /// Scratch space on the host disk (hostdir, hostfs sources, mount points).
    pub host: ScratchDir,
    /// The `uvfs` binary.
    pub uvfs_bin: PathBuf,
    /// Extra `uvfs mount` arguments.
    pub mount_opts: Vec<String>,
    /// Whether `drop_caches` may be written (root).
    pub can_drop: bool,
    /// Whether [`Env::uvfs_bin`]'s `mount --stats` prints its counts on `SIGUSR1` (an
    /// older binary given with `--uvfs-bin` would die of it): the uvfs targets then count
    /// each workload's round trips.
    pub counts: bool,
}

impl Env {
    /// Whether `uvfs mount` of `bin` says it prints its counts on `SIGUSR1`.
    pub fn counts_supported(bin: &Path) -> bool {
        Command::new(bin)
            .args(["mount", "--help"])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("`SIGUSR1` prints the counts"))
    }
}

/// `sync`, then drop the page cache, dentries and inodes.
pub fn drop_caches() -> Result<(), String> {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3").map_err(|e| format!("drop_caches: {e}"))
}

/// Where one round runs on one target: a fresh directory, and for a mount target its
/// server. Owned and used by the main thread only. Fields drop in order: the server
/// (unmounting) before the directories.
#[derive(Debug)]
pub struct Site {
    /// The directory the workloads run in (the mount point for a mount target).
    pub work: PathBuf,
    /// The server of a mount target.
    daemon: Option<Daemon>,
    /// The host directory a host-backed server serves.
    src: Option<PathBuf>,
    /// Servers started so far (names their logs).
    starts: usize,
    /// Log file prefix.
    log: PathBuf,
    /// The target.
    target: Target,
    /// Immutable: the server counts requests ([`Env::counts`]).
    counts: bool,
    /// Directories of this round, removed last.
    _dirs: Vec<ScratchDir>,
}

impl Site {
    /// Makes the directory of round `round` (and starts the server).
    pub fn open(target: &Target, env: &Env, round: usize) -> Result<Site, String> {
        let tag = format!("{}-r{round}", target.name);
        let mut dirs = Vec::new();
        let (work, src) = match target.kind {
            Kind::Tmpfs => {
                dirs.push(ScratchDir::create(env.tmp.path().join(&tag))?);
                (dirs[0].path().to_path_buf(), None)
            }
            Kind::HostDir => {
                dirs.push(ScratchDir::create(env.host.path().join(&tag))?);
                (dirs[0].path().to_path_buf(), None)
            }
            Kind::Uvfs(_) | Kind::Peer(_) => {
                let src = if target.host_backed() {
                    dirs.push(ScratchDir::create(env.host.path().join(format!("{tag}-src")))?);
                    Some(dirs[0].path().to_path_buf())
                } else {
                    None
                };
                let mnt = ScratchDir::create(env.host.path().join(format!("{tag}-mnt")))?;
                let work = mnt.path().to_path_buf();
                dirs.push(mnt);
                (work, src)
            }
        };
        let mut site = Site {
            work,
            daemon: None,
            src,
            starts: 0,
            log: env.tmp.path().join(format!("{tag}-server")),
            target: target.clone(),
            counts: env.counts,
            _dirs: dirs,
        };
        site.start(env)?;
        Ok(site)
    }

    fn start(&mut self, env: &Env) -> Result<(), String> {
        if let Some(cmd) = self.target.command(env, &self.work, self.src.as_deref()) {
            self.starts += 1;
            let log = self.log.with_extension(format!("{}.log", self.starts));
            self.daemon = Some(Daemon::start(cmd, &self.work, &log)?);
        }
        Ok(())
    }

    /// Makes the caches cold; `Ok(false)` when there is nothing to make cold here.
    pub fn cold(&mut self, env: &Env) -> Result<bool, String> {
        match self.target.cold() {
            Cold::NotApplicable => return Ok(false),
            Cold::DropCaches if !env.can_drop => return Ok(false),
            Cold::DropCaches => {}
            Cold::Remount => {
                if let Some(mut d) = self.daemon.take() {
                    d.stop().map_err(|e| format!("stopping the server for the remount: {e}"))?;
                }
                self.start(env)?;
            }
        }
        if env.can_drop {
            drop_caches()?;
        }
        Ok(true)
    }

    /// CPU time of the server so far (`None` for a directory target).
    pub fn cpu(&self) -> Option<Duration> {
        self.daemon.as_ref().map(Daemon::cpu)
    }

    /// The mean time of an empty round trip to the server, in microseconds: a
    /// `getxattr` of a name that does not exist on the mount's root, which the kernel
    /// sends as a GETXATTR every time (it caches no extended attributes), [`RTT_CALLS`]
    /// of them. Only where the requests are counted, and only if the count grew by
    /// exactly that many (each call one round trip), else `None`.
    pub fn round_trip_us(&self) -> Option<f64> {
        let path = std::ffi::CString::new(self.work.as_os_str().as_encoded_bytes()).ok()?;
        let missing = || {
            // SAFETY: valid C strings; a null buffer of size 0 asks for the size only.
            let r = unsafe { libc::getxattr(path.as_ptr(), c"user.uvfs-bench-rtt".as_ptr(), std::ptr::null_mut(), 0) };
            r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENODATA)
        };
        // A first call outside the count: whatever a fresh mount's first access asks.
        if !missing() {
            return None;
        }
        let before = self.requests()?.waited();
        let start = std::time::Instant::now();
        for _ in 0..RTT_CALLS {
            if !missing() {
                return None;
            }
        }
        let took = start.elapsed();
        let after = self.requests()?.waited();
        (after.saturating_sub(before) == RTT_CALLS).then(|| took.as_secs_f64() * 1e6 / RTT_CALLS as f64)
    }

    /// The requests the server received so far: a uvfs target started with `--stats`
    /// ([`Env::counts`]) only, `None` elsewhere (peers are never signalled).
    pub fn requests(&self) -> Option<Requests> {
        match self.target.kind {
            Kind::Uvfs(_) if self.counts => self.daemon.as_ref()?.requests(),
            _ => None,
        }
    }

    /// Stops the server and removes the directories; an error says what did not go
    /// cleanly (everything is released either way).
    pub fn close(mut self) -> Result<(), String> {
        match self.daemon.take() {
            Some(mut d) => d.stop(),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_and_their_cold_steps() {
        let t = |n| Target::builtin(n).unwrap();
        assert_eq!(t("tmpfs").cold(), Cold::NotApplicable);
        assert_eq!(t("hostdir").cold(), Cold::DropCaches);
        assert_eq!(t("uvfs-memfs").cold(), Cold::DropCaches);
        assert_eq!(t("uvfs-hostfs").cold(), Cold::Remount);
        assert_eq!(t("uvfs-hostfs-unchanged").kind, Kind::Uvfs(Served::Host { unchanged: true }));
        assert!(t("uvfs-hostfs").host_backed() && t("hostdir").host_backed() && !t("uvfs-memfs").host_backed());
        assert!(!t("tmpfs").is_mount() && t("uvfs-memfs").is_mount());
        assert!(Target::builtin("kernel").is_none());
        assert_eq!(t("uvfs-hostfs").cold_words(false), "remount");
        for n in BUILTIN {
            assert_eq!(t(n).name, n);
        }
    }

    #[test]
    fn peer_specs() {
        let p = Target::peer("bindfs=bindfs -f {src} {mnt}").unwrap();
        assert_eq!(p.name, "bindfs");
        assert_eq!(p.kind, Kind::Peer("bindfs -f {src} {mnt}".into()));
        assert!(p.host_backed() && p.is_mount());
        assert_eq!(p.cold(), Cold::Remount);
        let m = Target::peer("go-memfs = memfs {mnt}").unwrap();
        assert_eq!(m.name, "go-memfs");
        assert!(!m.host_backed());
        assert_eq!(m.cold(), Cold::DropCaches);
        for (bad, why) in [
            ("bindfs", "expected NAME=CMD"),
            ("=x {mnt}", "NAME must be"),
            ("a b=x {mnt}", "NAME must be"),
            ("tmpfs=x {mnt}", "built-in"),
            ("x=bindfs -f /a /b", "must contain {mnt}"),
        ] {
            let e = Target::peer(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
