//! Results of `uvfs bench --case workloads`: the data model (`--json`) and the tables.
//!
//! JSON (`schema: 1`, `kind: "workloads"`):
//! ```text
//! { "schema": 1, "kind": "workloads",
//!   "machine": { "cores", "kernel", "cpu", "uvfs_version" },
//!   "config":  { "quick", "rounds", "tree": { "source", "seed", "dirs", "files", "symlinks", "bytes" },
//!                "c_units", "make_jobs", "big_file_bytes", "random_reads", "mount_opts", "as_user",
//!                "uvfs_bin", "tmpfs", "hostdir", "hostdir_ext4_no_journal", "drop_caches",
//!                "load_average" },
//!   "targets": [ { "target", "kind", "command", "cold", "host_backed", "skipped", "round_trip_us" } ],
//!   "workloads": [ { "workload", "title",
//!                    "results": [ { "target", "seconds", "n", "median", "min", "max",
//!                                   "vs_tmpfs", "vs_hostdir",
//!                                   "server_cpu_seconds", "server_cpu_median",
//!                                   "client_cpu_seconds", "client_cpu_median",
//!                                   "round_trips", "round_trips_median" } ],
//!                    "not_applicable": [ { "target", "reason" } ],
//!                    "failed": [ { "target", "round", "error" } ] } ] }
//! ```
//! - `tree.source` is `"generated"` (then `seed` is set) or the `--tree` directory; the
//!   counts are of the staged tree (the source tree plus the C project).
//! - `hostdir_ext4_no_journal`: the device name when `hostdir` is on an ext4 without a
//!   journal (else null). Its creates pass over every inode deleted in the last one to six
//!   minutes, so a host-backed untar right after many deletes (the previous round's
//!   `rm -rf`) takes longer, on the host's side, by however much was deleted before it.
//! - `load_average`: the 1-minute load average before staging and after the last round
//!   (other work on the machine while measuring).
//! - `targets[].round_trip_us`: the median over rounds of an empty FUSE round trip on
//!   the fresh mount (2,000 `getxattr`s of a missing name, each a GETXATTR), for the uvfs
//!   targets; null elsewhere. `round_trips` times this is what a workload's round trips
//!   cost at the least, whatever the server does.
//! - `targets[].kind`: `tmpfs`, `hostdir`, `uvfs` or `peer`; `command` is the server's
//!   command line with `{mnt}` and `{src}` left in (null for the directory targets);
//!   `cold` is the cold step in words; `host_backed` says whether `vs_hostdir` applies;
//!   `skipped` is why the target did not run (null when it ran).
//! - `seconds`: wall time of each round, in round order; `median` over them (the mean of
//!   the two middle values for an even count); `vs_tmpfs` and `vs_hostdir` are this
//!   median over theirs (above 1: slower), `vs_hostdir` only for host-backed targets.
//! - `server_cpu_seconds`: user + system CPU of the FUSE server process (and its
//!   children) during each round's run of the workload (null for directory targets).
//! - `round_trips`: the FUSE requests whose reply a caller waited for during each round's
//!   run of the workload, as the uvfs server counted them (`uvfs mount --stats`, asked
//!   with `SIGUSR1` before and after; RELEASE, RELEASEDIR, FORGET, BATCH_FORGET and
//!   INTERRUPT left out); null for other targets. Each is a context switch to the server
//!   and back that the workload cannot do without: with the round trip's cost on the
//!   machine, it says how much of a row no server could take off.
//! - `client_cpu_seconds`: user + system CPU of the workload itself in each round: its
//!   programs with their descendants (tar, git, make with every cc), or the benchmark
//!   thread for the big-file workloads. On a loaded machine, wall time over this CPU
//!   time shows how much was waiting (for the filesystem, or for a core).
//! - A workload that failed its check in a round is in `failed` with the round (from 1),
//!   never in `seconds`; the target's later rounds do not run.

use comfy_table::{Cell, CellAlignment, Table, presets};
use serde::Serialize;

