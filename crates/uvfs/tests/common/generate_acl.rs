//! What the differential suite of extended attributes and POSIX ACLs generates: the
//! identities, ACL values (valid and broken), the starting tree, call sequences and the
//! epilogue that reads every identity's view back. Shared by `differential_acl.rs`
//! (uvfs in-process against the host kernel) and `uvfs-fuse`'s `differential_mount.rs`
//! (the same sequences through a FUSE mount).

use proptest::prelude::*;

use super::generate::mkdir;
use super::{D, Op, P, V, Who, X, p};

use libc::{
    AT_EACCESS, AT_REMOVEDIR, AT_SYMLINK_NOFOLLOW, O_CREAT, O_DIRECTORY, O_EXCL, O_PATH, O_RDONLY, O_RDWR, O_WRONLY,
    S_IFIFO,
};

/// Owner of most of the tree.
pub const OWNER: Who = Who::As { uid: 1000, gid: 1000, supp: 1001 };
/// A user the generated ACLs name.
pub const NAMED: Who = Who::As { uid: 1002, gid: 1002, supp: 1003 };
/// A member of the owning group 1000.
pub const MEMBER: Who = Who::As { uid: 1004, gid: 1004, supp: 1000 };
/// A member of the named group 1003 only.
pub const GMEMBER: Who = Who::As { uid: 1005, gid: 1005, supp: 1003 };
/// Nobody in particular.
pub const OTHER: Who = Who::As { uid: 3000, gid: 3000, supp: 3001 };

pub const XATTR_CREATE: i32 = 1;
pub const XATTR_REPLACE: i32 = 2;

pub const ACCESS: &str = "system.posix_acl_access";
pub const DEFAULT: &str = "system.posix_acl_default";

// ---------------------------------------------------------------- ACL values

pub const USER_OBJ: u16 = 0x01;
pub const USER: u16 = 0x02;
pub const GROUP_OBJ: u16 = 0x04;
pub const GROUP: u16 = 0x08;
pub const MASK: u16 = 0x10;
pub const OTHER_TAG: u16 = 0x20;
pub const UNDEF: u32 = u32::MAX;

/// An ACL as entries (tag, perm, id), serialized as Linux's xattr value.
#[derive(Clone, Debug)]
pub struct AclSpec(pub Vec<(u16, u16, u32)>);

impl AclSpec {
    pub fn bytes(&self) -> Vec<u8> {
        let mut v = 2u32.to_le_bytes().to_vec();
        for &(t, p, id) in &self.0 {
            v.extend_from_slice(&t.to_le_bytes());
            v.extend_from_slice(&p.to_le_bytes());
            v.extend_from_slice(&id.to_le_bytes());
        }
        v
    }
}

pub fn acl(entries: &[(u16, u16, u32)]) -> V {
    V(AclSpec(entries.to_vec()).bytes())
}

/// A valid ACL over the test's ids: owner, named users, owning group, named groups, a
/// mask (required with named entries, optional without), other. The ids of entries that
/// are not named are arbitrary (Linux ignores them and reads back `ACL_UNDEFINED_ID`).
pub fn valid_acl() -> BoxedStrategy<AclSpec> {
    let perm = || 0u16..8;
    let junk_id = || prop::sample::select(vec![UNDEF, UNDEF, 0, 1000]);
    let users = prop::collection::vec((prop::sample::select(vec![1000u32, 1002, 3000, 0]), perm()), 0..3);
    let groups = prop::collection::vec((prop::sample::select(vec![1000u32, 1001, 1003, 3001]), perm()), 0..3);
    (perm(), users, perm(), groups, prop::option::of(perm()), perm(), junk_id(), junk_id())
        .prop_map(|(uo, mut users, go, mut groups, mask, other, j1, j2)| {
            users.sort();
            users.dedup_by_key(|u| u.0);
            groups.sort();
            groups.dedup_by_key(|g| g.0);
            let mut e = vec![(USER_OBJ, uo, j1)];
            e.extend(users.iter().map(|&(id, p)| (USER, p, id)));
            e.push((GROUP_OBJ, go, j2));
            e.extend(groups.iter().map(|&(id, p)| (GROUP, p, id)));
            let named = !users.is_empty() || !groups.is_empty();
            if let Some(m) = mask.or(named.then_some(7)) {
                e.push((MASK, m, UNDEF));
            }
            e.push((OTHER_TAG, other, UNDEF));
            AclSpec(e)
        })
        .boxed()
}

