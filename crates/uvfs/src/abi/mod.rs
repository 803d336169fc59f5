//! What crosses the API: errno values, flag newtypes, credentials, the configuration, the
//! stat types and the limits, with Linux's values. Imports only `sync`.

pub mod config;
pub mod cred;
pub mod errno;
pub mod flags;
pub mod limits;
pub mod lock;
pub mod stat;
