//! `uvfs bench` options and their checks.
//!
//! Syntax errors (a non-numeric or out-of-range number, an unknown flag) are clap's and
//! exit with status 2. Semantic errors found here (an unknown case or target, a target
//! or case that cannot run although it was asked for by name, an unwritable chart path)
//! are one line on stderr and also exit 2. A target that cannot run and was *not* named
//! is reported as skipped and the rest still runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;

use crate::cases::{self, Case, Sizes};
use crate::target::{self, Target, TargetKind};

/// Help text appended to `uvfs bench --help`.
pub const AFTER_HELP: &str = "\
Cases: openneg, readlink1, stat, open1, stat2, write1, messaging, fstree (alone: --case fstree),
  workloads (alone: --case workloads), scale (alone: --case scale).
Targets: kernel, uvfs, fuse (root), uvfs-no-lockless, uvfs-no-failed-open,
  uvfs-no-symlink-cache, uvfs-no-acl, uvfs-no-notify, uvfs-no-inode-hash, uvfs-no-path-cache.
By default each case runs on kernel, uvfs and the uvfs-no-* switches relevant to it.
fstree always runs kernel, uvfs, uvfs-no-inode-hash (hostfs trusting its caches) and
  uvfs-revalidate (hostfs checking cached names against the host, its default).

Workloads (--case workloads): real programs (tar, find, grep, git, make, rm) and a big file
  on a generated source tree (or --tree DIR), timed on the targets tmpfs, hostdir,
  uvfs-memfs, uvfs-hostfs, uvfs-hostfs-unchanged (each `uvfs mount` a separate process)
  and any --target-cmd; --samples sets the rounds (3, --quick: 2), --threads make -j.
  Measure a FUSE lever:  uvfs bench --case workloads --quick --mount-opt=--attr-timeout=60
  Compare a peer server: --target-cmd bindfs='bindfs -f --no-allow-other {src} {mnt}'

Profiling one case: build with `cargo build --release -p uvfs-cli`, then
  perf record -g -- target/release/uvfs bench --case stat --target uvfs --seconds 2
  perf report
(--seconds lengthens every sample; --samples adds samples.)";

/// `uvfs bench`: reproduce the seeds' measurements against the host kernel and uvfs.
#[derive(Args, Clone, Debug, Default)]
#[command(after_help = AFTER_HELP)]
pub struct BenchArgs {
    /// Case to run (repeatable or comma separated; default: all)
    #[arg(long = "case", value_name = "NAME", value_delimiter = ',')]
    pub cases: Vec<String>,

    /// Target to run (repeatable or comma separated; default: kernel, uvfs and the
    /// relevant uvfs-no-* switches)
    #[arg(long = "target", value_name = "NAME", value_delimiter = ',')]
    pub targets: Vec<String>,

    /// Largest thread count N (readlink1/write1 run 1 and N, stat2 runs 1..=N)
    /// [default: available cores]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub threads: Option<u32>,

    /// Length of one sample of the ops/s cases, in seconds [default: 1, --quick: 0.25]
    #[arg(long, value_name = "S", value_parser = parse_seconds)]
    pub seconds: Option<f64>,

    /// Samples kept per run; for wall-time cases, timed iterations
    /// [default: 5, --quick: 8]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub samples: Option<u32>,

    /// Warm-up samples (iterations) dropped before the kept ones [default: 2, --quick: 1]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub warmup: Option<u32>,

    /// Short run: 0.25 s samples, 1 warm-up + 8 samples, stat2 at 1, 2, 4, ..., N threads,
    /// one messaging group of 100 loops (full: 4 groups of 250); about 1.5 minutes on 2 cores
    #[arg(long)]
    pub quick: bool,

    /// Print the results as JSON on stdout (no table, no progress bar)
    #[arg(long)]
    pub json: bool,

    /// Where to write the SVG chart [default: bench-results/uvfs-bench.svg;
    /// --case workloads: bench-results/uvfs-workloads.svg]
    #[arg(long, value_name = "PATH")]
    pub chart: Option<PathBuf>,

    /// A directory on a tmpfs for the kernel target (and the workloads' tmpfs target)
    #[arg(long, value_name = "DIR", default_value = "/dev/shm")]
    pub tmpfs: PathBuf,

