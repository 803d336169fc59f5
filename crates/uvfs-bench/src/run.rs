//! Runs a [`Plan`]: every case, group and target, with progress and per-case tables.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::backend::{Backend, KernelFs, UvfsFs, Who, running_as_root};
use crate::cases::{self, Case, Group, Measured, Timing};
use crate::cli::{Plan, Settings};
use crate::report::{self, CaseReport, Failed, Machine, Report, RunConfig, Skipped, TargetResult};
use crate::target::{self, Target, TargetKind};

/// What happens to a target in a case.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Disposition {
    Run,
    Skip(String),
}

/// The targets of a case, each to run or to report as skipped.
fn case_targets(case: &Case, plan: &Plan) -> Vec<(&'static Target, Disposition)> {
    if let Some(named) = &plan.targets {
        // Named targets run (their availability was checked with the options).
        return named.iter().map(|t| (*t, Disposition::Run)).collect();
    }
    let mut out = Vec::new();
    for t in target::TARGETS {
        let d = match t.kind {
            TargetKind::Kernel => match &plan.kernel_dir {
                Ok(_) => Disposition::Run,
                Err(why) => Disposition::Skip(why.clone()),
            },
            TargetKind::Fuse => match fuse_blocker(case) {
                None => Disposition::Run,
                Some(why) => Disposition::Skip(why),
            },
            TargetKind::Uvfs { off } if off.is_empty() => Disposition::Run,
            TargetKind::Uvfs { off } => {
                if case.switches.contains(off) {
                    Disposition::Run
                } else if let Some((_, why)) = case.pending.iter().find(|(fp, _)| *fp == off) {
                    Disposition::Skip((*why).to_string())
                } else {
                    continue; // not relevant to this case
                }
            }
        };
        out.push((t, d));
    }
    out
}

/// Why `target` cannot run `group`, if it cannot (checked before making a backend).
fn group_blocker(t: &Target, group: &Group) -> Option<String> {
    match (t.kind, &group.who) {
        (TargetKind::Kernel, Who::User { uid, .. }) if !running_as_root() => {
            Some(format!("switching the kernel credentials to uid {uid} needs root"))
        }
        _ => None,
    }
}

fn measure(t: &Target, case: &Case, group: &Group, plan: &Plan) -> Result<Measured, String> {
    let s = &plan.settings;
    let timing = Timing { interval: s.interval, count: s.warmup + s.samples };
    match t.kind {
        TargetKind::Kernel => {
            let dir = plan.kernel_dir.as_ref().map_err(Clone::clone)?;
            let b = Arc::new(KernelFs::new(dir)?);
            go(case, group, b, timing, s)
        }
        TargetKind::Uvfs { .. } => {
            let fp = t.fast_paths().unwrap_or_default();
            go(case, group, Arc::new(UvfsFs::new(fp)), timing, s)
        }
        TargetKind::Fuse => {
            if let Some(why) = fuse_blocker(case) {
                return Err(why);
            }
            go(case, group, Arc::new(KernelFs::on_fuse()?), timing, s)
        }
    }
}

/// Why the FUSE target does not run `case`, if it does not: it applies to the
/// single-file and messaging cases (fstree measures cold host caches, which a FUSE mount
/// of memfs has none of), and needs root and /dev/fuse.
fn fuse_blocker(case: &Case) -> Option<String> {
    const FUSE_CASES: &[&str] = &["openneg", "readlink1", "stat", "open1", "stat2", "write1", "messaging"];
    if !FUSE_CASES.contains(&case.name) {
        return Some(format!("the FUSE target does not apply to {}", case.name));
    }
    if !running_as_root() {
        return Some("the FUSE target mounts, which needs root".into());
    }
    if !std::path::Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    None
}

fn go<B: Backend>(case: &Case, group: &Group, b: Arc<B>, timing: Timing, s: &Settings) -> Result<Measured, String> {
    cases::run(case, group, b, timing, &s.sizes)
}

/// Progress on stderr and tables on stdout.
pub struct Ui {
    bar: ProgressBar,
    tables: bool,
}

