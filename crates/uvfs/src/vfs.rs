//! `Vfs`: the public handle of an instance: making one (with an empty memfs, or any
//! filesystem, as its root), its tasks, its configuration and the counts of its bounded
//! caches. The shared state itself is `core/instance.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::abi::config::{FastPaths, VfsConfig};
use crate::abi::cred::Credentials;
use crate::abi::errno::Result;
use crate::core::dentry::Dentry;
use crate::core::instance::VfsInner;
use crate::core::mount::{Mount, MountFlags, MountId};
use crate::core::namespace::MountTree;
use crate::core::superblock::SuperBlock;
use crate::fs::memfs::{MemFs, MemFsLimits};
use crate::sync::Mutex;
use crate::sync::rcu::Rcu;
use crate::sync::seqcount::SeqCount;
use crate::task::Task;

/// A VFS instance. Cheap to clone (shared).
#[derive(Clone)]
pub struct Vfs {
    pub(crate) inner: Arc<VfsInner>,
}

impl Vfs {
    /// A new instance whose root is an empty memfs.
    pub fn new(config: VfsConfig) -> Vfs {
        let fs =
            MemFs::with_limits(MemFsLimits { max_bytes: config.root_size_limit, max_inodes: config.root_inode_limit })
                .with_small_write_pages(config.root_small_write_pages);
        Vfs::with_root(config, Box::new(fs)).expect("memfs root")
    }

    /// A new instance whose root is `fs` (for example a [`HostFs`](crate::fs::hostfs::HostFs));
    /// the error of its root inode if it has none.
    pub fn with_root(config: VfsConfig, fs: Box<dyn crate::core::superblock::FileSystem>) -> Result<Vfs> {
        let rcu = Rcu::new();
        let sb = SuperBlock::with_config(fs, false, &rcu, &config);
        let dcache_counts: Arc<crate::core::dentry::DcacheCounts> = Arc::default();
        sb.count_inodes_in(&dcache_counts);
        let root_inode = sb.fs().root_inode(&sb)?;
        let root_dentry = Dentry::new_root(root_inode, &rcu);
        let root = Mount::new(MountId(1), sb, root_dentry, None, MountFlags::empty());
        root.set_attached(true);
        let mounts = crate::sync::rhashtable::RHashTable::new();
        let tree = MountTree::new(root.clone());
        Ok(Vfs {
            inner: Arc::new(VfsInner {
                id: crate::core::instance::next_instance_id(),
                fast: config.fast_paths,
                config,
                rcu,
                rename_seq: SeqCount::new(),
                rename_lock: Mutex::new(tree),
                mounts,
                root,
                dcache_counts,
                dcache_lru: Default::default(),
                shrink_retry_at: AtomicUsize::new(0),
                next_pid: std::sync::atomic::AtomicI32::new(1),
                expiry_used: std::sync::atomic::AtomicBool::new(false),
                fifos: Default::default(),
            }),
        })
    }

    /// A task (process) with these credentials, cwd and root at the root of the tree,
    /// umask 022 and no open files.
    pub fn task(&self, creds: Credentials) -> Task {
        Task::new(self.inner.clone(), creds)
    }

    /// A root task.
    pub fn root_task(&self) -> Task {
        self.task(Credentials::root())
    }

    /// The fast paths in force.
    pub fn fast_paths(&self) -> FastPaths {
        self.inner.fast
    }

    /// The configuration.
    pub fn config(&self) -> &VfsConfig {
        &self.inner.config
    }

    /// Cached dentries of filesystems that are not dcache-complete, alive now:
    /// (positive, negative). Bounded by [`VfsConfig::dentry_limit`] and
    /// [`VfsConfig::negative_dentry_limit`] (give or take what is in use).
    pub fn dcache_counts(&self) -> (usize, usize) {
        let c = &self.inner.dcache_counts;
        (c.positive.load(Ordering::Relaxed), c.negative.load(Ordering::Relaxed))
    }

    /// Inodes of filesystems that are not dcache-complete, alive now. Bounded by
    /// [`VfsConfig::inode_limit`] (give or take what is in use or open).
    pub fn cached_inodes(&self) -> usize {
        self.inner.dcache_counts.inodes.load(Ordering::Relaxed)
    }
}

