//! Generated tar archives for the tests that read them (tarfs in-process, tarfs through
//! a FUSE mount): members written one by one by Python's tarfile (GNU, PAX and ustar
//! headers, names given again, hard links to names replaced later, long names and
//! targets, `./` and `//` in names, ids and times only PAX or base-256 can hold, `user.`
//! xattrs, a `./` entry), GNU tar's extraction as the reference, and the directory times
//! that extraction leaves to chance masked.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::Command;

use proptest::prelude::*;

#[derive(Clone, Debug)]
pub struct Member {
    /// `f` file, `d` directory, `s` symlink, `h` hard link, `p` fifo, `c` character device.
    pub kind: char,
    pub name: &'static str,
    /// A symlink's or hard link's target.
    pub target: &'static str,
    pub size: usize,
    pub mode: u32,
    pub uid: u32,
    pub mtime: u64,
    pub xattr: Option<(&'static str, &'static str)>,
}

const LONG_DIR: &str =
    "a/mmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmm";
const LONG_FILE: &str = "a/mmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmm/ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff";
/// Directories' names, and other members': mostly apart (GNU tar does not put a file
/// where a directory with children is), sometimes the same.
const DIRS: [&str; 7] = ["a", "b", "a/c", ".", LONG_DIR, "a/f", "./b/"];
const FILES: [&str; 9] = ["a/f", "a/g", "b/f", "a/c/f", "./a/g", "b//h", LONG_FILE, "a/c", "c"];
const TARGETS: [&str; 6] = ["a/f", "a/g", "b/f", "a/c/f", "f", LONG_FILE];

pub fn member() -> impl Strategy<Value = Member> {
    (
        prop::sample::select(vec!['f', 'f', 'f', 'd', 'd', 's', 'h', 'h', 'p', 'c']),
        prop_oneof![5 => prop::sample::select(DIRS[..5].to_vec()), 1 => prop::sample::select(DIRS[5..].to_vec())],
        prop_oneof![6 => prop::sample::select(FILES[..7].to_vec()), 1 => prop::sample::select(FILES[7..].to_vec())],
        prop::sample::select(TARGETS.to_vec()),
        prop::sample::select(vec![0usize, 5, 700, 10_000]),
        prop::sample::select(vec![0o644u32, 0o755, 0o4755, 0o600, 0o1777, 0o000]),
        prop_oneof![4 => Just(0u32), 4 => Just(1000), 1 => Just(3_000_000)],
        prop::sample::select(vec![1_000_000_000u64, 1_500_000_000, 9_000_000_000]),
        prop::option::of(prop::sample::select(vec![("user.k", "v1"), ("user.j", "second")])),
    )
        .prop_map(|(kind, dir, file, target, size, mode, uid, mtime, xattr)| Member {
            kind,
            name: if kind == 'd' { dir } else { file },
            target,
            size,
            mode,
            uid,
            mtime,
            xattr,
        })
}

/// An archive's members and header format.
pub fn case() -> impl Strategy<Value = (Vec<Member>, &'static str)> {
    (proptest::collection::vec(member(), 1..14), prop_oneof![3 => Just("gnu"), 3 => Just("pax"), 1 => Just("ustar")])
        .prop_map(|(members, format)| (prepare(members), format))
}

/// Members as GNU tar extracts them cleanly more often: three in four hard links name a
/// non-directory given earlier (GNU tar refuses a link to what is not there yet), the rest
/// keep their generated target; xattrs only where Linux takes `user.` ones.
fn prepare(members: Vec<Member>) -> Vec<Member> {
    let mut earlier: Vec<&'static str> = Vec::new();
    members
        .into_iter()
        .map(|mut m| {
            if m.kind == 'h' && m.size != 10_000 && !earlier.is_empty() {
                m.target = earlier[m.size % earlier.len()];
            }
            if !matches!(m.kind, 'd' | 'h') {
                earlier.push(m.name);
            }
            // Linux takes `user.` xattrs on files and directories only; GNU tar sets the
            // root's from its last `./` entry unless another member between them made it
            // set them early: left out.
            if !matches!(m.kind, 'f' | 'd') || normal(m.name).is_empty() {
                m.xattr = None;
            }
            m
        })
        .collect()
}

/// Writes `members` as a tar archive in `format` (Python's tarfile: it writes what it
/// is given, in order, without looking at the disk); false where the format cannot
/// hold a member (ustar: long names, large ids).
pub fn write_archive(path: &Path, format: &str, members: &[Member]) -> bool {
    let mut spec = String::new();
    for m in members {
        let (xk, xv) = m.xattr.unwrap_or(("", ""));
        spec += &format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            m.kind, m.name, m.target, m.size, m.mode, m.uid, m.mtime, xk, xv
        );
    }
    let script = r#"