use crate::report::Machine;
use crate::workloads::steps::{Outcome, Workload};

/// The tree the workloads ran on.
#[derive(Clone, Debug, Serialize)]
pub struct TreeInfo {
    /// `"generated"` or the `--tree` directory.
    pub source: String,
    /// The generator's seed.
    pub seed: Option<u64>,
    /// Directories.
    pub dirs: usize,
    /// Regular files.
    pub files: usize,
    /// Symlinks.
    pub symlinks: usize,
    /// Bytes of regular files.
    pub bytes: u64,
}

/// The settings of a workloads run.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadsConfig {
    /// `--quick`.
    pub quick: bool,
    /// Rounds per target.
    pub rounds: usize,
    /// The staged tree.
    pub tree: TreeInfo,
    /// `.c` units of the C project.
    pub c_units: usize,
    /// `make -j`.
    pub make_jobs: usize,
    /// Size of the big file.
    pub big_file_bytes: u64,
    /// Number of 4 KiB random reads.
    pub random_reads: usize,
    /// Extra `uvfs mount` arguments.
    pub mount_opts: Vec<String>,
    /// The uid the programs ran as (`--as-user`; null: the bench's own, root).
    pub as_user: Option<u32>,
    /// The `uvfs` binary that mounted.
    pub uvfs_bin: String,
    /// Where the tmpfs target and the stage lived.
    pub tmpfs: String,
    /// Where the host-disk targets lived.
    pub hostdir: String,
    /// The device of `hostdir`'s filesystem if it is an ext4 without a journal, whose
    /// creates pass over recently deleted inodes one by one
    /// ([`crate::workloads::ext4_without_journal`]).
    pub hostdir_ext4_no_journal: Option<String>,
    /// Whether the cold steps could drop the kernel's caches.
    pub drop_caches: bool,
    /// 1-minute load average before and after.
    pub load_average: [Option<f64>; 2],
}

/// A target as run.
#[derive(Clone, Debug, Serialize)]
pub struct TargetInfo {
    /// Name.
    pub target: String,
    /// `tmpfs`, `hostdir`, `uvfs` or `peer`.
    pub kind: &'static str,
    /// The server's command line, for a mount target.
    pub command: Option<String>,
    /// The cold step in words.
    pub cold: String,
    /// Whether its data lives in a host directory.
    pub host_backed: bool,
    /// Why it did not run, if it did not.
    pub skipped: Option<String>,
    /// The median over rounds of an empty round trip's time, in microseconds (uvfs
    /// mount targets whose requests were counted; filled in by [`WorkloadsReport::build`]).
    pub round_trip_us: Option<f64>,
}

/// One target's times for one workload.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadResult {
    /// Target.
    pub target: String,
    /// Wall seconds of each round.
    pub seconds: Vec<f64>,
    /// Number of rounds measured.
    pub n: usize,
    /// Median of `seconds`.
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// `median` / tmpfs's median.
    pub vs_tmpfs: Option<f64>,
    /// `median` / hostdir's median (host-backed targets).
    pub vs_hostdir: Option<f64>,
    /// The server's CPU seconds in each round (mount targets).
    pub server_cpu_seconds: Option<Vec<f64>>,
    /// Their median.
    pub server_cpu_median: Option<f64>,
    /// The workload's own CPU seconds in each round.
    pub client_cpu_seconds: Vec<f64>,
    /// Their median.
    pub client_cpu_median: f64,
    /// The round trips waited for in each round (uvfs mount targets).
    pub round_trips: Option<Vec<u64>>,
    /// Their median.
    pub round_trips_median: Option<f64>,
}

/// A workload that does not apply to a target.
#[derive(Clone, Debug, Serialize)]
pub struct NotApplicable {
    /// Target.
    pub target: String,
    /// Why.
    pub reason: String,
}

/// A failed run: a wrong result or a command that failed.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadFailure {
    /// Target.
    pub target: String,
    /// Round, from 1.
    pub round: usize,
    /// What went wrong.
    pub error: String,
}

