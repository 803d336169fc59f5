//! A hand-written SVG chart of a run: no plotting crate.
//!
//! Top: one horizontal bar per (case, variant, threads, target) that has a `kernel`
//! result in the same group, showing speed relative to the kernel on a log2 axis
//! (ops/s ratio, or kernel time / target time for wall-time cases), so bars to the right
//! of 1x are faster than the host. Bottom: stat2's ops/s against threads, one line per
//! target (thread scaling of same-file stat, seed 004).
//!
//! `uvfs bench --case workloads` draws its own chart with the same bars ([`workloads`]).

pub mod workloads;

use std::fmt::Write as _;

use crate::report::{CaseReport, Report};

const W: f64 = 960.0;
const LABEL_W: f64 = 330.0;
const BAR_H: f64 = 18.0;
const PAD: f64 = 20.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A colour per target, stable across charts.
fn color(target: &str) -> &'static str {
    match target {
        "kernel" => "#7f7f7f",
        "uvfs" => "#1f77b4",
        "fuse" => "#2ca02c",
        "uvfs-no-lockless" => "#ff7f0e",
        "uvfs-no-failed-open" => "#d62728",
        "uvfs-no-symlink-cache" => "#9467bd",
        "uvfs-no-acl" => "#8c564b",
        "uvfs-no-notify" => "#e377c2",
        "uvfs-no-path-cache" => "#aec7e8",
        "tmpfs" => "#7f7f7f",
        "hostdir" => "#8c564b",
        "uvfs-memfs" => "#1f77b4",
        "uvfs-hostfs" => "#17becf",
        "uvfs-hostfs-unchanged" => "#2ca02c",
        // Peer servers of the workloads (`--target-cmd`): a colour from the name.
        other => {
            const PEERS: [&str; 5] = ["#bcbd22", "#e377c2", "#9467bd", "#ff7f0e", "#d62728"];
            PEERS[other.bytes().map(usize::from).sum::<usize>() % PEERS.len()]
        }
    }
}

/// One bar: label and speed relative to the kernel (> 1: faster).
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    /// Row label.
    pub label: String,
    /// Target (for the colour).
    pub target: String,
    /// Speed relative to the kernel.
    pub ratio: f64,
}

/// The bars of a report, in table order.
pub fn bars(report: &Report) -> Vec<Bar> {
    let mut out = Vec::new();
    for c in &report.cases {
        for r in &c.results {
            if r.target == "kernel" {
                continue;
            }
            let Some(k) =
                c.results.iter().find(|k| k.target == "kernel" && k.variant == r.variant && k.threads == r.threads)
            else {
                continue;
            };
            if k.mean <= 0.0 || r.mean <= 0.0 {
                continue;
            }
            let ratio = if c.higher_is_better { r.mean / k.mean } else { k.mean / r.mean };
            let mut label = c.case.clone();
            if let Some(v) = &r.variant {
                let _ = write!(label, " [{v}]");
            }
            let _ = write!(label, " {}t {}", r.threads, r.target);
            out.push(Bar { label, target: r.target.clone(), ratio });
        }
    }
    out
}

/// stat2 lines: (target, [(threads, ops/s)]).
pub fn scaling_lines(report: &Report) -> Vec<(String, Vec<(usize, f64)>)> {
    let mut lines: Vec<(String, Vec<(usize, f64)>)> = Vec::new();
    let Some(c) = report.cases.iter().find(|c| c.case == "stat2") else {
        return lines;
    };
    for r in &c.results {
        match lines.iter_mut().find(|(t, _)| *t == r.target) {
            Some((_, pts)) => pts.push((r.threads, r.mean)),
            None => lines.push((r.target.clone(), vec![(r.threads, r.mean)])),
        }
    }
    for (_, pts) in &mut lines {
        pts.sort_by_key(|p| p.0);
    }
    lines
}

/// The whole chart as an SVG document.
pub fn render(report: &Report) -> String {
    let bars = bars(report);
    let lines = scaling_lines(report);
    let bars_h = 50.0 + BAR_H * bars.len().max(1) as f64 + 30.0;
    let line_h = if lines.is_empty() { 0.0 } else { 340.0 };
    let h = PAD + bars_h + line_h + PAD;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let m = &report.machine;
    let _ = writeln!(
        s,
        r#"<text x="{PAD}" y="{}" font-size="15" font-weight="bold">uvfs bench: speed relative to the host kernel (log scale)</text>"#,
        PAD + 12.0
    );
    let _ = writeln!(
        s,
        r##"<text x="{PAD}" y="{}" fill="#555">{} cores, Linux {}, uvfs {}{}</text>"##,
        PAD + 30.0,
        m.cores,
        esc(&m.kernel),
        esc(&m.uvfs_version),
        if report.config.quick { ", --quick" } else { "" }
    );
    render_bars(&mut s, &bars, PAD + 50.0);
    if !lines.is_empty() {
        render_lines(&mut s, &lines, PAD + bars_h, report.cases.iter().find(|c| c.case == "stat2"));
    }
    s.push_str("</svg>\n");
    s
}

