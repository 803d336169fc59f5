//! POSIX ACLs: the inode's ACL slot (seed 001), evaluation, the xattr format, and the
//! calls that set, inherit and chmod them. Mirrors Linux's `fs/posix_acl.c`.
//!
//! **The slot.** Each inode has two ([`Inode`]'s access and default ACL), each in one of
//! three states: *not cached* (ask the filesystem under the inode lock), *known none*
//! (mode bits decide; the common case), or *an ACL*. The permission check loads the
//! access slot with one atomic read and no lock; only *not cached* takes the slow path,
//! `load_locked`, which asks the filesystem and caches the answer. Every change of a slot
//! happens under the inode lock; a replaced ACL is retired through the collector, so a
//! lockless reader that still holds it stays safe.
//!
//! **Stored as mode bits when minimal.** An access ACL with only the owner, owning group
//! and other entries says nothing the mode does not ([`Acl::equiv_mode`]): setting one
//! only changes the mode, and the slot says "known none". A real ACL keeps the group bits
//! of the mode equal to its mask (or to the owning group entry when there is no mask), on
//! set (`set_posix_acl`) and on chmod (`posix_acl_chmod_locked`).
//!
//! **Inheritance.** A node created in a directory with a default ACL gets an access ACL
//! derived from it, masked by the requested mode, and the umask is not applied
//! (`posix_acl_create`); a new directory also inherits the default ACL itself.
//!
//! **Format.** `system.posix_acl_access` / `system.posix_acl_default` values are Linux's:
//! a little-endian `u32` version (2), then entries of `u16` tag, `u16` perm, `u32` id
//! ([`Acl::from_xattr`], [`Acl::to_xattr`]), so `getfacl`/`setfacl` work unchanged.
//! Like Linux, uvfs checks the order of the entry *kinds* and that the required ones are
//! there ([`Acl::valid`]), but not the order or uniqueness of the ids of named entries
//! (libacl does that in user space); those come back exactly as they were set.

use std::sync::Arc;
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::abi::cred::{Capabilities, Credentials, Gid};
use crate::abi::errno::{Errno, Result};
use crate::abi::stat::{FileType, S_IFMT, S_ISGID};
use crate::core::inode::Inode;
use crate::core::permission::owner_or_capable;
use crate::core::superblock::SetAttr;
use crate::sync::rcu::{Guard, LocalGuard, Rcu};

/// `ACL_USER_OBJ` tag value in the xattr format.
pub const ACL_USER_OBJ: u16 = 0x01;
/// `ACL_USER`.
pub const ACL_USER: u16 = 0x02;
/// `ACL_GROUP_OBJ`.
pub const ACL_GROUP_OBJ: u16 = 0x04;
/// `ACL_GROUP`.
pub const ACL_GROUP: u16 = 0x08;
/// `ACL_MASK`.
pub const ACL_MASK: u16 = 0x10;
/// `ACL_OTHER`.
pub const ACL_OTHER: u16 = 0x20;
/// `POSIX_ACL_XATTR_VERSION`.
pub const POSIX_ACL_XATTR_VERSION: u32 = 2;
/// `ACL_UNDEFINED_ID`: the id field of entries that are not named.
pub const ACL_UNDEFINED_ID: u32 = u32::MAX;
/// The xattr name of the access ACL.
pub const XATTR_NAME_POSIX_ACL_ACCESS: &[u8] = b"system.posix_acl_access";
/// The xattr name of the default ACL.
pub const XATTR_NAME_POSIX_ACL_DEFAULT: &[u8] = b"system.posix_acl_default";

const HEADER_SIZE: usize = 4;
const ENTRY_SIZE: usize = 8;

/// Which ACL of an inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AclType {
    /// The access ACL (`ACL_TYPE_ACCESS`): decides permissions.
    Access,
    /// The default ACL (`ACL_TYPE_DEFAULT`, directories only): inherited by new nodes.
    Default,
}

impl AclType {
    /// The `system.posix_acl_*` xattr name.
    pub fn xattr_name(self) -> &'static [u8] {
        match self {
            AclType::Access => XATTR_NAME_POSIX_ACL_ACCESS,
            AclType::Default => XATTR_NAME_POSIX_ACL_DEFAULT,
        }
    }

    /// The type an xattr name stands for (`posix_acl_type`), if it is an ACL name.
    pub fn from_xattr_name(name: &[u8]) -> Option<AclType> {
        match name {
            XATTR_NAME_POSIX_ACL_ACCESS => Some(AclType::Access),
            XATTR_NAME_POSIX_ACL_DEFAULT => Some(AclType::Default),
            _ => None,
        }
    }
}