    /// Workloads: run on a copy of this directory tree instead of a generated one (its
    /// top-level .git is left out)
    #[arg(long, value_name = "DIR")]
    pub tree: Option<PathBuf>,

    /// Workloads: a directory on the host disk for the hostdir and uvfs-hostfs targets
    /// [default: /var/tmp]
    #[arg(long, value_name = "DIR")]
    pub hostdir: Option<PathBuf>,

    /// Workloads: one more argument for every `uvfs mount` (repeatable), e.g.
    /// --mount-opt=--attr-timeout=60
    #[arg(long = "mount-opt", value_name = "ARG", allow_hyphen_values = true)]
    pub mount_opts: Vec<String>,

    /// Workloads: a peer FUSE server as one more target (repeatable): NAME='CMD', where
    /// CMD mounts on {mnt} and stays in the foreground; with {src} it serves that fresh
    /// host directory
    #[arg(long = "target-cmd", value_name = "NAME=CMD")]
    pub target_cmds: Vec<String>,

    /// Workloads: run the programs as this uid (its gid the same number, no supplementary
    /// groups) instead of as the caller: what a user other than root gets (needs root;
    /// the big-file rows stay the bench's own calls)
    #[arg(long, value_name = "UID", value_parser = clap::value_parser!(u32).range(1..))]
    pub as_user: Option<u32>,

    /// Workloads: the `uvfs` binary the mount targets run [default: this program]
    #[arg(long, value_name = "PATH")]
    pub uvfs_bin: Option<PathBuf>,

    /// Scale: empty files of the memory row (spread over a thousandth as many directories)
    /// [default: 1000000, --quick: 100000]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub scale_files: Option<u64>,

    /// Scale: entries of the big directory [default: 1000000, --quick: 100000]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub scale_big_dir: Option<u64>,

    /// Workloads (tests): files of the generated tree
    #[arg(long, hide = true, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub tree_files: Option<u64>,

    /// Workloads (tests): MiB of the big file
    #[arg(long, hide = true, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub big_file_mib: Option<u64>,
}

/// The chart path of the seeds' cases when `--chart` is not given.
pub const DEFAULT_CHART: &str = "bench-results/uvfs-bench.svg";

fn parse_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!("{s} is not a positive number of seconds"));
    }
    if !(0.01..=3600.0).contains(&v) {
        return Err(format!("{s} is outside 0.01..=3600 seconds"));
    }
    Ok(v)
}

/// A semantic error in the options: printed as one line, exit status 2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Resolved settings of a run.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `--quick`.
    pub quick: bool,
    /// Sample interval.
    pub interval: Duration,
    /// Kept samples.
    pub samples: usize,
    /// Dropped warm-up samples.
    pub warmup: usize,
    /// Sizes the cases need.
    pub sizes: Sizes,
    /// `--json`.
    pub json: bool,
    /// Chart path.
    pub chart: PathBuf,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Cases, in run order.
    pub cases: Vec<&'static Case>,
    /// Targets named with `--target` (they must run), or `None` for the defaults.
    pub targets: Option<Vec<&'static Target>>,
    /// The tmpfs directory for the kernel target, or why there is none.
    pub kernel_dir: Result<PathBuf, String>,
    /// Settings.
    pub settings: Settings,
}

