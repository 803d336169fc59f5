//! The SVG chart of `uvfs bench --case workloads`: one bar per (workload, target) that
//! has a tmpfs time beside it, showing speed relative to tmpfs (tmpfs median / target
//! median) on the same log2 axis as the seeds' chart, so every bar left of 1x is slower
//! than the physical limit and its length says by how much.

use std::fmt::Write as _;

use super::{Bar, PAD, W, esc, render_bars};
use crate::report::workloads::WorkloadsReport;

const BAR_H: f64 = super::BAR_H;

/// The bars, in table order (workload, then target).
pub fn bars(r: &WorkloadsReport) -> Vec<Bar> {
    let mut out = Vec::new();
    for w in &r.workloads {
        for x in &w.results {
            if let Some(v) = x.vs_tmpfs.filter(|v| *v > 0.0) {
                out.push(Bar {
                    label: format!("{} {}", w.workload, x.target),
                    target: x.target.clone(),
                    ratio: 1.0 / v,
                });
            }
        }
    }
    out
}

/// The chart as an SVG document.
pub fn render(r: &WorkloadsReport) -> String {
    let bars = bars(r);
    let h = PAD + 50.0 + BAR_H * bars.len().max(1) as f64 + 30.0 + PAD;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{PAD}" y="{}" font-size="15" font-weight="bold">uvfs bench --case workloads: speed relative to tmpfs (log scale)</text>"#,
        PAD + 12.0
    );
    let m = &r.machine;
    let c = &r.config;
    let _ = writeln!(
        s,
        r##"<text x="{PAD}" y="{}" fill="#555">{} cores, Linux {}, uvfs {}; {} files, {:.0} MB, {} round(s){}{}</text>"##,
        PAD + 30.0,
        m.cores,
        esc(&m.kernel),
        esc(&m.uvfs_version),
        c.tree.files,
        c.tree.bytes as f64 / 1e6,
        c.rounds,
        if c.quick { ", --quick" } else { "" },
        if c.mount_opts.is_empty() { String::new() } else { format!("; mount: {}", esc(&c.mount_opts.join(" "))) },
    );
    if bars.is_empty() {
        let _ = writeln!(s, r#"<text x="{PAD}" y="{}">no target ran next to tmpfs</text>"#, PAD + 64.0);
    } else {
        render_bars(&mut s, &bars, PAD + 50.0);
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_are_speed_relative_to_tmpfs() {
        let r = crate::report::workloads::tests::sample_report();
        let b = bars(&r);
        let find = |l: &str| b.iter().find(|x| x.label == l).map(|x| x.ratio);
        assert_eq!(find("untar uvfs-memfs"), Some(0.1));
        assert_eq!(find("untar hostdir"), Some(0.5));
        assert_eq!(find("untar tmpfs"), None, "tmpfs is the axis");
        let svg = render(&r);
        assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
        assert!(svg.contains("untar uvfs-memfs: 0.10x"), "{svg}");
        assert!(svg.contains("mount: --attr-timeout=60"));
    }
}
