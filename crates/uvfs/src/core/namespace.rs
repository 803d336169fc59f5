//! The mount tree of an instance: the list of mounts (under the rename lock) and the
//! attaching and detaching of mounts in the mount hash the walk probes. Mirrors Linux's
//! `struct mnt_namespace` with `attach_mnt` and `umount_tree` of `fs/namespace.c`, but:
//! one namespace per instance, no propagation, no `MS_MOVE`; the calls are in
//! `syscalls/mount.rs`.

use std::sync::Arc;

use crate::core::dentry::{DENTRY_MOUNTED, Dentry};

use crate::core::instance::VfsInner;
use crate::core::mount::{Mount, MountId};
use crate::core::superblock::SuperBlock;
use crate::sync::rcu::{ArcBorrow, LocalGuard};

/// The list of attached mounts, protected by the rename lock (whose value it is).
pub(crate) struct MountTree {
    /// Attached mounts in mount order, so every parent comes before its children; the
    /// root of the tree first.
    pub(crate) mounts: Vec<Arc<Mount>>,
    /// The next mount id.
    next_id: u64,
}

impl MountTree {
    pub(crate) fn new(root: Arc<Mount>) -> MountTree {
        let next_id = root.id().0 + 1;
        MountTree { mounts: vec![root], next_id }
    }

    /// Takes the list of mounts (instance teardown).
    pub(crate) fn take_mounts(&mut self) -> Vec<Arc<Mount>> {
        std::mem::take(&mut self.mounts)
    }

    pub(crate) fn alloc_id(&mut self) -> MountId {
        let id = self.next_id;
        self.next_id += 1;
        MountId(id)
    }

    /// Whether `m` has attached children.
    pub(crate) fn has_children(&self, m: &Mount, guard: &LocalGuard<'_>) -> bool {
        self.mounts.iter().any(|c| c.parent(guard).is_some_and(|(p, _)| std::ptr::eq(p, m)))
    }
}

impl VfsInner {
    /// Attaches `m` at `mp` in `parent` (`attach_mnt`); `m`'s parent link is already set.
    ///
    /// # Preconditions
    /// The caller holds the rename lock (as `tree`) and is inside the rename sequence.
    pub(crate) fn attach(&self, tree: &mut MountTree, parent: &Mount, mp: &Dentry, m: Arc<Mount>) {
        debug_assert!(self.rename_seq.in_write_section(), "attach outside the rename sequence");
        mp.hot.mounts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        parent.sb.mountpoints.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        mp.set_flag(DENTRY_MOUNTED);
        let old = self.mounts.insert((parent.id(), mp as *const Dentry as usize), m.clone(), &self.rcu);
        debug_assert!(old.is_none(), "two mounts on one mountpoint of one mount");
        m.set_attached(true);
        tree.mounts.push(m);
    }

    /// Detaches `top` and every mount below it (`umount_tree`): out of the table, parent
    /// links cleared. Returns the filesystems of the detached mounts.
    ///
    /// # Preconditions
    /// The caller holds the rename lock (as `tree`) and is inside the rename sequence.
    pub(crate) fn detach_tree(
        &self,
        tree: &mut MountTree,
        top: &Arc<Mount>,
        guard: &LocalGuard<'_>,
    ) -> Vec<Arc<SuperBlock>> {
        debug_assert!(self.rename_seq.in_write_section(), "detach_tree outside the rename sequence");
        let mut victims: Vec<Arc<Mount>> = vec![top.clone()];
        // Parents come before children in the list, so one pass finds the whole subtree.
        for m in tree.mounts.iter() {
            if let Some((p, _)) = m.parent(guard)
                && victims.iter().any(|v| std::ptr::eq(&**v, p))
                && !victims.iter().any(|v| Arc::ptr_eq(v, m))
            {
                victims.push(m.clone());
            }
        }
        for v in &victims {
            if let Some((p, mp)) = v.parent(guard) {
                self.mounts.remove(&(p.id(), mp as *const Dentry as usize), &self.rcu);
                p.sb.mountpoints.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                if mp.hot.mounts.fetch_sub(1, std::sync::atomic::Ordering::Relaxed) == 1 {
                    mp.clear_mounted();
                }
            }
            // `mp` (read under `guard`) stays valid: the old link is retired, not freed.
            v.set_parent(None, &self.rcu);
            v.set_attached(false);
        }
        tree.mounts.retain(|m| !victims.iter().any(|v| Arc::ptr_eq(v, m)));
        victims.iter().map(|v| v.sb.clone()).collect()
    }

    /// The topmost mount on (`mnt`, `dentry`) (`lock_mount` follows mounts that appeared
    /// since the caller's walk).
    ///
    /// # Preconditions
    /// The caller holds the rename lock.
    pub(crate) fn topmost<'g>(
        &'g self,
        mnt: ArcBorrow<'g, Mount>,
        dentry: ArcBorrow<'g, Dentry>,
        guard: &'g LocalGuard<'_>,
    ) -> (ArcBorrow<'g, Mount>, ArcBorrow<'g, Dentry>) {
        debug_assert!(self.rename_lock.is_locked());
        let (mut m, mut d) = (mnt, dentry);
        while d.flags() & DENTRY_MOUNTED != 0 {
            match self.lookup_mount(&m, &d, guard) {
                Some(c) => {
                    m = c;
                    d = ArcBorrow::from_arc(&c.get().root);
                }
                None => break,
            }
        }
        (m, d)
    }
}
