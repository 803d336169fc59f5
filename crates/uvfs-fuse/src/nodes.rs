//! The node table: FUSE node ids to `O_PATH` files, and the file handle table.
//!
//! The FUSE protocol names files by node id; the uvfs API by file and path. Every node
//! the kernel knows (it was returned by lookup, create, mkdir, mknod, symlink, link or
//! readdirplus) holds one `O_PATH` [`File`] opened with [`uvfs::Task::openat_file`]
//! (held here, in no descriptor table: no descriptor limit, no free-slot search), and
//! every operation on it runs relative to that file ([`uvfs::DirFd::File`] with
//! `AT_EMPTY_PATH`, or [`uvfs::Task::reopen_file`]). Like an `O_PATH` descriptor on Linux,
//! it keeps the inode (and an unlinked file's contents) alive, as the kernel's own inode
//! reference does.
//!
//! Lookup counts follow the protocol: each reply that hands the kernel a node adds one,
//! `forget(n)` takes `n` away, and the file is released when the count reaches zero.
//!
//! Open files (OPEN, OPENDIR, CREATE) are [`Handles`]: the FUSE file handle is an index
//! into a slab of `Arc<File>`, checked on every use, reused after RELEASE.
//!
//! Node ids: a file of the filesystem at the root of the served tree gets its uvfs inode
//! number when that id is free (memfs never reuses numbers while the inode lives; a host
//! filesystem may, see [`Nodes::insert`]), and `st_ino` on the mount is the in-process one; the root is node 1 (FUSE's root id), swapped with the inode that has
//! number 1 if the root has another. Files of other filesystems mounted inside the tree
//! get ids from a counter above [`FOREIGN_BASE`].

use std::collections::HashMap;

use parking_lot::Mutex;
use std::sync::Arc;

use uvfs::{Errno, File, Inode};

/// FUSE's node id of the root.
pub const ROOT_ID: u64 = 1;
/// Node ids of files of filesystems other than the root's start here.
pub const FOREIGN_BASE: u64 = 1 << 56;

/// An inode's identity: (device, inode number).
pub type Key = (u64, u64);

struct Node {
    file: Arc<File>,
    /// The address of `file`'s inode, compared (never followed) by `node_of`, so that
    /// checking a node does not read the file's memory too (a cache miss per entry of a
    /// READDIRPLUS).
    inode: usize,
    lookups: u64,
    key: Key,
    /// A directory whose cached listing the kernel was told to drop since it last read
    /// one (see `Levers::RELIST`).
    relist: bool,
    /// The attributes the kernel was last given for this node are, as far as the server
    /// knows, the ones it still holds: set when a reply hands them out (an entry, a
    /// GETATTR or SETATTR answer), cleared by what makes the kernel forget or change them
    /// on its own (an open, a read or write without one, a readlink, a link, a rename, an
    /// xattr or flags change, an in-process change). Only a hint (`Levers::KNOWN_ENTRIES`):
    /// the kernel asks again for attributes it dropped, whatever this says.
    fresh: bool,
}

/// The node maps' hash: every request looks a node up, and a READDIRPLUS one per entry;
/// the keys are node ids and inode numbers, not names a caller chooses, so a fast
/// hash (foldhash, seeded per map) serves better than the default SipHash.
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

struct Inner {
    by_id: Map<u64, Node>,
    by_key: Map<Key, u64>,
    next_foreign: u64,
}

/// Node id -> file, with lookup counts. Protected by one mutex (held for a few map
/// operations, never across a uvfs call; files are released after it is dropped).
pub struct Nodes {
    inner: Mutex<Inner>,
    root_key: Key,
}

/// What [`Nodes::insert`] did with the caller's file.
pub enum Inserted {
    /// A new node keeps the file.
    New(u64),
    /// The inode had a node already; its count went up and the caller's file is handed
    /// back (to be released).
    Existing(u64, Arc<File>),
}

impl Nodes {
    /// A table holding the root, whose file is never released.
    pub fn new(root: Arc<File>, root_key: Key) -> Nodes {
        let mut by_id = Map::default();
        let inode = addr(root.inode());
        by_id.insert(
            ROOT_ID,
            Node { file: root, inode, lookups: u64::MAX / 2, key: root_key, relist: false, fresh: true },
        );
        let mut by_key = Map::default();
        by_key.insert(root_key, ROOT_ID);
        Nodes { inner: Mutex::new(Inner { by_id, by_key, next_foreign: FOREIGN_BASE }), root_key }
    }

