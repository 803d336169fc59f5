//! `getdents64`. Mirrors Linux's `fs/readdir.c` with tmpfs's stable offsets
//! (`simple_offset_*`): every entry of a directory gets a position when it is added, and
//! the cursor is the next position to return, so an entry present for a whole listing
//! appears exactly once however others are added and removed meanwhile.

use crate::abi::errno::{Errno, Result};
use crate::abi::stat::FileType;
use crate::core::file::{File, FileRef};
use crate::core::superblock::DirEntry;
use crate::sync::rcu::LocalGuard;
use crate::task::Task;

/// The position of a listing that reached the end (Linux's `DIR_OFFSET_EOD`, `S32_MAX`).
const DIR_OFFSET_EOD: u64 = i32::MAX as u64;

impl Task {
    /// Lists up to `max` entries from the descriptor's cursor and advances it.
    /// An empty vector means the end of the directory.
    pub fn getdents<'f>(&self, fd: impl Into<FileRef<'f>>, max: usize) -> Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        self.readdir_with(fd.into(), &mut |e| {
            if out.len() >= max {
                return false;
            }
            out.push(e);
            true
        })?;
        Ok(out)
    }

    /// `getdents64(2)`: fills `buf` with `struct linux_dirent64` records.
    pub fn getdents64<'f>(&self, fd: impl Into<FileRef<'f>>, buf: &mut [u8]) -> Result<usize> {
        let mut used = 0;
        let mut first_too_big = false;
        self.readdir_with(fd.into(), &mut |e| {
            let reclen = (19 + e.name.len() + 1).next_multiple_of(8);
            if used + reclen > buf.len() {
                first_too_big = used == 0;
                return false;
            }
            let r = &mut buf[used..used + reclen];
            r.fill(0);
            r[0..8].copy_from_slice(&e.ino.to_ne_bytes());
            r[8..16].copy_from_slice(&(e.next as i64).to_ne_bytes());
            r[16..18].copy_from_slice(&(reclen as u16).to_ne_bytes());
            r[18] = e.dtype;
            r[19..19 + e.name.len()].copy_from_slice(&e.name);
            used += reclen;
            true
        })?;
        if first_too_big {
            return Err(Errno::EINVAL);
        }
        Ok(used)
    }

    /// Runs `emit` on entries from the cursor until it returns false; the cursor moves
    /// past every entry `emit` accepted.
    fn readdir_with(&self, fd: FileRef<'_>, emit: &mut dyn FnMut(DirEntry) -> bool) -> Result<()> {
        let guard = self.vfs.rcu.pin();
        let file = self.fget(fd, &guard)?;
        if file.is_path() {
            return Err(Errno::EBADF);
        }
        let inode = file.inode();
        if !inode.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let mut pos = file.pos.lock();
        if file.dentry.is_dead() {
            return Err(Errno::ENOENT);
        }
        let r = Task::iterate(file, &mut pos, emit, &guard);
        drop(pos);
        // `iterate_dir`: a listing of a live directory is an access, whatever it emitted.
        file.accessed();
        r
    }

    /// Emits entries from the cursor `pos` of `file`, a live directory's open file.
    fn iterate(
        file: &File,
        pos: &mut u64,
        emit: &mut dyn FnMut(DirEntry) -> bool,
        guard: &LocalGuard<'_>,
    ) -> Result<()> {
        let inode = file.inode();
        let dentry = &file.dentry;
        let sb = inode.sb();
        if !sb.dcache_complete() {
            let mut cursor = *pos;
            sb.fs().readdir(inode, cursor, &mut |e| {
                let next = e.next;
                if emit(e) {
                    cursor = next;
                    true
                } else {
                    false
                }
            })?;
            *pos = cursor;
            return Ok(());
        }
        if *pos == 0 {
            if !emit(DirEntry {
                ino: inode.ino().0,
                next: 1,
                dtype: FileType::Directory.dirent_type(),
                name: b".".to_vec(),
            }) {
                return Ok(());
            }
            *pos = 1;
        }
        if *pos == 1 {
            let parent = if std::ptr::eq(&**dentry, &**file.mnt.root()) {
                // ".." of a mount root is the mountpoint's parent, as Linux reports it.
                match file.mnt.parent(guard) {
                    Some((_, mp)) => mp.parent(guard).inode().map(|i| i.ino().0),
                    None => Some(inode.ino().0),
                }
            } else {
                dentry.parent(guard).inode().map(|i| i.ino().0)
            };
            let ino = parent.unwrap_or(inode.ino().0);
            if !emit(DirEntry { ino, next: 2, dtype: FileType::Directory.dirent_type(), name: b"..".to_vec() }) {
                return Ok(());
            }
            *pos = 2;
        }
        if *pos == DIR_OFFSET_EOD {
            return Ok(());
        }
        let dir = dentry.dir().ok_or(Errno::ENOTDIR)?;
        let locked = dir.lock.read();
        for (p, d) in locked.order.range_from(*pos) {
            let Some(i) = d.inode() else { continue };
            let e = DirEntry {
                ino: i.ino().0,
                next: p + 1,
                dtype: i.file_type().dirent_type(),
                name: d.name(guard).to_vec(),
            };
            if !emit(e) {
                return Ok(());
            }
            *pos = p + 1;
        }
        // The end reached: later listings through this descriptor are empty until it is
        // rewound, even if entries are added meanwhile (6.18's `offset_readdir`).
        *pos = DIR_OFFSET_EOD;
        Ok(())
    }
}