/// A valid ACL, or one broken in one of the ways Linux refuses (or, for the id order,
/// accepts).
pub fn acl_value() -> BoxedStrategy<V> {
    let broken = (valid_acl(), 0..12u8).prop_map(|(a, how)| {
        let mut e = a.0.clone();
        let n = e.len();
        match how {
            0 => {
                let mut b = a.bytes();
                b[0] = 1; // version 1
                return V(b);
            }
            1 => {
                let mut b = a.bytes();
                b.pop(); // not a whole entry
                return V(b);
            }
            2 => return V(vec![2, 0]),
            3 => return V(2u32.to_le_bytes().to_vec()), // header only: removes
            4 => e[0].0 = 0x40,                         // unknown tag
            5 => e.swap(0, n - 1),                      // unsorted kinds
            6 => {
                e.remove(n - 1); // no other entry
            }
            7 => e.insert(0, (USER_OBJ, 7, UNDEF)), // two owners
            8 => e[0].1 = 8,                        // perm beyond rwx
            9 => e.insert(1, (USER, 5, UNDEF)),     // named user -1
            10 => {
                // Named entries without a mask.
                e.retain(|x| x.0 != MASK);
                e.insert(1, (USER, 5, 1002));
            }
            _ => {
                // Duplicate and unsorted named users: Linux accepts them.
                e.insert(1, (USER, 4, 1002));
                e.insert(1, (USER, 6, 3000));
                e.insert(1, (USER, 1, 1002));
                if !e.iter().any(|x| x.0 == MASK) {
                    let other = e.pop().expect("other");
                    e.push((MASK, 7, UNDEF));
                    e.push(other);
                }
            }
        }
        V(AclSpec(e).bytes())
    });
    prop_oneof![3 => valid_acl().prop_map(|a| V(a.bytes())), 2 => broken].boxed()
}

// ---------------------------------------------------------------- the starting tree

/// A file of 3 bytes, as `generate::creat` makes it.
fn creat(path: &str, mode: u32, owner: (u32, u32)) -> Vec<Op> {
    super::generate::creat(path, mode, 3, owner)
}

pub fn set(path: &str, name: &str, v: V) -> Op {
    Op::Setxattr(X::Path(p(path)), p(name), v, 0)
}

/// The tree every case starts from (made by root, umask 0), with a few stored xattrs.
pub fn base_tree() -> Vec<Op> {
    let owner = (1000, 1000);
    [
        vec![Op::Umask(0)],
        mkdir("d", 0o775, owner),
        creat("d/f", 0o664, owner),
        mkdir("d/x", 0o775, owner),
        creat("f", 0o640, owner),
        creat("g", 0o2770, owner),
        mkdir("s", 0o1777, (0, 0)),
        mkdir("e", 0o770, (2000, 1000)),
        creat("e/h", 0o660, (2000, 1000)),
        mkdir("k", 0o2777, (0, 3001)),
        vec![
            Op::Symlinkat(p("f"), D::Cwd, p("l")),
            Op::Mknodat(D::Cwd, p("q"), S_IFIFO | 0o666, 0),
            Op::Fchownat(D::Cwd, p("q"), Some(1000), Some(1000), 0),
            set("f", "user.a", V(b"alpha".to_vec())),
            set("f", "trusted.t", V(b"tt".to_vec())),
            set("f", "security.s", V(b"sec".to_vec())),
            set("d", "user.a", V(b"dir".to_vec())),
            set("s", "user.a", V(b"sticky".to_vec())),
            Op::Umask(0o022),
        ],
    ]
    .concat()
}