    /// The inode number the mount shows for `key` (`st_ino`, a directory entry's `d_ino`):
    /// the in-process one for files of the root's filesystem (the root shows 1, the inode
    /// numbered 1 the root's number), else the node id if the kernel knows the file, else
    /// the inode number. Node ids may differ from it (see `insert`); no node is made here.
    pub fn ino_for_key(&self, key: Key) -> u64 {
        if key == self.root_key {
            return ROOT_ID;
        }
        if key.0 == self.root_key.0 {
            return if key.1 == ROOT_ID { self.root_key.1 } else { key.1 };
        }
        let g = self.inner.lock();
        g.by_key.get(&key).copied().unwrap_or(key.1)
    }

    /// The file of a node.
    pub fn file(&self, id: u64) -> Option<Arc<File>> {
        self.inner.lock().by_id.get(&id).map(|n| n.file.clone())
    }

    /// The file of a node, which is marked `fresh` (see `Node::fresh`): true when its
    /// attributes are about to be handed to the kernel, false when the kernel is about to
    /// change or forget them.
    pub fn file_marked(&self, id: u64, fresh: bool) -> Option<Arc<File>> {
        let mut g = self.inner.lock();
        let n = g.by_id.get_mut(&id)?;
        n.fresh = fresh;
        Some(n.file.clone())
    }

    /// Marks node `id` (see [`Nodes::file_marked`]).
    pub fn mark(&self, id: u64, fresh: bool) {
        if let Some(n) = self.inner.lock().by_id.get_mut(&id) {
            n.fresh = fresh;
        }
    }

    /// The node of the inode `key` if the kernel knows it and holds the attributes it was
    /// last given for it (`Levers::KNOWN_ENTRIES`). The node whose id is the inode number is
    /// looked at first, as in `node_of` (a node a reused number left there only makes
    /// the answer a worse guess: it is a hint).
    pub fn known_fresh(&self, key: Key) -> Option<u64> {
        let g = self.inner.lock();
        if let Some(n) = g.by_id.get(&key.1)
            && n.key == key
        {
            return n.fresh.then_some(key.1);
        }
        let id = *g.by_key.get(&key)?;
        g.by_id.get(&id).is_some_and(|n| n.fresh).then_some(id)
    }

    /// The node of a key, if the kernel knows it, marked as no longer fresh (an
    /// in-process change the kernel is told to forget).
    pub fn lookup_key_stale(&self, key: Key) -> Option<u64> {
        let mut g = self.inner.lock();
        let id = *g.by_key.get(&key)?;
        if let Some(n) = g.by_id.get_mut(&id) {
            n.fresh = false;
        }
        Some(id)
    }

    /// The key of a node.
    pub fn key(&self, id: u64) -> Option<Key> {
        self.inner.lock().by_id.get(&id).map(|n| n.key)
    }

    /// The node of a key, if the kernel knows it.
    pub fn lookup_key(&self, key: Key) -> Option<u64> {
        self.inner.lock().by_key.get(&key).copied()
    }

    /// The node of directory `key` if the kernel knows it and was not told to drop its
    /// listing since it last read one; it is marked told.
    pub fn relist(&self, key: Key) -> Option<u64> {
        let mut g = self.inner.lock();
        let id = *g.by_key.get(&key)?;
        let n = g.by_id.get_mut(&id)?;
        if n.relist {
            return None;
        }
        n.relist = true;
        Some(id)
    }

    /// The kernel read directory node `id`'s listing (with attributes) from the start.
    pub fn listed(&self, id: u64) {
        if let Some(n) = self.inner.lock().by_id.get_mut(&id) {
            n.relist = false;
        }
    }

