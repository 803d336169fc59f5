//! `overlay`: a writable layer in memory over read-only lower layers, with Linux
//! overlayfs's semantics (`fs/overlayfs/`). What is read comes from the topmost layer that
//! has it; the first change to an object copies it up; a removed lower name leaves a
//! whiteout, a directory made or moved where one was is opaque (hides the lower directories).
//!
//! The lower layers are any filesystems that answer lookups and listings themselves (not
//! dcache-complete: hostfs, tarfs), used through the filesystem API only: an overlay
//! inode holds the lower inode it stands for (a directory, the lower directories it
//! merges). The upper layer is the overlay's own: names decided in the upper layer
//! (created, copied up, whited out) are kept per directory, and file data copied up is
//! copy-on-write by page over the lower file, so a copy-up costs nothing until pages are
//! written (`lower_len` is how much of the lower file still shows through after a
//! truncation).
//!
//! A directory's merged listing is made when a reader starts it and its cursors stay
//! valid while the directory changes, as overlayfs's cached listing.
//! [`OverlayFs::snapshot`] freezes an overlay as a read-only layer (a fork of a sandbox
//! is a new overlay over it), [`OverlayFs::export_changes`] writes the upper layer as an
//! OCI layer tar.
//!
//! As overlayfs without `redirect_dir`, `index` or `metacopy`: renaming a directory that
//! has lower parts is EXDEV (tools copy instead); a copy-up breaks a lower hard link (the
//! other names keep the lower file); a merged directory reports one link; an open object
//! whose name went reports what overlayfs's `getattr` does (a lower one not copied up, the
//! lower object's link count: [`FileSystem::stat_nlink`]). Lower whiteouts
//! (character devices 0/0) and opaque lower directories (`trusted.overlay.opaque` "y")
//! are honoured, so stacked layers work. Inode numbers follow overlayfs's `xino` scheme:
//! one `st_dev` for every object, a lower object's own inode number with its layer in the
//! top bits (here the top byte), kept across copy-up; objects made in the upper layer
//! count from 2 (the root is 1), as the upper filesystem's would.

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use crate::abi::errno::{Errno, Result};
use crate::abi::flags::{FallocFlags, RenameFlags, Timespec};
use crate::abi::stat::{FileType, Ino, StatFs};
use crate::core::acl::{Acl, AclInit, AclType};
use crate::core::inode::{Inode, NewInode, current_time};
use crate::core::superblock::{CreateArgs, DirEntry, FileSystem, RenameReq, SetAttr, SuperBlock, TruncateBy, WriteAt};
use crate::core::xattr::XattrFlags;
use crate::sync::Mutex;

/// Generations of merged listings (readdir cursors), from 1.
static LISTINGS: AtomicU64 = AtomicU64::new(1);

/// tmpfs's directory size per entry and base, which the upper layer reports.
const DIRENT_SIZE: u64 = 20;
/// Page size of copied-up data.
const PAGE: u64 = 4096;
/// `OVERLAYFS_SUPER_MAGIC`.
pub const OVERLAYFS_SUPER_MAGIC: u64 = 0x794c_7630;
/// The xattr that makes a lower directory opaque.
const OPAQUE_XATTR: &[u8] = b"trusted.overlay.opaque";

/// Where a lower object was found: (its directory, its name).
type Origin = Option<(Weak<Inode>, Box<[u8]>)>;
/// Lower directories merged, top first, each with its layer.
type LowerDirs = Vec<(usize, Arc<Inode>)>;
/// A directory's listing: name, inode number, `DT_*` type.
type Listing = Vec<(Box<[u8]>, u64, u8)>;
/// A directory's upper names for the export: each child, or `None` for a whiteout.
type UpperNames = Vec<(Box<[u8]>, Option<Arc<Inode>>)>;
/// Names seen while listing: shown (inode number, type) or hidden by a whiteout (`None`).
type Shown = BTreeMap<Box<[u8]>, Option<(u64, u8)>>;

/// A page of zeros.
fn zeroed() -> Box<[u8; PAGE as usize]> {
    // SAFETY: an all-zero byte array is a valid `[u8; N]`.
    unsafe { Box::new_zeroed().assume_init() }
}

/// The page of a copied-up file's range allocated by `fallocate` and never written:
/// zeros, a hole to `SEEK_DATA` and `SEEK_HOLE` (as tmpfs's folios that are not
/// uptodate), counted in the blocks. One page shared by all; the first write copies it
/// (`Arc::make_mut`).
fn unwritten() -> &'static PageBuf {
    static PAGE_BUF: OnceLock<PageBuf> = OnceLock::new();
    PAGE_BUF.get_or_init(|| Arc::new(zeroed()))
}

/// The page of a hole punched where the lower file would show through: as
/// [`unwritten`] (another page, to tell them apart), but no block (the space is freed).
fn punched() -> &'static PageBuf {
    static PAGE_BUF: OnceLock<PageBuf> = OnceLock::new();
    PAGE_BUF.get_or_init(|| Arc::new(zeroed()))
}

/// Whether `p` holds no data (allocated and never written, or punched).
fn is_hole(p: &PageBuf) -> bool {
    Arc::ptr_eq(p, unwritten()) || Arc::ptr_eq(p, punched())
}

/// A page of upper data: one 4 KiB allocation, shared copy-on-write with snapshots.
type PageBuf = Arc<Box<[u8; PAGE as usize]>>;

/// A name decided in the upper layer.
enum Entry {
    /// An object of the upper layer (made there, or copied up).
    Child(Arc<Inode>),
    /// A whiteout: the lower layers' object of this name is hidden.
    Whiteout,
}

/// What the upper layer holds of an object. One leaf lock per object.
#[derive(Default)]
struct State {
    /// The object exists in the upper layer (made there or copied up); its attributes are
    /// the overlay inode's own from then on.
    upper: bool,
    /// A directory that hides its lower directories.
    opaque: bool,
    /// A directory's names decided in the upper layer.
    entries: BTreeMap<Box<[u8]>, Entry>,
    /// A directory's children found in the lower layers and not copied up, while alive.
    cache: HashMap<Box<[u8]>, Weak<Inode>>,
    /// A copied-up file's pages written since the copy-up (shared with snapshots until
    /// written: `Arc::make_mut`).
    pages: BTreeMap<u64, PageBuf>,
    /// A copied-up file: how many bytes of the lower file still show (below the pages).
    lower_len: u64,
    /// A copied-up file's size, which writes resolve appends against under this lock
    /// (the inode's copy is updated after it is dropped).
    size: u64,
    /// A symlink's target (upper objects; a lower symlink reads the lower one).
    target: Option<Box<[u8]>>,
    /// Extended attributes of an upper object (copied from the lower one at copy-up).
    xattrs: BTreeMap<Box<[u8]>, Box<[u8]>>,
    /// ACLs of an upper object (access, default).
    acls: [Option<Arc<Acl>>; 2],
    /// A directory's merged listing as a reader started it (its generation, the names),
    /// so that its cursors stay valid while the directory changes (overlayfs keeps one
    /// per open directory).
    listing: Option<(u64, Arc<Listing>)>,
}

impl State {
    /// What an upper object holds besides its names and caches (contents, xattrs, ACLs,
    /// the opaque flag), for a snapshot: pages are shared, not copied.
    fn contents(&self) -> State {
        State {
            upper: self.upper,
            opaque: self.opaque,
            pages: self.pages.clone(),
            lower_len: self.lower_len,
            size: self.size,
            target: self.target.clone(),
            xattrs: self.xattrs.clone(),
            acls: self.acls.clone(),
            ..State::default()
        }
    }
}

/// The overlay's private data of an inode.
struct OvlNode {
    /// Immutable: the lower object this one stands for (the topmost), if any.
    lower: Option<Arc<Inode>>,
    /// Immutable: a directory's lower directories, top first, each with its layer.
    lower_dirs: LowerDirs,
    /// Where the object was found (parent, name) while it is not copied up: the copy-up
    /// names it there. Leaf lock.
    origin: Mutex<Origin>,
    /// The upper layer's part. Ranked as a filesystem's per-inode metadata: taken under
    /// the inode lock (a `setattr` copies up); the inode's attributes are updated after it
    /// is dropped, and nothing of a lower layer is called while it is held.
    state: Mutex<State, { crate::sync::rank::FS_META }>,
    /// Set once, right after the inode is made: the inode itself, for its children to
    /// name as their parent.
    me: OnceLock<Weak<Inode>>,
    /// Set once, when the object lost its last name, before the inode is marked for it
    /// ([`Inode::set_stat_by_fs`]): the link count `stat` reports from then on.
    shown_nlink: OnceLock<u32>,
}

