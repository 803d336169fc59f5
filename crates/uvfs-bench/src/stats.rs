//! Summary statistics and the significance rule.
//!
//! A target's result is a list of samples (ops/s per sample interval, or seconds per
//! iteration). [`Summary`] gives mean, sample standard deviation (n - 1), min and max.
//!
//! **Significance rule.** Two results differ significantly when Welch's two-sided t-test
//! rejects "equal means" at the 95% level: `t = (m1 - m2) / sqrt(s1²/n1 + s2²/n2)`, with
//! the Welch–Satterthwaite degrees of freedom rounded *down* and the critical value taken
//! from the t table (for df above 30 the next lower tabulated df is used), so the test
//! errs towards "not significant". It is only applied when both sides have at least
//! [`MIN_SAMPLES`] samples; with fewer, the comparison has no verdict (`None`). Welch's
//! test uses each side's own spread, so a noisy target does not borrow the precision of a
//! quiet one.

use serde::Serialize;

/// Fewest samples on each side for a significance verdict.
pub const MIN_SAMPLES: usize = 5;

/// Mean, spread and range of a list of samples.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (divides by n - 1; 0 for a single sample).
    pub stddev: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
}

impl Summary {
    /// Summarises `samples`; `None` when there are none.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        let n = samples.len();
        if n == 0 {
            return None;
        }
        let mean = samples.iter().sum::<f64>() / n as f64;
        let stddev = if n > 1 {
            let ss: f64 = samples.iter().map(|x| (x - mean) * (x - mean)).sum();
            (ss / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        let min = samples.iter().copied().fold(f64::INFINITY, f64::min);
        let max = samples.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some(Summary { n, mean, stddev, min, max })
    }

    /// Standard deviation as a fraction of the mean (0 when the mean is 0).
    pub fn cv(&self) -> f64 {
        if self.mean == 0.0 { 0.0 } else { self.stddev / self.mean.abs() }
    }
}

/// Outcome of comparing a result with its baseline.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Comparison {
    /// `(mean - baseline mean) / baseline mean`, in percent.
    pub change_pct: f64,
    /// Welch's t statistic (`None` when both spreads are zero and the means are equal).
    pub t: Option<f64>,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: Option<f64>,
    /// Whether the difference is outside the noise; `None` when either side has fewer
    /// than [`MIN_SAMPLES`] samples.
    pub significant: Option<bool>,
}

/// Compares `x` with `baseline` under the rule in the module docs.
pub fn compare(x: &Summary, baseline: &Summary) -> Comparison {
    let change_pct = if baseline.mean == 0.0 { 0.0 } else { (x.mean - baseline.mean) / baseline.mean * 100.0 };
    let welch = welch(x, baseline);
    let significant = if x.n < MIN_SAMPLES || baseline.n < MIN_SAMPLES {
        None
    } else {
        Some(match welch {
            Some((t, df)) => t.abs() > t_critical_95(df),
            // Both spreads are zero: any difference of means is outside the noise.
            None => x.mean != baseline.mean,
        })
    };
    Comparison { change_pct, t: welch.map(|w| w.0), df: welch.map(|w| w.1), significant }
}

/// Welch's t statistic and degrees of freedom; `None` when both variances are zero (or
/// a side has fewer than two samples, so there is no variance to speak of).
pub fn welch(a: &Summary, b: &Summary) -> Option<(f64, f64)> {
    if a.n < 2 || b.n < 2 {
        return None;
    }
    let va = a.stddev * a.stddev / a.n as f64;
    let vb = b.stddev * b.stddev / b.n as f64;
    let se2 = va + vb;
    if se2 == 0.0 {
        return None;
    }
    let t = (a.mean - b.mean) / se2.sqrt();
    let df = se2 * se2 / (va * va / (a.n - 1) as f64 + vb * vb / (b.n - 1) as f64);
    Some((t, df))
}