    /// Counts one lookup of the inode `key`, whose `O_PATH` file is `file`.
    ///
    /// A key names one inode only while that inode lives: a host filesystem reuses the
    /// inode number of a deleted file (tar's placeholder for a delayed symlink is unlinked
    /// and the symlink gets its number), while the kernel may still hold the old node. A
    /// key whose node holds another inode therefore gets a fresh node id for the new one
    /// (from the counter), and the old node lives on under its id until forgotten; handing
    /// the old node back would answer for the deleted file (ESTALE, ENOTDIR).
    pub fn insert(&self, key: Key, file: Arc<File>) -> Inserted {
        let mut g = self.inner.lock();
        let reused = match Self::count_again(&mut g, key, file.inode()) {
            Some(Ok(id)) => return Inserted::Existing(id, file),
            Some(Err(())) => true,
            None => false,
        };
        let natural = if key.1 == ROOT_ID { self.root_key.1 } else { key.1 };
        let id = if key.0 == self.root_key.0 && !reused && !g.by_id.contains_key(&natural) {
            natural
        } else {
            g.next_foreign += 1;
            g.next_foreign
        };
        let inode = addr(file.inode());
        g.by_id.insert(id, Node { file, inode, lookups: 1, key, relist: false, fresh: true });
        g.by_key.insert(key, id);
        Inserted::New(id)
    }

    /// Whether the kernel knows the inode `key` by a node that holds `inode`.
    pub fn holds(&self, key: Key, inode: &Inode) -> bool {
        matches!(Self::node_of(&mut self.inner.lock(), key, inode), Some(Ok(_)))
    }

    /// Counts one more lookup of the inode `key` if the kernel knows it (its node holds
    /// `inode`): its node id. `None` when a file of the inode is needed to make its node.
    pub fn lookup_again(&self, key: Key, inode: &Inode) -> Option<u64> {
        Self::count_again(&mut self.inner.lock(), key, inode)?.ok()
    }

    /// `key`'s node if it holds `inode`: `Ok(node)`; `Err` if it holds another inode of
    /// that number (see `insert`); `None` without a node.
    fn node_of<'g>(g: &'g mut Inner, key: Key, inode: &Inode) -> Option<Result<(u64, &'g mut Node), ()>> {
        let inode = std::ptr::from_ref(inode) as usize;
        // Most nodes' ids are their inode numbers (`insert`): one map probe, not two. A
        // node found there holding this key and this inode is the key's (the node a
        // reused number left under its old id holds another inode).
        let natural = key.1;
        if g.by_id.get(&natural).is_some_and(|n| n.key == key && n.inode == inode) {
            return g.by_id.get_mut(&natural).map(|n| Ok((natural, n)));
        }
        let id = *g.by_key.get(&key)?;
        let n = g.by_id.get_mut(&id).expect("node of a key");
        Some(if n.inode == inode { Ok((id, n)) } else { Err(()) })
    }

    /// [`Nodes::node_of`], and the node found gets another lookup.
    fn count_again(g: &mut Inner, key: Key, inode: &Inode) -> Option<Result<u64, ()>> {
        Some(Self::node_of(g, key, inode)?.map(|(id, n)| {
            n.lookups += 1;
            // The entry about to be handed out carries the attributes.
            n.fresh = true;
            id
        }))
    }

    /// Takes `n` lookups away; returns the file to release when the node is gone.
    pub fn forget(&self, id: u64, n: u64) -> Option<Arc<File>> {
        if id == ROOT_ID {
            return None;
        }
        let mut g = self.inner.lock();
        let node = g.by_id.get_mut(&id)?;
        node.lookups = node.lookups.saturating_sub(n);
        if node.lookups > 0 {
            return None;
        }
        let node = g.by_id.remove(&id).expect("present");
        // The key may name a newer node already (a reused inode number, see `insert`).
        if g.by_key.get(&node.key) == Some(&id) {
            g.by_key.remove(&node.key);
        }
        Some(node.file)
    }

    /// Every file but the root's, emptying the table (at unmount).
    pub fn drain(&self) -> Vec<Arc<File>> {
        let mut g = self.inner.lock();
        let root = g.by_id.remove(&ROOT_ID);
        let fds = g.by_id.drain().map(|(_, n)| n.file).collect();
        g.by_key.clear();
        if let Some(r) = root {
            g.by_key.insert(r.key, ROOT_ID);
            g.by_id.insert(ROOT_ID, r);
        }
        fds
    }

    /// Number of nodes, the root included.
    pub fn len(&self) -> usize {
        self.inner.lock().by_id.len()
    }

    /// Whether only the root is left (never true of a fresh table's absence of root).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An inode's address, the identity [`Node::inode`] keeps.
fn addr(inode: &Arc<Inode>) -> usize {
    Arc::as_ptr(inode) as usize
}