impl OvlNode {
    fn new(lower: Option<Arc<Inode>>, lower_dirs: LowerDirs, origin: Origin, state: State) -> OvlNode {
        OvlNode {
            lower,
            lower_dirs,
            origin: Mutex::new(origin),
            state: Mutex::new(state),
            me: OnceLock::new(),
            shown_nlink: OnceLock::new(),
        }
    }
}

/// Makes an overlay inode and tells it who it is.
fn make(sb: &Arc<SuperBlock>, n: NewInode, node: OvlNode) -> Arc<Inode> {
    let inode = Inode::new(sb, n, Box::new(node));
    let _ = self::node(&inode).me.set(Arc::downgrade(&inode));
    inode
}

fn node(inode: &Inode) -> &OvlNode {
    inode.private::<OvlNode>().expect("overlay inode without its node")
}

/// A filesystem of the overlay's lower layers, mounted inside it.
#[derive(Clone)]
struct Layer {
    sb: Arc<SuperBlock>,
    root: Arc<Inode>,
}

/// The overlay filesystem type: a writable layer in memory over `lowers`.
pub struct OverlayFs {
    /// The lower filesystems, top first, until the overlay is mounted.
    pending: Mutex<Vec<Box<dyn FileSystem>>>,
    /// Set once at mount: the lower layers.
    layers: OnceLock<Vec<Layer>>,
    /// Atomic: the next inode number of an upper object.
    next_ino: AtomicU64,
    /// Immutable: for a snapshot ([`OverlayFs::snapshot`]), the frozen upper layer and the
    /// layers below it; such an overlay is read-only.
    frozen: Option<Frozen>,
}

/// An overlay's upper layer frozen by [`OverlayFs::snapshot`]: every upper object's
/// attributes and contents (pages shared), by index (0 is the root), and the layers below.
struct Frozen {
    layers: Vec<Layer>,
    nodes: Vec<FrozenNode>,
}

/// One frozen upper object.
struct FrozenNode {
    stat: crate::abi::stat::Stat,
    lower: Option<Arc<Inode>>,
    lower_dirs: LowerDirs,
    /// A directory's upper names: a node index, or `None` for a whiteout.
    entries: Vec<(Box<[u8]>, Option<usize>)>,
    /// Its upper state without names ([`State::contents`]).
    contents: State,
}

impl OverlayFs {
    /// An overlay over `lowers` (top first): filesystems that answer lookups and listings
    /// (hostfs, tarfs). EINVAL without a lower layer or with a dcache-complete one (memfs
    /// keeps its tree in the dentry cache, which a layer below cannot use).
    pub fn new(lowers: Vec<Box<dyn FileSystem>>) -> Result<OverlayFs> {
        if lowers.is_empty() || lowers.iter().any(|l| l.dcache_complete()) {
            return Err(Errno::EINVAL);
        }
        Ok(OverlayFs {
            pending: Mutex::new(lowers),
            layers: OnceLock::new(),
            next_ino: AtomicU64::new(2),
            frozen: None,
        })
    }

    fn layers(&self) -> &[Layer] {
        self.layers.get().map_or(&[], Vec::as_slice)
    }

    /// An overlay inode for `lower` (found in `layer`), with the lower directories it
    /// merges and where it was found.
    fn wrap(
        &self,
        sb: &Arc<SuperBlock>,
        layer: usize,
        lower: Arc<Inode>,
        lower_dirs: LowerDirs,
        origin: Origin,
    ) -> Arc<Inode> {
        let st = lower.stat();
        let link = if lower.file_type() == FileType::Symlink { lower.cached_link().map(Into::into) } else { None };
        // A directory that merges more than one lower directory reports one link, as a
        // merged one with an upper part does (`ovl_getattr`, `OVL_TYPE_MERGE`).
        let nlink = if lower_dirs.len() > 1 { 1 } else { st.nlink };
        let n = NewInode {
            ino: Ino(((layer as u64 + 1) << 56) | (st.ino & ((1 << 56) - 1))),
            mode: st.mode,
            uid: st.uid,
            gid: st.gid,
            nlink,
            size: st.size,
            blocks: st.blocks,
            rdev: st.rdev,
            times: [st.atime, st.mtime, st.ctime],
            acl: AclInit::NotCached,
            default_acl: AclInit::NotCached,
            link,
            btime: None,
        };
        make(sb, n, OvlNode::new(Some(lower), lower_dirs, origin, State::default()))
    }

    /// Whether a lower object is a whiteout (a character device 0/0).
    fn is_whiteout(inode: &Inode) -> bool {
        inode.file_type() == FileType::CharDevice && inode.stat().rdev == 0
    }

    /// Whether a lower directory is opaque.
    fn lower_opaque(dir: &Inode) -> bool {
        let mut v = [0u8; 4];
        matches!(dir.sb().fs().getxattr(dir, OPAQUE_XATTR, &mut v), Ok(1) if v[0] == b'y')
    }

    /// Looks `name` up in the lower directories of `dir`: the topmost object, and for a
    /// directory the lower directories it merges (down to an opaque one or a non-directory).
    fn lookup_lower(&self, dirs: &[(usize, Arc<Inode>)], name: &[u8]) -> Result<Option<(usize, LowerDirs)>> {
        let mut found: Option<(usize, LowerDirs)> = None;
        for (layer, d) in dirs {
            let sb = &self.layers()[*layer].sb;
            let Some(i) = d.sb().fs().lookup(sb, d, name)? else { continue };
            if OverlayFs::is_whiteout(&i) {
                break;
            }
            match &mut found {
                None => {
                    let dir = i.is_dir();
                    let opaque = dir && OverlayFs::lower_opaque(&i);
                    found = Some((*layer, vec![(*layer, i)]));
                    if !dir || opaque {
                        break;
                    }
                }
                Some((_, v)) => {
                    // Below a directory only directories merge; anything else ends it.
                    if !i.is_dir() {
                        break;
                    }
                    let opaque = OverlayFs::lower_opaque(&i);
                    v.push((*layer, i));
                    if opaque {
                        break;
                    }
                }
            }
        }
        Ok(found)
    }

    /// Whether a lower layer has `name` in `dir` (a removal must leave a whiteout).
    fn lower_has(&self, dir: &Inode, name: &[u8]) -> Result<bool> {
        let n = node(dir);
        if n.state.lock().opaque {
            return Ok(false);
        }
        Ok(self.lookup_lower(&n.lower_dirs, name)?.is_some())
    }

    /// `inode` lost a name (unlink, rmdir, a rename over it): its link count drops (to
    /// none for a directory), which decides when it is gone. What `stat` shows of it
    /// afterwards is what overlayfs's `getattr` shows: an upper object its own attributes
    /// (its change time moves; a removed directory is an empty one, and one that merged
    /// lower directories still reports one link), a lower one not copied up the lower
    /// object's, its link count too ([`FileSystem::stat_nlink`]).
    fn lost_name(inode: &Inode, now: Timespec) {
        let n = node(inode);
        let upper = n.state.lock().upper;
        let dir = inode.is_dir();
        let shown = match (upper, &n.lower) {
            (false, Some(lower)) => Some(lower.nlink()),
            (true, _) if dir && !n.lower_dirs.is_empty() => Some(1),
            _ => None,
        };
        if let Some(c) = shown
            && n.shown_nlink.set(c).is_ok()
        {
            inode.set_stat_by_fs(true);
        }
        // A lower object never copied up had this one name in the overlay (overlayfs
        // unites no lower hard links here): it is gone, and `linkat` of an open
        // descriptor of it is ENOENT as on overlayfs, whatever the lower count.
        let only_name = dir || (!upper && n.lower.is_some());
        inode.update(|w| {
            let a = w.get();
            w.set_nlink(if only_name { 0 } else { a.nlink.saturating_sub(1) });
            if upper {
                w.stamp_ctime(now);
                if dir {
                    w.set_size(2 * DIRENT_SIZE);
                }
            }
        });
    }