/// Checks the options and builds the plan. `tmpfs_check` tells whether a directory is
/// usable for the kernel target (a parameter so tests need no particular machine).
pub fn plan(
    args: &BenchArgs,
    cores: usize,
    tmpfs_check: impl Fn(&Path) -> Result<(), String>,
) -> Result<Plan, UsageError> {
    let mut case_list: Vec<&'static Case> = Vec::new();
    for name in &args.cases {
        let c = cases::case(name.trim())
            .ok_or_else(|| UsageError(format!("unknown case '{name}' (known: {})", cases::case_names())))?;
        if let Some(why) = c.unavailable {
            return Err(UsageError(format!("case {} cannot run: {why}", c.name)));
        }
        if !case_list.iter().any(|x| x.name == c.name) {
            case_list.push(c);
        }
    }
    if case_list.is_empty() {
        case_list = cases::CASES.iter().collect();
    } else {
        // Run order is the table order, whatever the order on the command line.
        case_list.sort_by_key(|c| cases::CASES.iter().position(|x| x.name == c.name));
    }

    let kernel_dir = tmpfs_check(&args.tmpfs).map(|()| args.tmpfs.clone());
    let targets = if args.targets.is_empty() {
        None
    } else {
        let mut v: Vec<&'static Target> = Vec::new();
        for name in &args.targets {
            let t = target::target(name.trim())
                .ok_or_else(|| UsageError(format!("unknown target '{name}' (known: {})", target::target_names())))?;
            match t.kind {
                TargetKind::Fuse => {
                    if !crate::backend::running_as_root() || !std::path::Path::new("/dev/fuse").exists() {
                        return Err(UsageError(
                            "target fuse cannot run: it mounts through FUSE, which needs root and /dev/fuse".into(),
                        ));
                    }
                }
                TargetKind::Kernel => {
                    if let Err(why) = &kernel_dir {
                        return Err(UsageError(format!("target kernel cannot run: {why}")));
                    }
                }
                TargetKind::Uvfs { .. } => {}
            }
            if !v.iter().any(|x| x.name == t.name) {
                v.push(t);
            }
        }
        v.sort_by_key(|t| target::TARGETS.iter().position(|x| x.name == t.name));
        Some(v)
    };

    let quick = args.quick;
    let threads = args.threads.map(|n| n as usize).unwrap_or(cores.max(1));
    let interval = Duration::from_secs_f64(args.seconds.unwrap_or(if quick { 0.25 } else { 1.0 }));
    let samples = args.samples.map(|n| n as usize).unwrap_or(if quick { 8 } else { 5 });
    let warmup = args.warmup.map(|n| n as usize).unwrap_or(if quick { 1 } else { 2 });
    let sizes = Sizes {
        threads,
        short_series: quick,
        msg_groups: if quick { 1 } else { 4 },
        msg_loops: if quick { 100 } else { 250 },
    };
    let chart = args.chart.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_CHART));
    check_chart_path(&chart)?;
    Ok(Plan {
        cases: case_list,
        targets,
        kernel_dir,
        settings: Settings { quick, interval, samples, warmup, sizes, json: args.json, chart },
    })
}

