//! Results: the data model (serialised as `--json`) and the comparison tables.
//!
//! JSON schema (`schema: 1`):
//! ```text
//! { "schema": 1,
//!   "machine": { "cores", "kernel", "cpu", "uvfs_version" },
//!   "config":  { "quick", "sample_seconds", "samples", "warmup", "threads",
//!                "messaging_groups", "messaging_loops", "significance" },
//!   "cases": [ { "case", "seed", "title", "unit", "higher_is_better",
//!                "skipped": null | reason,
//!                "results": [ { "target", "variant", "threads", "unit", "samples",
//!                               "warmup_samples", "n", "mean", "stddev", "min", "max",
//!                               "baseline", "change_pct", "significant", "scaling",
//!                               "ops", "uvfs_counters" } ],
//!                "skipped_targets": [ { "target", "variant", "threads", "reason" } ],
//!                "failed": [ { "target", "variant", "threads", "error" } ] } ] }
//! ```
//! `samples` are the kept samples (ops/s per interval, or seconds per iteration); the
//! statistics are over them. `change_pct` and `significant` compare with `baseline`
//! (see [`crate::stats`]); `scaling` is stat2's mean(N threads) / mean(1 thread) of the
//! same target.
//!
//! `uvfs bench --case workloads` has its own layout (`kind: "workloads"`), documented in
//! [`workloads`].

pub mod workloads;

use comfy_table::{Cell, CellAlignment, Table, presets};
use serde::Serialize;

use crate::backend::WalkCounters;
use crate::cases::Unit;
use crate::stats::{self, Summary};

/// Machine facts.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// `available_parallelism`.
    pub cores: usize,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// CPU model, if known.
    pub cpu: Option<String>,
    /// uvfs version (the workspace version, shared by uvfs and uvfs-bench).
    pub uvfs_version: String,
}

impl Machine {
    /// Facts about this machine.
    pub fn detect() -> Machine {
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".to_string());
        let cpu = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        });
        Machine { cores, kernel, cpu, uvfs_version: env!("CARGO_PKG_VERSION").to_string() }
    }
}

/// The settings a run used.
#[derive(Clone, Debug, Serialize)]
pub struct RunConfig {
    /// `--quick`.
    pub quick: bool,
    /// Sample interval of ops/s cases.
    pub sample_seconds: f64,
    /// Kept samples (iterations for wall-time cases).
    pub samples: usize,
    /// Dropped warm-up samples.
    pub warmup: usize,
    /// N, the largest thread count.
    pub threads: usize,
    /// messaging groups.
    pub messaging_groups: usize,
    /// messaging loops.
    pub messaging_loops: usize,
    /// The significance rule, in words.
    pub significance: &'static str,
}

/// The rule of [`crate::stats`], one line.
pub const SIGNIFICANCE: &str = "Welch's two-sided t-test at 95% (df rounded down), needs >= 5 samples per side";

/// One target's measurement of one group.
#[derive(Clone, Debug, Serialize)]
pub struct TargetResult {
    /// Target name.
    pub target: String,
    /// Variant label, if the case has variants.
    pub variant: Option<String>,
    /// Worker threads.
    pub threads: usize,
    /// "ops/s" or "s".
    pub unit: Unit,
    /// Kept samples.
    pub samples: Vec<f64>,
    /// Dropped warm-up samples.
    pub warmup_samples: Vec<f64>,
    /// Number of kept samples.
    pub n: usize,
    /// Mean of the kept samples.
    pub mean: f64,
    /// Their sample standard deviation.
    pub stddev: f64,
    /// Smallest kept sample.
    pub min: f64,
    /// Largest kept sample.
    pub max: f64,
    /// The target compared with, when it ran.
    pub baseline: Option<String>,
    /// Percent change of the mean against the baseline.
    pub change_pct: Option<f64>,
    /// Significance verdict (`None`: no baseline or too few samples).
    pub significant: Option<bool>,
    /// stat2: mean(N) / mean(1) for this target.
    pub scaling: Option<f64>,
    /// Operations over the whole run (warm-up included).
    pub ops: u64,
    /// uvfs counters over the whole run (uvfs targets).
    pub uvfs_counters: Option<WalkCounters>,
}

impl TargetResult {
    /// Builds a result from raw samples, dropping `warmup`. `None` when no sample is
    /// left.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        target: &str,
        variant: Option<&str>,
        threads: usize,
        unit: Unit,
        raw: &[f64],
        warmup: usize,
        ops: u64,
        uvfs_counters: Option<WalkCounters>,
    ) -> Option<TargetResult> {
        let (warm, kept) = crate::harness::split_warmup(raw, warmup);
        let s = Summary::of(kept)?;
        Some(TargetResult {
            target: target.to_string(),
            variant: variant.map(str::to_string),
            threads,
            unit,
            samples: kept.to_vec(),
            warmup_samples: warm.to_vec(),
            n: s.n,
            mean: s.mean,
            stddev: s.stddev,
            min: s.min,
            max: s.max,
            baseline: None,
            change_pct: None,
            significant: None,
            scaling: None,
            ops,
            uvfs_counters,
        })
    }

    /// The statistics of the kept samples.
    pub fn summary(&self) -> Summary {
        Summary { n: self.n, mean: self.mean, stddev: self.stddev, min: self.min, max: self.max }
    }
}