    /// Takes `name` out of the merged `dir` (unlink, rmdir): `dir` is copied up, and the
    /// name leaves a whiteout where a lower layer has it.
    fn remove_entry(&self, dir: &Inode, name: &[u8]) -> Result<()> {
        self.copy_up(dir)?;
        let lower_has = self.lower_has(dir, name)?;
        let mut st = node(dir).state.lock();
        st.cache.remove(name);
        if lower_has {
            st.entries.insert(name.into(), Entry::Whiteout);
        } else {
            st.entries.remove(name);
        }
        Ok(())
    }

    /// A new object of the upper layer.
    fn new_upper(&self, sb: &Arc<SuperBlock>, args: &CreateArgs<'_>, nlink: u32) -> Result<Arc<Inode>> {
        let ftype = FileType::from_mode(args.mode).ok_or(Errno::EINVAL)?;
        let now = current_time();
        // The upper layer's sizes are tmpfs's (overlayfs's upper directory is usually one).
        let (size, blocks, link) = match ftype {
            FileType::Directory => (2 * DIRENT_SIZE, 0, None),
            FileType::Symlink => {
                let t = args.target.unwrap_or_default();
                (t.len() as u64, crate::fs::memfs::symlink_blocks(t.len()), Some(t.into()))
            }
            _ => (0, 0, None),
        };
        let state = State {
            upper: true,
            target: link.clone(),
            acls: [args.acl.clone(), args.default_acl.clone()],
            ..State::default()
        };
        let n = NewInode {
            ino: Ino(self.next_ino.fetch_add(1, Ordering::Relaxed)),
            mode: args.mode,
            uid: args.uid,
            gid: args.gid,
            nlink,
            size,
            blocks,
            rdev: args.rdev,
            times: [now; 3],
            acl: AclInit::Known(args.acl.clone()),
            default_acl: AclInit::Known(args.default_acl.clone()),
            link,
            btime: None,
        };
        Ok(make(sb, n, OvlNode::new(None, Vec::new(), None, state)))
    }

    /// Copies `inode` up (its parents first): from now on the upper layer holds it, named
    /// where it was found. Data stays below until pages are written. `locked`: the caller
    /// holds `inode`'s lock (`setattr`, the xattr and ACL calls), never its parents'.
    fn copy_up(&self, inode: &Inode) -> Result<()> {
        self.copy_up_as(inode, false)
    }

    fn copy_up_as(&self, inode: &Inode, locked: bool) -> Result<()> {
        let n = node(inode);
        if n.state.lock().upper {
            return Ok(());
        }
        let origin = n.origin.lock().clone();
        let Some((parent, name)) = origin else { return Err(Errno::EIO) };
        let parent = parent.upgrade().ok_or(Errno::ESTALE)?;
        self.copy_up(&parent)?;
        let lower = n.lower.as_ref().ok_or(Errno::EIO)?;
        let lfs = lower.sb().fs();
        // What the upper copy keeps of the lower object besides its attributes.
        let mut xattrs = BTreeMap::new();
        if inode.file_type() != FileType::Symlink {
            let mut names = Vec::new();
            lfs.listxattr(lower, &mut |k| {
                names.push(k.to_vec());
                Ok(())
            })?;
            for k in names.into_iter().filter(|k| k.as_slice() != OPAQUE_XATTR) {
                let len = lfs.getxattr(lower, &k, &mut [])?;
                let mut v = vec![0u8; len];
                let got = lfs.getxattr(lower, &k, &mut v)?;
                v.truncate(got);
                xattrs.insert(k.into_boxed_slice(), v.into_boxed_slice());
            }
        }
        let acls = if lfs.posix_acl() && inode.file_type() != FileType::Symlink {
            [lfs.get_acl(lower, AclType::Access)?, lfs.get_acl(lower, AclType::Default)?]
        } else {
            [None, None]
        };
        let target = match inode.file_type() {
            FileType::Symlink => Some(lfs.readlink(lower)?.into_boxed_slice()),
            _ => None,
        };
        let this = {
            let mut p = node(&parent).state.lock();
            let found = p.cache.get(&name).and_then(Weak::upgrade).filter(|t| std::ptr::eq(&**t, inode));
            let Some(this) = found else {
                // Its name went while it stayed open: overlayfs copies it up to that name
                // all the same, and fails where the directory itself was removed, or where
                // a whiteout or another object holds the name now: a file is linked there
                // (EEXIST), a directory renamed there (ENOTDIR over a whiteout or a
                // non-directory; over an empty directory overlayfs's rename replaces it,
                // which uvfs refuses with EEXIST: its dentry would go on naming the
                // replaced one).
                let held = p.entries.get(&name);
                return Err(if parent.nlink() == 0 {
                    Errno::ENOENT
                } else if held.is_none() {
                    Errno::ESTALE
                } else if inode.is_dir() && !matches!(held, Some(Entry::Child(c)) if c.is_dir()) {
                    Errno::ENOTDIR
                } else {
                    Errno::EEXIST
                });
            };
            p.cache.remove(&name);
            p.entries.insert(name, Entry::Child(this.clone()));
            this
        };
        // The upper directory gained an entry; its modification time stays (overlayfs
        // restores it), which moves its change time. The copy is a new upper object
        // whose attributes were set from the lower one's: its change time moves too
        // (`ovl_set_attr`'s `notify_change` calls).
        let now = current_time();
        let entries = node(&parent).state.lock().entries.len() as u64;
        parent.update(|w| {
            w.set_size(2 * DIRENT_SIZE + DIRENT_SIZE * entries);
            w.stamp_ctime(now);
        });
        let link_blocks = target.as_ref().map(|t| crate::fs::memfs::symlink_blocks(t.len()));
        let mut st = n.state.lock();
        st.upper = true;
        st.lower_len = inode.size();
        st.size = inode.size();
        st.xattrs = xattrs;
        st.acls = acls;
        st.target = target;
        drop(st);
        *n.origin.lock() = None;
        if this.is_dir() {
            // The upper directory is new and empty (its size is the upper layer's); a
            // merged one (upper and lower parts) reports one link (overlayfs's
            // `ovl_getattr`: counting subdirectories is not worth it).
            let merged = !n.lower_dirs.is_empty();
            let set = |w: &mut crate::core::inode::AttrWriter<'_>| {
                w.set_size(2 * DIRENT_SIZE);
                if merged {
                    w.set_nlink(1);
                }
                w.stamp_ctime(now);
            };
            if locked {
                this.update_locked(set);
            } else {
                this.update(set);
            }
        } else {
            // The upper copy is a new file with one name: a lower hard link is broken
            // (overlayfs without `index`). A symlink's body takes the upper layer's blocks.
            let set = |w: &mut crate::core::inode::AttrWriter<'_>| {
                w.set_nlink(1);
                if let Some(b) = link_blocks {
                    w.set_blocks(b);
                }
                w.stamp_ctime(now);
            };
            if locked {
                this.update_locked(set);
            } else {
                this.update(set);
            }
        }
        Ok(())
    }

    /// A directory gained (`delta` 1), lost (-1) or changed (0, an exchange) an upper
    /// entry; `subdir`: a directory entry, which counts in the link count of a directory
    /// of the upper layer only.
    fn dir_changed(dir: &Inode, now: Timespec, delta: i64, subdir: bool) {
        let (entries, opaque) = {
            let st = node(dir).state.lock();
            (st.entries.len() as u64, st.opaque)
        };
        let merged = !node(dir).lower_dirs.is_empty() && !opaque;
        dir.update(|w| {
            let a = w.get();
            w.set_size(2 * DIRENT_SIZE + DIRENT_SIZE * entries);
            if subdir && !merged {
                w.set_nlink(if delta > 0 { a.nlink + 1 } else { a.nlink.saturating_sub(1) });
            }
            w.stamp_cmtime(now);
        });
    }

    /// Every name `dir` shows, in byte order, with its inode number and type.
    fn list(&self, dir: &Inode) -> Result<Listing> {
        let n = node(dir);
        let (opaque, mut names): (bool, Shown) = {
            let st = n.state.lock();
            let names = st
                .entries
                .iter()
                .map(|(k, e)| {
                    let v = match e {
                        Entry::Child(i) => Some((i.ino().0, i.file_type().dirent_type())),
                        Entry::Whiteout => None,
                    };
                    (k.clone(), v)
                })
                .collect();
            (st.opaque, names)
        };
        if !opaque {
            for (layer, d) in &n.lower_dirs {
                let mut below = Vec::new();
                d.sb().fs().readdir(d, 0, &mut |e| {
                    below.push(e);
                    true
                })?;
                for e in below {
                    if e.name == b"." || e.name == b".." || names.contains_key(e.name.as_slice()) {
                        continue;
                    }
                    // A lower whiteout hides the name in the layers below it.
                    let v = (e.dtype != FileType::CharDevice.dirent_type()
                        || self.lookup_lower(&[(*layer, d.clone())], &e.name)?.is_some())
                    .then_some((((*layer as u64 + 1) << 56) | (e.ino & ((1 << 56) - 1)), e.dtype));
                    names.insert(e.name.into_boxed_slice(), v);
                }
            }
        }
        Ok(names.into_iter().filter_map(|(k, v)| v.map(|(ino, t)| (k, ino, t))).collect())
    }

    /// Page `idx` of the lower file up to `lower_len` (zeros after it), read with no lock
    /// held (the lower layer takes its own).
    fn lower_page(&self, inode: &Inode, idx: u64, lower_len: u64) -> Result<Box<[u8; PAGE as usize]>> {
        let mut page = zeroed();
        let start = idx * PAGE;
        if start < lower_len {
            let lower = node(inode).lower.as_ref().ok_or(Errno::EIO)?;
            let want = (lower_len - start).min(PAGE) as usize;
            let mut done = 0;
            while done < want {
                let n = lower.sb().fs().read(lower, start + done as u64, &mut page[done..want])?;
                if n == 0 {
                    break;
                }
                done += n;
            }
        }
        Ok(page)
    }

    /// Makes sure pages `range` of a copied-up file are its own (read from the lower
    /// file where it still shows), reading with no lock held. The lower file never
    /// changes, so a page read twice by racing writers is the same; a truncation meanwhile
    /// is applied again to what is inserted.
    fn own_pages(&self, inode: &Inode, range: std::ops::Range<u64>) -> Result<()> {
        for idx in range {
            let lower_len = {
                let st = node(inode).state.lock();
                if st.pages.contains_key(&idx) {
                    continue;
                }
                st.lower_len
            };
            let mut page = self.lower_page(inode, idx, lower_len)?;
            let mut st = node(inode).state.lock();
            let start = idx * PAGE;
            if st.lower_len < start + PAGE && st.lower_len < lower_len {
                page[st.lower_len.saturating_sub(start).min(PAGE) as usize..].fill(0);
            }
            st.pages.entry(idx).or_insert_with(|| Arc::new(page));
        }
        Ok(())
    }

    /// Whether page `idx` of a copied-up file holds data: a page written, or one of the
    /// lower file that still shows (taken as data: the copy-up is lazy). An allocated page
    /// never written ([`unwritten`]), a punched one and a page past both are holes.
    fn is_data(st: &State, idx: u64) -> bool {
        match st.pages.get(&idx) {
            Some(p) => !is_hole(p),
            None => idx * PAGE < st.lower_len,
        }
    }

    /// The 512-byte blocks of a copied-up file: its pages, and the lower ones still shown
    /// (less those a punched hole freed: unwritten there).
    fn blocks(st: &State) -> u64 {
        let lower_pages = st.lower_len.div_ceil(PAGE);
        let freed = st.pages.range(..lower_pages).filter(|(_, p)| Arc::ptr_eq(p, punched())).count() as u64;
        (lower_pages - freed + st.pages.range(lower_pages..).count() as u64) * (PAGE / 512)
    }
}

