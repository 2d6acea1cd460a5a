//! Metric plugins (ksched's own): per-node values from live sources, a hard
//! threshold filter, a missing-value policy, and `prefer: lower | higher |
//! target(x)` scoring normalized to 0..=100 by min–max over the feasible
//! nodes or by a fixed range.

use super::node_resources_fit::FIRST_INSUFFICIENT;
use super::{FEASIBLE, MAX_NODE_SCORE};
use crate::model::{MetricSpec, Missing, Prefer};

/// Threshold reasons, `PER_METRIC` codes per metric after the resource codes:
/// "node(s) had <metric> above <x>", "... below <x>", "node(s) had no value for <metric>".
pub const METRIC_ABOVE: u32 = 0;
pub const METRIC_BELOW: u32 = 1;
pub const METRIC_MISSING: u32 = 2;
pub const PER_METRIC: u32 = 3;

#[inline]
pub fn metric(resources: usize, metric: usize, kind: u32) -> u32 {
    FIRST_INSUFFICIENT + resources as u32 + metric as u32 * PER_METRIC + kind
}

/// Score given to a node without a value under the `neutral` policy.
pub const NEUTRAL_SCORE: f64 = MAX_NODE_SCORE as f64 / 2.0;

/// First failing metric of a node under the specs' thresholds, as a reason code.
#[inline]
pub fn filter(specs: &[MetricSpec], values: &[f64], resources: usize) -> u32 {
    filter_with(specs, values, resources, |m| Some((specs[m].above, specs[m].below)), |_| 0.0)
}

/// First failing metric of a node, as a reason code, where `limits(m)` gives
/// metric m's (above, below) thresholds there (None: metric m does not filter
/// the pod at all, not even a missing value) and `added(m)` what the incoming
/// pod adds to its value (load estimate v2 counts the pod against the
/// thresholds). The reason is metric m's "above" or "below" whatever the
/// threshold's origin (the spec, the pod's priority band or the node's own).
#[inline]
pub fn filter_with(
    specs: &[MetricSpec],
    values: &[f64],
    resources: usize,
    limits: impl Fn(usize) -> Option<(Option<f64>, Option<f64>)>,
    added: impl Fn(usize) -> f64,
) -> u32 {
    for (m, spec) in specs.iter().enumerate() {
        let Some((above, below)) = limits(m) else { continue };
        let v = values[m];
        if v.is_nan() {
            if spec.missing == Missing::Exclude {
                return metric(resources, m, METRIC_MISSING);
            }
            continue;
        }
        if above.is_none() && below.is_none() {
            continue;
        }
        let v = v + added(m);
        if above.is_some_and(|limit| v > limit) {
            return metric(resources, m, METRIC_ABOVE);
        }
        if below.is_some_and(|limit| v < limit) {
            return metric(resources, m, METRIC_BELOW);
        }
    }
    FEASIBLE
}

/// Lower is better: the quantity min–max normalization works on. Always finite for a
/// value that is not NaN: a distance from the target past f64's range is its largest.
#[inline]
pub fn badness(prefer: Prefer, v: f64) -> f64 {
    let b = match prefer {
        Prefer::Lower => v,
        Prefer::Higher => -v,
        Prefer::Target(x) => (v - x).abs(),
    };
    b.clamp(f64::MIN, f64::MAX)
}

