//! A FUSE server run as a separate process, as users run it: `uvfs mount ...` in the
//! foreground, or a peer server's command line (`--target-cmd`).
//!
//! [`Daemon::start`] spawns it in a process group of its own (so a terminal's Ctrl-C
//! reaches the benchmark, which unmounts in order, not the server first) with
//! `PR_SET_PDEATHSIG = SIGTERM` (if the benchmark dies without cleaning up, e.g. SIGKILL,
//! `uvfs mount` still unmounts on its SIGTERM), then polls `/proc/self/mountinfo` until
//! the mount appears. [`Daemon::stop`] (and `Drop`) unmounts (a plain unmount; abort and
//! lazy detach if that fails), waits for the server to exit, then SIGTERM and SIGKILL to
//! the group if it does not, and reaps it. [`Daemon::cpu`] is the user + system CPU
//! time of the server and its descendants, from `/proc/PID/stat`.
//!
//! The server must stay in the foreground: a command that forks into the background
//! (bindfs without `-f`, `uvfs mount --daemon`) is refused once its mount appears.
//!
//! [`Daemon::requests`] asks a `uvfs mount --stats` for the requests it has received so
//! far (`SIGUSR1`; it prints them to its log) and reads them back ([`Requests`]); the
//! workloads take it before and after each workload, and the difference of
//! [`Requests::waited`] is the round trips the workload waited for.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::cleanup::{self, Item, Registration};

/// How long a server may take to mount.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a server is watched after it mounted, for exiting into the background.
const FORK_WATCH: Duration = Duration::from_millis(100);
/// The advice for a server that left the foreground.
const FOREGROUND: &str = "run the server in the foreground (e.g. bindfs -f, no --daemon)";
/// How long a server may take to exit once unmounted.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a server may take to print its counts when asked.
const COUNTS_TIMEOUT: Duration = Duration::from_secs(2);
/// What starts the line of counts `uvfs mount --stats` prints.
const COUNTS_LINE: &str = "uvfs mount: ";

/// The requests a `uvfs mount --stats` received, by opcode (its counts line parsed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requests(pub BTreeMap<String, u64>);

impl Requests {
    /// Opcodes the caller does not wait for: the kernel sends RELEASE and RELEASEDIR in
    /// the background, and FORGET, BATCH_FORGET and INTERRUPT get no reply.
    const ASYNC: [&'static str; 5] = ["RELEASE", "RELEASEDIR", "FORGET", "BATCH_FORGET", "INTERRUPT"];

    /// Parses `uvfs mount: N requests (P taken by busy polling): OP n, OP n, ...`; `None`
    /// for any other line, or one whose counts do not add up to N.
    pub fn parse(line: &str) -> Option<Requests> {
        let rest = line.strip_prefix(COUNTS_LINE)?;
        let (total, rest) = rest.split_once(" requests (")?;
        let total: u64 = total.parse().ok()?;
        let (_, list) = rest.split_once("): ")?;
        let mut m = BTreeMap::new();
        for item in list.trim_end().split(", ").filter(|i| !i.is_empty()) {
            let (op, n) = item.rsplit_once(' ')?;
            m.insert(op.to_string(), n.parse().ok()?);
        }
        (m.values().sum::<u64>() == total).then_some(Requests(m))
    }

    /// All requests.
    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }

    /// The requests a caller waited for the reply of: all but RELEASE, RELEASEDIR,
    /// FORGET, BATCH_FORGET and INTERRUPT.
    pub fn waited(&self) -> u64 {
        self.0.iter().filter(|(op, _)| !Self::ASYNC.contains(&op.as_str())).map(|(_, n)| n).sum()
    }
}

/// A running FUSE server and its mount.
#[derive(Debug)]
pub struct Daemon {
    /// The server process (`None` once reaped). Owned by the main thread.
    child: Option<Child>,
    /// Where it mounts (immutable).
    mountpoint: PathBuf,
    /// Its stdout and stderr (immutable).
    log: PathBuf,
    /// Registered for the signal handler until reaped.
    _reg: Registration,
}