impl FileSystem for OverlayFs {
    fn fs_type(&self) -> &'static str {
        "overlay"
    }

    fn dcache_complete(&self) -> bool {
        false
    }

    fn read_only(&self) -> bool {
        self.frozen.is_some()
    }

    fn root_inode(&self, sb: &Arc<SuperBlock>) -> Result<Arc<Inode>> {
        if let Some(f) = &self.frozen {
            return self.thaw(sb, f);
        }
        let pending = std::mem::take(&mut *self.pending.lock());
        if !pending.is_empty() {
            let rcu = sb.rcu();
            let config = crate::abi::config::VfsConfig::default();
            let mut layers = Vec::new();
            for fs in pending {
                let lsb = SuperBlock::with_config(fs, false, &rcu, &config);
                let root = lsb.fs().root_inode(&lsb)?;
                layers.push(Layer { sb: lsb, root });
            }
            let _ = self.layers.set(layers);
        }
        let dirs: Vec<(usize, Arc<Inode>)> =
            self.layers().iter().enumerate().map(|(i, l)| (i, l.root.clone())).collect();
        let top = dirs.first().ok_or(Errno::EINVAL)?.1.clone();
        let root = self.wrap(sb, 0, top, dirs, None);
        node(&root).state.lock().upper = true;
        root.update(|w| w.set_nlink(1));
        Ok(root)
    }

    fn statfs(&self, _sb: &SuperBlock) -> StatFs {
        StatFs { fs_type: OVERLAYFS_SUPER_MAGIC, bsize: PAGE, namelen: 255, ..StatFs::default() }
    }

    fn lookup(&self, sb: &Arc<SuperBlock>, dir: &Inode, name: &[u8]) -> Result<Option<Arc<Inode>>> {
        let n = node(dir);
        {
            let st = n.state.lock();
            match st.entries.get(name) {
                Some(Entry::Child(i)) => return Ok(Some(i.clone())),
                Some(Entry::Whiteout) => return Ok(None),
                None => {}
            }
            if let Some(i) = st.cache.get(name).and_then(Weak::upgrade) {
                return Ok(Some(i));
            }
            if st.opaque {
                return Ok(None);
            }
        }
        let Some((layer, mut dirs)) = self.lookup_lower(&n.lower_dirs, name)? else { return Ok(None) };
        let lower = dirs[0].1.clone();
        if !lower.is_dir() {
            dirs.clear();
        }
        let me = n.me.get().cloned().ok_or(Errno::EIO)?;
        let inode = self.wrap(sb, layer, lower, dirs, Some((me, name.into())));
        let mut st = n.state.lock();
        // A racing lookup may have made one already: keep the first.
        if let Some(i) = st.cache.get(name).and_then(Weak::upgrade) {
            return Ok(Some(i));
        }
        st.cache.insert(name.into(), Arc::downgrade(&inode));
        Ok(Some(inode))
    }

    fn readdir(&self, dir: &Inode, cursor: u64, out: &mut dyn FnMut(DirEntry) -> bool) -> Result<()> {
        // A cursor is (generation << 32) | position in the listing of that generation: a
        // listing starts (cursor 0) from the directory as it is and goes on over that
        // list, whatever changes meanwhile, as overlayfs's cached merged listing.
        let (generation, pos) = (cursor >> 32, cursor & 0xffff_ffff);
        let cached = node(dir).state.lock().listing.clone();
        let (generation, names) = match cached {
            Some((g, l)) if cursor != 0 && g == generation => (g, l),
            _ => {
                let fresh = Arc::new(self.list(dir)?);
                let g = LISTINGS.fetch_add(1, Ordering::Relaxed) & 0x7fff_ffff;
                node(dir).state.lock().listing = Some((g, fresh.clone()));
                (g, fresh)
            }
        };
        let dots = [(b".".as_slice(), dir.ino().0, FileType::Directory.dirent_type())];
        // ".." is the parent's number as the VFS reports it; the overlay reports its own
        // for the root and the lower parent's otherwise (as overlayfs without xino does).
        let parent_ino = dir.ino().0;
        let all = dots
            .into_iter()
            .chain(std::iter::once((b"..".as_slice(), parent_ino, FileType::Directory.dirent_type())))
            .chain(names.iter().map(|(k, i, t)| (&**k, *i, *t)));
        for (at, (name, ino, dtype)) in all.enumerate().skip(pos as usize) {
            let next = (generation << 32) | (at as u64 + 1);
            if !out(DirEntry { ino, next, dtype, name: name.to_vec() }) {
                break;
            }
        }
        Ok(())
    }

    fn create(&self, sb: &Arc<SuperBlock>, dir: &Inode, name: &[u8], args: &CreateArgs<'_>) -> Result<Arc<Inode>> {
        self.copy_up(dir)?;
        let is_dir = FileType::from_mode(args.mode) == Some(FileType::Directory);
        let inode = self.new_upper(sb, args, if is_dir { 2 } else { 1 })?;
        let lower_has = self.lower_has(dir, name)?;
        let was_whiteout = matches!(node(dir).state.lock().entries.get(name), Some(Entry::Whiteout));
        if is_dir && (was_whiteout || lower_has) {
            // A directory made where a lower object was hides what was below it.
            node(&inode).state.lock().opaque = true;
        }
        {
            let mut st = node(dir).state.lock();
            st.cache.remove(name);
            st.entries.insert(name.into(), Entry::Child(inode.clone()));
        }
        OverlayFs::dir_changed(dir, inode.attrs().ctime, 1, is_dir);
        Ok(inode)
    }

    /// As overlayfs's `ovl_tmpfile` (Linux 6.6+): the directory is copied up and the
    /// unnamed file made in the upper layer, where a `linkat` names it.
    fn tmpfile(&self, sb: &Arc<SuperBlock>, dir: &Inode, args: &CreateArgs<'_>) -> Result<Arc<Inode>> {
        self.copy_up(dir)?;
        self.new_upper(sb, args, 0)
    }

    fn link(&self, dir: &Inode, name: &[u8], inode: &Arc<Inode>) -> Result<()> {
        self.copy_up(inode)?;
        self.copy_up(dir)?;
        node(dir).state.lock().entries.insert(name.into(), Entry::Child(inode.clone()));
        let now = current_time();
        inode.update(|w| {
            let a = w.get();
            w.set_nlink(a.nlink + 1);
            w.stamp_ctime(now);
        });
        OverlayFs::dir_changed(dir, now, 1, false);
        Ok(())
    }

    fn unlink(&self, dir: &Inode, name: &[u8], inode: &Inode) -> Result<()> {
        self.remove_entry(dir, name)?;
        let now = current_time();
        OverlayFs::lost_name(inode, now);
        OverlayFs::dir_changed(dir, now, -1, false);
        Ok(())
    }

    fn rmdir(&self, dir: &Inode, name: &[u8], inode: &Inode) -> Result<()> {
        if !self.list(inode)?.is_empty() {
            return Err(Errno::ENOTEMPTY);
        }
        self.remove_entry(dir, name)?;
        let now = current_time();
        OverlayFs::lost_name(inode, now);
        OverlayFs::dir_changed(dir, now, -1, true);
        Ok(())
    }

    fn stat_nlink(&self, inode: &Inode) -> Option<u32> {
        node(inode).shown_nlink.get().copied()
    }

    fn rename(&self, r: &RenameReq<'_>) -> Result<()> {
        // No `RENAME_WHITEOUT` on an overlay, as overlayfs (EINVAL, before any other
        // check of its own): its whiteout would be the overlay's, hiding the name.
        if r.flags.contains(RenameFlags::WHITEOUT) {
            return Err(Errno::EINVAL);
        }
        // A directory with lower parts cannot move (no redirect_dir): EXDEV, as overlayfs.
        let lower_dir = |i: &Inode| i.is_dir() && !node(i).lower_dirs.is_empty();
        let exchange = r.flags.contains(RenameFlags::EXCHANGE);
        if lower_dir(r.inode) || (exchange && r.target.is_some_and(lower_dir)) {
            return Err(Errno::EXDEV);
        }
        if let Some(t) = r.target
            && t.is_dir()
            && !exchange
            && !self.list(t)?.is_empty()
        {
            return Err(Errno::ENOTEMPTY);
        }
        self.copy_up(r.inode)?;
        // The target of an exchange moves and is copied up; one that is replaced only
        // loses its name, and a lower one stays below, as overlayfs leaves it.
        if let Some(t) = r.target
            && exchange
        {
            self.copy_up(t)?;
        }
        self.copy_up(r.old_dir)?;
        self.copy_up(r.new_dir)?;
        let take = |dir: &Inode, name: &[u8]| -> Result<Arc<Inode>> {
            match node(dir).state.lock().entries.get(name) {
                Some(Entry::Child(i)) => Ok(i.clone()),
                _ => Err(Errno::ESTALE),
            }
        };
        let moving = take(r.old_dir, r.old_name)?;
        // A directory that lands where the lower layers have an object hides it, as one
        // made there does (`create`), and as overlayfs marks it: without the mark an
        // exported layer (or a snapshot's) would let the lower directory show through.
        // (Only directories without lower parts move, so what they show is theirs.)
        let hides =
            |i: &Inode, dir: &Inode, name: &[u8]| -> Result<bool> { Ok(i.is_dir() && self.lower_has(dir, name)?) };
        let moving_hides = hides(&moving, r.new_dir, r.new_name)?;
        let now = current_time();
        if exchange {
            let other = take(r.new_dir, r.new_name)?;
            if hides(&other, r.old_dir, r.old_name)? {
                node(&other).state.lock().opaque = true;
            }
            node(r.old_dir).state.lock().entries.insert(r.old_name.into(), Entry::Child(other.clone()));
            node(r.new_dir).state.lock().entries.insert(r.new_name.into(), Entry::Child(moving.clone()));
            let same_dir = std::ptr::eq(r.old_dir, r.new_dir);
            if !same_dir && moving.is_dir() != other.is_dir() {
                let (lose, gain) = if moving.is_dir() { (r.old_dir, r.new_dir) } else { (r.new_dir, r.old_dir) };
                OverlayFs::dir_changed(lose, now, -1, true);
                OverlayFs::dir_changed(gain, now, 1, true);
            } else {
                // Both directories changed an entry, no count: their times move, as the
                // upper layer's (`simple_rename_timestamp`).
                OverlayFs::dir_changed(r.old_dir, now, 0, false);
                if !same_dir {
                    OverlayFs::dir_changed(r.new_dir, now, 0, false);
                }
            }
            other.update(|w| w.stamp_ctime(now));
        } else {
            // A name the lower layer has stays hidden by a whiteout.
            let whiteout = self.lower_has(r.old_dir, r.old_name)?;
            {
                let mut st = node(r.old_dir).state.lock();
                if whiteout {
                    st.entries.insert(r.old_name.into(), Entry::Whiteout);
                } else {
                    st.entries.remove(r.old_name);
                }
            }
            if let Some(t) = r.target {
                OverlayFs::lost_name(t, now);
                if t.is_dir() {
                    OverlayFs::dir_changed(r.new_dir, now, -1, true);
                }
            }
            {
                let mut st = node(r.new_dir).state.lock();
                st.cache.remove(r.new_name);
                st.entries.insert(r.new_name.into(), Entry::Child(moving.clone()));
            }
            let d = if whiteout { 0 } else { -1 };
            OverlayFs::dir_changed(r.old_dir, now, d, moving.is_dir());
            OverlayFs::dir_changed(r.new_dir, now, 1, moving.is_dir());
        }
        if moving_hides {
            node(&moving).state.lock().opaque = true;
        }
        moving.update(|w| w.stamp_ctime(now));
        Ok(())
    }

    fn open(&self, inode: &Inode, flags: crate::abi::flags::OpenFlags) -> Result<()> {
        // As `ovl_open`: an open that may write copies up first.
        if flags.writable() || flags.contains(crate::abi::flags::OpenFlags::TRUNC) {
            self.copy_up(inode)?;
        }
        Ok(())
    }

    fn readlink(&self, inode: &Inode) -> Result<Vec<u8>> {
        let n = node(inode);
        if let Some(t) = &n.state.lock().target {
            return Ok(t.to_vec());
        }
        let lower = n.lower.as_ref().ok_or(Errno::EINVAL)?;
        lower.sb().fs().readlink(lower)
    }

    fn setattr(&self, inode: &Inode, _attr: &SetAttr) -> Result<()> {
        // The attributes live in the overlay inode: a change makes it an upper object.
        self.copy_up_as(inode, true)
    }

    fn truncate(&self, inode: &Inode, size: u64, _by: TruncateBy) -> Result<()> {
        self.copy_up(inode)?;
        // What of the lower file shows is cut at `lower_len`: nothing to read below.
        let mut st = node(inode).state.lock();
        st.size = size;
        // Not growing: pages past the end go, also those `fallocate` kept there
        // (`shmem_setattr`).
        if size <= inode.size() {
            let keep = size.div_ceil(PAGE);
            st.pages.split_off(&keep);
            // The new last page's tail is zeroed, unless it is a hole (zeros already:
            // a copy would turn it into a written page with a block).
            if !size.is_multiple_of(PAGE)
                && let Some(p) = st.pages.get_mut(&(size / PAGE))
                && !is_hole(p)
            {
                let p = Arc::make_mut(p);
                p[(size % PAGE) as usize..].fill(0);
            }
        }
        if size < st.lower_len {
            st.lower_len = size;
        }
        let blocks = OverlayFs::blocks(&st);
        drop(st);
        inode.update(|w| {
            w.set_size(size);
            w.set_blocks(blocks);
        });
        Ok(())
    }

    fn privs_before_fallocate(&self) -> bool {
        true
    }

    fn fallocate(&self, inode: &Inode, mode: FallocFlags, off: u64, len: u64) -> Result<()> {
        // The upper layer's modes are tmpfs's, as overlayfs's over a tmpfs upper layer:
        // allocate (the size grows unless `KEEP_SIZE`) and punch a hole.
        let punch = mode == FallocFlags::PUNCH_HOLE | FallocFlags::KEEP_SIZE;
        if !punch && !FallocFlags::KEEP_SIZE.contains(mode) {
            return Err(Errno::EOPNOTSUPP);
        }
        self.copy_up(inode)?;
        let n = node(inode);
        let end = off + len;
        if punch {
            // Partial pages at the edges are zeroed in place (owned first where the lower
            // file shows); whole pages go, or become unwritten where the lower file would
            // show through them.
            let edges = [off / PAGE, (end - 1) / PAGE];
            for idx in if edges[0] == edges[1] { &edges[..1] } else { &edges[..] } {
                let (from, to) = (off.max(idx * PAGE), end.min((idx + 1) * PAGE));
                let shows = {
                    let st = n.state.lock();
                    to - from < PAGE && OverlayFs::is_data(&st, *idx)
                };
                if shows {
                    self.own_pages(inode, *idx..*idx + 1)?;
                    if let Some(p) = n.state.lock().pages.get_mut(idx) {
                        Arc::make_mut(p)[(from - idx * PAGE) as usize..(to - idx * PAGE) as usize].fill(0);
                    }
                }
            }
            let (first, last) = (off.div_ceil(PAGE), end / PAGE);
            let mut st = n.state.lock();
            if first < last {
                let tail = st.pages.split_off(&last);
                st.pages.split_off(&first);
                st.pages.extend(tail);
                for idx in first..last.min(st.lower_len.div_ceil(PAGE)) {
                    st.pages.insert(idx, punched().clone());
                }
            }
            let blocks = OverlayFs::blocks(&st);
            drop(st);
            inode.update(|w| w.set_blocks(blocks));
            return Ok(());
        }
        let (first, last) = (off / PAGE, end.div_ceil(PAGE));
        // No more than tmpfs's default size (half of RAM) at once.
        if last - first > crate::fs::memfs::half_ram_pages() {
            return Err(Errno::ENOSPC);
        }
        let mut st = n.state.lock();
        let shown = st.lower_len.div_ceil(PAGE);
        // A page an earlier call reserved is zeroed and holds data from now on, as
        // tmpfs's; one reserved now is a hole until written. Where the lower file shows,
        // only punched pages need space again.
        for (_, p) in st.pages.range_mut(first..last) {
            if Arc::ptr_eq(p, unwritten()) {
                *p = Arc::new(zeroed());
            }
        }
        for (_, p) in st.pages.range_mut(first..last.min(shown).max(first)) {
            if Arc::ptr_eq(p, punched()) {
                *p = unwritten().clone();
            }
        }
        for idx in first.max(shown)..last {
            st.pages.entry(idx).or_insert_with(|| unwritten().clone());
        }
        if !mode.contains(FallocFlags::KEEP_SIZE) {
            st.size = st.size.max(end);
        }
        let (size, blocks) = (st.size, OverlayFs::blocks(&st));
        drop(st);
        inode.update(|w| {
            w.set_size(size);
            w.set_blocks(blocks);
        });
        Ok(())
    }

    fn seek_hole_data(&self, inode: &Inode, off: u64, hole: bool) -> Result<u64> {
        let n = node(inode);
        let st = n.state.lock();
        if !st.upper {
            drop(st);
            return match n.lower.as_ref() {
                Some(lower) => lower.sb().fs().seek_hole_data(lower, off, hole),
                None => Ok(if hole { inode.size() } else { off }),
            };
        }
        let size = st.size;
        // Each step below stands on a page that exists or on one the lower file shows:
        // bounded by the data, not by the size.
        let mut idx = off / PAGE;
        if hole {
            while idx * PAGE < size && OverlayFs::is_data(&st, idx) {
                idx += 1;
            }
            return Ok((idx * PAGE).max(off).min(size));
        }
        let shown = st.lower_len.div_ceil(PAGE);
        while idx < shown && !OverlayFs::is_data(&st, idx) {
            idx += 1;
        }
        let data =
            if idx < shown { Some(idx) } else { st.pages.range(idx..).find(|(_, p)| !is_hole(p)).map(|(&i, _)| i) };
        data.map(|i| (i * PAGE).max(off)).filter(|&d| d < size).ok_or(Errno::ENXIO)
    }

    fn read(&self, inode: &Inode, off: u64, buf: &mut [u8]) -> Result<usize> {
        let n = node(inode);
        let st = n.state.lock();
        if !st.upper {
            drop(st);
            let lower = n.lower.as_ref().ok_or(Errno::EINVAL)?;
            return lower.sb().fs().read(lower, off, buf);
        }
        let size = inode.size();
        if off >= size {
            return Ok(0);
        }
        let len = buf.len().min((size - off) as usize);
        // Own pages are copied under the lock; what still shows from the lower file is
        // read after it is dropped (the lower layer takes its own locks).
        let mut below = Vec::new();
        let mut done = 0;
        while done < len {
            let pos = off + done as u64;
            let (idx, in_page) = (pos / PAGE, (pos % PAGE) as usize);
            let chunk = (len - done).min(PAGE as usize - in_page);
            match st.pages.get(&idx) {
                Some(p) => buf[done..done + chunk].copy_from_slice(&p[in_page..in_page + chunk]),
                None => {
                    let shown = if pos < st.lower_len { chunk.min((st.lower_len - pos) as usize) } else { 0 };
                    buf[done + shown..done + chunk].fill(0);
                    if shown > 0 {
                        below.push((done, pos, shown));
                    }
                }
            }
            done += chunk;
        }
        drop(st);
        let lower = n.lower.as_ref();
        for (at, pos, want) in below {
            let lower = lower.ok_or(Errno::EIO)?;
            let got = lower.sb().fs().read(lower, pos, &mut buf[at..at + want])?;
            buf[at + got..at + want].fill(0);
        }
        Ok(len)
    }

    fn write(&self, inode: &Inode, at: WriteAt, buf: &[u8]) -> Result<(u64, usize)> {
        self.copy_up(inode)?;
        // The pages written, owned first (an append's offset is known only under the
        // lock: it owns the pages from the size it sees, and checks again below).
        let seen = node(inode).state.lock().size;
        let (off, len) = at.resolve(seen, buf.len())?;
        if len > 0 {
            self.own_pages(inode, off / PAGE..(off + len as u64).div_ceil(PAGE))?;
        }
        let n = node(inode);
        let mut st = n.state.lock();
        let (off, len) = at.resolve(st.size, buf.len())?;
        let buf = &buf[..len];
        if buf.is_empty() {
            return Ok((off, 0));
        }
        let end = off.checked_add(buf.len() as u64).ok_or(Errno::EFBIG)?;
        if (off / PAGE..end.div_ceil(PAGE)).any(|i| !st.pages.contains_key(&i) && i * PAGE < st.lower_len) {
            // An append raced with another write: own the pages now, and write then.
            drop(st);
            self.own_pages(inode, off / PAGE..end.div_ceil(PAGE))?;
            st = n.state.lock();
        }
        let mut done = 0;
        while done < buf.len() {
            let pos = off + done as u64;
            let (idx, in_page) = (pos / PAGE, (pos % PAGE) as usize);
            let chunk = (buf.len() - done).min(PAGE as usize - in_page);
            let page = Arc::make_mut(st.pages.entry(idx).or_insert_with(|| Arc::new(zeroed())));
            page[in_page..in_page + chunk].copy_from_slice(&buf[done..done + chunk]);
            done += chunk;
        }
        st.size = st.size.max(end);
        let blocks = OverlayFs::blocks(&st);
        drop(st);
        inode.update(|w| {
            if end > w.get().size {
                w.set_size(end);
            }
            w.set_blocks(blocks);
        });
        Ok((off, buf.len()))
    }

    fn posix_acl(&self) -> bool {
        true
    }

    fn get_acl(&self, inode: &Inode, ty: AclType) -> Result<Option<Arc<Acl>>> {
        let n = node(inode);
        let i = match ty {
            AclType::Access => 0,
            AclType::Default => 1,
        };
        {
            let st = n.state.lock();
            if st.upper || n.lower.is_none() {
                return Ok(st.acls[i].clone());
            }
        }
        let lower = n.lower.as_ref().expect("checked above");
        if lower.sb().fs().posix_acl() { lower.sb().fs().get_acl(lower, ty) } else { Ok(None) }
    }

    fn remove_acl_check(&self, inode: &Inode, ty: AclType) -> Result<()> {
        // Removing an ACL the lower object does not have copies nothing up: ENODATA
        // (`ovl_set_or_remove_acl`); an upper object's goes without a check, as tmpfs's.
        if !node(inode).state.lock().upper && self.get_acl(inode, ty)?.is_none() {
            return Err(Errno::ENODATA);
        }
        Ok(())
    }

    fn set_acl(&self, inode: &Inode, ty: AclType, acl: Option<&Arc<Acl>>) -> Result<()> {
        self.copy_up_as(inode, true)?;
        let i = match ty {
            AclType::Access => 0,
            AclType::Default => 1,
        };
        node(inode).state.lock().acls[i] = acl.cloned();
        Ok(())
    }

    fn getxattr(&self, inode: &Inode, name: &[u8], buf: &mut [u8]) -> Result<usize> {
        let n = node(inode);
        let st = n.state.lock();
        if !st.upper {
            drop(st);
            if name == OPAQUE_XATTR {
                return Err(Errno::ENODATA);
            }
            let lower = n.lower.as_ref().ok_or(Errno::ENODATA)?;
            return lower.sb().fs().getxattr(lower, name, buf);
        }
        let v = st.xattrs.get(name).ok_or(Errno::ENODATA)?;
        if buf.is_empty() {
            return Ok(v.len());
        }
        buf.get_mut(..v.len()).ok_or(Errno::ERANGE)?.copy_from_slice(v);
        Ok(v.len())
    }

    fn setxattr(&self, inode: &Inode, name: &[u8], value: &[u8], flags: XattrFlags) -> Result<()> {
        self.copy_up_as(inode, true)?;
        let mut st = node(inode).state.lock();
        match st.xattrs.get_mut(name) {
            Some(_) if flags.contains(XattrFlags::CREATE) => Err(Errno::EEXIST),
            Some(old) => {
                *old = value.into();
                Ok(())
            }
            None if flags.contains(XattrFlags::REPLACE) => Err(Errno::ENODATA),
            None => {
                st.xattrs.insert(name.into(), value.into());
                Ok(())
            }
        }
    }

    fn removexattr(&self, inode: &Inode, name: &[u8]) -> Result<()> {
        // Removing what the lower object does not have copies nothing up (`ovl_xattr_set`).
        if !node(inode).state.lock().upper {
            self.getxattr(inode, name, &mut [])?;
        }
        self.copy_up_as(inode, true)?;
        node(inode).state.lock().xattrs.remove(name).map(drop).ok_or(Errno::ENODATA)
    }

    fn listxattr(&self, inode: &Inode, out: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        let n = node(inode);
        let st = n.state.lock();
        if !st.upper {
            drop(st);
            let Some(lower) = n.lower.as_ref() else { return Ok(()) };
            return lower.sb().fs().listxattr(lower, &mut |k| if k == OPAQUE_XATTR { Ok(()) } else { out(k) });
        }
        st.xattrs.keys().try_for_each(|k| out(k))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The header of an empty marker member (a whiteout, an opaque directory's mark, a PAX
/// header): every numeric field set, as readers parse them all.
fn marker(ty: tar::EntryType, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(ty);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_size(size);
    h
}

/// Reads an overlay file from its start, for the archive.
struct FileReader<'a> {
    fs: &'a OverlayFs,
    inode: &'a Inode,
    off: u64,
}

impl std::io::Read for FileReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.fs.read(self.inode, self.off, buf).map_err(|e| std::io::Error::from_raw_os_error(e.raw()))?;
        self.off += n as u64;
        Ok(n)
    }
}