fn render_bars(s: &mut String, bars: &[Bar], top: f64) {
    let x0 = PAD + LABEL_W;
    let plot_w = W - x0 - PAD;
    if bars.is_empty() {
        let _ = writeln!(s, r#"<text x="{PAD}" y="{}">no target ran next to the kernel</text>"#, top + 14.0);
        return;
    }
    // Symmetric log2 axis, at least 0.5x .. 2x.
    let span = bars.iter().map(|b| b.ratio.log2().abs()).fold(1.0f64, f64::max).ceil();
    let xof = |ratio: f64| x0 + plot_w / 2.0 + ratio.log2().clamp(-span, span) / span * plot_w / 2.0;
    let bottom = top + BAR_H * bars.len() as f64;
    for k in -(span as i32)..=(span as i32) {
        let r = 2f64.powi(k);
        let x = xof(r);
        let label = if k >= 0 { format!("{}x", 1u64 << k) } else { format!("1/{}x", 1u64 << -k) };
        let stroke = if k == 0 { "#000" } else { "#ddd" };
        let _ = writeln!(s, r#"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{bottom}" stroke="{stroke}"/>"#);
        let _ = writeln!(
            s,
            r##"<text x="{x:.1}" y="{:.1}" text-anchor="middle" fill="#555">{label}</text>"##,
            bottom + 14.0
        );
    }
    for (i, b) in bars.iter().enumerate() {
        let y = top + BAR_H * i as f64;
        let (a, z) = (xof(1.0), xof(b.ratio));
        let (x, w) = if z >= a { (a, z - a) } else { (z, a - z) };
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            x0 - 6.0,
            y + BAR_H - 5.0,
            esc(&b.label)
        );
        let _ = writeln!(
            s,
            r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}: {:.2}x</title></rect>"#,
            y + 2.0,
            w.max(1.0),
            BAR_H - 4.0,
            color(&b.target),
            esc(&b.label),
            b.ratio
        );
        let tx = if z >= a { z + 4.0 } else { z - 4.0 };
        let anchor = if z >= a { "start" } else { "end" };
        let _ = writeln!(
            s,
            r#"<text x="{tx:.1}" y="{:.1}" text-anchor="{anchor}" font-size="10">{:.2}x</text>"#,
            y + BAR_H - 5.0,
            b.ratio
        );
    }
}

