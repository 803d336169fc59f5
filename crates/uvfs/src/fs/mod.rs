//! Filesystems: memfs (tmpfs semantics in memory), hostfs (a host directory, by
//! descriptors), tarfs (a tar archive, read-only) and overlay (a writable layer in memory
//! over read-only layers of the others). Each sees only the filesystem API (re-exported here: the
//! [`FileSystem`] trait and the objects it is handed), `abi` and `sync`: never the walk
//! or a call.

pub mod hostfs;
pub mod memfs;
pub mod overlay;
pub mod tarfs;

// The filesystem API: what a filesystem implements and is handed, for filesystems
// written outside this crate too.
pub use crate::core::acl::{Acl, AclInit, AclType};
pub use crate::core::dentry::Dentry;
pub use crate::core::inode::{AttrWriter, Attrs, Inode, NewInode};
pub use crate::core::superblock::{CreateArgs, DirEntry, FileSystem, RenameReq, SetAttr, SuperBlock, WriteAt};
pub use crate::core::xattr::XattrFlags;
