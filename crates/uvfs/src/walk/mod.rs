//! The path walk: from a start (a directory, the root) and credentials to the dentry a
//! path names, through the lockless and the locked tier. Imports `core`, `abi`, `sync`.

pub(crate) mod namei;
pub(crate) mod pathcache;