/// A target that did not run, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Skipped {
    /// Target name.
    pub target: String,
    /// Variant, when only one variant is affected.
    pub variant: Option<String>,
    /// Thread count, when only one group is affected.
    pub threads: Option<usize>,
    /// Why.
    pub reason: String,
}

/// A run that failed (a wrong result, a panic, a hang): a bug to report.
#[derive(Clone, Debug, Serialize)]
pub struct Failed {
    /// Target name.
    pub target: String,
    /// Variant.
    pub variant: Option<String>,
    /// Thread count.
    pub threads: usize,
    /// What went wrong.
    pub error: String,
}

/// All results of one case.
#[derive(Clone, Debug, Serialize)]
pub struct CaseReport {
    /// Case name.
    pub case: String,
    /// Seed number.
    pub seed: String,
    /// What the loop does.
    pub title: String,
    /// Unit of the results.
    pub unit: Unit,
    /// Whether a larger value is an improvement.
    pub higher_is_better: bool,
    /// Why the whole case was skipped, if it was.
    pub skipped: Option<String>,
    /// Measured results.
    pub results: Vec<TargetResult>,
    /// Targets (or groups) that did not run.
    pub skipped_targets: Vec<Skipped>,
    /// Runs that failed.
    pub failed: Vec<Failed>,
}

impl CaseReport {
    /// Fills `baseline`, `change_pct`, `significant` and `scaling` of every result:
    /// each is compared with its target's baseline in the same variant and thread count.
    pub fn compare(&mut self, baseline_of: impl Fn(&str) -> Option<&'static str>) {
        let snapshot = self.results.clone();
        let find = |target: &str, variant: &Option<String>, threads: usize| {
            snapshot.iter().find(|r| r.target == target && &r.variant == variant && r.threads == threads)
        };
        for r in &mut self.results {
            if let Some(b) = baseline_of(&r.target)
                && let Some(base) = find(b, &r.variant, r.threads)
            {
                let c = stats::compare(&r.summary(), &base.summary());
                r.baseline = Some(b.to_string());
                r.change_pct = Some(c.change_pct);
                r.significant = c.significant;
            }
            if r.threads > 1
                && let Some(one) = find(&r.target, &r.variant, 1)
                && one.mean > 0.0
            {
                r.scaling = Some(r.mean / one.mean);
            }
        }
    }
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Version of this JSON layout.
    pub schema: u32,
    /// Machine facts.
    pub machine: Machine,
    /// Settings.
    pub config: RunConfig,
    /// One entry per case.
    pub cases: Vec<CaseReport>,
}

/// Formats a value of `unit` for a table: ops/s with k/M/G, seconds with ms/µs.
pub fn fmt_value(v: f64, unit: Unit) -> String {
    match unit {
        Unit::OpsPerSec => {
            let a = v.abs();
            if a >= 1e9 {
                format!("{:.3}G", v / 1e9)
            } else if a >= 1e6 {
                format!("{:.3}M", v / 1e6)
            } else if a >= 1e3 {
                format!("{:.1}k", v / 1e3)
            } else {
                format!("{v:.1}")
            }
        }
        Unit::Seconds => {
            let a = v.abs();
            if a >= 1.0 || a == 0.0 {
                format!("{v:.3}s")
            } else if a >= 1e-3 {
                format!("{:.2}ms", v * 1e3)
            } else {
                format!("{:.1}µs", v * 1e6)
            }
        }
    }
}

/// The change column: signed percent, with `*` when significant, `?` when too few
/// samples for a verdict.
pub fn fmt_change(r: &TargetResult) -> String {
    match r.change_pct {
        None => "-".to_string(),
        Some(p) => {
            let mark = match r.significant {
                Some(true) => " *",
                Some(false) => "",
                None => " ?",
            };
            format!("{p:+.1}%{mark}")
        }
    }
}

