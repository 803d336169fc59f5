//! Mounting and unmounting a FUSE filesystem: as root, `mount(2)` of `fuse.uvfs` on a
//! `/dev/fuse` descriptor we opened; otherwise through the setuid `fusermount3`, which
//! mounts and passes the descriptor back over a socket (`_FUSE_COMMFD`, `SCM_RIGHTS`), as
//! libfuse does.

use std::ffi::CString;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// A mount of ours.
pub(crate) struct Mount {
    /// The connection's `/dev/fuse` descriptor.
    pub(crate) dev: OwnedFd,
    /// The canonical mount point.
    pub(crate) mountpoint: CString,
}

/// The options every uvfs mount has (as `fuser` was given them): device files and setuid
/// bits work, read-write; `allow_other` lets every user in.
fn fusermount_options(allow_other: bool) -> String {
    let mut o = String::from("fsname=uvfs,subtype=uvfs,dev,suid,rw");
    if allow_other {
        o.push_str(",allow_other");
    }
    o
}

/// Mounts on `mountpoint` (with `fusermount`, through `fusermount3` even if `mount(2)`
/// is permitted).
pub(crate) fn mount(mountpoint: &Path, allow_other: bool, fusermount: bool) -> io::Result<Mount> {
    let canon = mountpoint.canonicalize()?;
    let mp = CString::new(canon.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let sys = if fusermount { None } else { mount_sys(&canon, &mp, allow_other)? };
    let dev = match sys {
        Some(fd) => fd,
        None => mount_fusermount(&canon, allow_other)?,
    };
    Ok(Mount { dev, mountpoint: mp })
}

/// `mount(2)` directly; `None` when not permitted (then `fusermount3`).
fn mount_sys(canon: &Path, mp: &CString, allow_other: bool) -> io::Result<Option<OwnedFd>> {
    let mode = std::fs::metadata(canon)?.mode() & libc::S_IFMT;
    // SAFETY: a NUL-terminated path; the descriptor is owned below.
    let fd = unsafe { libc::open(c"/dev/fuse".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just opened, owned by nobody else.
    let dev = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut data = format!("fd={},rootmode={:o},user_id={uid},group_id={gid}", dev.as_raw_fd(), mode);
    if allow_other {
        data.push_str(",allow_other");
    }
    let data = CString::new(data).expect("no NUL");
    // SAFETY: valid C strings; flags 0 (dev, suid, rw).
    let r = unsafe { libc::mount(c"uvfs".as_ptr(), mp.as_ptr(), c"fuse.uvfs".as_ptr(), 0, data.as_ptr().cast()) };
    if r == 0 {
        return Ok(Some(dev));
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EPERM) { Ok(None) } else { Err(e) }
}

fn fusermount_bin() -> &'static str {
    ["/usr/bin/fusermount3", "/bin/fusermount3", "/usr/local/bin/fusermount3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("fusermount3")
}

/// Mounts through `fusermount3`: it gets one end of a socket pair in `_FUSE_COMMFD` and
/// sends the `/dev/fuse` descriptor back on it.
fn mount_fusermount(canon: &Path, allow_other: bool) -> io::Result<OwnedFd> {
    let (ours, theirs) = UnixStream::pair()?;
    let theirs_fd = theirs.as_raw_fd();
    let mut cmd = Command::new(fusermount_bin());
    cmd.arg("-o")
        .arg(fusermount_options(allow_other))
        .arg("--")
        .arg(canon)
        .env("_FUSE_COMMFD", theirs_fd.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe calls between fork and exec (fcntl).
    unsafe {
        cmd.pre_exec(move || {
            // The child's end must survive exec.
            let fl = libc::fcntl(theirs_fd, libc::F_GETFD);
            if fl < 0 || libc::fcntl(theirs_fd, libc::F_SETFD, fl & !libc::FD_CLOEXEC) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let child = cmd.spawn()?;
    drop(theirs);
    let got = recv_fd(&ours);
    drop(ours);
    let out = child.wait_with_output()?;
    match got {
        Ok(fd) => Ok(fd),
        Err(_) => {
            let msg = String::from_utf8_lossy(&out.stderr).trim().replace('\n', " ");
            let kind = if msg.contains("allow_other") || msg.contains("ermission") {
                io::ErrorKind::PermissionDenied
            } else {
                io::ErrorKind::Other
            };
            Err(io::Error::new(kind, if msg.is_empty() { "fusermount3 failed".to_string() } else { msg }))
        }
    }
}

/// Receives one descriptor (`SCM_RIGHTS`) from `sock`.
fn recv_fd(sock: &UnixStream) -> io::Result<OwnedFd> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
    let mut byte = [0u8; 1];
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    let r = loop {
        match recvmsg(sock.as_fd(), &mut [io::IoSliceMut::new(&mut byte)], &mut cmsg, RecvFlags::CMSG_CLOEXEC) {
            Err(rustix::io::Errno::INTR) => continue,
            r => break r,
        }
    };
    let r = r.map_err(io::Error::from)?;
    if r.bytes == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "fusermount3 sent nothing"));
    }
    for m in cmsg.drain() {
        if let RecvAncillaryMessage::ScmRights(mut fds) = m
            && let Some(fd) = fds.next()
        {
            return Ok(fd);
        }
    }
    Err(io::Error::new(io::ErrorKind::InvalidData, "fusermount3 sent no descriptor"))
}

/// Whether `mp` is still a FUSE mount of connection `conn` (the minor device number; 0 if
/// unknown: any fuse mount there), from `/proc/self/mountinfo`, so that an unmount never
/// takes away a later mount on the same directory.
pub(crate) fn is_ours(mp: &CString, conn: u64) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return true };
    let want = String::from_utf8_lossy(mp.as_bytes()).into_owned();
    info.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let Some(sep) = f.iter().position(|&x| x == "-") else { return false };
        let fstype = f.get(sep + 1).copied().unwrap_or("");
        let at = f.get(4).map(|m| unescape(m)).unwrap_or_default();
        let dev_ok = conn == 0 || f.get(2).is_some_and(|d| *d == format!("0:{conn}"));
        at == want && fstype.starts_with("fuse") && dev_ok
    })
}