/// Two-sided 95% critical value of Student's t for `df` degrees of freedom, rounding
/// `df` down to a tabulated value (conservative).
pub fn t_critical_95(df: f64) -> f64 {
    const SMALL: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    ];
    if !df.is_finite() || df < 1.0 {
        // Not enough information: demand an impossible t so nothing is significant.
        return if df.is_infinite() && df > 0.0 { 1.960 } else { f64::INFINITY };
    }
    let d = df.floor() as u64;
    match d {
        1..=30 => SMALL[d as usize - 1],
        31..=39 => 2.042,
        40..=59 => 2.021,
        60..=119 => 2.000,
        120..=999 => 1.980,
        _ => 1.960,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    #[test]
    fn summary_of_known_samples() {
        let s = Summary::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert_eq!(s.n, 8);
        assert!(close(s.mean, 5.0));
        // Sum of squares 32, n - 1 = 7.
        assert!(close(s.stddev, (32.0f64 / 7.0).sqrt()));
        assert_eq!(s.min, 2.0);
        assert_eq!(s.max, 9.0);
        assert!(close(s.cv(), (32.0f64 / 7.0).sqrt() / 5.0));
    }

    #[test]
    fn summary_edge_cases() {
        assert_eq!(Summary::of(&[]), None);
        let one = Summary::of(&[3.5]).unwrap();
        assert_eq!((one.n, one.mean, one.stddev, one.min, one.max), (1, 3.5, 0.0, 3.5, 3.5));
        assert_eq!(Summary::of(&[0.0, 0.0]).unwrap().cv(), 0.0);
    }

    #[test]
    fn welch_matches_hand_computation() {
        // a: mean 10, var 1 (n 5); b: mean 12, var 4 (n 5).
        let a = Summary { n: 5, mean: 10.0, stddev: 1.0, min: 0.0, max: 0.0 };
        let b = Summary { n: 5, mean: 12.0, stddev: 2.0, min: 0.0, max: 0.0 };
        let (t, df) = welch(&a, &b).unwrap();
        // se² = 1/5 + 4/5 = 1; t = -2; df = 1 / ((0.04 + 0.64) / 4) = 5.882...
        assert!(close(t, -2.0));
        assert!(close(df, 1.0 / (0.68 / 4.0)));
    }

    #[test]
    fn critical_values_round_down() {
        assert_eq!(t_critical_95(1.0), 12.706);
        assert_eq!(t_critical_95(5.9), 2.571);
        assert_eq!(t_critical_95(6.0), 2.447);
        assert_eq!(t_critical_95(35.0), 2.042);
        assert_eq!(t_critical_95(45.0), 2.021);
        assert_eq!(t_critical_95(1e6), 1.960);
        assert_eq!(t_critical_95(0.5), f64::INFINITY);
        assert_eq!(t_critical_95(f64::NAN), f64::INFINITY);
        // The table decreases monotonically towards the normal quantile.
        let mut prev = f64::INFINITY;
        for df in 1..2000 {
            let c = t_critical_95(df as f64);
            assert!(c <= prev && c >= 1.96, "df {df}");
            prev = c;
        }
    }

    #[test]
    fn clear_difference_is_significant() {
        let base = Summary::of(&[100.0, 101.0, 99.0, 100.5, 99.5]).unwrap();
        let fast = Summary::of(&[150.0, 151.0, 149.0, 150.5, 149.5]).unwrap();
        let c = compare(&fast, &base);
        assert!(close(c.change_pct, 50.0));
        assert_eq!(c.significant, Some(true));
        let c = compare(&base, &fast);
        assert!(close(c.change_pct, -100.0 / 3.0));
        assert_eq!(c.significant, Some(true));
    }

    #[test]
    fn difference_inside_the_noise_is_not_significant() {
        let base = Summary::of(&[100.0, 120.0, 80.0, 110.0, 90.0]).unwrap();
        let other = Summary::of(&[105.0, 125.0, 85.0, 115.0, 95.0]).unwrap();
        let c = compare(&other, &base);
        assert!(close(c.change_pct, 5.0));
        assert_eq!(c.significant, Some(false));
    }

    #[test]
    fn borderline_uses_the_critical_value() {
        // t = -2 with df ≈ 5.88 → critical 2.571: not significant; the same t with
        // large n (df large, critical 1.98) is significant.
        let a = Summary { n: 5, mean: 10.0, stddev: 1.0, min: 0.0, max: 0.0 };
        let b = Summary { n: 5, mean: 12.0, stddev: 2.0, min: 0.0, max: 0.0 };
        assert_eq!(compare(&a, &b).significant, Some(false));
        let a = Summary { n: 500, mean: 10.0, stddev: 1.0 * 10.0, min: 0.0, max: 0.0 };
        let b = Summary { n: 500, mean: 12.0, stddev: 2.0 * 10.0, min: 0.0, max: 0.0 };
        let c = compare(&a, &b);
        assert!(close(c.t.unwrap(), -2.0));
        assert_eq!(c.significant, Some(true));
    }

    #[test]
    fn too_few_samples_gives_no_verdict() {
        let base = Summary::of(&[100.0, 100.0, 100.0, 100.0]).unwrap();
        let fast = Summary::of(&[200.0, 200.0, 200.0, 200.0, 200.0]).unwrap();
        let c = compare(&fast, &base);
        assert_eq!(c.significant, None);
        assert!(close(c.change_pct, 100.0));
    }

    #[test]
    fn zero_spread_compares_means() {
        let a = Summary::of(&[5.0; 6]).unwrap();
        let b = Summary::of(&[6.0; 6]).unwrap();
        assert_eq!(compare(&a, &b).significant, Some(true));
        assert_eq!(compare(&a, &a).significant, Some(false));
        assert_eq!(compare(&a, &a).t, None);
    }
}