/// Tag of an ACL entry (acl(5)). The derived order is the order entries must come in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AclTag {
    /// `ACL_USER_OBJ`: the owner.
    UserObj,
    /// `ACL_USER`: a named user.
    User(u32),
    /// `ACL_GROUP_OBJ`: the owning group.
    GroupObj,
    /// `ACL_GROUP`: a named group.
    Group(u32),
    /// `ACL_MASK`: the upper bound for the group class.
    Mask,
    /// `ACL_OTHER`: everybody else.
    Other,
}

impl AclTag {
    /// The tag value and id of the xattr format.
    fn raw(self) -> (u16, u32) {
        match self {
            AclTag::UserObj => (ACL_USER_OBJ, ACL_UNDEFINED_ID),
            AclTag::User(u) => (ACL_USER, u),
            AclTag::GroupObj => (ACL_GROUP_OBJ, ACL_UNDEFINED_ID),
            AclTag::Group(g) => (ACL_GROUP, g),
            AclTag::Mask => (ACL_MASK, ACL_UNDEFINED_ID),
            AclTag::Other => (ACL_OTHER, ACL_UNDEFINED_ID),
        }
    }
}

/// One entry: a tag and `rwx` bits (4, 2, 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AclEntry {
    /// Whom it is for.
    pub tag: AclTag,
    /// Permission bits, `rwx` as 4/2/1. `u16` as in the xattr format, so that a value with
    /// stray high bits is seen (and refused by [`Acl::valid`]), not truncated.
    pub perm: u16,
}

impl AclEntry {
    /// An entry.
    pub const fn new(tag: AclTag, perm: u16) -> AclEntry {
        AclEntry { tag, perm }
    }
}

/// A POSIX ACL: entries in the order acl(5) requires (checked by [`Acl::valid`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acl {
    /// The entries: owner, named users, owning group, named groups, mask, other.
    pub entries: Vec<AclEntry>,
}

const RWX: u16 = 7;

impl Acl {
    /// An ACL of these entries (not validated).
    pub fn new(entries: Vec<AclEntry>) -> Acl {
        Acl { entries }
    }

    /// `posix_acl_from_xattr`: parses the xattr format. `Ok(None)` for an empty value or
    /// a header without entries (Linux removes the ACL then). EINVAL for a short value,
    /// a size that is not header plus whole entries, an unknown tag or an invalid id;
    /// EOPNOTSUPP for another version. Entry order and permissions are checked later, by
    /// [`Acl::valid`], after the ownership check, as in Linux.
    pub fn from_xattr(value: &[u8]) -> Result<Option<Acl>> {
        if value.is_empty() {
            return Ok(None);
        }
        if value.len() < HEADER_SIZE {
            return Err(Errno::EINVAL);
        }
        let version = u32::from_le_bytes(value[..4].try_into().expect("4 bytes"));
        if version != POSIX_ACL_XATTR_VERSION {
            return Err(Errno::EOPNOTSUPP);
        }
        let body = &value[HEADER_SIZE..];
        if !body.len().is_multiple_of(ENTRY_SIZE) {
            return Err(Errno::EINVAL);
        }
        if body.is_empty() {
            return Ok(None);
        }
        let mut entries = Vec::with_capacity(body.len() / ENTRY_SIZE);
        for e in body.chunks_exact(ENTRY_SIZE) {
            let tag = u16::from_le_bytes([e[0], e[1]]);
            let perm = u16::from_le_bytes([e[2], e[3]]);
            let id = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
            let tag = match tag {
                ACL_USER_OBJ => AclTag::UserObj,
                ACL_GROUP_OBJ => AclTag::GroupObj,
                ACL_MASK => AclTag::Mask,
                ACL_OTHER => AclTag::Other,
                // (uid_t)-1 maps to no user.
                ACL_USER if id != ACL_UNDEFINED_ID => AclTag::User(id),
                ACL_GROUP if id != ACL_UNDEFINED_ID => AclTag::Group(id),
                _ => return Err(Errno::EINVAL),
            };
            entries.push(AclEntry { tag, perm });
        }
        Ok(Some(Acl { entries }))
    }

