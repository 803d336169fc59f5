//! `tarfs`: a tar archive as a read-only filesystem, without unpacking it. The archive is
//! read once to index its entries (names, metadata, where each file's data starts); file
//! data is then read from the archive on demand, so mounting a 1 GB image costs its index,
//! not its size. The read-only layer a sandbox or an overlay sits on (issue 14).
//!
//! What an entry becomes follows GNU tar's extraction: paths are relative to the root
//! (`./` and `/` prefixes dropped, `..` refused), a later entry of a name replaces an
//! earlier one (a directory keeps its children and its xattrs, and gains the new
//! entry's), missing parent directories appear with mode 0755, hard links share one
//! inode (a link of a name to what it already names is nothing), a later entry's path
//! goes through the archive's own symlinks where they lead to a directory (tar opens the
//! path; not those GNU tar defers: absolute, or with `..`), symlinks have mode 0777,
//! PAX `SCHILY.xattr.*` records are the file's extended attributes and `uid`, `gid` and
//! `mtime` records override the header, and a `./` entry gives the root its metadata. GNU
//! sparse files are held in memory (their data is not contiguous in the archive). Times
//! have the archive's one-second resolution; directories report tmpfs's sizes (20 bytes
//! an entry plus 40), files their data's 512-byte blocks.
//!
//! Plain (uncompressed) archives only: data is read from the file at its offset.
//! Directories are listed from the index ("." and ".." first, then names in byte order),
//! so cursors are stable. Every change is EROFS ([`FileSystem::read_only`]).

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Weak};

use crate::abi::errno::{Errno, Result};
use crate::abi::flags::Timespec;
use crate::abi::stat::{FileType, Ino, StatFs};
use crate::core::acl::AclInit;
use crate::core::inode::{Inode, NewInode};
use crate::core::superblock::{CreateArgs, DirEntry, FileSystem, RenameReq, SuperBlock, TruncateBy, WriteAt};
use crate::sync::Mutex;

/// `f_type` of a tarfs (`"tarf"`; Linux has no tar filesystem to borrow one from).
pub const TARFS_MAGIC: u64 = 0x7461_7266;

/// tmpfs's directory size per entry, which tarfs reports too.
const DIRENT_SIZE: u64 = 20;

/// An extended attribute: full name, value.
type Xattr = (Box<[u8]>, Box<[u8]>);

/// A stretch of a sparse file's data: offset in the file, offset in the archive, length.
type Chunk = (u64, u64, u64);

/// Where a file's bytes are.
enum Data {
    /// None (directories, links, devices, empty files).
    None,
    /// Contiguous in the archive at this offset.
    At(u64),
    /// In memory (old GNU sparse files, which the reader expands).
    Mem(Box<[u8]>),
    /// A PAX sparse file (GNU format 1.0): (offset in the file, offset in the archive,
    /// length) of each stretch of data, in order; the rest reads as zeros.
    Chunks(Vec<Chunk>),
}

/// One node of the archive's tree. Immutable once the index is built.
struct Node {
    ftype: FileType,
    /// Permission bits (with set-id and sticky bits).
    perm: u32,
    uid: u32,
    gid: u32,
    mtime: i64,
    size: u64,
    data: Data,
    target: Option<Box<[u8]>>,
    rdev: u64,
    xattrs: Vec<Xattr>,
    /// A directory's children by name.
    children: BTreeMap<Box<[u8]>, usize>,
    /// The directory this one is in (the root: itself).
    parent: usize,
    nlink: u32,
}

impl Node {
    fn dir(parent: usize, perm: u32, mtime: i64) -> Node {
        Node {
            ftype: FileType::Directory,
            perm,
            uid: 0,
            gid: 0,
            mtime,
            size: 0,
            data: Data::None,
            target: None,
            rdev: 0,
            xattrs: Vec::new(),
            children: BTreeMap::new(),
            parent,
            nlink: 2,
        }
    }
}

