//! `uvfs run`: a command with a uvfs tree as its root, without root privileges.
//!
//! The process makes itself a user namespace (it is root in it, mapped to the caller's
//! ids) and a mount namespace, serves the tree through FUSE on a private mount point
//! (FUSE may be mounted inside a user namespace where `/dev/fuse` can be opened), binds
//! the host's `/proc` and `/dev` and a fresh `/tmp` into it, and runs the command chrooted
//! there. The tree is an overlay: a writable layer in memory over the `--overlay`
//! directories and the `--tar` layer, so every write lands in memory and the host is never
//! changed (`--bind` directories excepted: they are the host's). When the command ends,
//! `--export` writes the changes as an OCI layer tar and `--summary` lists them; the exit
//! status is the command's. Everything lives in the namespaces, so nothing outlives the
//! run.

use std::ffi::{CString, OsString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::ExitCode;

use uvfs::fs::overlay::{Change, OverlayFs};

use crate::MountOptions;

/// Arguments of `uvfs run`.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// A host directory the tree starts as, copy-on-write (repeatable: the first is on
    /// top). `--overlay /` gives a writable view of the whole host
    #[arg(long = "overlay", value_name = "DIR")]
    pub overlays: Vec<PathBuf>,
    /// A tar archive (an OCI image layer) the tree starts as, below the `--overlay`
    /// directories
    #[arg(long, value_name = "FILE")]
    pub tar: Option<PathBuf>,
    /// Bind a host directory into the tree at DST (read-write, to the host)
    #[arg(long, value_name = "SRC:DST")]
    pub bind: Vec<String>,
    /// When the command ends, write what it changed to FILE as an OCI layer tar
    #[arg(long, value_name = "FILE")]
    pub export: Option<PathBuf>,
    /// When the command ends, write the whole tree it saw to FILE as a tar archive (not
    /// /proc, /dev, /sys, /tmp or the --bind directories)
    #[arg(long, value_name = "FILE")]
    pub export_tree: Option<PathBuf>,
    /// When the command ends, list what it changed (A added, M modified, D deleted)
    #[arg(long)]
    pub summary: bool,
    /// The command and its arguments (after `--`)
    #[arg(last = true, required = true)]
    pub cmd: Vec<OsString>,
}

struct Fail(String);

fn fail(what: impl std::fmt::Display) -> Fail {
    Fail(what.to_string())
}

fn os(what: &str) -> Fail {
    fail(format!("{what}: {}", std::io::Error::last_os_error()))
}

/// Runs `uvfs run`: the command's exit status, or 125 with one line on stderr when the
/// sandbox could not be made.
pub fn run(a: RunArgs) -> ExitCode {
    match run_inner(&a) {
        Ok(code) => ExitCode::from(code),
        Err(Fail(msg)) => {
            eprintln!("uvfs run: {msg}");
            ExitCode::from(125)
        }
    }
}

fn write_file(path: &str, data: &str) -> Result<(), Fail> {
    std::fs::write(path, data).map_err(|e| fail(format!("{path}: {e}")))
}

fn c(p: &std::path::Path) -> Result<CString, Fail> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| fail(format!("{}: a NUL in the path", p.display())))
}

fn mount(src: &CString, dst: &CString, fstype: Option<&std::ffi::CStr>, flags: libc::c_ulong) -> Result<(), Fail> {
    let t = fstype.map_or(std::ptr::null(), |t| t.as_ptr());
    // SAFETY: NUL-terminated strings that outlive the call.
    if unsafe { libc::mount(src.as_ptr(), dst.as_ptr(), t, flags, std::ptr::null()) } != 0 {
        return Err(os(&format!("mount {} on {}", src.to_string_lossy(), dst.to_string_lossy())));
    }
    Ok(())
}