/// Where setup may put a valid ACL.
pub const ACL_SPOTS: &[(&str, &str)] = &[
    ("d", ACCESS),
    ("d", DEFAULT),
    ("d/f", ACCESS),
    ("d/x", DEFAULT),
    ("f", ACCESS),
    ("g", ACCESS),
    ("e", ACCESS),
    ("e", DEFAULT),
    ("e/h", ACCESS),
    ("q", ACCESS),
];

// ---------------------------------------------------------------- strategies

pub fn path() -> BoxedStrategy<P> {
    prop::sample::select(vec![
        "d", "d/f", "d/x", "d/n", "d/x/n", "d/x/f", "f", "g", "s", "l", "q", "e", "e/h", "e/n", "k", "k/n", "n",
        "nope/x", "d/f/",
    ])
    .prop_map(p)
    .boxed()
}

pub fn target() -> BoxedStrategy<X> {
    prop_oneof![6 => path().prop_map(X::Path), 2 => path().prop_map(X::LPath), 2 => (0..4i32).prop_map(X::Fd)].boxed()
}

pub fn name() -> BoxedStrategy<P> {
    prop_oneof![
        8 => prop::sample::select(vec![ACCESS, DEFAULT]).prop_map(p),
        6 => prop::sample::select(vec!["user.a", "user.b", "trusted.t", "security.s", "trusted.u", "security.z"]).prop_map(p),
        1 => prop::sample::select(vec!["user.", "trusted.", "security.", "system.", "system.foo", "foo", "foo.bar", ""]).prop_map(p),
        1 => prop::sample::select(vec![255usize, 256]).prop_map(|n| P([b"user.".to_vec(), vec![b'n'; n - 5]].concat())),
    ]
    .boxed()
}

pub fn value() -> BoxedStrategy<V> {
    prop_oneof![
        3 => prop::sample::select(vec![&b""[..], b"v", b"value-2", b"\0\x01binary"]).prop_map(|v| V(v.to_vec())),
        4 => acl_value(),
        1 => prop::sample::select(vec![65536usize, 65537]).prop_map(|n| V(vec![b'z'; n])),
    ]
    .boxed()
}

pub fn mode() -> BoxedStrategy<u32> {
    prop::sample::select(vec![0o777, 0o755, 0o750, 0o700, 0o640, 0o604, 0o070, 0o2775, 0o1777, 0o000, 0o666]).boxed()
}

