//! `getcwd`. Mirrors Linux's `fs/d_path.c`: the path is built from the dentry up to the
//! task's root, crossing mount roots, validated against the rename sequence.

use crate::dentry::Dentry;
use crate::errno::{Errno, Result};
use crate::mount::Mount;
use crate::rcu::LocalGuard;
use crate::task::Task;

impl Task {
    /// `getcwd(2)`: ENOENT if the working directory was removed; a directory outside the
    /// task's root (after chroot) is reported with the `(unreachable)` prefix, as Linux.
    pub fn getcwd(&self) -> Result<Vec<u8>> {
        loop {
            let guard = self.vfs.rcu.pin();
            let seq = self.vfs.rename_seq.read_begin().map_err(|_| Errno::EIO)?;
            let fsx = self.fs.load(&guard);
            let (root_m, root_d) = (&*fsx.root.mnt, &*fsx.root.dentry);
            let (m, d) = (&*fsx.cwd.mnt, &*fsx.cwd.dentry);
            if d.is_dead() {
                return Err(Errno::ENOENT);
            }
            let mut parts: Vec<&[u8]> = Vec::new();
            let unreachable = !climb(m, d, Some((root_m, root_d)), &guard, |n| parts.push(n));
            let mut out = Vec::new();
            if unreachable {
                out.extend_from_slice(b"(unreachable)");
            }
            out.extend_from_slice(&join(&parts));
            if !self.vfs.rename_seq.read_retry(seq) {
                return Ok(out);
            }
        }
    }
}

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