/// Undoes `/proc/self/mountinfo`'s escapes of a path.
pub(crate) fn unescape(s: &str) -> String {
    s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
}

/// `/proc/self/mountinfo`'s escaping of a mount point (the inverse of [`unescape`]).
fn escape(s: &str) -> String {
    s.replace('\\', "\\134").replace(' ', "\\040").replace('\t', "\\011").replace('\n', "\\012")
}

/// What the guardian runs (`sh -c`; `$0` the mount point, `$1` it as mountinfo writes it,
/// `$2` `fusermount3`): it reads the connection id (written once mounted), waits until its
/// standard input closes or SIGTERM comes (its keeper thread died), then unmounts
/// (detached) if the mount point still holds that connection, and aborts the connection
/// (root only). The abort is for a process that serves its own mount (a library user, the
/// tests): killed while one of its threads waits in a request of that mount, which no one
/// will answer, it cannot end, nor close its `/dev/fuse` descriptor (which would abort the
/// connection) or the guardian's pipe, until that thread returns.
const GUARDIAN: &str = r#"trap 'exit 0' TERM
mp=$0 info=$1 fm=$2
read conn || exit 0
end() {
  awk -v mp="$info" -v dev="0:$conn" '$3 == dev && $5 == mp { f = 1 } END { exit !f }' /proc/self/mountinfo || exit 0
  umount -l -- "$mp" 2>/dev/null || "$fm" -u -q -z -- "$mp" 2>/dev/null
  echo 1 2>/dev/null > "/sys/fs/fuse/connections/$conn/abort"
  exit 0
}
trap end TERM
read _
end"#;

/// A process that unmounts a mount when this one ends without doing so: the kernel keeps
/// a FUSE mount whose server died ("Transport endpoint is not connected") until someone
/// unmounts it, and a killed process runs no destructor (libfuse's `auto_unmount` keeps a
/// `fusermount3` for the same). It waits for the end of a pipe this process holds, which
/// the kernel closes however the process ends, once all its threads have. A thread can
/// outlive a kill (one waiting in a request its own dead server was serving), so the
/// guardian also has a death signal: it is started by a keeper thread of its own, which
/// only waits, and the kernel sends SIGTERM when that thread ends (`PR_SET_PDEATHSIG`
/// follows the thread that forked). It is started before the mount and told the
/// connection right after, so a kill at any later moment is covered, also one of the
/// whole process group (the guardian has a session of its own); dropping it (the mount
/// is gone) ends it.
pub(crate) struct Guardian {
    /// The pipe's writing end (owned; closing it ends the guardian).
    pipe: Option<std::process::ChildStdin>,
    /// Dropped to let the keeper reap the guardian and end.
    stop: Option<std::sync::mpsc::Sender<()>>,
    /// The keeper thread: started the guardian, waits for `stop`, then reaps it.
    keeper: Option<std::thread::JoinHandle<()>>,
}