impl OverlayFs {
    /// Writes the changes of the overlay whose root inode is `root` (its upper layer) to
    /// `out` as an OCI image layer: every object made or copied up, with its metadata,
    /// `user.`/`trusted.`/`security.` xattrs (PAX `SCHILY.xattr.*`) and data, `DIR/.wh.NAME`
    /// for a whiteout and `DIR/.wh..wh..opq` for an opaque directory; hard links as links.
    /// Applied over the lower layers ([`TarFs::open_layer`](crate::fs::tarfs::TarFs::open_layer)
    /// in an overlay, or `tar -x` after removing what the whiteouts name) it gives the
    /// overlay's tree. EINVAL if `root` is not an overlay's. ACLs are not exported.
    pub fn export_changes(root: &Inode, out: impl std::io::Write) -> Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let fs = root.sb().fs().as_any().downcast_ref::<OverlayFs>().ok_or(Errno::EINVAL)?;
        let io = |e: std::io::Error| e.raw_os_error().map_or(Errno::EIO, Errno::from_raw);
        let mut tar = tar::Builder::new(out);
        let path = |p: &[u8]| std::path::PathBuf::from(std::ffi::OsStr::from_bytes(p));
        // Objects with more than one name, by identity: the overlay inode, not `st_ino`,
        // which a copy-up keeps from the lower object, so two copies of one lower file
        // (linked under two lower names, each copied up on its own) share it. Each is
        // held so that its address names it for the whole export.
        let mut seen: HashMap<*const Inode, (Arc<Inode>, Vec<u8>)> = HashMap::new();
        // Directories to list, by their path in the archive ("" is the root).
        let root_arc = node(root).me.get().and_then(Weak::upgrade).ok_or(Errno::EIO)?;
        // The root's own metadata first (`./`), as an image layer may carry it.
        let st = root.stat();
        let mut h = marker(tar::EntryType::Directory, 0);
        h.set_mode(st.mode & 0o7777);
        h.set_uid(u64::from(st.uid));
        h.set_gid(u64::from(st.gid));
        h.set_mtime(st.mtime.sec.max(0) as u64);
        tar.append_data(&mut h, "./", std::io::empty()).map_err(io)?;
        let mut stack: Vec<(Vec<u8>, Arc<Inode>)> = vec![(Vec::new(), root_arc)];
        while let Some((prefix, dir)) = stack.pop() {
            let entries: UpperNames = node(&dir)
                .state
                .lock()
                .entries
                .iter()
                .map(|(k, e)| (k.clone(), if let Entry::Child(i) = e { Some(i.clone()) } else { None }))
                .collect();
            let at = |name: &[u8]| if prefix.is_empty() { name.to_vec() } else { [&prefix[..], b"/", name].concat() };
            for (name, child) in entries {
                let Some(i) = child else {
                    let mut h = marker(tar::EntryType::Regular, 0);
                    tar.append_data(&mut h, path(&at(&[b".wh.", &name[..]].concat())), std::io::empty()).map_err(io)?;
                    continue;
                };
                let p = at(&name);
                let st = i.stat();
                let mut h = crate::fs::tarfs::entry_header(&st);
                if i.file_type() != FileType::Directory && st.nlink > 1 {
                    if let Some((_, first)) = seen.get(&Arc::as_ptr(&i)) {
                        h.set_entry_type(tar::EntryType::Link);
                        tar.append_link(&mut h, path(&p), path(first)).map_err(io)?;
                        continue;
                    }
                    seen.insert(Arc::as_ptr(&i), (i.clone(), p.clone()));
                }
                let xattrs: Vec<(Vec<u8>, Vec<u8>)> =
                    node(&i).state.lock().xattrs.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
                crate::fs::tarfs::append_xattrs(&mut tar, &xattrs).map_err(io)?;
                match i.file_type() {
                    FileType::Directory => {
                        h.set_entry_type(tar::EntryType::Directory);
                        tar.append_data(&mut h, path(&p), std::io::empty()).map_err(io)?;
                        if node(&i).state.lock().opaque {
                            let mut o = marker(tar::EntryType::Regular, 0);
                            tar.append_data(&mut o, path(&[&p[..], b"/.wh..wh..opq"].concat()), std::io::empty())
                                .map_err(io)?;
                        }
                        stack.push((p, i));
                    }
                    FileType::Regular => {
                        h.set_entry_type(tar::EntryType::Regular);
                        h.set_size(st.size);
                        tar.append_data(&mut h, path(&p), FileReader { fs, inode: &i, off: 0 }).map_err(io)?;
                    }
                    FileType::Symlink => {
                        h.set_entry_type(tar::EntryType::Symlink);
                        let target = fs.readlink(&i)?;
                        tar.append_link(&mut h, path(&p), path(&target)).map_err(io)?;
                    }
                    t => {
                        crate::fs::tarfs::set_special(&mut h, t, st.rdev).map_err(io)?;
                        tar.append_data(&mut h, path(&p), std::io::empty()).map_err(io)?;
                    }
                }
            }
        }
        tar.finish().map_err(io)
    }
}