/// Renders a case as a table plus lines for skipped and failed runs.
pub fn render_case(c: &CaseReport) -> String {
    let mut out = format!("{} (seed {}): {}\n", c.case, c.seed, c.title);
    if let Some(why) = &c.skipped {
        out.push_str(&format!("  skipped: {why}\n"));
        return out;
    }
    let better = if c.higher_is_better { "higher is better" } else { "lower is better" };
    let has_variant = c.results.iter().any(|r| r.variant.is_some());
    let has_scaling = c.results.iter().any(|r| r.scaling.is_some());
    let mut t = Table::new();
    t.load_preset(presets::ASCII_MARKDOWN);
    let mut head: Vec<String> = Vec::new();
    if has_variant {
        head.push("variant".into());
    }
    head.extend([
        "threads".to_string(),
        "target".to_string(),
        format!("mean {} ({better})", c.unit.as_str()),
        "stddev %".to_string(),
        "min .. max".to_string(),
        "n".to_string(),
        "vs".to_string(),
        "change".to_string(),
    ]);
    if has_scaling {
        head.push("x 1 thread".into());
    }
    let has_counters = c.results.iter().any(|r| r.uvfs_counters.is_some());
    if has_counters {
        head.push("locks/op".into());
    }
    t.set_header(head.clone());
    for r in &c.results {
        let mut row: Vec<Cell> = Vec::new();
        if has_variant {
            row.push(Cell::new(r.variant.as_deref().unwrap_or("")));
        }
        row.push(Cell::new(r.threads).set_alignment(CellAlignment::Right));
        row.push(Cell::new(&r.target));
        row.push(Cell::new(fmt_value(r.mean, r.unit)).set_alignment(CellAlignment::Right));
        row.push(Cell::new(format!("{:.1}%", r.summary().cv() * 100.0)).set_alignment(CellAlignment::Right));
        row.push(Cell::new(format!("{} .. {}", fmt_value(r.min, r.unit), fmt_value(r.max, r.unit))));
        row.push(Cell::new(r.n).set_alignment(CellAlignment::Right));
        row.push(Cell::new(r.baseline.as_deref().unwrap_or("-")));
        row.push(Cell::new(fmt_change(r)).set_alignment(CellAlignment::Right));
        if has_scaling {
            row.push(
                Cell::new(r.scaling.map(|s| format!("{s:.2}x")).unwrap_or_else(|| "-".into()))
                    .set_alignment(CellAlignment::Right),
            );
        }
        if has_counters {
            let locks = match r.uvfs_counters {
                Some(k) if r.ops > 0 => format!("{:.1}", k.locks as f64 / r.ops as f64),
                _ => "-".into(),
            };
            row.push(Cell::new(locks).set_alignment(CellAlignment::Right));
        }
        t.add_row(row);
    }
    if !c.results.is_empty() {
        out.push_str(&t.to_string());
        out.push('\n');
    }
    for f in &c.failed {
        out.push_str(&format!(
            "  FAILED {}{} ({} thread{}): {}\n",
            f.target,
            f.variant.as_deref().map(|v| format!(" [{v}]")).unwrap_or_default(),
            f.threads,
            if f.threads == 1 { "" } else { "s" },
            f.error
        ));
    }
    for s in &c.skipped_targets {
        let mut what = s.target.clone();
        if let Some(v) = &s.variant {
            what.push_str(&format!(" [{v}]"));
        }
        if let Some(n) = s.threads {
            what.push_str(&format!(" ({n} threads)"));
        }
        out.push_str(&format!("  skipped {what}: {}\n", s.reason));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(target: &str, threads: usize, samples: &[f64]) -> TargetResult {
        TargetResult::new(target, None, threads, Unit::OpsPerSec, samples, 1, 42, None).unwrap()
    }

    fn baseline_of(t: &str) -> Option<&'static str> {
        crate::target::target(t).and_then(|t| t.baseline)
    }

    fn sample_case() -> CaseReport {
        let mut c = CaseReport {
            case: "stat2".into(),
            seed: "004".into(),
            title: "t".into(),
            unit: Unit::OpsPerSec,
            higher_is_better: true,
            skipped: None,
            results: vec![
                result("kernel", 1, &[0.0, 100.0, 101.0, 99.0, 100.0, 100.0]),
                result("uvfs", 1, &[0.0, 200.0, 202.0, 198.0, 200.0, 200.0]),
                result("uvfs-no-lockless", 1, &[0.0, 190.0, 230.0, 170.0, 210.0, 200.0]),
                result("kernel", 2, &[0.0, 150.0, 151.0, 149.0, 150.0, 150.0]),
                result("uvfs", 2, &[0.0, 400.0, 404.0, 396.0, 400.0, 400.0]),
            ],
            skipped_targets: vec![Skipped {
                target: "fuse".into(),
                variant: None,
                threads: None,
                reason: "no FUSE".into(),
            }],
            failed: vec![Failed {
                target: "uvfs-no-lockless".into(),
                variant: None,
                threads: 2,
                error: "stat a/b: EIO".into(),
            }],
        };
        c.compare(baseline_of);
        c
    }

    #[test]
    fn warmup_dropped_from_statistics() {
        let r = result("uvfs", 1, &[1e9, 10.0, 20.0]);
        assert_eq!(r.warmup_samples, vec![1e9]);
        assert_eq!(r.samples, vec![10.0, 20.0]);
        assert_eq!((r.n, r.mean, r.min, r.max), (2, 15.0, 10.0, 20.0));
        assert!(TargetResult::new("uvfs", None, 1, Unit::Seconds, &[1.0], 1, 0, None).is_none());
    }

    #[test]
    fn comparisons_use_the_documented_baselines() {
        let c = sample_case();
        let get = |t: &str, n: usize| c.results.iter().find(|r| r.target == t && r.threads == n).unwrap();
        let k = get("kernel", 1);
        assert_eq!((k.baseline.as_deref(), k.change_pct, k.significant), (None, None, None));
        let u = get("uvfs", 1);
        assert_eq!(u.baseline.as_deref(), Some("kernel"));
        assert!((u.change_pct.unwrap() - 100.0).abs() < 1e-9);
        assert_eq!(u.significant, Some(true));
        let off = get("uvfs-no-lockless", 1);
        assert_eq!(off.baseline.as_deref(), Some("uvfs"));
        assert!((off.change_pct.unwrap() + 0.0).abs() < 1e-9);
        assert_eq!(off.significant, Some(false));
        // Scaling: mean(2) / mean(1) of the same target.
        assert!((get("uvfs", 2).scaling.unwrap() - 2.0).abs() < 1e-9);
        assert!((get("kernel", 2).scaling.unwrap() - 1.5).abs() < 1e-9);
        assert_eq!(get("uvfs", 1).scaling, None);
    }

    #[test]
    fn json_has_the_documented_keys() {
        let report = Report {
            schema: 1,
            machine: Machine { cores: 2, kernel: "6.1.0".into(), cpu: None, uvfs_version: "0.1.0".into() },
            config: RunConfig {
                quick: true,
                sample_seconds: 0.25,
                samples: 5,
                warmup: 1,
                threads: 2,
                messaging_groups: 1,
                messaging_loops: 10,
                significance: SIGNIFICANCE,
            },
            cases: vec![sample_case()],
        };
        let v: serde_json::Value = serde_json::to_value(&report).unwrap();
        for k in ["cores", "kernel", "uvfs_version"] {
            assert!(v["machine"].get(k).is_some(), "machine.{k}");
        }
        let case = &v["cases"][0];
        assert_eq!(case["case"], "stat2");
        assert_eq!(case["unit"], "ops/s");
        let r = &case["results"][1];
        for k in ["target", "threads", "samples", "mean", "stddev", "unit", "baseline", "change_pct", "significant"] {
            assert!(r.get(k).is_some(), "result.{k}");
        }
        assert_eq!(r["target"], "uvfs");
        assert_eq!(r["unit"], "ops/s");
        assert_eq!(r["samples"].as_array().unwrap().len(), 5);
        assert_eq!(r["mean"], 200.0);
        assert_eq!(r["significant"], true);
        assert_eq!(case["skipped_targets"][0]["target"], "fuse");
        assert_eq!(case["skipped_targets"][0]["reason"], "no FUSE");
        assert_eq!(case["failed"][0]["error"], "stat a/b: EIO");
        let s = serde_json::to_value(Unit::Seconds).unwrap();
        assert_eq!(s, "s");
    }

    #[test]
    fn table_shows_marks_and_skips() {
        let mut c = sample_case();
        c.results[2].uvfs_counters = Some(WalkCounters { locks: 6 * 42, ..Default::default() });
        let text = render_case(&c);
        assert!(text.contains("locks/op"), "{text}");
        assert!(text.contains("|      6.0 |"), "{text}");
        assert!(text.contains("+100.0% *"), "{text}");
        assert!(text.contains("| uvfs-no-lockless"), "{text}");
        assert!(text.contains("2.00x"), "{text}");
        assert!(text.contains("skipped fuse: no FUSE"), "{text}");
        assert!(text.contains("FAILED uvfs-no-lockless (2 threads): stat a/b: EIO"), "{text}");
    }

    #[test]
    fn value_formatting() {
        assert_eq!(fmt_value(2_914_973.0, Unit::OpsPerSec), "2.915M");
        assert_eq!(fmt_value(51_230.0, Unit::OpsPerSec), "51.2k");
        assert_eq!(fmt_value(0.4837, Unit::Seconds), "483.70ms");
        assert_eq!(fmt_value(12.5, Unit::Seconds), "12.500s");
        let mut r = result("uvfs", 1, &[0.0, 1.0, 2.0]);
        assert_eq!(fmt_change(&r), "-");
        r.change_pct = Some(-4.27);
        r.significant = None;
        assert_eq!(fmt_change(&r), "-4.3% ?");
        r.significant = Some(true);
        assert_eq!(fmt_change(&r), "-4.3% *");
    }
}