impl Guardian {
    /// Starts a guardian of `mountpoint`; `None` if no shell can be started (then a killed
    /// server leaves the mount, as without one).
    pub(crate) fn start(mountpoint: &Path) -> Option<Guardian> {
        let canon = mountpoint.canonicalize().ok()?;
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(GUARDIAN)
            .arg(&canon)
            .arg(escape(&canon.to_string_lossy()))
            .arg(fusermount_bin())
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: between fork and exec only the async-signal-safe close_range, setsid and
        // prctl run: the guardian keeps nothing of this process open but its pipe (an
        // inherited descriptor could hold a pipe another process waits on, or a mount
        // busy), leaves this process's group and session, so that what ends them all
        // (Ctrl-C at a terminal, `timeout`, `kill -- -PGID`, a hangup) does not end it
        // before it unmounts, and is sent SIGTERM when the forking (keeper) thread ends.
        unsafe {
            cmd.pre_exec(|| {
                libc::close_range(3, u32::MAX, 0);
                libc::setsid();
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let (pipe_tx, pipe_rx) = std::sync::mpsc::sync_channel(1);
        let (stop, stop_rx) = std::sync::mpsc::channel::<()>();
        let keeper = std::thread::Builder::new()
            .name("uvfs-guardian".into())
            .stack_size(64 << 10)
            .spawn(move || {
                let Ok(mut child) = cmd.spawn() else {
                    let _ = pipe_tx.send(None);
                    return;
                };
                let _ = pipe_tx.send(child.stdin.take());
                // Until the guardian is dropped: a kill ends this wait, and the thread.
                let _ = stop_rx.recv();
                let _ = child.wait();
            })
            .ok()?;
        let Some(pipe) = pipe_rx.recv().ok().flatten() else {
            let _ = keeper.join();
            return None;
        };
        Some(Guardian { pipe: Some(pipe), stop: Some(stop), keeper: Some(keeper) })
    }

    /// The mount holds connection `conn` now (0: unknown, then nothing is unmounted).
    pub(crate) fn arm(&mut self, conn: u64) {
        if let Some(p) = self.pipe.as_mut() {
            let _ = p.write_all(format!("{conn}\n").as_bytes());
        }
    }
}

impl Drop for Guardian {
    fn drop(&mut self) {
        drop(self.pipe.take());
        drop(self.stop.take());
        if let Some(k) = self.keeper.take() {
            let _ = k.join();
        }
    }
}

/// Raises the readahead window of the mount whose connection is `conn` (its device is
/// `0:conn`, which names its `backing_dev_info`) to `kib`, unless it is larger already.
/// Only root may write `read_ahead_kb`; the error says why not.
pub(crate) fn raise_readahead(conn: u64, kib: u32) -> Result<(), String> {
    if conn == 0 {
        return Err("the mount's device is unknown".into());
    }
    let p = format!("/sys/class/bdi/0:{conn}/read_ahead_kb");
    let now = std::fs::read_to_string(&p).map_err(|e| format!("{p}: {e}"))?;
    if now.trim().parse::<u32>().is_ok_and(|n| n >= kib) {
        return Ok(());
    }
    std::fs::write(&p, kib.to_string()).map_err(|e| format!("writing {p}: {e}"))
}

/// Unmounts `mp` (connection `conn`) if it is still ours: `umount2`, detached if busy;
/// `fusermount3 -u -z` when not permitted.
pub(crate) fn unmount(mp: &CString, conn: u64) -> io::Result<()> {
    if !is_ours(mp, conn) {
        return Ok(());
    }
    // SAFETY: a valid C string.
    if unsafe { libc::umount2(mp.as_ptr(), 0) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EBUSY) => {
            // SAFETY: a valid C string.
            if unsafe { libc::umount2(mp.as_ptr(), libc::MNT_DETACH) } == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        }
        Some(libc::EPERM) => {
            let st = Command::new(fusermount_bin())
                .args(["-u", "-q", "-z", "--"])
                .arg(std::ffi::OsStr::from_bytes(mp.as_bytes()))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()?;
            if st.success() { Ok(()) } else { Err(io::Error::other("fusermount3 -u failed")) }
        }
        Some(libc::EINVAL) | Some(libc::ENOENT) => Ok(()),
        _ => Err(e),
    }
}