    /// Size of the xattr form (`posix_acl_xattr_size`).
    pub fn xattr_size(&self) -> usize {
        HEADER_SIZE + ENTRY_SIZE * self.entries.len()
    }

    /// `posix_acl_to_xattr`: writes the xattr form into `buf` and returns its size; an
    /// empty `buf` only asks for the size, a short one is ERANGE. Entries that are not
    /// named carry `ACL_UNDEFINED_ID`, whatever id they were set with.
    pub fn to_xattr(&self, buf: &mut [u8]) -> Result<usize> {
        let size = self.xattr_size();
        if buf.is_empty() {
            return Ok(size);
        }
        if buf.len() < size {
            return Err(Errno::ERANGE);
        }
        buf[..HEADER_SIZE].copy_from_slice(&POSIX_ACL_XATTR_VERSION.to_le_bytes());
        for (e, out) in self.entries.iter().zip(buf[HEADER_SIZE..size].chunks_exact_mut(ENTRY_SIZE)) {
            let (tag, id) = e.tag.raw();
            out[..2].copy_from_slice(&tag.to_le_bytes());
            out[2..4].copy_from_slice(&e.perm.to_le_bytes());
            out[4..].copy_from_slice(&id.to_le_bytes());
        }
        Ok(size)
    }

    /// The xattr form as a vector.
    pub fn to_xattr_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.xattr_size()];
        self.to_xattr(&mut v).expect("sized buffer");
        v
    }

    /// `posix_acl_valid`: permissions within `rwx`; exactly one owner, owning group and
    /// other entry; named users after the owner, named groups after the owning group, at
    /// most one mask after them, required when named entries exist; other last. EINVAL
    /// otherwise.
    pub fn valid(&self) -> Result<()> {
        #[derive(PartialEq)]
        enum State {
            UserObj,
            User,
            Group,
            Other,
            Done,
        }
        let mut state = State::UserObj;
        let mut needs_mask = false;
        for e in &self.entries {
            if e.perm & !RWX != 0 {
                return Err(Errno::EINVAL);
            }
            state = match (e.tag, state) {
                (AclTag::UserObj, State::UserObj) => State::User,
                (AclTag::User(u), State::User) if u != ACL_UNDEFINED_ID => {
                    needs_mask = true;
                    State::User
                }
                (AclTag::GroupObj, State::User) => State::Group,
                (AclTag::Group(g), State::Group) if g != ACL_UNDEFINED_ID => {
                    needs_mask = true;
                    State::Group
                }
                (AclTag::Mask, State::Group) => State::Other,
                (AclTag::Other, State::Other) => State::Done,
                (AclTag::Other, State::Group) if !needs_mask => State::Done,
                _ => return Err(Errno::EINVAL),
            };
        }
        if state == State::Done { Ok(()) } else { Err(Errno::EINVAL) }
    }

    /// `posix_acl_permission`: whether the ACL grants `want` (`MAY_*` bits, `rwx`) to
    /// `uid` (with `in_group` for group membership) on an inode owned by `owner` and
    /// `owner_gid`. In acl(5)'s order: the owner entry for the owner; a named user entry,
    /// limited by the mask; else the owning group and named groups the caller is in, one
    /// of which must grant all of `want` (limited by the mask); else, only if no group
    /// entry matched, the other entry. EACCES when not granted.
    pub fn permission(
        &self,
        uid: u32,
        owner: u32,
        owner_gid: u32,
        in_group: impl Fn(u32) -> bool,
        want: u32,
    ) -> Result<()> {
        let want = (want & RWX as u32) as u16;
        let grants = |perm: u16| if perm & want == want { Ok(()) } else { Err(Errno::EACCES) };
        let masked = |i: usize| {
            // The mask comes after the matching entry; without one the entry stands.
            let mask = self.entries[i + 1..].iter().find(|e| e.tag == AclTag::Mask).map_or(RWX, |e| e.perm);
            grants(self.entries[i].perm & mask)
        };
        let mut found = false;
        for (i, e) in self.entries.iter().enumerate() {
            match e.tag {
                AclTag::UserObj if uid == owner => return grants(e.perm),
                AclTag::User(u) if u == uid => return masked(i),
                AclTag::GroupObj | AclTag::Group(_) => {
                    let gid = if let AclTag::Group(g) = e.tag { g } else { owner_gid };
                    if in_group(gid) {
                        found = true;
                        if e.perm & want == want {
                            return masked(i);
                        }
                    }
                }
                AclTag::Other => return if found { Err(Errno::EACCES) } else { grants(e.perm) },
                _ => {}
            }
        }
        // A valid ACL always ends with the other entry.
        Err(Errno::EIO)
    }

    /// `posix_acl_equiv_mode`: puts the permission bits the ACL implies into `mode`'s
    /// `rwxrwxrwx` (group bits from the mask when there is one) and returns whether the
    /// ACL says more than the mode can (named entries or a mask).
    pub fn equiv_mode(&self, mode: &mut u32) -> bool {
        let mut m = 0u32;
        let mut not_equiv = false;
        for e in &self.entries {
            let p = (e.perm & RWX) as u32;
            match e.tag {
                AclTag::UserObj => m |= p << 6,
                AclTag::GroupObj => m |= p << 3,
                AclTag::Other => m |= p,
                AclTag::Mask => {
                    m = (m & !0o070) | (p << 3);
                    not_equiv = true;
                }
                AclTag::User(_) | AclTag::Group(_) => not_equiv = true,
            }
        }
        *mode = (*mode & !0o777) | m;
        not_equiv
    }

    /// `__posix_acl_chmod_masq`: the owner, other and mask (or, without a mask, owning
    /// group) entries take the new mode's bits.
    pub fn chmod_masq(&mut self, mode: u32) {
        let has_mask = self.entries.iter().any(|e| e.tag == AclTag::Mask);
        for e in &mut self.entries {
            match e.tag {
                AclTag::UserObj => e.perm = ((mode >> 6) & 7) as u16,
                AclTag::Other => e.perm = (mode & 7) as u16,
                AclTag::Mask => e.perm = ((mode >> 3) & 7) as u16,
                AclTag::GroupObj if !has_mask => e.perm = ((mode >> 3) & 7) as u16,
                _ => {}
            }
        }
    }

    /// `posix_acl_create_masq`: a default ACL turned into the access ACL of a node created
    /// with `mode`: the owner, other and mask (or owning group) entries are limited by the
    /// mode, and the mode by them. Returns whether the result says more than the mode.
    pub fn create_masq(&mut self, mode: &mut u32) -> bool {
        let mut m = *mode;
        let mut not_equiv = false;
        let (mut group_obj, mut mask) = (None, None);
        for (i, e) in self.entries.iter_mut().enumerate() {
            match e.tag {
                AclTag::UserObj => {
                    e.perm &= ((m >> 6) & 7) as u16;
                    m &= ((e.perm as u32) << 6) | !0o700;
                }
                AclTag::User(_) | AclTag::Group(_) => not_equiv = true,
                AclTag::GroupObj => group_obj = Some(i),
                AclTag::Other => {
                    e.perm &= (m & 7) as u16;
                    m &= (e.perm as u32) | !0o007;
                }
                AclTag::Mask => {
                    mask = Some(i);
                    not_equiv = true;
                }
            }
        }
        if let Some(i) = mask.or(group_obj) {
            let e = &mut self.entries[i];
            e.perm &= ((m >> 3) & 7) as u16;
            m &= ((e.perm as u32) << 3) | !0o070;
        }
        *mode = m;
        not_equiv
    }
}