/// The slab behind [`Handles`].
#[derive(Default)]
struct Slab {
    slots: Vec<Option<Arc<File>>>,
    free: Vec<usize>,
}

/// Open files by FUSE file handle (an index into a slab, plus one: handle 0 is what the
/// kernel sends when it did not open, see `Levers::NO_OPENDIR`). Protected by one mutex,
/// held for a slot's update or an `Arc` clone.
#[derive(Default)]
pub struct Handles {
    slab: Mutex<Slab>,
}

impl Handles {
    /// Stores `file`; its handle.
    pub fn insert(&self, file: Arc<File>) -> u64 {
        let mut s = self.slab.lock();
        match s.free.pop() {
            Some(i) => {
                s.slots[i] = Some(file);
                i as u64 + 1
            }
            None => {
                s.slots.push(Some(file));
                s.slots.len() as u64
            }
        }
    }

    /// The file of handle `fh`; EBADF for a handle that is not open.
    pub fn get(&self, fh: u64) -> Result<Arc<File>, Errno> {
        let s = self.slab.lock();
        Self::index(fh).and_then(|i| s.slots.get(i)).and_then(|f| f.clone()).ok_or(Errno::EBADF)
    }

    /// Takes handle `fh` out (RELEASE); the file goes when its last user is done.
    pub fn remove(&self, fh: u64) -> Result<Arc<File>, Errno> {
        let mut s = self.slab.lock();
        let i = Self::index(fh).ok_or(Errno::EBADF)?;
        let f = s.slots.get_mut(i).and_then(Option::take).ok_or(Errno::EBADF)?;
        s.free.push(i);
        Ok(f)
    }

    fn index(fh: u64) -> Option<usize> {
        usize::try_from(fh.checked_sub(1)?).ok()
    }

    /// Every open file, emptying the table (at unmount).
    pub fn drain(&self) -> Vec<Arc<File>> {
        let mut s = self.slab.lock();
        s.free.clear();
        s.slots.drain(..).flatten().collect()
    }

    /// Number of open handles.
    pub fn len(&self) -> usize {
        let s = self.slab.lock();
        s.slots.len() - s.free.len()
    }

    /// Whether no handle is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uvfs::{DirFd, OpenFlags, Vfs, VfsConfig};

    fn path_file(t: &uvfs::Task, name: &[u8]) -> Arc<File> {
        let f = t.openat_file(DirFd::Cwd, name, OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap();
        t.reopen_file(&f, OpenFlags::PATH).unwrap()
    }

    /// A host filesystem reuses a deleted file's inode number while the kernel still holds
    /// the old node: the new file must get its own node, not the deleted one's.
    #[test]
    fn a_reused_inode_number_gets_a_fresh_node() {
        let vfs = Vfs::new(VfsConfig::default());
        let t = vfs.root_task();
        let root = t.openat_file(DirFd::Cwd, b"/", OpenFlags::PATH, 0).unwrap();
        let nodes = Nodes::new(root, (7, 2));
        let (old, new) = (path_file(&t, b"/old"), path_file(&t, b"/new"));
        let key = (7, 40);
        let Inserted::New(old_id) = nodes.insert(key, old.clone()) else { panic!("first insert is new") };
        assert_eq!(old_id, 40, "a free natural id is the inode number");
        let Inserted::New(new_id) = nodes.insert(key, new.clone()) else { panic!("another inode, same key: new node") };
        assert_ne!(new_id, old_id);
        assert!(Arc::ptr_eq(nodes.file(new_id).unwrap().inode(), new.inode()));
        assert!(Arc::ptr_eq(nodes.file(old_id).unwrap().inode(), old.inode()));
        assert_eq!(nodes.lookup_key(key), Some(new_id));
        // The same inode again counts on its node.
        assert!(matches!(nodes.insert(key, new.clone()), Inserted::Existing(id, _) if id == new_id));
        // Forgetting the old node leaves the key with the new one.
        assert!(nodes.forget(old_id, 1).is_some());
        assert_eq!(nodes.lookup_key(key), Some(new_id));
        assert!(nodes.forget(new_id, 1).is_none());
        assert!(nodes.forget(new_id, 1).is_some());
        assert_eq!(nodes.lookup_key(key), None);
        assert_eq!(nodes.ino_for_key(key), 40, "st_ino stays the inode number");
    }
}