impl Default for Vfs {
    fn default() -> Self {
        Vfs::new(VfsConfig::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DirFd, InotifyFlags, OpenFlags};

    /// A dentry's name: the one it was made with (inline up to 39 bytes, else on the
    /// heap), then each rename's, the replaced one freed through the collector, the last
    /// with the dentry (run under Miri by the test command).
    #[test]
    fn dentry_names_through_renames() {
        // Explicit limits: no `sysinfo` call, which Miri does not have.
        let vfs = Vfs::new(VfsConfig { root_size_limit: Some(0), root_inode_limit: Some(0), ..Default::default() });
        let t = vfs.root_task();
        let long = "l".repeat(60);
        t.mkdir(b"/a", 0o755).unwrap();
        t.chdir(b"/a").unwrap();
        let names = ["b", long.as_str(), "c", "a-name-of-exactly-thirty-nine-bytes-xyz"];
        let mut at = String::from("/a");
        for n in names {
            let to = format!("/{n}");
            t.rename(at.as_bytes(), to.as_bytes()).unwrap();
            assert_eq!(t.getcwd().unwrap(), to.as_bytes());
            at = to;
        }
        let fd = t.open(b"/", OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
        let listed: Vec<Vec<u8>> = t.getdents(fd, 100).unwrap().into_iter().map(|e| e.name).collect();
        assert!(listed.contains(&names[3].as_bytes().to_vec()), "{listed:?}");
        t.close(fd).unwrap();
        t.chdir(b"/").unwrap();
        t.rmdir(at.as_bytes()).unwrap();
    }

    /// A directory's readdir order holds its children by pointer, kept alive by the
    /// children table (`dentry::Ordered`): listings read it while names are created,
    /// unlinked, renamed within and across directories and removed with their directory,
    /// and a cursor resumes across those changes (run under Miri by the test command).
    #[test]
    fn readdir_order_through_creates_unlinks_and_renames() {
        let vfs = Vfs::new(VfsConfig { root_size_limit: Some(0), root_inode_limit: Some(0), ..Default::default() });
        let t = vfs.root_task();
        let list = |dir: &[u8]| -> Vec<Vec<u8>> {
            let fd = t.open(dir, OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
            let mut names: Vec<Vec<u8>> = t.getdents(fd, 100).unwrap().into_iter().map(|e| e.name).collect();
            t.close(fd).unwrap();
            names.retain(|n| n != b"." && n != b"..");
            names
        };
        t.mkdir(b"/d", 0o755).unwrap();
        t.mkdir(b"/e", 0o755).unwrap();
        for i in 0..6 {
            t.close(t.open(format!("/d/f{i}").as_bytes(), OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap())
                .unwrap();
        }
        // A cursor taken after two entries, then changes, then the rest of the listing.
        let fd = t.open(b"/d", OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
        let first = t.getdents(fd, 4).unwrap();
        assert_eq!(first.iter().map(|e| e.name.clone()).collect::<Vec<_>>()[2..], [b"f0".to_vec(), b"f1".to_vec()]);
        t.unlink(b"/d/f2").unwrap();
        t.rename(b"/d/f3", b"/d/g3").unwrap();
        t.rename(b"/d/f4", b"/e/f4").unwrap();
        t.rename(b"/d/f5", b"/d/f0").unwrap();
        let rest: Vec<Vec<u8>> = t.getdents(fd, 100).unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(rest, [b"g3".to_vec(), b"f0".to_vec()], "f2 unlinked, f4 moved out, f5 renamed over f0");
        t.close(fd).unwrap();
        assert_eq!(list(b"/d"), [b"f1".to_vec(), b"g3".to_vec(), b"f0".to_vec()]);
        assert_eq!(list(b"/e"), [b"f4".to_vec()]);
        t.rename(b"/e", b"/d/e").unwrap();
        assert_eq!(list(b"/d"), [b"f1".to_vec(), b"g3".to_vec(), b"f0".to_vec(), b"e".to_vec()]);
        for n in ["/d/f1", "/d/g3", "/d/f0", "/d/e/f4"] {
            t.unlink(n.as_bytes()).unwrap();
        }
        t.rmdir(b"/d/e").unwrap();
        assert!(list(b"/d").is_empty());
        t.rmdir(b"/d").unwrap();
    }

    /// Dropping the instance while files and an inotify instance outlive it: they stay
    /// usable and are released safely afterwards (run under Miri by the test command).
    #[test]
    fn files_and_watches_outlive_the_instance() {
        // Explicit limits: no `sysinfo` call, which Miri does not have.
        let vfs = Vfs::new(VfsConfig { root_size_limit: Some(0), root_inode_limit: Some(0), ..Default::default() });
        let t = vfs.root_task();
        t.mkdir(b"/d", 0o755).unwrap();
        let f = t.openat_file(DirFd::Cwd, b"/d/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
        assert_eq!(t.pwrite(&f, b"hello", 0), Ok(5));
        let ino = t.inotify_init1(InotifyFlags::NONBLOCK).unwrap();
        t.inotify_add_watch(&ino, b"/d", crate::EventMask::ALL_EVENTS).unwrap();
        // Retire a few things (an old name, an old parent link) before the instance goes.
        t.mkdir(b"/e", 0o755).unwrap();
        t.rename(b"/d/f", b"/e/g").unwrap();
        t.rename(b"/e/g", b"/d/h").unwrap();
        let fd = t.open(b"/d/h", OpenFlags::RDONLY, 0).unwrap();
        let kept = t.file(fd).unwrap();
        drop(t);
        drop(vfs);
        assert_eq!(f.inode().stat().size, 5);
        assert_eq!(kept.inode().ino(), f.inode().ino());
        // Released now: the close reaches the watch, which still works.
        drop(f);
        drop(kept);
        let events = ino.read_events(usize::MAX, None).unwrap();
        assert!(events.iter().any(|e| e.mask.contains(crate::EventMask::CLOSE_WRITE)), "{events:?}");
        drop(ino);
    }

    fn small_vfs() -> Vfs {
        // Explicit limits: no `sysinfo` call, which Miri does not have.
        Vfs::new(VfsConfig { root_size_limit: Some(0), root_inode_limit: Some(0), ..Default::default() })
    }

    fn size(t: &crate::Task, p: &[u8]) -> crate::Result<u64> {
        t.fstatat(DirFd::Cwd, p, crate::AtFlags::empty()).map(|s| s.size)
    }

    /// Path cache entries (`walk/pathcache.rs`) whose dentries were removed, replaced, pruned or torn down with their
    /// instance are never read again.
    #[test]
    fn path_cache_entries_outlived_by_nothing_they_name() {
        let v = small_vfs();
        let t = v.root_task();
        t.mkdir(b"/a", 0o755).unwrap();
        t.mkdir(b"/a/b", 0o755).unwrap();
        for round in 0..4u64 {
            let fd = t.open(b"/a/b/f", OpenFlags::CREAT | OpenFlags::WRONLY | OpenFlags::TRUNC, 0o644).unwrap();
            t.write(fd, &vec![b'x'; round as usize]).unwrap();
            t.close(fd).unwrap();
            let h = crate::counters().path_cache_hits;
            assert_eq!(size(&t, b"/a/b/f"), Ok(round));
            assert_eq!(size(&t, b"/a/b/f"), Ok(round));
            assert_eq!(crate::counters().path_cache_hits, h + 1);
            t.unlink(b"/a/b/f").unwrap();
            assert_eq!(size(&t, b"/a/b/f"), Err(crate::Errno::ENOENT));
        }
        // A cached directory removed with its subtree moved away, then the instance.
        t.mkdir(b"/a/b/c", 0o755).unwrap();
        assert!(size(&t, b"/a/b/c").is_ok());
        assert!(size(&t, b"/a/b/c").is_ok());
        t.rename(b"/a/b", b"/moved").unwrap();
        assert_eq!(size(&t, b"/a/b/c"), Err(crate::Errno::ENOENT));
        t.rmdir(b"/moved/c").unwrap();
        assert_eq!(size(&t, b"/moved/c"), Err(crate::Errno::ENOENT));
        assert!(size(&t, b"/moved").is_ok());
        drop(t);
        drop(v);
        // A new instance on this thread: the old entries name nothing it has.
        let w = small_vfs();
        let t = w.root_task();
        t.mkdir(b"/moved", 0o700).unwrap();
        assert!(size(&t, b"/moved").is_ok());
    }

    /// A reader hitting the path cache while a writer removes and makes again what it names.
    #[test]
    fn path_cache_hits_race_removals() {
        let v = small_vfs();
        let t = v.root_task();
        t.mkdir(b"/d", 0o755).unwrap();
        let make = |t: &crate::Task| t.close(t.open(b"/d/f", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap());
        make(&t).unwrap();
        let rounds = if cfg!(miri) { 20 } else { 2000 };
        std::thread::scope(|s| {
            let r = t.fork();
            s.spawn(move || {
                for _ in 0..rounds {
                    match size(&r, b"/d/f") {
                        Ok(0) | Err(crate::Errno::ENOENT) => {}
                        other => panic!("{other:?}"),
                    }
                }
            });
            for _ in 0..rounds {
                t.unlink(b"/d/f").unwrap();
                make(&t).unwrap();
            }
        });
    }
}