/// Sentinel for "not cached".
const NOT_CACHED: *mut Acl = std::ptr::dangling_mut::<Acl>();

/// The state of an inode's ACL slot, as read.
#[derive(Debug)]
pub enum AclState<'g> {
    /// The filesystem has not been asked yet.
    NotCached,
    /// Known: no ACL; mode bits decide.
    None,
    /// The ACL.
    Some(&'g Acl),
}

/// What a slot starts as, given by the filesystem when it makes an inode.
#[derive(Clone, Debug)]
pub enum AclInit {
    /// Unknown: the first permission check asks the filesystem.
    NotCached,
    /// Known (memfs always knows): none, or this ACL.
    Known(Option<Arc<Acl>>),
}

/// An inode's ACL slot.
pub struct AclSlot {
    /// Atomic: null = known none, `NOT_CACHED` sentinel, or a pointer from
    /// `Arc::into_raw` (the slot owns that count; retired through the collector when
    /// replaced). Changed only under the inode lock.
    ptr: AtomicPtr<Acl>,
}

impl AclSlot {
    pub(crate) fn new(init: AclInit) -> AclSlot {
        let p = match init {
            AclInit::NotCached => NOT_CACHED,
            AclInit::Known(None) => std::ptr::null_mut(),
            AclInit::Known(Some(a)) => Arc::into_raw(a).cast_mut(),
        };
        AclSlot { ptr: AtomicPtr::new(p) }
    }