impl Ui {
    /// A progress bar when stderr is a terminal and JSON is off; tables unless JSON.
    pub fn new(json: bool) -> Ui {
        let bar = if json || !std::io::stderr().is_terminal() {
            ProgressBar::hidden()
        } else {
            let b = ProgressBar::new(0);
            b.set_style(
                ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b.enable_steady_tick(Duration::from_millis(200));
            b
        };
        Ui { bar, tables: !json }
    }

    fn print(&self, text: &str) {
        if self.tables {
            self.bar.suspend(|| println!("{text}"));
        }
    }
}

/// Number of target runs of a plan (for the progress bar).
fn total_runs(plan: &Plan) -> u64 {
    plan.cases
        .iter()
        .filter(|c| c.unavailable.is_none())
        .map(|c| {
            let targets = case_targets(c, plan).iter().filter(|(_, d)| *d == Disposition::Run).count();
            let groups = cases::groups(c, &plan.settings.sizes).iter().filter(|g| g.skip.is_none()).count();
            (targets * groups) as u64
        })
        .sum()
}

/// Runs the plan. Tables are printed as each case finishes (unless JSON).
pub fn execute(plan: &Plan, ui: &Ui) -> Report {
    let s = &plan.settings;
    ui.bar.set_length(total_runs(plan));
    let machine = Machine::detect();
    let config = RunConfig {
        quick: s.quick,
        sample_seconds: s.interval.as_secs_f64(),
        samples: s.samples,
        warmup: s.warmup,
        threads: s.sizes.threads,
        messaging_groups: s.sizes.msg_groups,
        messaging_loops: s.sizes.msg_loops,
        significance: report::SIGNIFICANCE,
    };
    ui.print(&format!(
        "uvfs bench: {} cores{}, Linux {}, uvfs {}; {} samples of {:.2} s after {} warm-up{}",
        machine.cores,
        machine.cpu.as_deref().map(|c| format!(" ({c})")).unwrap_or_default(),
        machine.kernel,
        machine.uvfs_version,
        s.samples,
        s.interval.as_secs_f64(),
        s.warmup,
        if s.quick { " (--quick)" } else { "" },
    ));
    ui.print(
        "change: mean vs the `vs` target (uvfs vs kernel; uvfs-no-* vs uvfs). \
         * = significant (Welch t-test, 95%), ? = too few samples to tell.\n",
    );
    let mut cases_out = Vec::new();
    for case in &plan.cases {
        let rep = run_case(case, plan, ui);
        ui.print(&report::render_case(&rep));
        cases_out.push(rep);
    }
    ui.bar.finish_and_clear();
    Report { schema: 1, machine, config, cases: cases_out }
}

fn run_case(case: &Case, plan: &Plan, ui: &Ui) -> CaseReport {
    let mut rep = CaseReport {
        case: case.name.to_string(),
        seed: case.seed.to_string(),
        title: case.title.to_string(),
        unit: case.unit,
        higher_is_better: case.unit.higher_is_better(),
        skipped: case.unavailable.map(str::to_string),
        results: vec![],
        skipped_targets: vec![],
        failed: vec![],
    };
    if case.unavailable.is_some() {
        return rep;
    }
    let targets = case_targets(case, plan);
    for (t, d) in &targets {
        if let Disposition::Skip(why) = d {
            rep.skipped_targets.push(Skipped {
                target: t.name.to_string(),
                variant: None,
                threads: None,
                reason: why.clone(),
            });
        }
    }
    for group in cases::groups(case, &plan.settings.sizes) {
        let variant = group.variant.map(str::to_string);
        if let Some(why) = group.skip {
            rep.skipped_targets.push(Skipped {
                target: "all".into(),
                variant: variant.clone(),
                threads: Some(group.threads),
                reason: why.to_string(),
            });
            continue;
        }
        for (t, _) in targets.iter().filter(|(_, d)| *d == Disposition::Run) {
            ui.bar.set_message(format!(
                "{}{} {}t {}",
                case.name,
                variant.as_deref().map(|v| format!(" [{v}]")).unwrap_or_default(),
                group.threads,
                t.name
            ));
            if let Some(why) = group_blocker(t, &group) {
                rep.skipped_targets.push(Skipped {
                    target: t.name.to_string(),
                    variant: variant.clone(),
                    threads: Some(group.threads),
                    reason: why,
                });
                ui.bar.inc(1);
                continue;
            }
            match measure(t, case, &group, plan) {
                Ok(m) => {
                    let r = TargetResult::new(
                        t.name,
                        group.variant,
                        group.threads,
                        case.unit,
                        &m.raw,
                        plan.settings.warmup,
                        m.ops,
                        m.counters,
                    );
                    match r {
                        Some(r) => rep.results.push(r),
                        None => rep.failed.push(Failed {
                            target: t.name.to_string(),
                            variant: variant.clone(),
                            threads: group.threads,
                            error: "no samples left after the warm-up".into(),
                        }),
                    }
                }
                Err(error) => rep.failed.push(Failed {
                    target: t.name.to_string(),
                    variant: variant.clone(),
                    threads: group.threads,
                    error,
                }),
            }
            ui.bar.inc(1);
        }
    }
    rep.compare(|name| target::target(name).and_then(|t| t.baseline));
    rep
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{BenchArgs, plan};

    fn test_plan(args: BenchArgs, tmpfs: bool) -> Plan {
        let dir = if args.tmpfs.as_os_str().is_empty() { "/dev/shm".into() } else { args.tmpfs.clone() };
        let args = BenchArgs {
            // Accepted by the chart check, and leaves no file behind.
            chart: Some("/dev/null".into()),
            tmpfs: dir,
            ..args
        };
        plan(&args, 2, |p| if tmpfs { Ok(()) } else { Err(format!("{} missing", p.display())) }).unwrap()
    }

    fn names(v: &[(&'static Target, Disposition)]) -> Vec<(&'static str, bool)> {
        v.iter().map(|(t, d)| (t.name, *d == Disposition::Run)).collect()
    }

    #[test]
    fn default_targets_follow_the_case_switches() {
        let p = test_plan(BenchArgs::default(), true);
        // The fuse target runs these cases where it can mount (root, /dev/fuse).
        let fuse = fuse_blocker(cases::case("openneg").unwrap()).is_none();
        let t = case_targets(cases::case("openneg").unwrap(), &p);
        assert_eq!(
            names(&t),
            [
                ("kernel", true),
                ("uvfs", true),
                ("fuse", fuse),
                ("uvfs-no-lockless", true),
                ("uvfs-no-failed-open", true),
                ("uvfs-no-path-cache", true)
            ]
        );
        let t = case_targets(cases::case("stat").unwrap(), &p);
        assert_eq!(
            names(&t),
            [
                ("kernel", true),
                ("uvfs", true),
                ("fuse", fuse),
                ("uvfs-no-lockless", true),
                ("uvfs-no-acl", true),
                ("uvfs-no-path-cache", true)
            ]
        );
        let t = case_targets(cases::case("readlink1").unwrap(), &p);
        assert_eq!(names(&t), [("kernel", true), ("uvfs", true), ("fuse", fuse), ("uvfs-no-symlink-cache", true)]);
        // fstree is not a FUSE case.
        assert!(fuse_blocker(cases::case("fstree").unwrap()).is_some());
    }

    #[test]
    fn a_fuse_run_leaves_no_mount_behind() {
        let _serial = crate::FUSE_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: no preconditions.
        assert!(unsafe { libc::geteuid() } == 0, "this test mounts through FUSE: run it as root");
        // The smallest bench that mounts: the cases that hold files open, one short sample.
        let args = BenchArgs {
            cases: vec!["write1".into(), "messaging".into()],
            targets: vec!["fuse".into()],
            quick: true,
            seconds: Some(0.02),
            samples: Some(1),
            warmup: Some(0),
            json: true,
            ..Default::default()
        };
        let report = execute(&test_plan(args, true), &Ui::new(true));
        for c in &report.cases {
            assert!(c.failed.is_empty(), "{}: {:?}", c.case, c.failed);
            assert!(!c.results.is_empty(), "{}", c.case);
        }
        let mine = format!("/uvfs-bench-fuse.{}.", std::process::id());
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let left: Vec<&str> = info.lines().filter(|l| l.contains(&mine)).collect();
        assert!(left.is_empty(), "mounts left behind: {left:#?}");
    }

    #[test]
    fn missing_tmpfs_skips_only_the_kernel() {
        let p = test_plan(BenchArgs::default(), false);
        let t = case_targets(cases::case("stat2").unwrap(), &p);
        assert_eq!(t[0].0.name, "kernel");
        assert_eq!(t[0].1, Disposition::Skip("/dev/shm missing".into()));
        assert_eq!(t[1], (target::target("uvfs").unwrap(), Disposition::Run));
    }

    #[test]
    fn named_targets_run_even_when_pending() {
        let args = BenchArgs { targets: vec!["uvfs-no-acl".into()], ..Default::default() };
        let p = test_plan(args, true);
        let t = case_targets(cases::case("stat").unwrap(), &p);
        assert_eq!(names(&t), [("uvfs-no-acl", true)]);
    }

    #[test]
    fn run_counts_cover_groups_and_targets() {
        let args = BenchArgs { cases: vec!["readlink1".into(), "fstree".into()], ..Default::default() };
        // fstree is refused when named with other cases (it runs alone).
        let e = plan(&BenchArgs { chart: Some("/dev/null".into()), ..args }, 2, |_| Ok(()));
        assert!(e.unwrap_err().0.contains("runs alone"));
        let args = BenchArgs { cases: vec!["readlink1".into()], threads: Some(2), ..Default::default() };
        // 2 groups (1 and 2 threads) x 3 targets, plus fuse where it can mount.
        let fuse = u64::from(fuse_blocker(cases::case("readlink1").unwrap()).is_none());
        assert_eq!(total_runs(&test_plan(args, true)), 2 * (3 + fuse));
    }
}