import sys, tarfile, io
path, fmt = sys.argv[1], sys.argv[2]
fmt = {"gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT, "ustar": tarfile.USTAR_FORMAT}[fmt]
with tarfile.open(path, "w", format=fmt) as t:
    for i, line in enumerate(sys.stdin.read().splitlines()):
        kind, name, target, size, mode, uid, mtime, xk, xv = line.split("\t")
        ti = tarfile.TarInfo(name)
        ti.mode, ti.uid, ti.gid, ti.mtime = int(mode), int(uid), int(uid) // 2, int(mtime)
        if xk and fmt == tarfile.PAX_FORMAT:
            ti.pax_headers = {"SCHILY.xattr." + xk: xv}
        data = None
        if kind == "f":
            ti.type, ti.size = tarfile.REGTYPE, int(size)
            data = io.BytesIO(bytes([65 + i % 26]) * int(size))
        elif kind == "d":
            ti.type = tarfile.DIRTYPE
        elif kind == "s":
            ti.type, ti.linkname = tarfile.SYMTYPE, target
        elif kind == "h":
            ti.type, ti.linkname = tarfile.LNKTYPE, target
        elif kind == "p":
            ti.type = tarfile.FIFOTYPE
        elif kind == "c":
            ti.type, ti.devmajor, ti.devminor = tarfile.CHRTYPE, 1, 3
        t.addfile(ti, data)
"#;
    let mut child = Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .arg(format)
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("python3");
    child.stdin.take().unwrap().write_all(spec.as_bytes()).unwrap();
    child.wait().unwrap().success()
}

/// A name as the tree knows it: no `./` prefix, no empty components.
pub fn normal(name: &str) -> Vec<u8> {
    name.split('/').filter(|c| !c.is_empty() && *c != ".").collect::<Vec<_>>().join("/").into_bytes()
}

/// GNU tar's extraction of `tar` into `dst` (owners, `user.` xattrs); false where tar
/// complains (ustar's limits, a file under a file, ...): the extraction is then undefined.
pub fn extract(tar: &Path, dst: &Path) -> bool {
    let out = Command::new("tar")
        .args(["--xattrs", "--xattrs-include=user.*", "--same-owner", "--warning=no-timestamp", "-xpf"])
        .arg(tar)
        .arg("-C")
        .arg(dst)
        .output()
        .unwrap();
    out.status.success() && out.stderr.is_empty()
}

/// `tree` with the time of each directory GNU tar leaves to chance set to 0.
pub fn mask_untimed(members: &[Member], tree: super::Tree) -> super::Tree {
    // The directories the archive names last as directories keep its times; others
    // are made as needed, at extraction time. So are those GNU tar gave their
    // times (at the first later member outside them) before a member inside them
    // came and changed them again. "Inside" is tar's comparison of the names as
    // written, less a directory's trailing slashes: `./b` is not where `b/f` is.
    let mut last: BTreeMap<Vec<u8>, (char, usize)> = BTreeMap::new();
    for (i, m) in members.iter().enumerate() {
        last.insert(normal(m.name), (m.kind, i));
    }
    let inside = |dir: &str, name: &str| {
        let d = dir.trim_end_matches('/');
        name.strip_prefix(d).is_some_and(|rest| rest.starts_with('/'))
    };
    let timed = |dir: &Vec<u8>| -> bool {
        let Some(&('d', j)) = last.get(dir) else { return false };
        let mut set = false;
        for m in &members[j + 1..] {
            // Tar sets the times before it extracts the member that is outside by
            // name, which may still be in the directory (`./a/g` in `a`).
            set |= !inside(members[j].name, m.name);
            let n = normal(m.name);
            if set && (dir.is_empty() || n.starts_with(&[&dir[..], b"/"].concat())) {
                return false;
            }
        }
        true
    };
    tree.into_iter()
        .map(|(k, mut n)| {
            if n.mode & 0o170000 == 0o040000 && !timed(&k) {
                n.mtime = 0;
            }
            (k, n)
        })
        .collect()
}

/// The archive of `members` written in `format` under `dir`, and the tree GNU tar extracts
/// from it with the times it leaves to chance masked; `None` where the format cannot hold
/// the members or tar does not extract them cleanly (a case to leave out).
pub fn reference(dir: &Path, members: &[Member], format: &str) -> Option<(std::path::PathBuf, super::Tree)> {
    let tar = dir.join("t.tar");
    let dst = dir.join("dst");
    std::fs::create_dir(&dst).unwrap();
    (write_archive(&tar, format, members) && extract(&tar, &dst))
        .then(|| (tar, mask_untimed(members, super::host_tree(&dst))))
}

/// `Err` naming the first path whose node differs between `want` and `got`.
pub fn same(want: &super::Tree, got: &super::Tree) -> Result<(), String> {
    if want.keys().ne(got.keys()) {
        return Err(format!(
            "names: want {:?}, got {:?}",
            want.keys().collect::<Vec<_>>(),
            got.keys().collect::<Vec<_>>()
        ));
    }
    match want.iter().find(|(k, w)| got[*k] != **w) {
        Some((k, w)) => Err(format!("{}: want {w:?}, got {:?}", String::from_utf8_lossy(k), got[k])),
        None => Ok(()),
    }
}