/// Everything about one workload.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadResults {
    /// Name.
    pub workload: &'static str,
    /// What it does.
    pub title: &'static str,
    /// One entry per target that measured it.
    pub results: Vec<WorkloadResult>,
    /// Targets it does not apply to.
    pub not_applicable: Vec<NotApplicable>,
    /// Failed runs.
    pub failed: Vec<WorkloadFailure>,
}

/// A whole workloads run.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadsReport {
    /// Version of this layout.
    pub schema: u32,
    /// Always `"workloads"`.
    pub kind: &'static str,
    /// Machine facts.
    pub machine: Machine,
    /// Settings.
    pub config: WorkloadsConfig,
    /// Targets, in column order.
    pub targets: Vec<TargetInfo>,
    /// Workloads, in run order.
    pub workloads: Vec<WorkloadResults>,
}

/// One round of one target, as run.
#[derive(Clone, Debug)]
pub struct RoundOutcome {
    /// Target.
    pub target: String,
    /// Round, from 1.
    pub round: usize,
    /// What happened to each workload it reached (a failure to start or stop the
    /// server is reported on the first or last workload).
    pub outcomes: Vec<(Workload, Outcome)>,
    /// An empty round trip's time on the fresh mount, in microseconds (uvfs targets).
    pub round_trip_us: Option<f64>,
}

/// Median of a non-empty slice (mean of the middle two for an even length).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 }
}

impl WorkloadsReport {
    /// Collects the rounds into per-workload results.
    pub fn build(
        machine: Machine,
        config: WorkloadsConfig,
        mut targets: Vec<TargetInfo>,
        rounds: &[RoundOutcome],
    ) -> WorkloadsReport {
        for t in &mut targets {
            let rtt: Vec<f64> =
                rounds.iter().filter(|r| r.target == t.target).filter_map(|r| r.round_trip_us).collect();
            t.round_trip_us = (!rtt.is_empty()).then(|| median(&rtt));
        }
        let mut workloads: Vec<WorkloadResults> = Workload::ALL
            .iter()
            .map(|w| WorkloadResults {
                workload: w.name(),
                title: w.title(),
                results: vec![],
                not_applicable: vec![],
                failed: vec![],
            })
            .collect();
        for (wi, w) in Workload::ALL.iter().enumerate() {
            let out = &mut workloads[wi];
            for t in targets.iter().filter(|t| t.skipped.is_none()) {
                let mut secs = Vec::new();
                let mut cpu = Vec::new();
                let mut client = Vec::new();
                let mut trips = Vec::new();
                let mut na = None;
                for r in rounds.iter().filter(|r| r.target == t.target) {
                    for (rw, o) in r.outcomes.iter().filter(|(rw, _)| rw == w) {
                        debug_assert_eq!(rw, w);
                        match o {
                            Outcome::Measured(s) => {
                                secs.push(s.seconds);
                                client.push(s.client_cpu);
                                if let Some(c) = s.server_cpu {
                                    cpu.push(c);
                                }
                                if let Some(n) = s.round_trips {
                                    trips.push(n);
                                }
                            }
                            Outcome::NotApplicable(why) => na = Some(why.clone()),
                            Outcome::Failed(e) => out.failed.push(WorkloadFailure {
                                target: t.target.clone(),
                                round: r.round,
                                error: e.clone(),
                            }),
                        }
                    }
                }
                if let Some(reason) = na.filter(|_| secs.is_empty()) {
                    out.not_applicable.push(NotApplicable { target: t.target.clone(), reason });
                }
                if secs.is_empty() {
                    continue;
                }
                let (min, max) = secs.iter().fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
                out.results.push(WorkloadResult {
                    target: t.target.clone(),
                    n: secs.len(),
                    median: median(&secs),
                    min,
                    max,
                    vs_tmpfs: None,
                    vs_hostdir: None,
                    server_cpu_median: (!cpu.is_empty()).then(|| median(&cpu)),
                    server_cpu_seconds: (!cpu.is_empty()).then_some(cpu),
                    client_cpu_median: median(&client),
                    client_cpu_seconds: client,
                    round_trips_median: (!trips.is_empty())
                        .then(|| median(&trips.iter().map(|&n| n as f64).collect::<Vec<_>>())),
                    round_trips: (!trips.is_empty()).then_some(trips),
                    seconds: secs,
                });
            }
            let base = |name: &str| out.results.iter().find(|r| r.target == name).map(|r| r.median);
            let (tmpfs, hostdir) = (base("tmpfs"), base("hostdir"));
            for r in &mut out.results {
                let backed = targets.iter().any(|t| t.target == r.target && t.host_backed);
                if r.target != "tmpfs" {
                    r.vs_tmpfs = tmpfs.filter(|&b| b > 0.0).map(|b| r.median / b);
                }
                if backed && r.target != "hostdir" {
                    r.vs_hostdir = hostdir.filter(|&b| b > 0.0).map(|b| r.median / b);
                }
            }
        }
        WorkloadsReport { schema: 1, kind: "workloads", machine, config, targets, workloads }
    }