fn render_lines(s: &mut String, lines: &[(String, Vec<(usize, f64)>)], top: f64, case: Option<&CaseReport>) {
    let title = case.map(|c| c.title.as_str()).unwrap_or("stat2");
    let _ = writeln!(
        s,
        r#"<text x="{PAD}" y="{:.1}" font-size="15" font-weight="bold">stat2: {} (ops/s by threads)</text>"#,
        top + 14.0,
        esc(title)
    );
    let (x0, y0, pw, ph) = (PAD + 70.0, top + 40.0, W - 2.0 * PAD - 70.0 - 170.0, 250.0);
    let max_t = lines.iter().flat_map(|(_, p)| p.iter().map(|q| q.0)).max().unwrap_or(1).max(2);
    let max_y = lines.iter().flat_map(|(_, p)| p.iter().map(|q| q.1)).fold(0.0f64, f64::max);
    let max_y = if max_y > 0.0 { nice_ceiling(max_y) } else { 1.0 };
    let xof = |t: usize| x0 + (t as f64 - 1.0) / (max_t as f64 - 1.0) * pw;
    let yof = |v: f64| y0 + ph - v / max_y * ph;
    let _ = writeln!(s, r##"<rect x="{x0}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>"##);
    for i in 0..=4 {
        let v = max_y * i as f64 / 4.0;
        let y = yof(v);
        let _ = writeln!(s, r##"<line x1="{x0}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#eee"/>"##, x0 + pw);
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#555">{}</text>"##,
            x0 - 6.0,
            y + 4.0,
            crate::report::fmt_value(v, crate::cases::Unit::OpsPerSec)
        );
    }
    let step = (max_t / 16).max(1);
    for t in (1..=max_t).filter(|t| (t - 1) % step == 0 || *t == max_t) {
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#555">{t}</text>"##,
            xof(t),
            y0 + ph + 16.0
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#555">threads</text>"##,
        x0 + pw / 2.0,
        y0 + ph + 32.0
    );
    for (i, (target, pts)) in lines.iter().enumerate() {
        let col = color(target);
        let path: Vec<String> = pts.iter().map(|&(t, v)| format!("{:.1},{:.1}", xof(t), yof(v))).collect();
        let _ = writeln!(s, r#"<polyline points="{}" fill="none" stroke="{col}" stroke-width="2"/>"#, path.join(" "));
        for &(t, v) in pts {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{col}"><title>{} {t} threads: {}</title></circle>"#,
                xof(t),
                yof(v),
                esc(target),
                crate::report::fmt_value(v, crate::cases::Unit::OpsPerSec)
            );
        }
        let ly = y0 + 10.0 + 18.0 * i as f64;
        let lx = x0 + pw + 16.0;
        let _ = writeln!(s, r#"<rect x="{lx}" y="{:.1}" width="12" height="12" fill="{col}"/>"#, ly - 10.0);
        let _ = writeln!(s, r#"<text x="{:.1}" y="{ly:.1}">{}</text>"#, lx + 18.0, esc(target));
    }
}

/// The next 1, 2 or 5 times a power of ten at or above `v` (> 0).
fn nice_ceiling(v: f64) -> f64 {
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * p).find(|&c| c >= v).unwrap_or(10.0 * p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cases::Unit;
    use crate::report::{Machine, RunConfig, SIGNIFICANCE, TargetResult};

    fn res(target: &str, threads: usize, v: f64) -> TargetResult {
        TargetResult::new(target, None, threads, Unit::OpsPerSec, &[v, v], 0, 0, None).unwrap()
    }

    fn report() -> Report {
        let case = |name: &str, unit: Unit, results| CaseReport {
            case: name.into(),
            seed: "000".into(),
            title: "t <&>".into(),
            unit,
            higher_is_better: unit.higher_is_better(),
            skipped: None,
            results,
            skipped_targets: vec![],
            failed: vec![],
        };
        let mut msg = vec![res("kernel", 40, 2.0), res("uvfs", 40, 0.5)];
        for r in &mut msg {
            r.unit = Unit::Seconds;
        }
        Report {
            schema: 1,
            machine: Machine { cores: 2, kernel: "6.1".into(), cpu: None, uvfs_version: "0.1.0".into() },
            config: RunConfig {
                quick: true,
                sample_seconds: 0.25,
                samples: 2,
                warmup: 0,
                threads: 2,
                messaging_groups: 1,
                messaging_loops: 1,
                significance: SIGNIFICANCE,
            },
            cases: vec![
                case(
                    "stat2",
                    Unit::OpsPerSec,
                    vec![
                        res("kernel", 1, 100.0),
                        res("uvfs", 1, 300.0),
                        res("kernel", 2, 150.0),
                        res("uvfs", 2, 600.0),
                        res("uvfs-no-lockless", 2, 50.0),
                    ],
                ),
                case("messaging", Unit::Seconds, msg),
            ],
        }
    }

    #[test]
    fn bars_are_speed_relative_to_the_kernel() {
        let b = bars(&report());
        let find = |l: &str| b.iter().find(|x| x.label == l).unwrap().ratio;
        assert_eq!(b.len(), 4);
        assert!((find("stat2 1t uvfs") - 3.0).abs() < 1e-12);
        assert!((find("stat2 2t uvfs") - 4.0).abs() < 1e-12);
        assert!((find("stat2 2t uvfs-no-lockless") - 1.0 / 3.0).abs() < 1e-12);
        // Wall time: kernel 2 s, uvfs 0.5 s → 4x faster.
        assert!((find("messaging 40t uvfs") - 4.0).abs() < 1e-12);
    }

    #[test]
    fn scaling_lines_per_target() {
        let l = scaling_lines(&report());
        assert_eq!(l[0], ("kernel".to_string(), vec![(1, 100.0), (2, 150.0)]));
        assert_eq!(l[1], ("uvfs".to_string(), vec![(1, 300.0), (2, 600.0)]));
        assert_eq!(l[2], ("uvfs-no-lockless".to_string(), vec![(2, 50.0)]));
    }

    #[test]
    fn svg_is_well_formed_and_escaped() {
        let svg = render(&report());
        assert!(svg.starts_with("<svg "));
        assert!(svg.trim_end().ends_with("</svg>"));
        for tag in ["text", "title", "svg"] {
            let open = svg.matches(&format!("<{tag}")).count();
            assert!(open > 0, "{tag}");
            assert_eq!(open, svg.matches(&format!("</{tag}>")).count(), "{tag}");
        }
        // Every element is either self-closed or closed.
        for tag in ["rect", "circle", "line", "polyline"] {
            for (i, _) in svg.match_indices(&format!("<{tag} ")) {
                let end = svg[i..].find('>').unwrap();
                let closed = svg[i..i + end].ends_with('/') || svg[i + end..].starts_with("><title>");
                assert!(closed, "{tag} at {i}");
            }
        }
        assert!(svg.contains("t &lt;&amp;&gt;"));
        assert!(!svg.contains("t <&>"));
        assert_eq!(svg.matches("<polyline").count(), 3);
        assert!(svg.contains("4.00x"));
    }

    #[test]
    fn nice_ceilings() {
        assert_eq!(nice_ceiling(7.0), 10.0);
        assert_eq!(nice_ceiling(1.5e6), 2e6);
        assert_eq!(nice_ceiling(3e6), 5e6);
        assert_eq!(nice_ceiling(1e6), 1e6);
    }
}
