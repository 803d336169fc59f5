//! `/dev/fuse` opened to every user for a test's length, as a desktop's udev rule leaves
//! it (this project's machine has it 0600): what the rootless paths need. Shared by the
//! tests that mount as a user.

use std::os::unix::fs::PermissionsExt;

/// Makes `/dev/fuse` usable by everyone while alive (mode 0666), and puts the old mode
/// back.
pub struct FuseOpen(u32);

impl FuseOpen {
    pub fn new() -> FuseOpen {
        let old = std::fs::metadata("/dev/fuse").expect("/dev/fuse").permissions().mode() & 0o7777;
        std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(0o666)).expect("chmod /dev/fuse: root");
        FuseOpen(old)
    }
}

impl Drop for FuseOpen {
    fn drop(&mut self) {
        let _ = std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(self.0));
    }
}