    /// Whether any run failed.
    pub fn any_failed(&self) -> bool {
        self.workloads.iter().any(|w| !w.failed.is_empty())
    }
}

fn secs(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn table(head: Vec<String>) -> Table {
    let mut t = Table::new();
    t.load_preset(presets::ASCII_MARKDOWN);
    t.set_header(head);
    t
}

/// The cell of `target` in workload `w`: its value, n/a, FAILED or `-`.
fn cell(w: &WorkloadResults, target: &str, value: impl Fn(&WorkloadResult) -> Option<String>) -> Cell {
    let text = if w.failed.iter().any(|f| f.target == target) {
        "FAILED".to_string()
    } else if let Some(r) = w.results.iter().find(|r| r.target == target) {
        value(r).unwrap_or_else(|| "-".into())
    } else if w.not_applicable.iter().any(|n| n.target == target) {
        "n/a".to_string()
    } else {
        "-".to_string()
    };
    Cell::new(text).set_alignment(CellAlignment::Right)
}

/// A table of one value per workload (rows) and target (columns), appended to `out`.
fn grid(
    out: &mut String,
    r: &WorkloadsReport,
    targets: &[&TargetInfo],
    value: impl Fn(&TargetInfo, &WorkloadResult) -> Option<String>,
) {
    let mut head = vec!["workload".to_string()];
    head.extend(targets.iter().map(|t| t.target.clone()));
    let mut t = table(head);
    for w in &r.workloads {
        let mut row = vec![Cell::new(w.workload)];
        for tg in targets {
            row.push(cell(w, &tg.target, |x| value(tg, x)));
        }
        t.add_row(row);
    }
    out.push_str(&t.to_string());
    out.push('\n');
}

/// The tables: median seconds with the ratio to tmpfs; host-backed targets against
/// hostdir; the FUSE servers' CPU; then the cold steps, failures and skipped targets.
pub fn render(r: &WorkloadsReport) -> String {
    let c = &r.config;
    let ran: Vec<&TargetInfo> = r.targets.iter().filter(|t| t.skipped.is_none()).collect();
    let mut out = format!(
        "workloads: {} tree, {} dirs, {} files, {} symlinks, {:.1} MB; C project of {} units, make -j{}; \
         big file {} MiB, {} random reads; {} round{}{}\n",
        if c.tree.source == "generated" { "generated".to_string() } else { format!("--tree {}", c.tree.source) },
        c.tree.dirs,
        c.tree.files,
        c.tree.symlinks,
        c.tree.bytes as f64 / 1e6,
        c.c_units,
        c.make_jobs,
        c.big_file_bytes >> 20,
        c.random_reads,
        c.rounds,
        if c.rounds == 1 { "" } else { "s" },
        if c.quick { " (--quick)" } else { "" },
    );
    if !c.mount_opts.is_empty() {
        out.push_str(&format!("uvfs mount options: {}\n", c.mount_opts.join(" ")));
    }
    if let Some(u) = c.as_user {
        out.push_str(&format!("programs run as uid {u} (gid {u}, no supplementary groups)\n"));
    }
    if let [Some(a), Some(b)] = c.load_average {
        out.push_str(&format!("load average (1 min): {a:.2} before, {b:.2} after\n"));
    }
    if let Some(dev) = &c.hostdir_ext4_no_journal
        && ran.iter().any(|t| t.host_backed)
    {
        out.push_str(&format!(
            "{} is on ext4 without a journal ({dev}): each create there passes over the inodes deleted 1 s to 6 min \
             before, one by one, so the untars of hostdir and of every host-backed target, which follow the previous \
             round's rm -rf, are slower than the disk (--hostdir on a journaled filesystem avoids it)\n",
            c.hostdir
        ));
    }
    out.push_str("\nmedian seconds (x tmpfs; lower is better)\n");
    grid(&mut out, r, &ran, |_, x| {
        Some(match x.vs_tmpfs {
            Some(v) => format!("{} ({v:.1}x)", secs(x.median)),
            None => secs(x.median),
        })
    });

    let backed: Vec<&TargetInfo> = ran.iter().copied().filter(|t| t.host_backed && t.target != "hostdir").collect();
    if !backed.is_empty() && ran.iter().any(|t| t.target == "hostdir") {
        out.push_str("\nhost-backed targets against hostdir (x hostdir median)\n");
        grid(&mut out, r, &backed, |_, x| x.vs_hostdir.map(|v| format!("{v:.2}x")));
    }

    let servers: Vec<&TargetInfo> = ran.iter().copied().filter(|t| t.command.is_some()).collect();
    if !servers.is_empty() {
        out.push_str("\nFUSE server CPU seconds (user + system, median)\n");
        grid(&mut out, r, &servers, |_, x| x.server_cpu_median.map(secs));
    }

    let counted: Vec<&TargetInfo> = servers
        .iter()
        .copied()
        .filter(|t| {
            r.workloads.iter().any(|w| w.results.iter().any(|x| x.target == t.target && x.round_trips.is_some()))
        })
        .collect();
    if !counted.is_empty() {
        out.push_str(
            "\nFUSE round trips the workload waited for (requests but RELEASE and FORGET, median), \
             and in parentheses their seconds at the target's empty round trip\n",
        );
        grid(&mut out, r, &counted, |tg, x| {
            x.round_trips_median.map(|n| match tg.round_trip_us {
                Some(us) => format!("{n:.0} ({})", secs(n * us / 1e6)),
                None => format!("{n:.0}"),
            })
        });
        let rtts: Vec<String> =
            counted.iter().filter_map(|t| t.round_trip_us.map(|us| format!("{} {us:.1} us", t.target))).collect();
        if !rtts.is_empty() {
            out.push_str(&format!(
                "empty round trip (a GETXATTR of a missing name, mean of {}, median of rounds): {}\n",
                crate::workloads::targets::RTT_CALLS,
                rtts.join(", ")
            ));
        }
    }

    out.push_str("\nthe workload's own CPU seconds (its programs, or the I/O thread; user + system, median)\n");
    grid(&mut out, r, &ran, |_, x| Some(secs(x.client_cpu_median)));

    out.push_str("\ncold step: ");
    out.push_str(&ran.iter().map(|t| format!("{} {}", t.target, t.cold)).collect::<Vec<_>>().join("; "));
    out.push('\n');
    for t in &ran {
        if let Some(cmd) = &t.command {
            out.push_str(&format!("  {}: {cmd}\n", t.target));
        }
    }
    for w in &r.workloads {
        for f in &w.failed {
            out.push_str(&format!("  FAILED {} {} (round {}): {}\n", f.target, w.workload, f.round, f.error));
        }
    }
    for t in r.targets.iter().filter_map(|t| t.skipped.as_ref().map(|s| (t, s))) {
        out.push_str(&format!("  skipped {}: {}\n", t.0.target, t.1));
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::workloads::steps::Sample;

    fn m(seconds: f64, cpu: Option<f64>) -> Outcome {
        Outcome::Measured(Sample {
            seconds,
            server_cpu: cpu,
            client_cpu: seconds / 2.0,
            round_trips: cpu.map(|c| (c * 1000.0) as u64),
        })
    }

    fn info(target: &str, kind: &'static str, backed: bool) -> TargetInfo {
        TargetInfo {
            target: target.into(),
            kind,
            command: (kind == "uvfs").then(|| "uvfs mount {mnt}".to_string()),
            cold: "drop_caches".into(),
            host_backed: backed,
            skipped: None,
            round_trip_us: None,
        }
    }

    pub(crate) fn sample_report() -> WorkloadsReport {
        let config = WorkloadsConfig {
            quick: true,
            rounds: 2,
            tree: TreeInfo { source: "generated".into(), seed: Some(1), dirs: 3, files: 10, symlinks: 1, bytes: 1000 },
            c_units: 4,
            make_jobs: 2,
            big_file_bytes: 4 << 20,
            random_reads: 10,
            mount_opts: vec!["--attr-timeout=60".into()],
            as_user: None,
            uvfs_bin: "uvfs".into(),
            tmpfs: "/dev/shm".into(),
            hostdir: "/var/tmp".into(),
            hostdir_ext4_no_journal: None,
            drop_caches: true,
            load_average: [Some(0.5), None],
        };
        let mut skipped = info("bindfs", "peer", true);
        skipped.skipped = Some("not installed".into());
        let targets = vec![
            info("tmpfs", "tmpfs", false),
            info("hostdir", "hostdir", true),
            info("uvfs-memfs", "uvfs", false),
            info("uvfs-hostfs", "uvfs", true),
            skipped,
        ];
        let round = |target: &str, round, outcomes| {
            // The memfs mount's empty round trip: 10 and 20 us in its two rounds.
            let round_trip_us = (target == "uvfs-memfs").then_some(10.0 * round as f64);
            RoundOutcome { target: target.into(), round, outcomes, round_trip_us }
        };
        use Workload as W;
        let rounds = vec![
            round(
                "tmpfs",
                1,
                vec![(W::Untar, m(1.0, None)), (W::FindCold, Outcome::NotApplicable("cold: n/a".into()))],
            ),
            round(
                "tmpfs",
                2,
                vec![(W::Untar, m(3.0, None)), (W::FindCold, Outcome::NotApplicable("cold: n/a".into()))],
            ),
            round("hostdir", 1, vec![(W::Untar, m(4.0, None)), (W::FindCold, m(0.5, None))]),
            round("uvfs-memfs", 1, vec![(W::Untar, m(10.0, Some(2.0))), (W::FindCold, m(1.0, Some(0.5)))]),
            round("uvfs-memfs", 2, vec![(W::Untar, m(30.0, Some(4.0)))]),
            round(
                "uvfs-hostfs",
                1,
                vec![(W::Untar, m(8.0, Some(1.0))), (W::FindCold, Outcome::Failed("find printed 3 lines".into()))],
            ),
        ];
        WorkloadsReport::build(
            Machine { cores: 2, kernel: "6.18".into(), cpu: None, uvfs_version: "0.1.0".into() },
            config,
            targets,
            &rounds,
        )
    }

    #[test]
    fn medians_ratios_and_failures() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0]), 2.5);
        let r = sample_report();
        let untar = &r.workloads[0];
        assert_eq!(untar.workload, "untar");
        let get = |t: &str| untar.results.iter().find(|x| x.target == t).unwrap();
        assert_eq!(get("tmpfs").median, 2.0);
        assert_eq!(get("tmpfs").vs_tmpfs, None);
        assert_eq!(get("uvfs-memfs").median, 20.0);
        assert_eq!(get("uvfs-memfs").vs_tmpfs, Some(10.0));
        assert_eq!(get("uvfs-memfs").vs_hostdir, None, "memfs is not host-backed");
        assert_eq!(get("uvfs-memfs").server_cpu_seconds, Some(vec![2.0, 4.0]));
        assert_eq!(get("uvfs-memfs").server_cpu_median, Some(3.0));
        assert_eq!(get("uvfs-memfs").client_cpu_seconds, vec![5.0, 15.0]);
        assert_eq!(get("uvfs-memfs").client_cpu_median, 10.0);
        assert_eq!(get("uvfs-hostfs").vs_hostdir, Some(2.0));
        assert_eq!(get("hostdir").vs_hostdir, None);
        assert!(get("tmpfs").server_cpu_seconds.is_none());
        assert_eq!(get("uvfs-memfs").round_trips, Some(vec![2000, 4000]));
        assert_eq!(get("uvfs-memfs").round_trips_median, Some(3000.0));
        assert!(get("tmpfs").round_trips.is_none() && get("tmpfs").round_trips_median.is_none());
        assert!(untar.results.iter().all(|x| x.target != "bindfs"));
        let cold = &r.workloads[2];
        assert_eq!(cold.workload, "find-cold");
        assert_eq!(cold.not_applicable.len(), 1);
        assert_eq!(cold.failed.len(), 1);
        assert_eq!((cold.failed[0].target.as_str(), cold.failed[0].round), ("uvfs-hostfs", 1));
        assert!(cold.results.iter().all(|x| x.target != "uvfs-hostfs"), "a failure is never a time");
        assert!(r.any_failed());
    }

    #[test]
    fn tables_show_ratios_na_failed_and_skips() {
        let text = render(&sample_report());
        assert!(text.contains("| untar      |"), "{text}");
        assert!(text.contains("20.00 (10.0x)"), "{text}");
        assert!(text.contains("FAILED"), "{text}");
        assert!(text.contains("n/a"), "{text}");
        assert!(text.contains("2.00x"), "{text}");
        assert!(text.contains("FUSE server CPU seconds"), "{text}");
        assert!(text.contains("FUSE round trips the workload waited for"), "{text}");
        assert!(text.contains(" 3000 (0.045) |"), "the memfs untar's median round trips, at 15 us: {text}");
        assert!(text.contains("uvfs-memfs 15.0 us"), "{text}");
        assert!(text.contains("the workload's own CPU seconds"), "{text}");
        assert!(text.contains("FAILED uvfs-hostfs find-cold (round 1): find printed 3 lines"), "{text}");
        assert!(text.contains("skipped bindfs: not installed"), "{text}");
        assert!(text.contains("uvfs mount options: --attr-timeout=60"), "{text}");
        let json = serde_json::to_value(sample_report()).unwrap();
        assert_eq!(json["kind"], "workloads");
        assert_eq!(json["workloads"][0]["results"][2]["vs_tmpfs"], 10.0);
        assert_eq!(json["workloads"][0]["results"][2]["round_trips_median"], 3000.0);
        assert_eq!(json["targets"][2]["round_trip_us"], 15.0);
        assert!(json["targets"][0]["round_trip_us"].is_null());
        assert_eq!(json["targets"][4]["skipped"], "not installed");
        assert!(json["config"]["hostdir_ext4_no_journal"].is_null());
        assert!(!text.contains("without a journal"), "{text}");
    }

    #[test]
    fn a_host_directory_on_ext4_without_a_journal_is_named() {
        let mut r = sample_report();
        r.config.hostdir_ext4_no_journal = Some("vda".into());
        let text = render(&r);
        assert!(text.contains("/var/tmp is on ext4 without a journal (vda)"), "{text}");
        assert_eq!(serde_json::to_value(&r).unwrap()["config"]["hostdir_ext4_no_journal"], "vda");
        // Said only where a host-backed target ran.
        r.targets.retain(|t| !t.host_backed);
        assert!(!render(&r).contains("without a journal"));
    }
}
