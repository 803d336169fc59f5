//! Extended-attribute names: their namespaces (`user.`, `trusted.`, `security.`,
//! `system.`), the checks of a name, and who may read or change which (`xattr_permission`,
//! with the `security.*` hooks of `security/commoncap.c`). Mirrors the checking half of
//! Linux's `fs/xattr.c`, but: the calls are in `syscalls/xattr.rs`, and the ACL names go to
//! `core/acl.rs` before a filesystem sees them.

use bitflags::bitflags;

use crate::abi::config::FastPaths;
use crate::abi::cred::{Capabilities, Credentials};
use crate::abi::errno::{Errno, Result};
use crate::abi::limits::XATTR_NAME_MAX;
use crate::abi::stat::{FileType, S_ISVTX};
use crate::core::inode::Inode;
use crate::core::permission::{MAY_WRITE, generic_permission, owner_or_capable};
use crate::sync::rcu::LocalGuard;

bitflags! {
    /// `setxattr(2)` flags.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct XattrFlags: u32 {
        /// `XATTR_CREATE`: fail with EEXIST if the attribute exists.
        const CREATE = 1;
        /// `XATTR_REPLACE`: fail with ENODATA if it does not.
        const REPLACE = 2;
    }
}

const SECURITY_PREFIX: &[u8] = b"security.";
const SYSTEM_PREFIX: &[u8] = b"system.";
pub(crate) const TRUSTED_PREFIX: &[u8] = b"trusted.";
const USER_PREFIX: &[u8] = b"user.";

/// The xattr of a file capability (`XATTR_NAME_CAPS`), which a write or chown removes
/// (`crate::core::attr`).
pub(crate) const XATTR_NAME_CAPS: &[u8] = b"security.capability";

/// The namespace a name is in, by prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Namespace {
    Security,
    System,
    Trusted,
    User,
    /// No known prefix: permission as for `user.*`, then EOPNOTSUPP.
    Unknown,
}

fn namespace(name: &[u8]) -> Namespace {
    if name.starts_with(SECURITY_PREFIX) {
        Namespace::Security
    } else if name.starts_with(SYSTEM_PREFIX) {
        Namespace::System
    } else if name.starts_with(TRUSTED_PREFIX) {
        Namespace::Trusted
    } else if name.starts_with(USER_PREFIX) {
        Namespace::User
    } else {
        Namespace::Unknown
    }
}

/// `import_xattr_name`: ERANGE for an empty name or one over [`XATTR_NAME_MAX`]. A C
/// caller cannot pass a NUL inside a name; uvfs refuses one (EINVAL).
pub(crate) fn import_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.len() > XATTR_NAME_MAX {
        return Err(Errno::ERANGE);
    }
    if name.contains(&0) {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// `xattr_resolve_name` over the namespaces a filesystem stores (tmpfs's handlers):
/// EOPNOTSUPP outside them, EINVAL for a bare prefix.
pub(crate) fn resolve_name(name: &[u8]) -> Result<()> {
    for prefix in [SECURITY_PREFIX, TRUSTED_PREFIX, USER_PREFIX] {
        if name.starts_with(prefix) {
            return if name.len() == prefix.len() { Err(Errno::EINVAL) } else { Ok(()) };
        }
    }
    Err(Errno::EOPNOTSUPP)
}

/// `xattr_permission`: may `creds` read (`MAY_READ`) or change (`MAY_WRITE`) the xattr
/// `name` of `inode`?
pub fn xattr_permission(
    creds: &Credentials,
    inode: &Inode,
    name: &[u8],
    mask: u32,
    fast: FastPaths,
    guard: &LocalGuard<'_>,
) -> Result<()> {
    let write = mask & MAY_WRITE != 0;
    // `may_write_xattr`: no xattr of an immutable or append-only inode changes.
    if write && inode.is_immutable_or_append() {
        return Err(Errno::EPERM);
    }
    // Read: "not there"; write: "not allowed".
    let refuse = if write { Errno::EPERM } else { Errno::ENODATA };
    match namespace(name) {
        // Left to the filesystem and the security hooks.
        Namespace::Security | Namespace::System => return Ok(()),
        Namespace::Trusted => return if creds.capable(Capabilities::SYS_ADMIN) { Ok(()) } else { Err(refuse) },
        Namespace::User => match inode.file_type() {
            FileType::Regular => {}
            FileType::Directory => {
                if inode.mode() & S_ISVTX != 0 && write && !owner_or_capable(creds, inode) {
                    return Err(Errno::EPERM);
                }
            }
            _ => return Err(refuse),
        },
        Namespace::Unknown => {}
    }
    generic_permission(creds, inode, mask, fast, guard)
}

/// The capability LSM's `inode_setxattr`/`inode_removexattr`: `security.*` changes need
/// `CAP_SYS_ADMIN`.
pub(crate) fn security_may_change(creds: &Credentials, name: &[u8]) -> Result<()> {
    if namespace(name) == Namespace::Security && !creds.capable(Capabilities::SYS_ADMIN) {
        return Err(Errno::EPERM);
    }
    Ok(())
}
