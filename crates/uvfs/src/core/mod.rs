//! The objects of the VFS and what keeps them consistent: dentries and the dcache,
//! inodes and the inode cache, superblocks (the filesystem API), mounts and the mount
//! namespace, open files and descriptor tables, paths, permissions and ACLs, xattr names,
//! notification. Imports `abi` and `sync`, never the walk, a filesystem or a call.

pub(crate) mod acl;
pub(crate) mod attr;
pub(crate) mod dcache;
pub(crate) mod dentry;
pub(crate) mod dhash;
pub(crate) mod fdtable;
pub(crate) mod file;
pub(crate) mod fsnotify;
pub(crate) mod icache;
pub(crate) mod inode;
pub(crate) mod inotify;
pub(crate) mod instance;
pub(crate) mod locks;
pub(crate) mod mount;
pub(crate) mod namespace;
pub(crate) mod offset;
pub(crate) mod path;
pub(crate) mod permission;
pub(crate) mod pipe;
pub(crate) mod superblock;
pub(crate) mod xattr;
