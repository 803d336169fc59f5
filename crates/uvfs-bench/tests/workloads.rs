//! `uvfs bench --case workloads` on the tmpfs target with a tiny tree: every workload
//! runs with the real programs and passes its check; a wrong result is reported as a
//! failure, never as a time. Needs tar, find, grep, git, make and cc (scripts/setup.sh)
//! and a tmpfs at /dev/shm. Times are never asserted.

#[path = "../../uvfs/tests/scratch/mod.rs"]
mod scratch;

use std::path::PathBuf;

use clap::Parser;
use uvfs_bench::BenchArgs;
use uvfs_bench::workloads::cleanup::ScratchDir;
use uvfs_bench::workloads::steps::{self, Outcome, Source, Workload};
use uvfs_bench::workloads::targets::{Env, Site, Target};
use uvfs_bench::workloads::tree::{CBuild, SEED, TreeSpec};
use uvfs_bench::workloads::{self, bigfile::BigFile};

#[derive(Parser, Debug)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

fn args(extra: &[&str]) -> BenchArgs {
    // The chart is rendered and written, into nothing: a test leaves no file behind.
    let base = ["bench", "--case", "workloads", "--quick", "--json", "--chart", "/dev/null"];
    Cli::try_parse_from(base.iter().chain(extra.iter()).copied()).unwrap().bench
}

fn require_tools() {
    let missing = workloads::missing_tools(workloads::TOOLS);
    assert!(missing.is_empty(), "missing programs {missing:?}: run scripts/setup.sh");
}

/// Scratch directories named `name` left in /dev/shm or /var/tmp.
fn scratch_left(name: &str) -> Vec<PathBuf> {
    ["/dev/shm", "/var/tmp"].iter().map(|b| PathBuf::from(b).join(name)).filter(|p| p.exists()).collect()
}

#[test]
fn quick_run_on_tmpfs_passes_every_check() {
    require_tools();
    let a = args(&["--target", "tmpfs,hostdir", "--tree-files", "150", "--big-file-mib", "4", "--samples", "1"]);
    let o = workloads::options(&a, 2, uvfs_bench::backend::check_tmpfs, workloads::missing_tools).unwrap();
    assert_eq!(o.source, Source::Generated(TreeSpec::with_files(150)));
    let report = workloads::run(&o).unwrap();
    let failed: Vec<_> = report.workloads.iter().flat_map(|w| w.failed.iter().map(move |f| (w.workload, f))).collect();
    assert!(failed.is_empty(), "{failed:#?}");
    assert_eq!(report.workloads.len(), Workload::ALL.len());
    for w in &report.workloads {
        let tmpfs = w.results.iter().find(|r| r.target == "tmpfs");
        if w.workload == "find-cold" {
            assert!(tmpfs.is_none());
            assert_eq!(w.not_applicable.len(), 1, "tmpfs has no cold caches");
        } else {
            let r = tmpfs.unwrap_or_else(|| panic!("{}: no tmpfs result", w.workload));
            assert_eq!(r.n, 1);
            assert_eq!(r.client_cpu_seconds.len(), 1);
            assert!(r.server_cpu_seconds.is_none(), "no server behind tmpfs");
        }
        // hostdir is compared with tmpfs wherever both ran.
        if let Some(h) = w.results.iter().find(|r| r.target == "hostdir")
            && tmpfs.is_some()
        {
            assert!(h.vs_tmpfs.is_some(), "{}", w.workload);
        }
    }
    let t = &report.config.tree;
    assert_eq!(t.source, "generated");
    // The generated files plus the C project (Makefile, main.c, common.h, 2 per unit).
    assert_eq!(t.files, 150 + 3 + 2 * report.config.c_units);
    assert!(t.symlinks >= 2);
    // The only run of this test binary: its scratch directories are numbered 0.
    assert_eq!(scratch_left(&format!("uvfs-workloads.{}.0", std::process::id())), Vec::<PathBuf>::new());
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["kind"], "workloads");
    assert_eq!(json["workloads"][0]["workload"], "untar");
}

/// A round on a tmpfs site whose expectations were tampered with: the check that
/// catches it fails the workload, and the rest of the round does not run.
#[test]
fn a_wrong_result_is_a_failure_not_a_time() {
    require_tools();
    let pid = std::process::id();
    let env = Env {
        tmp: ScratchDir::create(scratch::scratch_in("/dev/shm").join(format!("uvfs-workloads.{pid}.t1"))).unwrap(),
        host: ScratchDir::create(scratch::scratch_in("/var/tmp").join(format!("uvfs-workloads.{pid}.t1"))).unwrap(),
        uvfs_bin: PathBuf::from("/nonexistent"),
        mount_opts: vec![],
        can_drop: false,
        counts: false,
    };
    let spec = TreeSpec::with_files(60);
    let cb = CBuild { units: 4, seed: SEED };
    let mut prep = steps::prepare(&env, Source::Generated(spec), cb, 2, BigFile::new(2, 10, 1), &|_| {}).unwrap();
    let tmpfs = Target::builtin("tmpfs").unwrap();
    let run = |prep: &steps::Prepared, round| {
        let mut site = Site::open(&tmpfs, &env, round).unwrap();
        let out = steps::run_round(&mut site, &env, "n/a", prep, &mut |_| {});
        site.close().unwrap();
        out
    };
    let last = |out: &[(Workload, Outcome)]| out.last().cloned().unwrap();

    // As staged: every workload measured (find-cold n/a).
    let out = run(&prep, 1);
    assert_eq!(out.len(), Workload::ALL.len());
    assert!(out.iter().all(|(_, o)| !matches!(o, Outcome::Failed(_))), "{out:#?}");

    // One mode bit of one file.
    prep.manifest.entries[5].mode ^= 0o100;
    let (w, o) = last(&run(&prep, 2));
    assert_eq!(w, Workload::Untar);
    assert!(
        matches!(&o, Outcome::Failed(e) if e.contains("the extracted tree differs") && e.contains("mode")),
        "{o:?}"
    );
    prep.manifest.entries[5].mode ^= 0o100;

    // Another commit than the stage's.
    let head = std::mem::replace(&mut prep.git_head, "0".repeat(40));
    let out = run(&prep, 3);
    assert_eq!(out.len(), 6, "the round ends at git-commit");
    let (w, o) = last(&out);
    assert_eq!(w, Workload::GitCommit);
    assert!(matches!(&o, Outcome::Failed(e) if e.contains(&head)), "{o:?}");
    prep.git_head = head;

    // The program must print the predicted checksum.
    prep.cbuild.seed ^= 1;
    let (w, o) = last(&run(&prep, 4));
    assert_eq!(w, Workload::Make);
    assert!(matches!(&o, Outcome::Failed(e) if e.contains("the program printed")), "{o:?}");
    drop(prep);
    drop(env);
    assert_eq!(scratch_left(&format!("uvfs-workloads.{pid}.t1")), Vec::<PathBuf>::new());
}
