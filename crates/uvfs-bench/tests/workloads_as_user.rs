//! `uvfs bench --case workloads --as-user UID`: every program runs as that user and passes
//! its check (the extracted tree is that user's, which the round checks), on the tmpfs
//! and host-directory targets with a tiny tree. A file of its own: a test binary's
//! scratch directories are numbered by its runs. Times are never asserted.

use clap::Parser;
use uvfs_bench::BenchArgs;
use uvfs_bench::workloads::{self, steps::Workload};

#[derive(Parser, Debug)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

#[test]
fn every_workload_passes_as_another_user() {
    let missing = workloads::missing_tools(workloads::TOOLS);
    assert!(missing.is_empty(), "missing programs {missing:?}: run scripts/setup.sh");
    // SAFETY: no preconditions.
    assert!(unsafe { libc::geteuid() } == 0, "--as-user needs root: run the tests as root");
    let a = [
        "bench",
        "--case",
        "workloads",
        "--quick",
        "--json",
        "--chart",
        "/dev/null",
        "--target",
        "tmpfs,hostdir",
        "--tree-files",
        "120",
        "--big-file-mib",
        "4",
        "--samples",
        "1",
        "--as-user",
        "4321",
    ];
    let args = Cli::try_parse_from(a).unwrap().bench;
    let o = workloads::options(&args, 2, uvfs_bench::backend::check_tmpfs, workloads::missing_tools).unwrap();
    assert_eq!(o.as_user, Some(4321));
    let report = workloads::run(&o).unwrap();
    let failed: Vec<_> = report.workloads.iter().flat_map(|w| w.failed.iter().map(move |f| (w.workload, f))).collect();
    assert!(failed.is_empty(), "{failed:#?}");
    assert_eq!(report.workloads.len(), Workload::ALL.len());
    for w in &report.workloads {
        assert!(w.results.iter().any(|r| r.target == "hostdir"), "{}: no hostdir result", w.workload);
    }
    assert_eq!(report.config.as_user, Some(4321));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["config"]["as_user"], 4321);
}
