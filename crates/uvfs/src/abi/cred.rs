//! Credentials: who asks. Mirrors Linux's `struct cred` (the parts the VFS reads).

use bitflags::bitflags;

/// A user id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Uid(pub u32);

/// A group id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gid(pub u32);

bitflags! {
    /// The capabilities the VFS consults (a subset of Linux's, same names).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Capabilities: u32 {
        /// `CAP_CHOWN`: change owner and group freely.
        const CHOWN = 1 << 0;
        /// `CAP_DAC_OVERRIDE`: bypass read/write/search permission checks.
        const DAC_OVERRIDE = 1 << 1;
        /// `CAP_DAC_READ_SEARCH`: bypass read and directory search checks.
        const DAC_READ_SEARCH = 1 << 2;
        /// `CAP_FOWNER`: act as the owner for permission-sensitive calls.
        const FOWNER = 1 << 3;
        /// `CAP_FSETID`: keep setuid/setgid bits on change.
        const FSETID = 1 << 4;
        /// `CAP_MKNOD`: create device nodes.
        const MKNOD = 1 << 5;
        /// `CAP_SYS_ADMIN`: mounts, `trusted.` xattrs.
        const SYS_ADMIN = 1 << 6;
        /// `CAP_SYS_CHROOT`: `chroot`.
        const SYS_CHROOT = 1 << 7;
        /// `CAP_LINUX_IMMUTABLE`.
        const LINUX_IMMUTABLE = 1 << 8;
    }
}

/// What a task is to permission checks. Immutable once built; a task replaces its
/// credentials as a whole (like `commit_creds`), so checks never see a half-changed set.
/// Equal when their ids, groups and capabilities are (the install serial aside).
#[derive(Clone, Debug)]
pub struct Credentials {
    /// Real user id (used by `access(2)` without `AT_EACCESS`).
    pub ruid: Uid,
    /// Real group id.
    pub rgid: Gid,
    /// Filesystem user id (Linux's fsuid, normally the effective uid).
    pub uid: Uid,
    /// Filesystem group id.
    pub gid: Gid,
    /// Supplementary groups, sorted for binary search.
    groups: Box<[Gid]>,
    /// Effective capabilities.
    pub caps: Capabilities,
    /// Set when a task installs them (then they are behind an `Arc` and cannot change):
    /// unique per installation, 0 before. The path cache keys answers that depended on
    /// who asked by it.
    serial: u64,
}

impl PartialEq for Credentials {
    fn eq(&self, o: &Credentials) -> bool {
        (self.ruid, self.rgid, self.uid, self.gid, &self.groups, self.caps)
            == (o.ruid, o.rgid, o.uid, o.gid, &o.groups, o.caps)
    }
}

impl Eq for Credentials {}

impl Credentials {
    /// Root with every capability.
    pub fn root() -> Credentials {
        Credentials::new(Uid(0), Gid(0), &[])
    }

    /// A user; uid 0 gets every capability (as Linux without securebits), others none.
    pub fn new(uid: Uid, gid: Gid, groups: &[Gid]) -> Credentials {
        let mut g: Vec<Gid> = groups.to_vec();
        g.sort();
        g.dedup();
        Credentials {
            ruid: uid,
            rgid: gid,
            uid,
            gid,
            groups: g.into_boxed_slice(),
            caps: if uid.0 == 0 { Capabilities::all() } else { Capabilities::empty() },
            serial: 0,
        }
    }

    /// These credentials as a task installs them: with a serial of their own.
    pub(crate) fn installed(mut self) -> Credentials {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        self.serial = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// The install serial (0: not installed by a task, such as `access(2)`'s).
    #[inline]
    pub(crate) fn serial(&self) -> u64 {
        self.serial
    }

    /// The same credentials with another capability set.
    pub fn with_caps(mut self, caps: Capabilities) -> Credentials {
        self.caps = caps;
        self
    }

    /// Supplementary groups.
    pub fn groups(&self) -> &[Gid] {
        &self.groups
    }

    /// `in_group_p`: the fs gid or a supplementary group.
    pub fn in_group(&self, gid: Gid) -> bool {
        self.gid == gid || self.groups.binary_search(&gid).is_ok()
    }

    /// Whether the capability is in the effective set.
    pub fn capable(&self, cap: Capabilities) -> bool {
        self.caps.contains(cap)
    }

    /// Whether `access(2)` would check with these very credentials (real ids equal the
    /// effective ones, and the capabilities are what Linux would leave), so it need not
    /// build new ones.
    pub fn uses_own_ids_for_access(&self) -> bool {
        self.ruid == self.uid && self.rgid == self.gid && (self.ruid.0 == 0 || self.caps.is_empty())
    }

    /// The credentials `access(2)` checks with: real ids, and for a non-root real uid
    /// no capabilities (Linux drops them unless the real uid is 0).
    pub fn for_access(&self) -> Credentials {
        let mut c = self.clone();
        c.serial = 0;
        c.uid = self.ruid;
        c.gid = self.rgid;
        if self.ruid.0 != 0 {
            c.caps = Capabilities::empty();
        }
        c
    }
}