fn run_inner(a: &RunArgs) -> Result<u8, Fail> {
    // What the namespaces need, checked first so that a missing one is one clear line.
    if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse") {
        return Err(fail(format!("/dev/fuse cannot be opened ({e}): install fuse3 and make it usable")));
    }
    let (uid, gid) = (rustix::process::getuid().as_raw(), rustix::process::getgid().as_raw());
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    // Before any thread exists: a user namespace needs a single-threaded process.
    // SAFETY: unshare has no memory preconditions.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(fail(format!("user namespaces are not available ({e}): see kernel.unprivileged_userns_clone")));
    }
    write_file("/proc/self/setgroups", "deny")?;
    write_file("/proc/self/uid_map", &format!("0 {uid} 1"))?;
    write_file("/proc/self/gid_map", &format!("0 {gid} 1"))?;
    let none = CString::new("none").unwrap();
    mount(&none, &CString::new("/").unwrap(), None, libc::MS_REC | libc::MS_PRIVATE)?;

    // The tree: a writable layer over the given ones (or an empty one).
    let mut layers: Vec<Box<dyn uvfs::fs::FileSystem>> = Vec::new();
    for d in &a.overlays {
        let fs = uvfs::fs::hostfs::HostFs::new(d).map_err(|e| fail(format!("--overlay {}: {e}", d.display())))?;
        layers.push(Box::new(fs));
    }
    if let Some(t) = &a.tar {
        let fs = uvfs::fs::tarfs::TarFs::open_layer(t).map_err(|e| fail(format!("--tar {}: {e}", t.display())))?;
        layers.push(Box::new(fs));
    }
    if layers.is_empty() {
        let empty = tempfile::tempdir().map_err(|e| fail(format!("a temporary directory: {e}")))?;
        layers.push(Box::new(uvfs::fs::hostfs::HostFs::new(empty.path()).map_err(|e| fail(format!("{e}")))?));
        // The empty base is only read; it can go now (hostfs holds its descriptor).
        drop(empty);
    }
    let fs = OverlayFs::new(layers).map_err(|e| fail(format!("the overlay: {e}")))?;
    let vfs = uvfs::Vfs::with_root(uvfs::VfsConfig::default(), Box::new(fs)).map_err(|e| fail(format!("{e}")))?;
    let t = vfs.root_task();
    for dir in ["/proc", "/dev", "/tmp"] {
        match t.mkdir(dir.as_bytes(), 0o755) {
            Ok(()) | Err(uvfs::Errno::EEXIST) => {}
            Err(e) => return Err(fail(format!("{dir} in the tree: {e}"))),
        }
    }
    let mut binds = Vec::new();
    for b in &a.bind {
        let (src, dst) = b.split_once(':').ok_or_else(|| fail(format!("--bind {b}: SRC:DST")))?;
        if !dst.starts_with('/') {
            return Err(fail(format!("--bind {b}: DST must be absolute")));
        }
        let mut at = Vec::new();
        for part in dst.split('/').filter(|p| !p.is_empty()) {
            at.extend_from_slice(b"/");
            at.extend_from_slice(part.as_bytes());
            match t.mkdir(&at, 0o755) {
                Ok(()) | Err(uvfs::Errno::EEXIST) => {}
                Err(e) => return Err(fail(format!("--bind {b}: {e}"))),
            }
        }
        binds.push((PathBuf::from(src), dst.trim_start_matches('/').to_string()));
    }

    // Served on a private mount point, seen only in this mount namespace.
    let mnt =
        tempfile::Builder::new().prefix("uvfs-run-").tempdir().map_err(|e| fail(format!("a mount point: {e}")))?;
    // Host owners the namespace does not map are shown as its root, so that the command,
    // root there, may change anything in the tree (every change stays in memory); the
    // kernel checks permissions with its long caches (a name cached with no timeout would
    // be looked up again, and a revalidation that drops it would take the /proc or /dev
    // mounted on it away). What the sandbox cannot have (FUSE over io_uring where the
    // kernel has it off, the idle class, a larger readahead window: root's outside the
    // namespace) it does without, unsaid: the command's stderr is the command's own.
    let opts = MountOptions {
        allow_other: false,
        squash_unmapped: true,
        // The mount lives in the sandbox's own mount namespace, which goes with it.
        auto_unmount: false,
        notices: false,
        ..MountOptions::default()
    };
    let handle = crate::spawn(&vfs, mnt.path(), &opts).map_err(|e| fail(format!("mounting the tree: {e}")))?;
    let root = c(mnt.path())?;
    let at = |p: &str| c(&mnt.path().join(p));
    let mounts = (|| -> Result<Vec<CString>, Fail> {
        let mut done = Vec::new();
        for (src, dst) in [("/proc", "proc"), ("/dev", "dev")] {
            let target = at(dst)?;
            mount(&CString::new(src).unwrap(), &target, None, libc::MS_BIND | libc::MS_REC)?;
            done.push(target);
        }
        let tmp = at("tmp")?;
        mount(&CString::new("tmpfs").unwrap(), &tmp, Some(c"tmpfs"), 0)?;
        done.push(tmp);
        for (src, dst) in &binds {
            let target = at(dst)?;
            mount(&c(src)?, &target, None, libc::MS_BIND | libc::MS_REC)?;
            done.push(target);
        }
        Ok(done)
    })();
    let status = match &mounts {
        Ok(_) => {
            let inside =
                if t.stat(cwd.as_os_str().as_bytes()).is_ok_and(|s| s.file_type() == Some(uvfs::FileType::Directory)) {
                    cwd.clone()
                } else {
                    PathBuf::from("/")
                };
            let inside = c(&inside)?;
            let root = root.clone();
            let mut cmd = std::process::Command::new(&a.cmd[0]);
            cmd.args(&a.cmd[1..]);
            // SAFETY: only async-signal-safe system calls between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    // The caller's directory if the tree has it (not one under the fresh
                    // /tmp, say), else the root.
                    if libc::chroot(root.as_ptr()) != 0
                        || (libc::chdir(inside.as_ptr()) != 0 && libc::chdir(c"/".as_ptr()) != 0)
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            cmd.status().map_err(|e| fail(format!("{}: {e}", a.cmd[0].to_string_lossy())))
        }
        Err(Fail(m)) => Err(fail(m)),
    };
    // Take the tree down (what is mounted on it first), whatever happened.
    for target in mounts.iter().flatten().rev() {
        // SAFETY: a NUL-terminated path.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
    let _ = handle.unmount();
    let status = status?;
    let top = t.openat_file(uvfs::DirFd::Cwd, b"/", uvfs::OpenFlags::PATH, 0).map_err(|e| fail(format!("{e}")))?;
    if let Some(path) = &a.export {
        let out = std::fs::File::create(path).map_err(|e| fail(format!("--export {}: {e}", path.display())))?;
        OverlayFs::export_changes(top.inode(), std::io::BufWriter::new(out))
            .map_err(|e| fail(format!("--export {}: {e}", path.display())))?;
    }
    if let Some(path) = &a.export_tree {
        let out = std::fs::File::create(path).map_err(|e| fail(format!("--export-tree {}: {e}", path.display())))?;
        // Not what was bound in from the host (/proc, /dev, the fresh /tmp, --bind).
        let mut skip: Vec<Vec<u8>> = ["proc", "dev", "tmp", "sys"].iter().map(|s| s.as_bytes().to_vec()).collect();
        skip.extend(binds.iter().map(|(_, dst)| dst.as_bytes().to_vec()));
        crate::archive::export_tree(&t, b"/", &skip, std::io::BufWriter::new(out))
            .map_err(|e| fail(format!("--export-tree {}: {e}", path.display())))?;
    }
    if a.summary {
        let mut err = std::io::stderr().lock();
        for (kind, p) in OverlayFs::changes(top.inode()).map_err(|e| fail(format!("--summary: {e}")))? {
            let k = match kind {
                Change::Added => 'A',
                Change::Modified => 'M',
                Change::Deleted => 'D',
            };
            let _ = writeln!(err, "{k} /{}", String::from_utf8_lossy(&p));
        }
    }
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => 128u8.saturating_add(sig as u8),
        _ => 1,
    })
}
