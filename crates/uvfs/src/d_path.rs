//! `getcwd`. Mirrors Linux's `fs/d_path.c`: the path is built from the dentry up to the
//! task's root, crossing mount roots, validated against the rename sequence.

use crate::errno::{Errno, Result};
use crate::task::Task;

impl Task {
    /// `getcwd(2)`: ENOENT if the working directory was removed; a directory outside the
    /// task's root (after chroot) is reported with the `(unreachable)` prefix, as Linux.
    pub fn getcwd(&self) -> Result<Vec<u8>> {
        loop {
            let guard = self.vfs.rcu.pin();
            let seq = self.vfs.rename_seq.read_begin();
            let fsx = self.fs.load(&guard);
            let (root_m, root_d) = (&*fsx.root.mnt, &*fsx.root.dentry);
            let (mut m, mut d) = (&*fsx.cwd.mnt, &*fsx.cwd.dentry);
            if d.is_dead() {
                return Err(Errno::ENOENT);
            }
            let mut parts: Vec<&[u8]> = Vec::new();
            let mut unreachable = false;
            loop {
                if std::ptr::eq(m, root_m) && std::ptr::eq(d, root_d) {
                    break;
                }
                if std::ptr::eq(d, &**m.root()) {
                    match &m.parent {
                        Some((pm, mp)) => {
                            m = pm;
                            d = mp;
                            continue;
                        }
                        None => {
                            unreachable = true;
                            break;
                        }
                    }
                }
                parts.push(d.name(&guard));
                d = d.parent(&guard);
            }
            let mut out = Vec::new();
            if unreachable {
                out.extend_from_slice(b"(unreachable)");
            }
            for p in parts.iter().rev() {
                out.push(b'/');
                out.extend_from_slice(p);
            }
            if out.is_empty() || unreachable && parts.is_empty() {
                out.push(b'/');
            }
            if !self.vfs.rename_seq.read_retry(seq) {
                return Ok(out);
            }
        }
    }
}