    /// Whether the slot knows the inode has no ACL (one load, nothing dereferenced).
    #[inline]
    pub(crate) fn known_none(&self) -> bool {
        self.ptr.load(Ordering::Acquire).is_null()
    }

    /// Reads the state without a lock, for as long as both `guard` and the slot are
    /// borrowed.
    #[inline]
    pub(crate) fn load<'g>(&'g self, guard: &'g LocalGuard<'_>) -> AclState<'g> {
        let p = guard.protect(&self.ptr, Ordering::Acquire);
        if p.is_null() {
            AclState::None
        } else if p == NOT_CACHED {
            AclState::NotCached
        } else {
            // SAFETY: a real pointer came from `Arc::into_raw` and is retired through the
            // collector only after being unpublished, so it lives as long as `guard`; the
            // slot's own drop is excluded by the borrow of `self`.
            AclState::Some(unsafe { &*p })
        }
    }

    /// The cached answer with a count of its own: `None` when not cached.
    pub(crate) fn get(&self, guard: &LocalGuard<'_>) -> Option<Option<Arc<Acl>>> {
        let p = guard.protect(&self.ptr, Ordering::Acquire);
        if p.is_null() {
            Some(None)
        } else if p == NOT_CACHED {
            None
        } else {
            // SAFETY: `p` came from `Arc::into_raw`; the slot's count is dropped only
            // through the collector after `guard` is released, so it lives while we add
            // ours.
            Some(Some(unsafe { crate::sync::rcu::ArcBorrow::from_raw(p) }.to_arc()))
        }
    }

    /// Publishes a state (`None`: known none). Called under the inode lock.
    pub(crate) fn set(&self, acl: Option<Arc<Acl>>, rcu: &Rcu) {
        let new = match acl {
            Some(a) => Arc::into_raw(a).cast_mut(),
            None => std::ptr::null_mut(),
        };
        let old = self.ptr.swap(new, Ordering::AcqRel);
        if !old.is_null() && old != NOT_CACHED {
            // SAFETY: `old` came from `Arc::into_raw`; we own its count and it is unpublished.
            let old = unsafe { Arc::from_raw(old) };
            rcu.defer_drop_arc(old);
        }
    }
}

impl AclSlot {
    /// Forgets the cached state (Linux's `forget_cached_acl`): the next check asks the
    /// filesystem. Called under the inode lock.
    pub(crate) fn forget(&self, rcu: &Rcu) {
        let old = self.ptr.swap(NOT_CACHED, Ordering::AcqRel);
        if !old.is_null() && old != NOT_CACHED {
            // SAFETY: `old` came from `Arc::into_raw`; we own its count and it is unpublished.
            let old = unsafe { Arc::from_raw(old) };
            rcu.defer_drop_arc(old);
        }
    }
}

impl Drop for AclSlot {
    fn drop(&mut self) {
        let p = *self.ptr.get_mut();
        if !p.is_null() && p != NOT_CACHED {
            // SAFETY: the slot owns the count; the inode is being freed, so no reader.
            drop(unsafe { Arc::from_raw(p) });
        }
    }
}

// ---------------------------------------------------------------- the VFS side

/// The inode's slot for `ty` (`None`: a default ACL of a non-directory, which is never
/// there).
fn slot(inode: &Inode, ty: AclType) -> Option<&AclSlot> {
    match ty {
        AclType::Access => Some(&inode.acl_access),
        AclType::Default => inode.acl_default(),
    }
}

/// Publishes `acl` in the inode's slot. A directory's access ACL changing changes who may
/// search it, which path cache answers depend on (see `SuperBlock::names_change`).
fn publish(inode: &Inode, ty: AclType, acl: Option<Arc<Acl>>) {
    let _change = (ty == AclType::Access && inode.is_dir()).then(|| inode.sb().names_change());
    if let Some(slot) = slot(inode, ty) {
        slot.set(acl, &inode.sb().rcu());
    }
}