impl Daemon {
    /// Spawns `cmd` (its stdout/stderr go to `log`) and waits until a FUSE filesystem
    /// is mounted on `mountpoint`. Call it from the main thread: the death signal is
    /// tied to the thread that forks.
    pub fn start(mut cmd: Command, mountpoint: &Path, log: &Path) -> Result<Daemon, String> {
        let out = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| format!("{}: {e}", log.display()))?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err).process_group(0);
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let what = format!("{:?}", cmd);
        let child = cmd.spawn().map_err(|e| format!("cannot start {what}: {e}"))?;
        let reg = cleanup::register(Item::Server { pgid: child.id() as i32, mountpoint: mountpoint.to_path_buf() });
        let mut d =
            Daemon { child: Some(child), mountpoint: mountpoint.to_path_buf(), log: log.to_path_buf(), _reg: reg };
        let start = Instant::now();
        loop {
            if cleanup::is_fuse_mount(mountpoint) {
                // A server that forks away exits right after mounting: watch it briefly.
                let t = Instant::now();
                while t.elapsed() < FORK_WATCH {
                    if let Some(st) = d.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                        let _ = d.stop();
                        return Err(format!("{what} went to the background ({st}) once mounted: {FOREGROUND}"));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                return Ok(d);
            }
            if let Some(st) = d.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                let tail = d.log_tail();
                d.child = None;
                return Err(format!("{what} exited ({st}) before mounting: {tail}"));
            }
            if cleanup::interrupted() {
                let _ = d.stop();
                return Err("interrupted".into());
            }
            if start.elapsed() > MOUNT_TIMEOUT {
                let tail = d.log_tail();
                let _ = d.stop();
                return Err(format!("{what} did not mount within {} s: {tail}", MOUNT_TIMEOUT.as_secs()));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The last lines the server printed.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(5)..].join(" | ");
        if tail.is_empty() { "(no output)".into() } else { tail }
    }

    /// The requests received so far, from a `uvfs mount --stats` (only such a server may
    /// be asked: `SIGUSR1` ends most other programs). `None` if it did not answer within
    /// two seconds.
    pub fn requests(&self) -> Option<Requests> {
        let pid = self.pid()?;
        let seen = std::fs::metadata(&self.log).map(|m| m.len()).ok()?;
        // SAFETY: no memory preconditions; the pid is our unreaped child's.
        if unsafe { libc::kill(pid as i32, libc::SIGUSR1) } != 0 {
            return None;
        }
        let start = Instant::now();
        while start.elapsed() < COUNTS_TIMEOUT {
            let text = std::fs::read(&self.log).unwrap_or_default();
            let new = String::from_utf8_lossy(text.get(seen as usize..).unwrap_or_default());
            // A whole line (the server writes its report at once).
            if let Some(r) = new.split_inclusive('\n').filter(|l| l.ends_with('\n')).find_map(Requests::parse) {
                return Some(r);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        None
    }

    /// The server's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// CPU time (user + system) of the server and its live descendants so far.
    pub fn cpu(&self) -> Duration {
        self.pid().map(tree_cpu).unwrap_or_default()
    }

    /// Unmounts, waits for the server to exit (signals it if it does not) and reaps it.
    /// An error says what did not go cleanly; everything is released either way.
    pub fn stop(&mut self) -> Result<(), String> {
        let Some(mut child) = self.child.take() else { return Ok(()) };
        let pgid = child.id() as i32;
        let mut problems = Vec::new();
        if let Ok(Some(st)) = child.try_wait()
            && cleanup::is_fuse_mount(&self.mountpoint)
        {
            // Its CPU time was not measured: the mount outlived the process we started.
            problems.push(format!("the server process exited ({st}) while its mount stayed: {FOREGROUND}"));
        }
        if cleanup::is_fuse_mount(&self.mountpoint)
            && let Err(e) = cleanup::unmount(&self.mountpoint, false)
        {
            problems.push(e);
            if !cleanup::force_unmount(&self.mountpoint) {
                problems.push(format!("{} is still mounted", self.mountpoint.display()));
            }
        }
        let deadline = Instant::now() + EXIT_TIMEOUT;
        let mut status = None;
        while Instant::now() < deadline {
            match child.try_wait() {
                Ok(Some(st)) => {
                    status = Some(st);
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => {
                    problems.push(format!("wait: {e}"));
                    break;
                }
            }
        }
        if status.is_none() {
            problems.push(format!("the server did not exit within {} s of the unmount", EXIT_TIMEOUT.as_secs()));
            for sig in [libc::SIGTERM, libc::SIGKILL] {
                // SAFETY: no memory preconditions; the group is the one we started.
                unsafe { libc::kill(-pgid, sig) };
                let t = Instant::now();
                while t.elapsed() < Duration::from_secs(3) {
                    if let Ok(Some(st)) = child.try_wait() {
                        status = Some(st);
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                if status.is_some() {
                    break;
                }
            }
            if status.is_none() {
                let _ = child.wait();
            }
        }
        // Helpers the server left in its group.
        // SAFETY: as above.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        // A server that forked away is no child of ours: it ends once unmounted.
        if let Some(e) = end_strays(&self.mountpoint) {
            problems.push(e);
        }
        if !cleanup::force_unmount(&self.mountpoint) {
            problems.push(format!("{} is still mounted", self.mountpoint.display()));
        }
        if problems.is_empty() { Ok(()) } else { Err(problems.join("; ")) }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Processes whose command line names `mountpoint`: servers that forked away from the
/// process we started (it can only be one of ours: the path is this run's own).
fn strays(mountpoint: &Path) -> Vec<i32> {
    let needle = mountpoint.as_os_str().as_encoded_bytes();
    let me = std::process::id();
    let Ok(rd) = std::fs::read_dir("/proc") else { return vec![] };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid as u32 != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.windows(needle.len()).any(|w| w == needle))
        })
        .collect()
}

/// Waits for stray servers of `mountpoint` to exit after the unmount, then signals them.
fn end_strays(mountpoint: &Path) -> Option<String> {
    let t = Instant::now();
    while t.elapsed() < EXIT_TIMEOUT {
        if strays(mountpoint).is_empty() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    for sig in [libc::SIGTERM, libc::SIGKILL] {
        for pid in strays(mountpoint) {
            // SAFETY: no memory preconditions; a server this run started (see strays).
            unsafe { libc::kill(pid, sig) };
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    Some(format!("a server of {} outside our process did not exit after the unmount", mountpoint.display()))
}

/// Clock ticks per second of `/proc/PID/stat`.
fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// (ppid, utime + stime in ticks) of a process, from `/proc/PID/stat`.
fn stat_of(pid: u32) -> Option<(u32, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    // rest[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
    let ppid = f.get(1)?.parse().ok()?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((ppid, utime + stime))
}

/// CPU time of `pid` and its live descendants.
pub fn tree_cpu(pid: u32) -> Duration {
    let mut procs: Vec<(u32, u32, u64)> = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            if let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok())
                && let Some((ppid, t)) = stat_of(p)
            {
                procs.push((p, ppid, t));
            }
        }
    }
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(procs.iter().filter(|(_, pp, _)| *pp == parent).map(|(p, _, _)| *p));
        i += 1;
    }
    let ticks: u64 = procs.iter().filter(|(p, _, _)| tree.contains(p)).map(|(_, _, t)| t).sum();
    Duration::from_secs_f64(ticks as f64 / ticks_per_second())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counts_line_parses_and_splits_what_callers_wait_for() {
        let r = Requests::parse(
            "uvfs mount: 20 requests (15 taken by busy polling): SETATTR 6, WRITE 5, RELEASE 4, FORGET 3, LOOKUP 2\n",
        )
        .unwrap();
        assert_eq!(r.total(), 20);
        assert_eq!(r.waited(), 13);
        assert_eq!(r.0.get("RELEASE"), Some(&4));
        assert_eq!(Requests::parse("uvfs mount: 0 requests (0 taken by busy polling): "), Some(Requests::default()));
        // Not a counts line, or counts that do not add up.
        assert_eq!(Requests::parse("uvfs mount: /dev/fuse followers woken by the device 3 times"), None);
        assert_eq!(Requests::parse("uvfs mount: 9 requests (0 taken by busy polling): GETATTR 2"), None);
        assert_eq!(Requests::parse("uvfs mount: 2 requests (0 taken by busy polling): GETATTR two"), None);
    }

    #[test]
    fn cpu_of_this_process_grows() {
        let me = std::process::id();
        let (ppid, _) = stat_of(me).unwrap();
        // SAFETY: no preconditions.
        assert_eq!(ppid, unsafe { libc::getppid() } as u32);
        let before = tree_cpu(me);
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(100) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(tree_cpu(me) > before);
        assert_eq!(tree_cpu(u32::MAX), Duration::ZERO);
    }

    #[test]
    fn a_server_that_never_mounts_is_reported_and_reaped() {
        let dir = std::env::temp_dir().join(format!("uvfs-daemon-test-{}", std::process::id()));
        let _ = std::fs::create_dir(&dir);
        let log = dir.join("log");
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg("echo no fuse here >&2; exit 3");
        let e = Daemon::start(cmd, &dir, &log).unwrap_err();
        assert!(e.contains("exited (exit status: 3) before mounting: no fuse here"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
