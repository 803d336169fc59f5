//! `--case scale` end to end at a tiny size: every row is measured on both sides (the
//! memory rows through the counting allocator this test installs), nothing is left on
//! the tmpfs. Times are not asserted, only that they were measured.

#[path = "../../uvfs/tests/scratch/mod.rs"]
mod scratch;

use std::path::Path;

use uvfs_bench::scale::{ScaleSizes, run, table};

#[global_allocator]
static GLOBAL: uvfs_bench::alloc::Counting<std::alloc::System> = uvfs_bench::alloc::Counting(std::alloc::System);

#[test]
fn every_row_is_measured_and_nothing_is_left() {
    let tmp = tempfile::tempdir_in(scratch::scratch_in("/dev/shm")).unwrap();
    let s = ScaleSizes { files: 2000, dirs: 10, churn_dirs: 1, big_dir: 3000, big_ops: 100, stats: 1000 };
    let r = run(tmp.path(), s, &|_| {}).unwrap();
    let measures: Vec<&str> = r.rows.iter().map(|r| r.measure.as_str()).collect();
    assert_eq!(r.rows.len(), 17, "{measures:?}");
    for row in &r.rows {
        let u = row.uvfs.unwrap_or_else(|| panic!("uvfs not measured: {row:?}"));
        assert!(u > 0.0, "{row:?}");
        if row.unit != "allocs/op" {
            assert!(row.kernel.is_some(), "{row:?}");
        }
    }
    // An empty file costs uvfs at least its dentry and inode, and creating one allocates.
    let mem = r.rows[0].uvfs.unwrap();
    assert!(mem >= 128.0, "bytes per empty file: {mem}");
    assert!(r.rows[2].uvfs.unwrap() >= 1.0, "allocations per create: {:?}", r.rows[2]);
    assert!(table(&r).contains("cached stat, path depth 64"));
    assert_eq!(measures[12], "cached stat, path depth 64, path cache off", "{measures:?}");
    assert_eq!(measures[13..15], ["create + close, path depth 8", "unlink, path depth 8"], "{measures:?}");
    // The fork (issue 14): measured on both sides, and it allocates (the thawed inodes).
    assert!(measures[7].starts_with("slowest create while filling"), "{measures:?}");
    assert!(measures[15].starts_with("fork a 200-file tree"), "{measures:?}");
    assert!(r.rows[16].uvfs.unwrap() > 0.0 && r.rows[16].kernel.is_some());
    // The big directory's creates against those in 1000-entry directories: the ratio row
    // is the two rows above it divided, on both sides.
    assert_eq!(
        measures[4..7],
        [
            "create in a 3000-entry directory",
            "create in a 1000-entry directory",
            "create: 3000-entry / 1000-entry directory"
        ],
        "{measures:?}"
    );
    for side in [|r: &uvfs_bench::scale::Row| r.uvfs.unwrap(), |r: &uvfs_bench::scale::Row| r.kernel.unwrap()] {
        let (big, small, ratio) = (side(&r.rows[4]), side(&r.rows[5]), side(&r.rows[6]));
        assert!((ratio - big / small).abs() < 1e-9, "{:?}", &r.rows[4..7]);
    }
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["rows"].as_array().unwrap().len(), 17);
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0, "the host directory was removed");
    assert!(Path::new(tmp.path()).exists());
}