pub fn op() -> BoxedStrategy<Op> {
    prop_oneof![
        6 => (target(), name(), value(), prop::sample::select(vec![0, 0, 0, XATTR_CREATE, XATTR_REPLACE, 3, 4]))
            .prop_map(|(x, n, v, f)| Op::Setxattr(x, n, v, f)),
        4 => (target(), name(), prop::sample::select(vec![0usize, 0, 2, 7, 100, 65536, 70000]))
            .prop_map(|(x, n, s)| Op::Getxattr(x, n, s)),
        2 => (target(), prop::sample::select(vec![0usize, 5, 4096])).prop_map(|(x, s)| Op::Listxattr(x, s)),
        2 => (target(), name()).prop_map(|(x, n)| Op::Removexattr(x, n)),
        2 => (path(), mode()).prop_map(|(pa, m)| Op::Fchmodat(D::Cwd, pa, m, 0)),
        1 => (path(), prop::sample::select(vec![Some(1000u32), Some(1002), Some(3000), None]), prop::sample::select(vec![Some(1000u32), Some(1003), None]))
            .prop_map(|(pa, u, g)| Op::Fchownat(D::Cwd, pa, u, g, AT_SYMLINK_NOFOLLOW)),
        3 => (path(), prop::sample::select(vec![O_RDONLY, O_WRONLY, O_RDWR, O_CREAT | O_WRONLY, O_CREAT | O_EXCL | O_RDWR, O_PATH, O_DIRECTORY]), mode())
            .prop_map(|(pa, f, m)| Op::Open(D::Cwd, pa, f, m)),
        2 => (path(), mode()).prop_map(|(pa, m)| Op::Mkdirat(D::Cwd, pa, m)),
        1 => (path(), mode()).prop_map(|(pa, m)| Op::Mknodat(D::Cwd, pa, S_IFIFO | m, 0)),
        4 => (path(), 0..8i32, prop::sample::select(vec![0, AT_EACCESS])).prop_map(|(pa, m, f)| Op::Faccessat(D::Cwd, pa, m, f)),
        3 => path().prop_map(|pa| Op::Fstatat(D::Cwd, pa, AT_SYMLINK_NOFOLLOW)),
        // Which times each call moves (see `Out::Since`): an ACL or xattr change moves
        // the change time, a refused one nothing.
        3 => path().prop_map(|pa| Op::Since(D::Cwd, pa, AT_SYMLINK_NOFOLLOW)),
        // Names move, multiply and go while their ACLs stay with the inode; an unnamed
        // file gets its directory's default ACL.
        2 => (path(), path(), prop::sample::select(vec![0u32, 0, 2])).prop_map(|(a, b, f)| Op::Renameat2(D::Cwd, a, D::Cwd, b, f)),
        1 => (path(), path()).prop_map(|(a, b)| Op::Linkat(D::Cwd, a, D::Cwd, b, 0)),
        1 => (path(), prop::sample::select(vec![0, AT_REMOVEDIR])).prop_map(|(pa, f)| Op::Unlinkat(D::Cwd, pa, f)),
        1 => (path(), mode()).prop_map(|(pa, m)| Op::Open(D::Cwd, pa, libc::O_TMPFILE | O_RDWR, m)),
        1 => (0..4i32).prop_map(Op::Close),
        1 => prop::sample::select(vec![0o022u32, 0o077, 0o002, 0]).prop_map(Op::Umask),
    ]
    .boxed()
}

pub fn who() -> BoxedStrategy<Who> {
    prop::sample::select(vec![OWNER, OWNER, NAMED, MEMBER, GMEMBER, OTHER, Who::Root]).boxed()
}

/// Setup: the base tree, then valid ACLs at some of [`ACL_SPOTS`] (as root).
pub fn setup_acls() -> BoxedStrategy<Vec<Op>> {
    prop::collection::vec((0..ACL_SPOTS.len(), valid_acl()), 0..5)
        .prop_map(|v| {
            let mut ops = base_tree();
            ops.extend(v.into_iter().map(|(i, a)| set(ACL_SPOTS[i].0, ACL_SPOTS[i].1, V(a.bytes()))));
            ops
        })
        .boxed()
}

/// After the generated calls, what every identity's view of the tree is: the ACL bytes,
/// modes and access of the interesting paths (run by the same identity).
pub fn epilogue() -> Vec<Op> {
    let mut v = Vec::new();
    for path in ["d", "d/f", "d/n", "d/x", "d/x/n", "f", "g", "e/h", "e/n", "k/n", "q"] {
        v.push(Op::Fstatat(D::Cwd, p(path), AT_SYMLINK_NOFOLLOW));
        v.push(Op::Getxattr(X::LPath(p(path)), p(ACCESS), 100));
        v.push(Op::Getxattr(X::LPath(p(path)), p(DEFAULT), 100));
        v.push(Op::Faccessat(D::Cwd, p(path), 7, AT_EACCESS));
        v.push(Op::Faccessat(D::Cwd, p(path), 4, AT_EACCESS));
        v.push(Op::Faccessat(D::Cwd, p(path), 2, AT_EACCESS));
        v.push(Op::Faccessat(D::Cwd, p(path), 1, AT_EACCESS));
    }
    v
}
