//! `--case scale` end to end at a tiny size: every row is measured on both sides (the
//! memory rows through the counting allocator this test installs), nothing is left on
//! the tmpfs. Times are not asserted, only that they were measured.

use std::path::Path;

use uvfs_bench::scale::{ScaleSizes, run, table};

#[global_allocator]
static GLOBAL: uvfs_bench::alloc::Counting<std::alloc::System> = uvfs_bench::alloc::Counting(std::alloc::System);

#[test]
fn every_row_is_measured_and_nothing_is_left() {
    let tmp = tempfile::tempdir_in("/dev/shm").unwrap();
    let s = ScaleSizes { files: 2000, dirs: 10, churn_dirs: 1, big_dir: 3000, big_ops: 100, stats: 1000 };
    let r = run(tmp.path(), s, &|_| {}).unwrap();
    let measures: Vec<&str> = r.rows.iter().map(|r| r.measure.as_str()).collect();
    assert_eq!(r.rows.len(), 13, "{measures:?}");
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
    assert_eq!(measures[10], "cached stat, path depth 64, path cache off", "{measures:?}");
    // The fork (issue 14): measured on both sides, and it allocates (the thawed inodes).
    assert!(measures[5].starts_with("slowest create while filling"), "{measures:?}");
    assert!(measures[11].starts_with("fork a 200-file tree"), "{measures:?}");
    assert!(r.rows[12].uvfs.unwrap() > 0.0 && r.rows[12].kernel.is_some());
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["rows"].as_array().unwrap().len(), 13);
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0, "the host directory was removed");
    assert!(Path::new(tmp.path()).exists());
}
