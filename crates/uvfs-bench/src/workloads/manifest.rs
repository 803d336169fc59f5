//! The checksum of a tree: every entry's path, type, permission bits, size, contents
//! (xxh3-128) and symlink target, in path order, so two trees compare entry by entry and
//! a difference is named ("src/a.c: mode 0644, expected 0600").
//!
//! Owners and timestamps are left out: the workloads check that data and metadata that
//! a build depends on arrive intact, and `tar` run as root restores owners anyway.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use xxhash_rust::xxh3::{Xxh3, xxh3_128};

/// The type of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
    /// A fifo, socket or device (compared by type and mode only).
    Special,
}

/// One entry of a tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Path relative to the tree's root, `/`-separated.
    pub path: Vec<u8>,
    /// Type.
    pub kind: Kind,
    /// Permission bits (`st_mode & 0o7777`; 0 for symlinks, whose bits mean nothing).
    pub mode: u32,
    /// Size of a regular file, length of a symlink's target, else 0.
    pub size: u64,
    /// xxh3-128 of a regular file's contents, of a symlink's target, else 0.
    pub hash: u128,
}

/// Every entry under a root (the root itself excluded), sorted by path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    /// The entries.
    pub entries: Vec<Entry>,
}

fn show(p: &[u8]) -> String {
    String::from_utf8_lossy(p).into_owned()
}

impl Manifest {
    /// Walks `root` (not following symlinks). `stop` is polled between entries: when it
    /// says so, the walk ends with an error (Ctrl-C).
    pub fn of(root: &Path, stop: &dyn Fn() -> bool) -> Result<Manifest, String> {
        let mut entries = Vec::new();
        let mut buf = vec![0u8; 1 << 20];
        walk(root, &mut Vec::new(), &mut entries, &mut buf, stop)?;
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(Manifest { entries })
    }

    /// One hash of the whole tree.
    pub fn digest(&self) -> u128 {
        let mut h = Xxh3::new();
        for e in &self.entries {
            h.update(&e.path);
            h.update(&[0, e.kind as u8]);
            h.update(&e.mode.to_le_bytes());
            h.update(&e.size.to_le_bytes());
            h.update(&e.hash.to_le_bytes());
        }
        h.digest128()
    }

    /// Number of entries of each kind: (directories, files, symlinks, bytes of files).
    pub fn counts(&self) -> (usize, usize, usize, u64) {
        let n = |k| self.entries.iter().filter(|e| e.kind == k).count();
        let bytes = self.entries.iter().filter(|e| e.kind == Kind::File).map(|e| e.size).sum();
        (n(Kind::Dir), n(Kind::File), n(Kind::Symlink), bytes)
    }

    /// `Ok` when `self` (what was found) equals `expected`; else the first differences
    /// (up to three) and how many entries differ.
    pub fn compare(&self, expected: &Manifest) -> Result<(), String> {
        let (mut i, mut j) = (0, 0);
        let (a, b) = (&self.entries, &expected.entries);
        let mut diffs: Vec<String> = Vec::new();
        let mut n = 0usize;
        let mut note = |s: String| {
            n += 1;
            if diffs.len() < 3 {
                diffs.push(s);
            }
        };
        while i < a.len() || j < b.len() {
            match (a.get(i), b.get(j)) {
                (Some(x), Some(y)) if x.path == y.path => {
                    let p = show(&x.path);
                    if x.kind != y.kind {
                        note(format!("{p}: {:?}, expected {:?}", x.kind, y.kind));
                    } else if x.mode != y.mode {
                        note(format!("{p}: mode {:04o}, expected {:04o}", x.mode, y.mode));
                    } else if x.size != y.size {
                        note(format!("{p}: size {}, expected {}", x.size, y.size));
                    } else if x.hash != y.hash {
                        let what = if x.kind == Kind::Symlink { "symlink target" } else { "contents" };
                        note(format!("{p}: {what} differ"));
                    }
                    i += 1;
                    j += 1;
                }
                (Some(x), Some(y)) if x.path < y.path => {
                    note(format!("{}: unexpected", show(&x.path)));
                    i += 1;
                }
                (Some(x), None) => {
                    note(format!("{}: unexpected", show(&x.path)));
                    i += 1;
                }
                (_, Some(y)) => {
                    note(format!("{}: missing", show(&y.path)));
                    j += 1;
                }
                (None, None) => unreachable!(),
            }
        }
        if n == 0 { Ok(()) } else { Err(format!("{n} entries differ: {}", diffs.join("; "))) }
    }
}