/// Whether the inode can carry ACLs: the filesystem supports them (`IS_POSIXACL`) and the
/// inode is not a symlink (Linux's symlinks have no ACL operations).
pub(crate) fn supported(inode: &Inode) -> bool {
    inode.file_type() != FileType::Symlink && inode.sb().fs().posix_acl()
}

/// The general path: asks the filesystem and caches the answer.
///
/// # Preconditions
/// The caller holds the inode lock (which orders this against [`set_posix_acl`] and
/// chmod).
pub(crate) fn load_locked(inode: &Inode, ty: AclType) -> Result<Option<Arc<Acl>>> {
    debug_assert!(inode.lock.is_locked());
    let acl = inode.sb().fs().get_acl(inode, ty)?;
    publish(inode, ty, acl.clone());
    Ok(acl)
}

/// `get_inode_acl`: the cached answer if there is one (no lock), else the locked load.
/// Inlined where called: most inodes are known to have none, one load (no domain
/// reached, no guard pinned); the rest is a call.
#[inline]
pub(crate) fn get_acl(inode: &Inode, ty: AclType) -> Result<Option<Arc<Acl>>> {
    let Some(slot) = slot(inode, ty) else { return Ok(None) };
    if slot.known_none() {
        return Ok(None);
    }
    get_acl_slow(inode, ty, slot)
}

/// [`get_acl`] of an inode that may have one: the cached answer, else the locked load.
#[inline(never)]
fn get_acl_slow(inode: &Inode, ty: AclType, slot: &AclSlot) -> Result<Option<Arc<Acl>>> {
    {
        let rcu = inode.sb().rcu();
        let guard = rcu.pin();
        if let Some(cached) = slot.get(&guard) {
            return Ok(cached);
        }
    }
    let _g = inode.lock.lock();
    load_locked(inode, ty)
}

/// `get_inode_acl` for a caller that holds the inode lock.
fn get_acl_locked(inode: &Inode, ty: AclType) -> Result<Option<Arc<Acl>>> {
    let rcu = inode.sb().rcu();
    let Some(slot) = slot(inode, ty) else { return Ok(None) };
    let cached = slot.get(&rcu.pin());
    match cached {
        Some(c) => Ok(c),
        None => load_locked(inode, ty),
    }
}

/// `vfs_get_acl` as the xattr calls see it: EOPNOTSUPP where ACLs cannot be.
pub(crate) fn vfs_get_acl(inode: &Inode, ty: AclType) -> Result<Option<Arc<Acl>>> {
    if !supported(inode) {
        return Err(Errno::EOPNOTSUPP);
    }
    get_acl(inode, ty)
}

/// `set_posix_acl` + `simple_set_acl`: sets (`Some`) or removes (`None`) an ACL. Checks
/// in Linux's order: not immutable or append-only (EPERM), ACLs supported (EOPNOTSUPP), a default ACL only on a directory
/// (EACCES; removing one elsewhere succeeds), the owner or `CAP_FOWNER` (EPERM), a valid
/// ACL (EINVAL). An access ACL sets the mode's bits (a minimal one is stored as the mode
/// only), and clears setgid unless the caller is in the file's group or has `CAP_FSETID`
/// (as Linux's `posix_acl_update_mode`, also on removal).
pub(crate) fn set_posix_acl(creds: &Credentials, inode: &Inode, ty: AclType, acl: Option<Acl>) -> Result<()> {
    // `vfs_set_acl`'s `may_write_xattr` comes first.
    if inode.is_immutable_or_append() {
        return Err(Errno::EPERM);
    }
    if !supported(inode) {
        return Err(Errno::EOPNOTSUPP);
    }
    if ty == AclType::Default && !inode.is_dir() {
        return if acl.is_some() { Err(Errno::EACCES) } else { Ok(()) };
    }
    if !owner_or_capable(creds, inode) {
        return Err(Errno::EPERM);
    }
    if let Some(a) = &acl {
        a.valid()?;
    }
    let _g = inode.lock.lock();
    if acl.is_none() {
        inode.sb().fs().remove_acl_check(inode, ty)?;
    }
    let old_mode = inode.mode();
    let mut mode = old_mode;
    let acl = match ty {
        AclType::Access => {
            let acl = acl.filter(|a| a.equiv_mode(&mut mode));
            if !creds.in_group(Gid(inode.gid())) && !creds.capable(Capabilities::FSETID) {
                mode &= !S_ISGID;
            }
            acl
        }
        AclType::Default => acl,
    };
    let acl = acl.map(Arc::new);
    let fs = inode.sb().fs();
    fs.set_acl(inode, ty, acl.as_ref())?;
    if mode != old_mode {
        fs.setattr(inode, &SetAttr { mode: Some(mode & !S_IFMT), ..Default::default() })?;
    }
    let now = crate::core::inode::current_time();
    inode.update_locked(|w| {
        w.set_mode(mode);
        w.stamp_ctime(now);
    });
    publish(inode, ty, acl);
    Ok(())
}

