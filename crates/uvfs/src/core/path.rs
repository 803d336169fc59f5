//! Paths: [`PathRef`] (a mount and a dentry, counted: Linux's `struct path`), [`Pos`] (the
//! same borrowed for one walk, uncounted), [`FsContext`] (a task's root and working
//! directory: Linux's `struct fs_struct`), and climbing from a dentry up to a root across
//! mount roots (`prepend_path` of `fs/d_path.c`), which `getcwd` and the paths of notify
//! events use. Mirrors those, but: a walk position costs no reference count, and a climb
//! is validated by the rename sequence instead of taking `rename_lock`.

use crate::core::dentry::Dentry;
use crate::core::mount::Mount;
use crate::sync::rcu::ArcBorrow;
use crate::sync::rcu::LocalGuard;
use std::sync::Arc;

/// The path of `dentry` as seen through `mnt`, from the top of the mount tree (for the
/// events of mount and filesystem marks).
pub(crate) fn dentry_path(mnt: &Mount, dentry: &Dentry, guard: &LocalGuard<'_>) -> Vec<u8> {
    let mut parts: Vec<&[u8]> = Vec::new();
    climb(mnt, dentry, None, guard, |n| parts.push(n));
    join(&parts)
}

/// `/a/b` from `[b"b", b"a"]` (innermost first); `/` for none.
pub(crate) fn join(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in parts.iter().rev() {
        out.push(b'/');
        out.extend_from_slice(p);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    out
}

/// Climbs from `d` as seen through `m` up to `root` (Linux's `prepend_path`; `None`: the
/// top of the mount tree), crossing mount roots to their mountpoints, handing `name` each
/// name passed, innermost first: whether the root was reached (false: the position is
/// outside it, or on a detached mount). No allocation of its own. The caller validates against the
/// rename sequence or holds the rename lock; the climb is bounded so that a torn view
/// cannot make it loop.
pub(crate) fn climb<'g>(
    m: &'g Mount,
    d: &'g Dentry,
    root: Option<(&Mount, &Dentry)>,
    guard: &'g LocalGuard<'_>,
    mut name: impl FnMut(&'g [u8]),
) -> bool {
    let (mut m, mut d) = (m, d);
    for _ in 0..CLIMB_LIMIT {
        if let Some((root_m, root_d)) = root
            && std::ptr::eq(m, root_m)
            && std::ptr::eq(d, root_d)
        {
            return true;
        }
        if std::ptr::eq(d, &**m.root()) {
            match m.parent(guard) {
                Some((pm, mp)) => {
                    m = pm;
                    d = mp;
                    continue;
                }
                // The top of the tree: the root when no other was asked for.
                None => return root.is_none(),
            }
        }
        if d.is_root() {
            // A filesystem root that is not its mount's root: the dentry was renamed out
            // of a bind mount's subtree.
            return false;
        }
        name(d.name(guard));
        d = d.parent(guard);
    }
    false
}

/// Most steps a climb takes: a bound for torn views in lockless readers (whose answer
/// the rename sequence then discards); no real tree is that deep.
pub(crate) const CLIMB_LIMIT: usize = 1 << 20;

/// A dentry as reached through a mount, counted (Linux's `struct path`).
#[derive(Clone)]
pub struct PathRef {
    /// The mount.
    pub mnt: Arc<Mount>,
    /// The dentry.
    pub dentry: Arc<Dentry>,
}

impl PathRef {
    /// The root of `mnt`.
    pub(crate) fn root_of(mnt: &Arc<Mount>) -> PathRef {
        PathRef { mnt: mnt.clone(), dentry: mnt.root().clone() }
    }

    /// The same position, borrowed (for calls that take a walk position).
    pub(crate) fn pos(&self) -> crate::core::path::Pos<'_> {
        crate::core::path::Pos::of(self)
    }
}

/// Root and working directory.
#[derive(Clone)]
pub(crate) struct FsContext {
    pub(crate) root: PathRef,
    pub(crate) cwd: PathRef,
}

/// A position: a dentry as seen through a mount (Linux's `struct path`, uncounted): both
/// borrowed for the walk's guard, and countable when the caller keeps them
/// ([`Pos::to_path`]).
#[derive(Clone, Copy)]
pub(crate) struct Pos<'a> {
    /// The mount.
    pub(crate) mnt: ArcBorrow<'a, Mount>,
    /// The dentry (always positive).
    pub(crate) dentry: ArcBorrow<'a, Dentry>,
}

impl<'a> Pos<'a> {
    /// The position of a counted path, for as long as it is borrowed.
    #[inline]
    pub(crate) fn of(p: &'a crate::core::path::PathRef) -> Pos<'a> {
        Pos { mnt: ArcBorrow::from_arc(&p.mnt), dentry: ArcBorrow::from_arc(&p.dentry) }
    }

    #[inline]
    pub(crate) fn same(&self, o: &Pos<'_>) -> bool {
        std::ptr::eq(self.mnt.as_ptr(), o.mnt.as_ptr()) && std::ptr::eq(self.dentry.as_ptr(), o.dentry.as_ptr())
    }

    /// The inode of a positive position.
    #[inline]
    pub(crate) fn inode(&self) -> &'a crate::core::inode::Inode {
        self.dentry.get().inode().expect("walk positions are positive")
    }

    /// The position a file was opened at, for as long as it is borrowed.
    #[inline]
    pub(crate) fn of_file(f: &'a crate::core::file::File) -> Pos<'a> {
        Pos { mnt: ArcBorrow::from_arc(&f.mnt), dentry: ArcBorrow::from_arc(&f.dentry) }
    }

    /// The position as a counted path (the caller keeps it).
    #[inline]
    pub(crate) fn to_path(self) -> crate::core::path::PathRef {
        PathRef { mnt: self.mnt.to_arc(), dentry: self.dentry.to_arc() }
    }
}