/// What happened to a path in an overlay's upper layer ([`OverlayFs::changes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Made in the upper layer (nothing of that name below).
    Added,
    /// Copied up from a lower layer and changed (a directory: only when opaque, which
    /// replaced what was below).
    Modified,
    /// Whited out: the lower object is gone.
    Deleted,
}

impl OverlayFs {
    /// The paths (relative to the root) the overlay whose root inode is `root` changed, in
    /// name order: what `uvfs run --summary` lists. EINVAL if `root` is not an overlay's.
    pub fn changes(root: &Inode) -> Result<Vec<(Change, Vec<u8>)>> {
        root.sb().fs().as_any().downcast_ref::<OverlayFs>().ok_or(Errno::EINVAL)?;
        let mut out = Vec::new();
        let root_arc = node(root).me.get().and_then(Weak::upgrade).ok_or(Errno::EIO)?;
        let mut stack: Vec<(Vec<u8>, Arc<Inode>)> = vec![(Vec::new(), root_arc)];
        while let Some((prefix, dir)) = stack.pop() {
            let entries: UpperNames = node(&dir)
                .state
                .lock()
                .entries
                .iter()
                .map(|(k, e)| (k.clone(), if let Entry::Child(i) = e { Some(i.clone()) } else { None }))
                .collect();
            for (name, child) in entries {
                let p = if prefix.is_empty() { name.to_vec() } else { [&prefix[..], b"/", &name[..]].concat() };
                let Some(i) = child else {
                    out.push((Change::Deleted, p));
                    continue;
                };
                let n = node(&i);
                let opaque = n.state.lock().opaque;
                match (i.is_dir(), n.lower.is_some()) {
                    (true, true) => {}
                    (true, false) => out.push((if opaque { Change::Modified } else { Change::Added }, p.clone())),
                    (false, true) => out.push((Change::Modified, p.clone())),
                    (false, false) => out.push((Change::Added, p.clone())),
                }
                if i.is_dir() {
                    stack.push((p, i));
                }
            }
        }
        out.sort_by(|a, b| a.1.cmp(&b.1));
        Ok(out)
    }
}