/// Score of a value given the min and max badness over the feasible nodes
/// (ignored when the spec has a fixed range): in 0..=100, never NaN, whatever
/// finite values the nodes report.
#[inline]
pub fn score(spec: &MetricSpec, v: f64, min_badness: f64, max_badness: f64) -> f64 {
    if v.is_nan() {
        return match spec.missing {
            Missing::Neutral => NEUTRAL_SCORE,
            Missing::Worst | Missing::Exclude => 0.0,
        };
    }
    let max = MAX_NODE_SCORE as f64;
    let fraction = match spec.range {
        Some((lo, hi)) => {
            let width = hi - lo;
            if width <= 0.0 {
                return max;
            }
            match spec.prefer {
                Prefer::Lower => (hi - v) / width,
                Prefer::Higher => (v - lo) / width,
                Prefer::Target(x) => 1.0 - (v - x).abs() / (x - lo).max(hi - x).max(f64::MIN_POSITIVE),
            }
        }
        None => {
            // Halved before subtracting: the spread of -1.7e308 and 1.7e308 is past f64's
            // range (infinite, and inf / inf is NaN); the halves' is not, and the ratio is the same.
            let (lo, hi) = (min_badness / 2.0, max_badness / 2.0);
            let spread = hi - lo;
            if spread.is_nan() || spread <= 0.0 {
                return max;
            }
            (hi - badness(spec.prefer, v) / 2.0) / spread
        }
    };
    // NaN only from a fixed range past f64's own (inf / inf): no better than the worst.
    if fraction.is_nan() {
        return 0.0;
    }
    fraction.clamp(0.0, 1.0) * max
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(prefer: Prefer) -> MetricSpec {
        MetricSpec {
            prefer,
            range: None,
            above: None,
            below: None,
            missing: Missing::Neutral,
            weight: 1.0,
            estimate: None,
        }
    }

    #[test]
    fn filter_table() {
        let above = MetricSpec {
            above: Some(0.9),
            ..spec(Prefer::Lower)
        };
        let below = MetricSpec {
            below: Some(10.0),
            ..spec(Prefer::Higher)
        };
        let exclude = MetricSpec {
            missing: Missing::Exclude,
            ..spec(Prefer::Lower)
        };
        let cases = [
            ("under threshold", vec![above], vec![0.5], FEASIBLE),
            ("over threshold", vec![above], vec![0.95], metric(4, 0, METRIC_ABOVE)),
            ("at threshold", vec![above], vec![0.9], FEASIBLE),
            (
                "below minimum",
                vec![spec(Prefer::Lower), below],
                vec![1.0, 5.0],
                metric(4, 1, METRIC_BELOW),
            ),
            ("missing excluded", vec![exclude], vec![f64::NAN], metric(4, 0, METRIC_MISSING)),
            ("missing neutral passes", vec![above], vec![f64::NAN], FEASIBLE),
        ];
        for (name, specs, values, want) in cases {
            assert_eq!(filter(&specs, &values, 4), want, "{name}");
        }
    }

    #[test]
    fn filter_with_table() {
        // Metric 0 excludes nodes without a value; metric 1 scores them neutrally.
        let exclude = MetricSpec {
            missing: Missing::Exclude,
            ..spec(Prefer::Lower)
        };
        let specs = [exclude, spec(Prefer::Lower)];
        type Limits = Option<(Option<f64>, Option<f64>)>;
        let (none, exempt): (Limits, Limits) = (Some((None, None)), None);
        let above = |x| Some((Some(x), None));
        let below = |x| Some((None, Some(x)));
        type Case = (&'static str, [Limits; 2], [f64; 2], [f64; 2], u32);
        let cases: [Case; 9] = [
            (
                "no thresholds: the pod adds nothing",
                [none, none],
                [5.0, 5.0],
                [9.0, 9.0],
                FEASIBLE,
            ),
            (
                "fits before the pod, not with it",
                [above(0.8), none],
                [0.7, 0.0],
                [0.2, 0.0],
                metric(4, 0, METRIC_ABOVE),
            ),
            (
                "with the pod at the threshold",
                [above(0.8), none],
                [0.5, 0.0],
                [0.25, 0.0],
                FEASIBLE,
            ),
            (
                "second metric's own threshold",
                [none, above(0.5)],
                [0.9, 0.6],
                [0.0, 0.0],
                metric(4, 1, METRIC_ABOVE),
            ),
            ("below, the pod lifts it over", [below(0.5), none], [0.4, 0.0], [0.2, 0.0], FEASIBLE),
            (
                "below, still under",
                [below(0.5), none],
                [0.2, 0.0],
                [0.1, 0.0],
                metric(4, 0, METRIC_BELOW),
            ),
            (
                "missing value excluded",
                [above(0.1), none],
                [f64::NAN, 0.0],
                [1.0, 0.0],
                metric(4, 0, METRIC_MISSING),
            ),
            (
                "exempt: a missing value passes",
                [exempt, none],
                [f64::NAN, 0.0],
                [0.0, 0.0],
                FEASIBLE,
            ),
            (
                "exempt from one metric only",
                [exempt, above(0.5)],
                [9.0, 0.6],
                [0.0, 0.0],
                metric(4, 1, METRIC_ABOVE),
            ),
        ];
        for (name, limits, values, added, want) in cases {
            assert_eq!(filter_with(&specs, &values, 4, |m| limits[m], |m| added[m]), want, "{name}");
        }
    }

    #[test]
    fn badness_is_finite() {
        let cases = [
            ("target far below", Prefer::Target(1e308), -1e308, f64::MAX),
            ("higher of the lowest", Prefer::Higher, -f64::MAX, f64::MAX),
            ("lower", Prefer::Lower, 2.0, 2.0),
        ];
        for (name, prefer, v, want) in cases {
            assert_eq!(badness(prefer, v), want, "{name}");
        }
    }

    #[test]
    fn score_table() {
        let lower = spec(Prefer::Lower);
        let higher = spec(Prefer::Higher);
        let target = spec(Prefer::Target(0.5));
        let fixed = MetricSpec {
            range: Some((0.0, 10.0)),
            ..spec(Prefer::Lower)
        };
        let worst = MetricSpec {
            missing: Missing::Worst,
            ..lower
        };
        let cases = [
            ("lower: min gets 100", lower, 1.0, 1.0, 3.0, 100.0),
            ("lower: max gets 0", lower, 3.0, 1.0, 3.0, 0.0),
            ("lower: middle", lower, 2.0, 1.0, 3.0, 50.0),
            ("higher: max gets 100", higher, 3.0, -3.0, -1.0, 100.0),
            ("target: on target", target, 0.5, 0.0, 0.4, 100.0),
            ("target: farthest", target, 0.9, 0.0, 0.4, 0.0),
            ("all equal", lower, 2.0, 2.0, 2.0, 100.0),
            ("fixed range", fixed, 2.5, 0.0, 0.0, 75.0),
            ("fixed range clamps", fixed, 20.0, 0.0, 0.0, 0.0),
            ("missing neutral", lower, f64::NAN, 0.0, 1.0, NEUTRAL_SCORE),
            ("missing worst", worst, f64::NAN, 0.0, 1.0, 0.0),
            // f64's extremes: their spread is past f64's range, never NaN.
            ("extremes: lowest gets 100", lower, -1.7e308, -1.7e308, 1.7e308, 100.0),
            ("extremes: highest gets 0", lower, 1.7e308, -1.7e308, 1.7e308, 0.0),
            ("extremes: the middle", lower, 0.3, -1.7e308, 1.7e308, 50.0),
            ("largest finite: middle", higher, 0.0, -f64::MAX, f64::MAX, 50.0),
            ("target: distance past f64", target, -f64::MAX, 0.0, f64::MAX, 0.0),
            ("fixed range: value past f64 from it", fixed, -f64::MAX, 0.0, 0.0, 100.0),
        ];
        for (name, s, v, lo, hi, want) in cases {
            let got = score(&s, v, lo, hi);
            assert!((got - want).abs() < 1e-9, "{name}: want {want} got {got}");
        }
    }
}