/// A tar archive as a read-only filesystem.
pub struct TarFs {
    /// Immutable: the archive, read at the files' offsets.
    file: std::fs::File,
    /// Immutable: the tree; node 0 is the root.
    nodes: Vec<Node>,
    /// Immutable: bytes of file data in the archive (for `statfs`).
    data_bytes: u64,
    /// The inode of each node while one is alive, so that a node (a file with hard
    /// links, one looked up again after its dentry was evicted) is one inode. Leaf lock.
    live: Mutex<HashMap<usize, Weak<Inode>>>,
}

/// `path` as components below the root; `None` for the root itself, EINVAL for `..`.
fn components(path: &[u8]) -> Result<Vec<&[u8]>> {
    let mut out = Vec::new();
    for c in path.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return Err(Errno::EINVAL),
            c if c.len() > crate::abi::limits::NAME_MAX => return Err(Errno::ENAMETOOLONG),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// A directory named again gets the new entry's xattrs and keeps its others, as GNU tar
/// sets each on the directory it finds there and removes none.
fn merge_xattrs(have: &mut Vec<Xattr>, new: Vec<Xattr>) {
    for (k, v) in new {
        match have.iter_mut().find(|(h, _)| *h == k) {
            Some(slot) => slot.1 = v,
            None => have.push((k, v)),
        }
    }
}

/// A PAX time record (`mtime=1234567890.5`, maybe negative) in whole seconds, rounded
/// down as the kernel stores a time before 1970 with a fraction (-1.5 is -2 s + 0.5 s).
fn pax_seconds(v: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(v).ok()?;
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let sec: i64 = whole.parse().ok()?;
    let fraction = frac.bytes().any(|b| b != b'0');
    Some(if whole.starts_with('-') && fraction { sec - 1 } else { sec })
}

/// Parses the map that starts a PAX 1.0 sparse member's data (`raw`, at `start` in the
/// archive): decimal lines, the number of stretches then each one's offset and length,
/// padded to 512 bytes, then the stretches' bytes one after another. Returns each
/// stretch as (offset in the file, offset in the archive, length) and the bytes stored.
fn sparse_map(raw: &[u8], start: u64) -> Option<(Vec<Chunk>, u64)> {
    let mut lines = raw.split(|&b| b == b'\n');
    let mut used = 0usize;
    let mut next = || -> Option<u64> {
        let l = lines.next()?;
        used += l.len() + 1;
        std::str::from_utf8(l).ok()?.parse().ok()
    };
    let n = next()?;
    let mut pairs = Vec::new();
    for _ in 0..n {
        pairs.push((next()?, next()?));
    }
    let mut at = start + used.div_ceil(512) as u64 * 512;
    let mut stored = 0;
    let chunks = pairs
        .into_iter()
        .map(|(off, len)| {
            let c = (off, at, len);
            at += len;
            stored += len;
            c
        })
        .collect();
    Some((chunks, stored))
}

impl TarFs {
    /// Indexes the archive at `path`. EINVAL for what is not a plain tar archive (or an
    /// entry that climbs out with `..`); the host's errno if it cannot be read.
    pub fn open(path: impl AsRef<Path>) -> Result<TarFs> {
        TarFs::read_index(path, false)
    }

    /// An OCI image layer (`application/vnd.oci.image.layer.v1.tar`) for an
    /// [`overlay`](crate::fs::overlay): as [`TarFs::open`], but a member `DIR/.wh.NAME`
    /// is a whiteout of `NAME` (a character device 0/0, as overlayfs stores one) and
    /// `DIR/.wh..wh..opq` makes `DIR` opaque (`trusted.overlay.opaque` "y"), so the
    /// layers of an image stack as the image says.
    pub fn open_layer(path: impl AsRef<Path>) -> Result<TarFs> {
        TarFs::read_index(path, true)
    }

    fn read_index(path: impl AsRef<Path>, oci: bool) -> Result<TarFs> {
        let io = |e: std::io::Error| e.raw_os_error().map_or(Errno::EINVAL, Errno::from_raw);
        let file = std::fs::File::open(path).map_err(io)?;
        let now = Timespec::now().sec;
        let mut nodes = vec![Node::dir(0, 0o755, now)];
        let mut data_bytes = 0u64;
        let mut archive = tar::Archive::new(&file);
        for entry in archive.entries().map_err(io)? {
            let mut entry = entry.map_err(|_| Errno::EINVAL)?;
            let path = entry.path_bytes().into_owned();
            let h = entry.header();
            let perm = h.mode().map_err(|_| Errno::EINVAL)? & 0o7777;
            let mut uid = h.uid().map_err(|_| Errno::EINVAL)? as u32;
            let mut gid = h.gid().map_err(|_| Errno::EINVAL)? as u32;
            let mut mtime = h.mtime().map_err(|_| Errno::EINVAL)? as i64;
            let kind = h.entry_type();
            let major = h.device_major().ok().flatten().unwrap_or(0);
            let minor = h.device_minor().ok().flatten().unwrap_or(0);
            let mut xattrs = Vec::new();
            // GNU tar's PAX sparse format 1.0: the real name and size, and the map of
            // data stretches at the start of the member's data.
            let (mut sparse_major, mut sparse_name, mut sparse_size) = (None, None, None);
            if let Some(pax) = entry.pax_extensions().map_err(|_| Errno::EINVAL)? {
                for ext in pax.flatten() {
                    let (k, v) = (ext.key_bytes(), ext.value_bytes());
                    if let Some(name) = k.strip_prefix(b"SCHILY.xattr.") {
                        xattrs.push((name.into(), v.into()));
                    }
                    // What the header's fields cannot hold (an id above 2^21 - 1, a time
                    // outside 0..8^11) PAX gives in records that override them.
                    let number = || std::str::from_utf8(v).ok().and_then(|s| s.parse::<u32>().ok());
                    match k {
                        b"uid" => uid = number().ok_or(Errno::EINVAL)?,
                        b"gid" => gid = number().ok_or(Errno::EINVAL)?,
                        b"mtime" => mtime = pax_seconds(v).ok_or(Errno::EINVAL)?,
                        b"GNU.sparse.major" => sparse_major = Some(v.to_vec()),
                        b"GNU.sparse.name" => sparse_name = Some(v.to_vec()),
                        b"GNU.sparse.realsize" => {
                            sparse_size = std::str::from_utf8(v).ok().and_then(|s| s.parse().ok())
                        }
                        _ => {}
                    }
                }
            }
            let path = match (&sparse_major, sparse_name) {
                (Some(m), Some(name)) if m == b"1" => name,
                (Some(_), _) => return Err(Errno::EINVAL),
                _ => path,
            };
            let parts = components(&path)?;
            // The parent, made as needed.
            let (name, dirs) = match parts.split_last() {
                Some((name, dirs)) => (Some(*name), dirs),
                None => (None, &[][..]),
            };
            let mut parent = 0usize;
            for d in dirs {
                let found = nodes[parent].children.get(*d).copied();
                parent = match found {
                    Some(i) if nodes[i].ftype == FileType::Directory => i,
                    // A symlink of the archive's leads where GNU tar's open of the path
                    // goes, when that is a directory.
                    _ => match found.and_then(|i| Self::through_symlink(&nodes, parent, i, 0)) {
                        Some(dir) => dir,
                        None => {
                            nodes.push(Node::dir(parent, 0o755, now));
                            let i = nodes.len() - 1;
                            Self::attach(&mut nodes, parent, d, i);
                            i
                        }
                    },
                };
            }
            if oci && let Some(name) = name.and_then(|n| n.strip_prefix(b".wh.")) {
                if name == b".wh..opq" {
                    let dir = &mut nodes[parent];
                    dir.xattrs.retain(|(k, _)| &**k != b"trusted.overlay.opaque");
                    dir.xattrs.push((b"trusted.overlay.opaque".as_slice().into(), b"y".as_slice().into()));
                } else {
                    let mut node = Node::dir(parent, 0, mtime);
                    (node.ftype, node.nlink) = (FileType::CharDevice, 1);
                    nodes.push(node);
                    let i = nodes.len() - 1;
                    Self::attach(&mut nodes, parent, name, i);
                }
                continue;
            }
            let Some(name) = name else {
                // `./`: the root's own metadata.
                let root = &mut nodes[0];
                (root.perm, root.uid, root.gid, root.mtime) = (perm, uid, gid, mtime);
                // GNU tar does not make the root: its xattrs are set when the last `./`
                // entry's delayed metadata is (the other directories keep those they
                // were made with, see `merge_xattrs`).
                root.xattrs = xattrs;
                continue;
            };
            if kind.is_hard_link() {
                let target = entry.link_name_bytes().ok_or(Errno::EINVAL)?.into_owned();
                let mut at = 0usize;
                for c in components(&target)? {
                    at = *nodes[at].children.get(c).ok_or(Errno::EINVAL)?;
                }
                // A link of a name to what it already names changes nothing (GNU tar's
                // `extract_link` takes the EEXIST as done), a directory too.
                if nodes[parent].children.get(name) == Some(&at) {
                    continue;
                }
                if nodes[at].ftype == FileType::Directory {
                    return Err(Errno::EINVAL);
                }
                nodes[at].nlink += 1;
                Self::attach(&mut nodes, parent, name, at);
                continue;
            }
            let (ftype, data, size, target, rdev) = if kind.is_dir() {
                // A directory named again keeps its children: only its metadata changes.
                if let Some(&i) = nodes[parent].children.get(name)
                    && nodes[i].ftype == FileType::Directory
                {
                    let n = &mut nodes[i];
                    (n.perm, n.uid, n.gid, n.mtime) = (perm, uid, gid, mtime);
                    merge_xattrs(&mut n.xattrs, xattrs);
                    continue;
                }
                (FileType::Directory, Data::None, 0, None, 0)
            } else if kind.is_symlink() {
                let t = entry.link_name_bytes().ok_or(Errno::EINVAL)?.into_owned();
                (FileType::Symlink, Data::None, t.len() as u64, Some(t.into_boxed_slice()), 0)
            } else if kind.is_character_special() || kind.is_block_special() {
                let ft = if kind.is_character_special() { FileType::CharDevice } else { FileType::BlockDevice };
                (ft, Data::None, 0, None, crate::abi::stat::makedev(major, minor))
            } else if kind.is_fifo() {
                (FileType::Fifo, Data::None, 0, None, 0)
            } else if kind.is_gnu_sparse() {
                let mut bytes = Vec::new();
                entry.read_to_end(&mut bytes).map_err(|_| Errno::EINVAL)?;
                data_bytes += bytes.len() as u64;
                (FileType::Regular, Data::Mem(bytes.into_boxed_slice()), entry.size(), None, 0)
            } else if sparse_major.is_some() {
                let start = entry.raw_file_position();
                let mut raw = Vec::new();
                entry.read_to_end(&mut raw).map_err(|_| Errno::EINVAL)?;
                let (chunks, stored) = sparse_map(&raw, start).ok_or(Errno::EINVAL)?;
                data_bytes += stored;
                (FileType::Regular, Data::Chunks(chunks), sparse_size.ok_or(Errno::EINVAL)?, None, 0)
            } else if kind.is_file() || kind.is_contiguous() {
                let size = entry.size();
                data_bytes += size;
                (
                    FileType::Regular,
                    if size > 0 { Data::At(entry.raw_file_position()) } else { Data::None },
                    size,
                    None,
                    0,
                )
            } else {
                // PAX and GNU headers are folded into their entries by the reader; any
                // other kind (a volume label, ...) names nothing.
                continue;
            };
            // A symlink's permission bits are 0777 whatever the header says (`symlink(2)`
            // takes no mode; GNU tar extracts it so).
            let perm = if ftype == FileType::Symlink { 0o777 } else { perm };
            let mut node = Node::dir(parent, perm, mtime);
            (node.ftype, node.uid, node.gid, node.size, node.data, node.target, node.rdev) =
                (ftype, uid, gid, size, data, target, rdev);
            node.xattrs = xattrs;
            if ftype != FileType::Directory {
                node.nlink = 1;
            }
            nodes.push(node);
            let i = nodes.len() - 1;
            Self::attach(&mut nodes, parent, name, i);
        }
        Ok(TarFs { file, nodes, data_bytes, live: Mutex::new(HashMap::new()) })
    }

    /// The directory symlink `link` (named in `dir`) leads to, as GNU tar's extraction
    /// follows it in the path of a later member: a relative target without `..` (tar makes
    /// any other a placeholder file until the end), through directories and further such
    /// symlinks (40 at most, as a walk). `None` where it leads to no directory.
    fn through_symlink(nodes: &[Node], dir: usize, link: usize, depth: u32) -> Option<usize> {
        let target = nodes[link].target.as_deref().filter(|_| nodes[link].ftype == FileType::Symlink)?;
        if depth >= 40 || target.first() == Some(&b'/') || target.split(|&b| b == b'/').any(|c| c == b"..") {
            return None;
        }
        let mut at = dir;
        for c in target.split(|&b| b == b'/').filter(|c| !c.is_empty() && *c != b".") {
            let i = *nodes[at].children.get(c)?;
            at = match nodes[i].ftype {
                FileType::Directory => i,
                FileType::Symlink => Self::through_symlink(nodes, at, i, depth + 1)?,
                _ => return None,
            };
        }
        Some(at)
    }

    /// Names `child` as `name` in `dir`, replacing what had that name.
    fn attach(nodes: &mut [Node], dir: usize, name: &[u8], child: usize) {
        if nodes[child].ftype == FileType::Directory {
            nodes[child].parent = dir;
            nodes[dir].nlink += 1;
        }
        if let Some(old) = nodes[dir].children.insert(name.into(), child) {
            if nodes[old].ftype == FileType::Directory {
                nodes[dir].nlink -= 1;
            } else {
                nodes[old].nlink -= 1;
            }
        }
    }

    /// The node an inode of this filesystem stands for.
    fn index(inode: &Inode) -> usize {
        *inode.private::<usize>().expect("tarfs inode without its node")
    }

    /// The inode of node `i`: the live one, or a new one.
    fn inode(&self, sb: &Arc<SuperBlock>, i: usize) -> Arc<Inode> {
        let mut live = self.live.lock();
        if let Some(inode) = live.get(&i).and_then(Weak::upgrade) {
            return inode;
        }
        let n = &self.nodes[i];
        let size = if n.ftype == FileType::Directory {
            2 * DIRENT_SIZE + DIRENT_SIZE * n.children.len() as u64
        } else {
            n.size
        };
        let blocks = match &n.data {
            Data::None => 0,
            Data::Chunks(c) => c.iter().map(|c| c.2).sum::<u64>().div_ceil(512),
            _ => n.size.div_ceil(512),
        };
        let t = Timespec { sec: n.mtime, nsec: 0 };
        let inode = Inode::new(
            sb,
            NewInode {
                ino: Ino(i as u64 + 1),
                mode: n.ftype.mode_bits() | n.perm,
                uid: n.uid,
                gid: n.gid,
                nlink: n.nlink,
                size,
                blocks,
                rdev: n.rdev,
                times: [t; 3],
                acl: AclInit::Known(None),
                default_acl: AclInit::Known(None),
                link: n.target.clone(),
                btime: None,
            },
            Box::new(i),
        );
        // Forget the nodes whose inodes are gone before the table grows.
        if live.len() >= 64 && live.len().is_power_of_two() {
            live.retain(|_, w| w.strong_count() > 0);
        }
        live.insert(i, Arc::downgrade(&inode));
        inode
    }
}

impl FileSystem for TarFs {
    fn fs_type(&self) -> &'static str {
        "tarfs"
    }

    fn dcache_complete(&self) -> bool {
        false
    }

    fn read_only(&self) -> bool {
        true
    }

    fn root_inode(&self, sb: &Arc<SuperBlock>) -> Result<Arc<Inode>> {
        Ok(self.inode(sb, 0))
    }

    fn statfs(&self, _sb: &SuperBlock) -> StatFs {
        StatFs {
            fs_type: TARFS_MAGIC,
            bsize: 4096,
            blocks: self.data_bytes.div_ceil(4096),
            bfree: 0,
            bavail: 0,
            files: self.nodes.len() as u64,
            ffree: 0,
            namelen: crate::abi::limits::NAME_MAX as u64,
            ..StatFs::default()
        }
    }

    fn lookup(&self, sb: &Arc<SuperBlock>, dir: &Inode, name: &[u8]) -> Result<Option<Arc<Inode>>> {
        Ok(self.nodes[TarFs::index(dir)].children.get(name).map(|&i| self.inode(sb, i)))
    }

    fn readdir(&self, dir: &Inode, cursor: u64, out: &mut dyn FnMut(DirEntry) -> bool) -> Result<()> {
        let i = TarFs::index(dir);
        let n = &self.nodes[i];
        let dots = [(b".".as_slice(), i), (b"..".as_slice(), n.parent)];
        let entries = dots.into_iter().chain(n.children.iter().map(|(k, &v)| (&**k, v)));
        for (pos, (name, child)) in entries.enumerate().skip(cursor as usize) {
            let e = DirEntry {
                ino: child as u64 + 1,
                next: pos as u64 + 1,
                dtype: self.nodes[child].ftype.dirent_type(),
                name: name.to_vec(),
            };
            if !out(e) {
                break;
            }
        }
        Ok(())
    }

    fn readlink(&self, inode: &Inode) -> Result<Vec<u8>> {
        self.nodes[TarFs::index(inode)].target.as_deref().map(<[u8]>::to_vec).ok_or(Errno::EINVAL)
    }

    fn read(&self, inode: &Inode, off: u64, buf: &mut [u8]) -> Result<usize> {
        let n = &self.nodes[TarFs::index(inode)];
        if off >= n.size {
            return Ok(0);
        }
        let len = buf.len().min((n.size - off) as usize);
        match &n.data {
            Data::None => Ok(0),
            Data::Mem(bytes) => {
                buf[..len].copy_from_slice(&bytes[off as usize..off as usize + len]);
                Ok(len)
            }
            Data::At(start) => {
                self.file.read_exact_at(&mut buf[..len], start + off).map_err(|_| Errno::EIO)?;
                Ok(len)
            }
            Data::Chunks(chunks) => {
                let buf = &mut buf[..len];
                buf.fill(0);
                for &(c_off, at, c_len) in chunks {
                    let (from, to) = (c_off.max(off), (c_off + c_len).min(off + len as u64));
                    if from < to {
                        let dst = &mut buf[(from - off) as usize..(to - off) as usize];
                        self.file.read_exact_at(dst, at + (from - c_off)).map_err(|_| Errno::EIO)?;
                    }
                }
                Ok(len)
            }
        }
    }

    fn getxattr(&self, inode: &Inode, name: &[u8], buf: &mut [u8]) -> Result<usize> {
        let n = &self.nodes[TarFs::index(inode)];
        let v = n.xattrs.iter().find(|(k, _)| &**k == name).map(|(_, v)| v).ok_or(Errno::ENODATA)?;
        if buf.is_empty() {
            return Ok(v.len());
        }
        buf.get_mut(..v.len()).ok_or(Errno::ERANGE)?.copy_from_slice(v);
        Ok(v.len())
    }

    fn listxattr(&self, inode: &Inode, out: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        self.nodes[TarFs::index(inode)].xattrs.iter().try_for_each(|(k, _)| out(k))
    }

    fn create(&self, _sb: &Arc<SuperBlock>, _dir: &Inode, _name: &[u8], _args: &CreateArgs<'_>) -> Result<Arc<Inode>> {
        Err(Errno::EROFS)
    }

    fn link(&self, _dir: &Inode, _name: &[u8], _inode: &Arc<Inode>) -> Result<()> {
        Err(Errno::EROFS)
    }

    fn unlink(&self, _dir: &Inode, _name: &[u8], _inode: &Inode) -> Result<()> {
        Err(Errno::EROFS)
    }

    fn rmdir(&self, _dir: &Inode, _name: &[u8], _inode: &Inode) -> Result<()> {
        Err(Errno::EROFS)
    }

    fn rename(&self, _req: &RenameReq<'_>) -> Result<()> {
        Err(Errno::EROFS)
    }

    fn truncate(&self, _inode: &Inode, _size: u64, _by: TruncateBy) -> Result<()> {
        Err(Errno::EROFS)
    }

    fn write(&self, _inode: &Inode, _at: WriteAt, _buf: &[u8]) -> Result<(u64, usize)> {
        Err(Errno::EROFS)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

// ---- writing archives: what the overlay's export and the frontend's tree export share ----

/// The header of an archive entry for an object with attributes `st`: mode, owner and
/// modification time, size 0. The caller sets the type (and a regular file's size).
pub fn entry_header(st: &crate::abi::stat::Stat) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_mode(st.mode & 0o7777);
    h.set_uid(u64::from(st.uid));
    h.set_gid(u64::from(st.gid));
    h.set_mtime(st.mtime.sec.max(0) as u64);
    h.set_size(0);
    h
}

/// Makes `h` the entry of a device node or fifo of type `ftype` (device number `rdev`).
pub fn set_special(h: &mut tar::Header, ftype: FileType, rdev: u64) -> std::io::Result<()> {
    h.set_entry_type(match ftype {
        FileType::CharDevice => tar::EntryType::Char,
        FileType::BlockDevice => tar::EntryType::Block,
        _ => tar::EntryType::Fifo,
    });
    let (major, minor) = crate::abi::stat::major_minor(rdev);
    h.set_device_major(major)?;
    h.set_device_minor(minor)
}

/// Appends a PAX extended header carrying `xattrs` (full names, values) as
/// `SCHILY.xattr.` records, for the entry appended next (GNU tar's form); nothing when
/// there are none.
pub fn append_xattrs<W: std::io::Write>(
    tar: &mut tar::Builder<W>,
    xattrs: &[(Vec<u8>, Vec<u8>)],
) -> std::io::Result<()> {
    if xattrs.is_empty() {
        return Ok(());
    }
    let keyed: Vec<(Vec<u8>, &[u8])> =
        xattrs.iter().map(|(k, v)| ([b"SCHILY.xattr.".as_slice(), k].concat(), &v[..])).collect();
    let records = pax_records(&keyed);
    let mut x = tar::Header::new_ustar();
    x.set_entry_type(tar::EntryType::XHeader);
    x.set_mode(0o644);
    x.set_uid(0);
    x.set_gid(0);
    x.set_mtime(0);
    x.set_size(records.len() as u64);
    tar.append_data(&mut x, "PaxHeader", &records[..])
}

/// A PAX extended header's records (`"LEN key=value\n"`, LEN counting itself).
fn pax_records(pairs: &[(Vec<u8>, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in pairs {
        let body = k.len() + v.len() + 3; // space, '=', newline
        let mut len = body + 1;
        while body + len.to_string().len() != len {
            len = body + len.to_string().len();
        }
        out.extend_from_slice(len.to_string().as_bytes());
        out.push(b' ');
        out.extend_from_slice(k);
        out.push(b'=');
        out.extend_from_slice(v);
        out.push(b'\n');
    }
    out
}