/// `posix_acl_chmod`: after a chmod to `mode`, the access ACL (if any) follows it. The
/// mode needs no second update: the ACL was made from it, and chmod already applied the
/// setgid rule.
///
/// # Preconditions
/// The caller holds the inode lock and has set the mode.
pub(crate) fn posix_acl_chmod_locked(inode: &Inode, mode: u32) -> Result<()> {
    debug_assert!(inode.lock.is_locked());
    if !supported(inode) {
        return Ok(());
    }
    let Some(acl) = get_acl_locked(inode, AclType::Access)? else { return Ok(()) };
    let mut acl = Acl::clone(&acl);
    acl.chmod_masq(mode);
    let acl = Arc::new(acl);
    inode.sb().fs().set_acl(inode, AclType::Access, Some(&acl))?;
    publish(inode, AclType::Access, Some(acl));
    Ok(())
}

/// What a new node starts with: its mode and its ACLs.
pub(crate) struct NewAcls {
    /// The mode, with the umask or the inherited ACL applied.
    pub mode: u32,
    /// Its access ACL.
    pub acl: Option<Arc<Acl>>,
    /// Its default ACL (directories).
    pub default_acl: Option<Arc<Acl>>,
}

/// `posix_acl_create`: the mode and ACLs of a node created in `dir` with `mode` (type
/// bits included; setgid rules already applied). Without a default ACL in `dir` the
/// umask applies; with one it does not: the node gets the default ACL masked by the mode
/// as its access ACL (unless that is minimal), and a directory also inherits the default
/// ACL itself. The default ACL is read from the slot without a lock when cached.
pub(crate) fn posix_acl_create(dir: &Inode, mode: u32, umask: u32) -> Result<NewAcls> {
    let plain = |mode: u32| NewAcls { mode: mode & !umask, acl: None, default_acl: None };
    if mode & S_IFMT == FileType::Symlink.mode_bits() || !dir.sb().fs().posix_acl() {
        return Ok(plain(mode));
    }
    let Some(p) = get_acl(dir, AclType::Default)? else { return Ok(plain(mode)) };
    let mut mode = mode;
    let mut acl = Acl::clone(&p);
    let not_equiv = acl.create_masq(&mut mode);
    let is_dir = mode & S_IFMT == FileType::Directory.mode_bits();
    Ok(NewAcls { mode, acl: not_equiv.then(|| Arc::new(acl)), default_acl: is_dir.then_some(p) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(tag: AclTag, perm: u16) -> AclEntry {
        AclEntry::new(tag, perm)
    }

    fn sample() -> Acl {
        Acl::new(vec![
            e(AclTag::UserObj, 7),
            e(AclTag::User(1000), 6),
            e(AclTag::GroupObj, 5),
            e(AclTag::Group(50), 2),
            e(AclTag::Mask, 6),
            e(AclTag::Other, 1),
        ])
    }

    #[test]
    fn xattr_round_trip() {
        let a = sample();
        let bytes = a.to_xattr_vec();
        assert_eq!(bytes.len(), 4 + 6 * 8);
        assert_eq!(&bytes[..4], &[2, 0, 0, 0]);
        assert_eq!(&bytes[4..12], &[1, 0, 7, 0, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(&bytes[12..20], &[2, 0, 6, 0, 0xe8, 3, 0, 0]);
        assert_eq!(Acl::from_xattr(&bytes), Ok(Some(a.clone())));
        assert_eq!(a.to_xattr(&mut [0; 10]), Err(Errno::ERANGE));
        assert_eq!(a.to_xattr(&mut []), Ok(52));
    }

    #[test]
    fn from_xattr_errors() {
        assert_eq!(Acl::from_xattr(&[]), Ok(None));
        assert_eq!(Acl::from_xattr(&[2, 0, 0, 0]), Ok(None));
        assert_eq!(Acl::from_xattr(&[2, 0]), Err(Errno::EINVAL));
        assert_eq!(Acl::from_xattr(&[1, 0, 0, 0, 1, 0, 7, 0, 0, 0, 0, 0]), Err(Errno::EOPNOTSUPP));
        assert_eq!(Acl::from_xattr(&[2, 0, 0, 0, 1, 0, 7, 0, 0, 0, 0]), Err(Errno::EINVAL));
        assert_eq!(Acl::from_xattr(&[2, 0, 0, 0, 3, 0, 7, 0, 0, 0, 0, 0]), Err(Errno::EINVAL));
        assert_eq!(Acl::from_xattr(&[2, 0, 0, 0, 2, 0, 7, 0, 0xff, 0xff, 0xff, 0xff]), Err(Errno::EINVAL));
    }

    #[test]
    fn validity() {
        assert_eq!(sample().valid(), Ok(()));
        let minimal = Acl::new(vec![e(AclTag::UserObj, 6), e(AclTag::GroupObj, 4), e(AclTag::Other, 4)]);
        assert_eq!(minimal.valid(), Ok(()));
        let mut no_mask = sample();
        no_mask.entries.remove(4);
        assert_eq!(no_mask.valid(), Err(Errno::EINVAL));
        let mut unsorted = sample();
        unsorted.entries.swap(1, 2);
        assert_eq!(unsorted.valid(), Err(Errno::EINVAL));
        let mut bad_perm = sample();
        bad_perm.entries[0].perm = 8;
        assert_eq!(bad_perm.valid(), Err(Errno::EINVAL));
        let mut two_owners = sample();
        two_owners.entries.insert(0, e(AclTag::UserObj, 7));
        assert_eq!(two_owners.valid(), Err(Errno::EINVAL));
        // Linux does not check the ids of named entries for order or duplicates.
        let mut dup = sample();
        dup.entries.insert(1, e(AclTag::User(1000), 1));
        assert_eq!(dup.valid(), Ok(()));
        assert_eq!(Acl::new(vec![]).valid(), Err(Errno::EINVAL));
    }

    #[test]
    fn permission_order() {
        let a = sample();
        let none = |_| false;
        // Named user: 6 & mask 6.
        assert_eq!(a.permission(1000, 1, 9, none, 4), Ok(()));
        assert_eq!(a.permission(1000, 1, 9, none, 1), Err(Errno::EACCES));
        // Owning group 5 & mask 6 = 4.
        assert_eq!(a.permission(7, 1, 9, |g| g == 9, 4), Ok(()));
        assert_eq!(a.permission(7, 1, 9, |g| g == 9, 1), Err(Errno::EACCES));
        // A group matched but none grants all: other is not consulted.
        assert_eq!(a.permission(7, 1, 9, |g| g == 50, 1), Err(Errno::EACCES));
        // Each group entry is judged alone: 5 and 2 do not add up to 7.
        assert_eq!(a.permission(7, 1, 9, |g| g == 9 || g == 50, 6), Err(Errno::EACCES));
        assert_eq!(a.permission(7, 1, 9, |g| g == 9 || g == 50, 2), Ok(()));
        // Other.
        assert_eq!(a.permission(7, 1, 9, none, 1), Ok(()));
        assert_eq!(a.permission(7, 1, 9, none, 4), Err(Errno::EACCES));
    }

    #[test]
    fn mode_helpers() {
        let mut mode = 0o100000;
        assert!(sample().equiv_mode(&mut mode));
        assert_eq!(mode, 0o100761);
        let mut a = sample();
        a.chmod_masq(0o640);
        assert_eq!(a.entries.iter().map(|e| e.perm).collect::<Vec<_>>(), [6, 6, 5, 2, 4, 0]);
        let mut a = sample();
        let mut mode = 0o100644;
        assert!(a.create_masq(&mut mode));
        assert_eq!(mode, 0o100640);
        assert_eq!(a.entries.iter().map(|e| e.perm).collect::<Vec<_>>(), [6, 6, 5, 2, 4, 0]);
    }
}