/// Fails early (before minutes of measuring) when the chart cannot be written.
pub fn check_chart_path(path: &Path) -> Result<(), UsageError> {
    let bad = |e: std::io::Error| UsageError(format!("cannot write chart {}: {e}", path.display()));
    if path.as_os_str().is_empty() || path.is_dir() {
        return Err(UsageError(format!("chart path '{}' is not a file name", path.display())));
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(bad)?;
    }
    std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(bad)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).map(|c| c.bench)
    }

    /// A chart path the checks accept and that leaves no file behind.
    fn chart() -> String {
        "/dev/null".into()
    }

    fn ok_tmpfs(_: &Path) -> Result<(), String> {
        Ok(())
    }

    fn no_tmpfs(p: &Path) -> Result<(), String> {
        Err(format!("{} is not a tmpfs", p.display()))
    }

    #[test]
    fn defaults_and_quick() {
        let a = parse(&["--chart", &chart()]).unwrap();
        let p = plan(&a, 4, ok_tmpfs).unwrap();
        assert_eq!(p.cases.len(), cases::CASES.len());
        assert!(p.targets.is_none());
        let s = &p.settings;
        assert_eq!((s.interval, s.samples, s.warmup), (Duration::from_secs(1), 5, 2));
        assert_eq!(s.sizes.threads, 4);
        assert!(s.samples >= crate::stats::MIN_SAMPLES);

        let a = parse(&["--quick", "--chart", &chart()]).unwrap();
        let s = plan(&a, 2, ok_tmpfs).unwrap().settings;
        assert_eq!((s.interval, s.samples, s.warmup), (Duration::from_millis(250), 8, 1));
        assert!(s.sizes.short_series);
        assert_eq!(s.sizes.msg_groups, 1);
        assert!(s.samples >= crate::stats::MIN_SAMPLES);

        let a = parse(&[
            "--quick",
            "--seconds",
            "0.5",
            "--samples",
            "9",
            "--warmup",
            "0",
            "--threads",
            "3",
            "--chart",
            &chart(),
        ])
        .unwrap();
        let s = plan(&a, 2, ok_tmpfs).unwrap().settings;
        assert_eq!((s.interval, s.samples, s.warmup, s.sizes.threads), (Duration::from_millis(500), 9, 0, 3));
    }

    #[test]
    fn bad_numbers_are_clap_errors() {
        for args in [
            &["--threads", "0"][..],
            &["--threads", "-1"],
            &["--threads", "many"],
            &["--seconds", "0"],
            &["--seconds", "-2"],
            &["--seconds", "soon"],
            &["--seconds", "NaN"],
            &["--samples", "0"],
            &["--warmup", "x"],
        ] {
            let e = parse(args).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{args:?}");
        }
    }

    #[test]
    fn names_are_checked() {
        let a = parse(&["--case", "nonexistent", "--chart", &chart()]).unwrap();
        let e = plan(&a, 2, ok_tmpfs).unwrap_err();
        assert!(e.0.starts_with("unknown case 'nonexistent'"), "{e}");
        assert!(!e.0.contains('\n'));

        let a = parse(&["--target", "zfs", "--chart", &chart()]).unwrap();
        assert!(plan(&a, 2, ok_tmpfs).unwrap_err().0.starts_with("unknown target 'zfs'"));

        let a = parse(&["--case", "fstree", "--chart", &chart()]).unwrap();
        assert!(plan(&a, 2, ok_tmpfs).unwrap_err().0.contains("runs alone"));

        // The fuse target needs root and /dev/fuse; without them naming it is an error.
        let a = parse(&["--target", "fuse", "--chart", &chart()]).unwrap();
        let fuse_ok = crate::backend::running_as_root() && std::path::Path::new("/dev/fuse").exists();
        match plan(&a, 2, ok_tmpfs) {
            Ok(_) => assert!(fuse_ok),
            Err(e) => assert!(!fuse_ok && e.0.contains("FUSE"), "{e}"),
        }
    }

    #[test]
    fn missing_tmpfs_is_an_error_only_when_kernel_is_named() {
        let a = parse(&["--target", "kernel", "--tmpfs", "/nope", "--chart", &chart()]).unwrap();
        let e = plan(&a, 2, no_tmpfs).unwrap_err();
        assert_eq!(e.0, "target kernel cannot run: /nope is not a tmpfs");

        let a = parse(&["--tmpfs", "/nope", "--chart", &chart()]).unwrap();
        let p = plan(&a, 2, no_tmpfs).unwrap();
        assert_eq!(p.kernel_dir, Err("/nope is not a tmpfs".to_string()));
    }

    #[test]
    fn cases_and_targets_are_deduplicated_and_ordered() {
        let a =
            parse(&["--case", "stat2,openneg", "--case", "openneg", "--target", "uvfs,kernel", "--chart", &chart()])
                .unwrap();
        let p = plan(&a, 2, ok_tmpfs).unwrap();
        assert_eq!(p.cases.iter().map(|c| c.name).collect::<Vec<_>>(), ["openneg", "stat2"]);
        assert_eq!(p.targets.unwrap().iter().map(|t| t.name).collect::<Vec<_>>(), ["kernel", "uvfs"]);
    }

    #[test]
    fn unwritable_chart_is_refused_up_front() {
        let a = parse(&["--chart", "/proc/uvfs-bench/x.svg"]).unwrap();
        let e = plan(&a, 2, ok_tmpfs).unwrap_err();
        assert!(e.0.starts_with("cannot write chart /proc/uvfs-bench/x.svg"), "{e}");
    }

    #[test]
    fn help_names_every_case_and_target() {
        let help = Cli::command().render_long_help().to_string();
        for c in cases::CASES {
            assert!(help.contains(c.name), "{}", c.name);
        }
        for t in target::TARGETS {
            assert!(help.contains(t.name), "{}", t.name);
        }
        assert!(help.contains("perf record -g -- target/release/uvfs bench --case stat --target uvfs"));
    }
}
