//! Filesystems: memfs (tmpfs semantics in memory) and hostfs (a host directory, by
//! descriptors). Each sees only the filesystem API (the `FileSystem` trait and the
//! objects it is given), `abi` and `sync`: never the walk or a call.

pub mod hostfs;
pub mod memfs;