impl OverlayFs {
    /// Freezes the overlay whose root inode is `root` into a read-only overlay holding
    /// what it shows now: its upper layer copied (attributes, names, whiteouts; data pages
    /// shared copy-on-write, so the copy costs no data) over the same lower layers. Time
    /// and memory grow with what was changed, not with the tree. To fork a sandbox, make a
    /// new overlay with the snapshot as its lower layer; the original goes on
    /// independently. Take it while nothing writes to the overlay (each object is copied
    /// whole, the tree is not frozen at one instant). EINVAL if `root` is not an
    /// overlay's.
    pub fn snapshot(root: &Inode) -> Result<OverlayFs> {
        let fs = root.sb().fs().as_any().downcast_ref::<OverlayFs>().ok_or(Errno::EINVAL)?;
        let root_arc = node(root).me.get().and_then(Weak::upgrade).ok_or(Errno::EIO)?;
        let mut index: HashMap<*const Inode, usize> = HashMap::new();
        let mut nodes: Vec<Option<FrozenNode>> = Vec::new();
        let mut todo: Vec<Arc<Inode>> = vec![root_arc.clone()];
        index.insert(Arc::as_ptr(&root_arc), 0);
        while let Some(i) = todo.pop() {
            let n = node(&i);
            let st = n.state.lock();
            let mut entries = Vec::new();
            for (k, e) in &st.entries {
                let child = match e {
                    Entry::Whiteout => None,
                    Entry::Child(c) => {
                        let next = index.len();
                        Some(*index.entry(Arc::as_ptr(c)).or_insert_with(|| {
                            todo.push(c.clone());
                            next
                        }))
                    }
                };
                entries.push((k.clone(), child));
            }
            let at = index[&Arc::as_ptr(&i)];
            let fnode = FrozenNode {
                stat: i.stat(),
                lower: n.lower.clone(),
                lower_dirs: n.lower_dirs.clone(),
                entries,
                contents: st.contents(),
            };
            drop(st);
            if nodes.len() <= at {
                nodes.resize_with(at + 1, || None);
            }
            nodes[at] = Some(fnode);
        }
        let nodes: Option<Vec<FrozenNode>> = nodes.into_iter().collect();
        Ok(OverlayFs {
            pending: Mutex::new(Vec::new()),
            layers: OnceLock::new(),
            next_ino: AtomicU64::new(fs.next_ino.load(Ordering::Relaxed)),
            frozen: Some(Frozen { layers: fs.layers().to_vec(), nodes: nodes.ok_or(Errno::EIO)? }),
        })
    }