fn walk(
    dir: &Path,
    rel: &mut Vec<u8>,
    out: &mut Vec<Entry>,
    buf: &mut [u8],
    stop: &dyn Fn() -> bool,
) -> Result<(), String> {
    let rd = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for ent in rd {
        if stop() {
            return Err("interrupted".into());
        }
        let ent = ent.map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = ent.path();
        let meta = std::fs::symlink_metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let len = rel.len();
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(ent.file_name().as_bytes());
        let ft = meta.file_type();
        let mode = meta.mode() & 0o7777;
        let entry = if ft.is_dir() {
            Entry { path: rel.clone(), kind: Kind::Dir, mode, size: 0, hash: 0 }
        } else if ft.is_file() {
            let mut f = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let mut h = Xxh3::new();
            let mut size = 0u64;
            loop {
                let n = f.read(buf).map_err(|e| format!("{}: {e}", path.display()))?;
                if n == 0 {
                    break;
                }
                h.update(&buf[..n]);
                size += n as u64;
            }
            if size != meta.len() {
                return Err(format!("{}: read {size} bytes, stat says {}", path.display(), meta.len()));
            }
            Entry { path: rel.clone(), kind: Kind::File, mode, size, hash: h.digest128() }
        } else if ft.is_symlink() {
            let t = std::fs::read_link(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let t = t.as_os_str().as_bytes();
            Entry { path: rel.clone(), kind: Kind::Symlink, mode: 0, size: t.len() as u64, hash: xxh3_128(t) }
        } else {
            debug_assert!(ft.is_fifo() || ft.is_socket() || ft.is_block_device() || ft.is_char_device());
            Entry { path: rel.clone(), kind: Kind::Special, mode, size: 0, hash: 0 }
        };
        out.push(entry);
        if ft.is_dir() {
            walk(&path, rel, out, buf, stop)?;
        }
        rel.truncate(len);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::tree::{TreePlan, TreeSpec};
    use std::os::unix::fs::PermissionsExt;

    fn never() -> bool {
        false
    }

    fn scratch(tag: &str) -> tempfile::TempDir {
        tempfile::Builder::new().prefix(&format!("uvfs-manifest-{tag}-")).tempdir().unwrap()
    }

    #[test]
    fn same_seed_same_checksum() {
        let (a, b) = (scratch("a"), scratch("b"));
        let plan = TreePlan::new(&TreeSpec::with_files(300));
        let na = plan.write(&a.path().join("t")).unwrap();
        let nb = TreePlan::new(&TreeSpec::with_files(300)).write(&b.path().join("t")).unwrap();
        assert_eq!(na, nb);
        let (ma, mb) =
            (Manifest::of(&a.path().join("t"), &never).unwrap(), Manifest::of(&b.path().join("t"), &never).unwrap());
        assert_eq!(ma.digest(), mb.digest());
        assert_eq!(ma.compare(&mb), Ok(()));
        let (dirs, files, links, bytes) = ma.counts();
        assert_eq!((dirs, files, links, bytes), (plan.dirs.len(), 300, plan.symlinks.len(), plan.bytes()));

        let c = scratch("c");
        TreePlan::new(&TreeSpec { seed: 99, ..TreeSpec::with_files(300) }).write(&c.path().join("t")).unwrap();
        assert_ne!(Manifest::of(&c.path().join("t"), &never).unwrap().digest(), ma.digest());
    }

    #[test]
    fn every_kind_of_change_is_named() {
        let d = scratch("changes");
        let root = d.path();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/file"), b"hello world").unwrap();
        std::fs::set_permissions(root.join("sub/file"), std::fs::Permissions::from_mode(0o644)).unwrap();
        std::os::unix::fs::symlink("sub/file", root.join("link")).unwrap();
        let base = Manifest::of(root, &never).unwrap();
        assert_eq!(base.entries.len(), 3);
        let check = |change: &dyn Fn(), undo: &dyn Fn(), needle: &str| {
            change();
            let m = Manifest::of(root, &never).unwrap();
            let e = m.compare(&base).unwrap_err();
            assert!(e.contains(needle), "{needle}: {e}");
            assert_ne!(m.digest(), base.digest(), "{needle}");
            undo();
            assert_eq!(Manifest::of(root, &never).unwrap().compare(&base), Ok(()));
        };
        // One byte of contents, same size.
        check(
            &|| std::fs::write(root.join("sub/file"), b"hello World").unwrap(),
            &|| std::fs::write(root.join("sub/file"), b"hello world").unwrap(),
            "sub/file: contents differ",
        );
        check(
            &|| std::fs::write(root.join("sub/file"), b"hello world!").unwrap(),
            &|| std::fs::write(root.join("sub/file"), b"hello world").unwrap(),
            "sub/file: size 12, expected 11",
        );
        let chmod = |m| std::fs::set_permissions(root.join("sub/file"), std::fs::Permissions::from_mode(m)).unwrap();
        check(&|| chmod(0o600), &|| chmod(0o644), "sub/file: mode 0600, expected 0644");
        let relink = |t: &str| {
            std::fs::remove_file(root.join("link")).unwrap();
            std::os::unix::fs::symlink(t, root.join("link")).unwrap();
        };
        check(&|| relink("sub/fil"), &|| relink("sub/file"), "link: size 7, expected 8");
        check(&|| relink("sub/fild"), &|| relink("sub/file"), "link: symlink target differ");
        check(
            &|| std::fs::write(root.join("extra"), b"").unwrap(),
            &|| std::fs::remove_file(root.join("extra")).unwrap(),
            "extra: unexpected",
        );
        check(
            &|| std::fs::rename(root.join("link"), root.join("zz")).unwrap(),
            &|| std::fs::rename(root.join("zz"), root.join("link")).unwrap(),
            "link: missing",
        );
        check(
            &|| {
                std::fs::remove_file(root.join("link")).unwrap();
                std::fs::create_dir(root.join("link")).unwrap();
            },
            &|| {
                std::fs::remove_dir(root.join("link")).unwrap();
                std::os::unix::fs::symlink("sub/file", root.join("link")).unwrap();
            },
            "link: Dir, expected Symlink",
        );
    }

    #[test]
    fn a_stop_request_ends_the_walk() {
        let d = scratch("stop");
        std::fs::write(d.path().join("f"), b"x").unwrap();
        assert_eq!(Manifest::of(d.path(), &|| true).unwrap_err(), "interrupted");
    }
}
