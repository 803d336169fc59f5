//! A uvfs tree out as a tar archive, through the calls of a [`Task`] (so any filesystem,
//! memfs included, and what the task may read): `uvfs run --export-tree`. An overlay's
//! changes alone are [`OverlayFs::export_changes`](uvfs::fs::overlay::OverlayFs::export_changes).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use uvfs::fs::tarfs;
use uvfs::{AtFlags, DirFd, Errno, FileType, OpenFlags, Task};

fn io(e: std::io::Error) -> Errno {
    e.raw_os_error().map_or(Errno::EIO, Errno::from_raw)
}

/// Reads a file of the tree for the archive.
struct Reader<'a> {
    task: &'a Task,
    fd: uvfs::Fd,
    off: i64,
}

impl std::io::Read for Reader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.task.pread(self.fd, buf, self.off).map_err(|e| std::io::Error::from_raw_os_error(e.raw()))?;
        self.off += n as i64;
        Ok(n)
    }
}

/// Writes the tree below `dir` (as `task` sees it, symlinks not followed) to `out` as a
/// tar archive: every directory, file (with its bytes), symlink, device node and fifo,
/// with mode, owner and modification time, `user.`/`trusted.`/`security.` xattrs as PAX
/// records, hard links as links; paths relative to `dir`, which is `./`. What `exclude`
/// names (paths relative to `dir`) is left out with everything below it.
pub fn export_tree(task: &Task, dir: &[u8], exclude: &[Vec<u8>], out: impl Write) -> uvfs::Result<()> {
    let mut tar = tar::Builder::new(out);
    let mut seen: HashMap<(u64, u64), Vec<u8>> = HashMap::new();
    let mut stack: Vec<Vec<u8>> = vec![Vec::new()];
    while let Some(rel) = stack.pop() {
        if exclude.contains(&rel) {
            continue;
        }
        let path = if rel.is_empty() { dir.to_vec() } else { [dir, b"/", &rel[..]].concat() };
        let st = task.fstatat(DirFd::Cwd, &path, AtFlags::SYMLINK_NOFOLLOW)?;
        let ftype = st.file_type().ok_or(Errno::EIO)?;
        if ftype == FileType::Socket {
            // tar has no sockets (GNU tar skips them too).
            continue;
        }
        let name = PathBuf::from(OsStr::from_bytes(if rel.is_empty() { b"./" } else { &rel }));
        let mut h = tarfs::entry_header(&st);
        if ftype != FileType::Directory && st.nlink > 1 {
            if let Some(first) = seen.get(&(st.dev, st.ino)) {
                h.set_entry_type(tar::EntryType::Link);
                tar.append_link(&mut h, &name, OsStr::from_bytes(first)).map_err(io)?;
                continue;
            }
            seen.insert((st.dev, st.ino), rel.clone());
        }
        if ftype != FileType::Symlink {
            let mut list = vec![0u8; 65536];
            let n = task.llistxattr(&path, &mut list)?;
            let mut xattrs = Vec::new();
            for k in list[..n].split(|&b| b == 0).filter(|k| !k.is_empty() && !k.starts_with(b"system.")) {
                let mut v = vec![0u8; 65536];
                let len = task.lgetxattr(&path, k, &mut v)?;
                xattrs.push((k.to_vec(), v[..len].to_vec()));
            }
            tarfs::append_xattrs(&mut tar, &xattrs).map_err(io)?;
        }
        match ftype {
            FileType::Directory => {
                h.set_entry_type(tar::EntryType::Directory);
                tar.append_data(&mut h, &name, std::io::empty()).map_err(io)?;
                let fd = task.openat(DirFd::Cwd, &path, OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0)?;
                let entries = task.getdents(fd, usize::MAX);
                task.close(fd)?;
                let mut names: Vec<Vec<u8>> =
                    entries?.into_iter().map(|e| e.name).filter(|n| n != b"." && n != b"..").collect();
                names.sort_unstable_by(|a, b| b.cmp(a));
                stack.extend(
                    names.into_iter().map(|n| if rel.is_empty() { n } else { [&rel[..], b"/", &n[..]].concat() }),
                );
            }
            FileType::Regular => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(st.size);
                let fd = task.openat(DirFd::Cwd, &path, OpenFlags::RDONLY, 0)?;
                let r = tar.append_data(&mut h, &name, Reader { task, fd, off: 0 }).map_err(io);
                task.close(fd)?;
                r?;
            }
            FileType::Symlink => {
                let mut target = vec![0u8; 4096];
                let n = task.readlinkat(DirFd::Cwd, &path, &mut target)?;
                h.set_entry_type(tar::EntryType::Symlink);
                tar.append_link(&mut h, &name, OsStr::from_bytes(&target[..n])).map_err(io)?;
            }
            t => {
                tarfs::set_special(&mut h, t, st.rdev).map_err(io)?;
                tar.append_data(&mut h, &name, std::io::empty()).map_err(io)?;
            }
        }
    }
    tar.finish().map_err(io)
}