    /// A snapshot's inodes, made at its mount: each frozen object once (hard links too).
    fn thaw(&self, sb: &Arc<SuperBlock>, f: &Frozen) -> Result<Arc<Inode>> {
        let _ = self.layers.set(f.layers.clone());
        let mut made: Vec<Option<Arc<Inode>>> = vec![None; f.nodes.len()];
        // Children before parents: a directory names inodes already made.
        let mut order = Vec::new();
        let mut stack = vec![(0usize, false)];
        let mut seen = vec![false; f.nodes.len()];
        while let Some((i, expanded)) = stack.pop() {
            if expanded {
                order.push(i);
                continue;
            }
            if std::mem::replace(&mut seen[i], true) {
                continue;
            }
            stack.push((i, true));
            for (_, c) in &f.nodes[i].entries {
                if let Some(c) = *c
                    && !seen[c]
                {
                    stack.push((c, false));
                }
            }
        }
        for i in order {
            let n = &f.nodes[i];
            let entries = n
                .entries
                .iter()
                .map(|(k, c)| {
                    let e = match c {
                        Some(c) => Entry::Child(made[*c].clone().expect("children are made first")),
                        None => Entry::Whiteout,
                    };
                    (k.clone(), e)
                })
                .collect();
            let state = State { upper: true, entries, ..n.contents.contents() };
            let s = &n.stat;
            let new = NewInode {
                ino: Ino(s.ino),
                mode: s.mode,
                uid: s.uid,
                gid: s.gid,
                nlink: s.nlink,
                size: s.size,
                blocks: s.blocks,
                rdev: s.rdev,
                times: [s.atime, s.mtime, s.ctime],
                acl: AclInit::Known(n.contents.acls[0].clone()),
                default_acl: AclInit::Known(n.contents.acls[1].clone()),
                link: n.contents.target.clone(),
                btime: None,
            };
            made[i] = Some(make(sb, new, OvlNode::new(n.lower.clone(), n.lower_dirs.clone(), None, state)));
        }
        made[0].clone().ok_or(Errno::EIO)
    }
}
