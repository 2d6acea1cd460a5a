//! The metric filter's verdict for one pod on one node (load estimate v2).
//!
//! Every node has a shared verdict (`BatchState::metric_codes`): its values,
//! with the placements of the batch added, against the specs' thresholds or
//! the node's own. A pod sees exactly that verdict unless its priority band
//! has other thresholds, its own estimate counts against them, or no metric
//! filter applies to it; such a pod's verdict is its own (`MetricFilter::Own`),
//! computed from the node's values and what the pod brings, and what it reads
//! of the pod joins its signature (`Engine::metric_key_part`), so the signature caches and
//! what they carry to the next call stay exact. Pods without load inputs take
//! the shared path, as fast as before there were any.
//!
//! A pod whose own estimate counts is scored by the node's values with the
//! pod's share added (`Engine::incoming`, `scored_value`): a node is ranked by
//! what it would read with the pod. The filter reads the cautious figures (the
//! values, and the pod's `amounts`); the scores read the expected ones (the
//! values less their `caution`, and the pod's `expected`), so that caution
//! keeps a node from going hot without skewing where pods go among the others:
//! a node whose new pods count with a deviation would otherwise rank below a
//! node that measures as much, and end cooler.

use super::engine::{Engine, Incoming, MetricFilter, PodView};
use super::signature::SignatureCache;
use super::state::BatchState;
use crate::model::{LoadInputs, MetricSpec, METRIC_EXEMPT, METRIC_POD_THRESHOLDS, METRIC_STRICTER_THRESHOLDS};
use crate::plugins::{metrics, FEASIBLE};
use std::sync::OnceLock;

/// A threshold as the load inputs carry it (NaN: none), bit for bit.
fn bits(limit: Option<f64>) -> u64 {
    limit.unwrap_or(f64::NAN).to_bits()
}

fn limit(v: f64) -> Option<f64> {
    (!v.is_nan()).then_some(v)
}

/// Metric `k`'s thresholds on `node`: the node's own where it has one, else `fallback`.
#[inline]
fn on_node(load: &LoadInputs, m: usize, node: usize, k: usize, fallback: (Option<f64>, Option<f64>)) -> (Option<f64>, Option<f64>) {
    let at = node * m + k;
    (limit(load.node_above[at]).or(fallback.0), limit(load.node_below[at]).or(fallback.1))
}

/// Metric `k`'s thresholds on `node` for a pod held to `pod` and to the node's
/// own, whichever is stricter: the lower `above`, the higher `below`.
#[inline]
fn stricter(load: &LoadInputs, m: usize, node: usize, k: usize, pod: (Option<f64>, Option<f64>)) -> (Option<f64>, Option<f64>) {
    let at = node * m + k;
    let pick = |a: Option<f64>, b: Option<f64>, f: fn(f64, f64) -> f64| match (a, b) {
        (Some(a), Some(b)) => Some(f(a, b)),
        (a, b) => a.or(b),
    };
    (
        pick(pod.0, limit(load.node_above[at]), f64::min),
        pick(pod.1, limit(load.node_below[at]), f64::max),
    )
}

/// `amount` over `capacity`; 0 where the node has none.
#[inline]
fn share(amount: i64, capacity: i64) -> f64 {
    if capacity > 0 {
        amount as f64 / capacity as f64
    } else {
        0.0
    }
}

/// Metric `k`'s lines for pod `index` on `node`, as its own verdict reads them
/// (`exempt`): None where the metric does not filter it.
#[inline]
fn pod_lines(load: &LoadInputs, m: usize, index: usize, node: usize, k: usize) -> Option<(Option<f64>, Option<f64>)> {
    let at = index * m + k;
    let pod_limits = (limit(load.pod_above[at]), limit(load.pod_below[at]));
    match load.exempt[at] {
        METRIC_EXEMPT => None,
        METRIC_POD_THRESHOLDS => Some(pod_limits),
        METRIC_STRICTER_THRESHOLDS => Some(stricter(load, m, node, k, pod_limits)),
        _ => Some(on_node(load, m, node, k, pod_limits)),
    }
}

/// The chance that a reading of mean `mean` and standard deviation `sd`
/// (normal) ends past the line on the caution's side: above the first of
/// `lines` where `up` (the caution reads higher), below the second else. The
/// line on the other side is not one the pod's load can take the node past.
/// Nil where the reading has no spread.
#[inline]
pub(super) fn crossing(mean: f64, sd: f64, up: bool, lines: (Option<f64>, Option<f64>)) -> f64 {
    if !(sd > 0.0 && sd.is_finite() && mean.is_finite()) {
        return 0.0;
    }
    // How far short of the line the mean reading is; past `TAIL_END`
    // deviations the tail is nil, and most nodes are that far (no division).
    let short = if up { lines.0.map(|a| a - mean) } else { lines.1.map(|b| mean - b) };
    match short {
        Some(short) if short < TAIL_END * sd => upper_tail(short / sd),
        _ => 0.0,
    }
}

/// Steps of the tail's table per deviation: linear interpolation between its
/// points is within 5e-7 of the tail (the step squared over 8, times the normal
/// density's steepest slope, 0.242).
const TAIL_STEPS: f64 = 256.0;
/// Deviations the table covers; past them the tail is under 1e-15, no score moves
/// by it, and most nodes are that far from their line.
const TAIL_END: f64 = 8.0;
const TAIL_POINTS: usize = (TAIL_END * TAIL_STEPS) as usize + 1;

/// P(Z > z) for a standard normal Z, interpolated in a table of
/// [`normal_tail`]: the engine asks it for every node a pod that weighs risk
/// could go to, and the table costs a fraction of the exponential.
pub(super) fn upper_tail(z: f64) -> f64 {
    static TABLE: OnceLock<[f64; TAIL_POINTS]> = OnceLock::new();
    let a = z.abs();
    if a.is_nan() {
        return 0.0;
    }
    let tail = if a < TAIL_END {
        let table = TABLE.get_or_init(|| std::array::from_fn(|i| normal_tail(i as f64 / TAIL_STEPS)));
        let at = a * TAIL_STEPS;
        let i = at as usize;
        table[i] + (at - i as f64) * (table[i + 1] - table[i])
    } else {
        0.0
    };
    if z >= 0.0 {
        tail
    } else {
        1.0 - tail
    }
}

/// P(Z > z) for a standard normal Z and z >= 0: erfc(z / sqrt 2) / 2, with erfc
/// by the Chebyshev fit of Numerical Recipes (6.2), fractional error under 1.2e-7.
pub(super) fn normal_tail(z: f64) -> f64 {
    let x = z / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.5 * x);
    let poly = -1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07 + t * (-1.135_203_98 + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    t * (-x * x + poly).exp() / 2.0
}

/// Whether a pod's own estimate of metric `k` (its load row at `at`) counts on
/// a node, against the thresholds and in its score: not for the legacy
/// `herdEstimate`, nor for an estimate of nothing.
#[inline]
fn counts_own_estimate(load: &LoadInputs, spec: &MetricSpec, at: usize, k: usize) -> bool {
    load.incoming[k] && spec.estimate.is_some() && load.amounts[at] != 0
}

impl Engine<'_, '_> {
    /// How the metric filter treats pod `index`.
    pub(super) fn metric_filter(&self, index: usize) -> MetricFilter {
        let Some(load) = &self.metrics.load else {
            return MetricFilter::Shared;
        };
        let specs = &self.metrics.specs;
        let m = specs.len();
        if m == 0 {
            return MetricFilter::Shared;
        }
        let exempt = &load.exempt[index * m..(index + 1) * m];
        if exempt.iter().all(|&e| e == METRIC_EXEMPT) {
            return MetricFilter::Exempt;
        }
        let own = specs.iter().enumerate().any(|(k, spec)| {
            let at = index * m + k;
            let (above, below) = (load.pod_above[at], load.pod_below[at]);
            exempt[k] != 0
                || above.to_bits() != bits(spec.above)
                || below.to_bits() != bits(spec.below)
                || counts_own_estimate(load, spec, at, k)
        });
        if own {
            MetricFilter::Own
        } else {
            MetricFilter::Shared
        }
    }

    /// The nodes the threshold of a metric of `ScheduleOptions::threshold_metrics`
    /// rejected for a pod that fits nowhere (`sig`, its evaluation), with their
    /// reason codes: the metric filter runs after every other, so those nodes
    /// passed the rest (`Outcome::threshold_nodes`). Nodes are walked only where
    /// the histogram counts such a reason.
    pub(super) fn threshold_nodes(&self, sig: &SignatureCache) -> Vec<(u32, u32)> {
        let first = metrics::metric(self.resources, 0, 0);
        let threshold = |code: u32| {
            code >= first
                && self
                    .threshold_metrics
                    .get(((code - first) / metrics::PER_METRIC) as usize)
                    .is_some_and(|&listed| listed)
                && matches!((code - first) % metrics::PER_METRIC, metrics::METRIC_ABOVE | metrics::METRIC_BELOW)
        };
        let counted = sig.histogram.iter().enumerate().any(|(code, &n)| n > 0 && threshold(code as u32));
        if !counted {
            return Vec::new();
        }
        (0..sig.evals.len())
            .filter_map(|node| match sig.first_reason(node, self.resources) {
                Some(code) if threshold(code) => Some((node as u32, code)),
                _ => None,
            })
            .collect()
    }

    /// The node's shared verdict from its metric values (`m` per node).
    pub(super) fn shared_metric_code(&self, values: &[f64], node: usize) -> u32 {
        let specs = &self.metrics.specs;
        match &self.metrics.load {
            None => metrics::filter(specs, values, self.resources),
            Some(load) => metrics::filter_with(
                specs,
                values,
                self.resources,
                |k| Some(on_node(load, specs.len(), node, k, (specs[k].above, specs[k].below))),
                |_| 0.0,
            ),
        }
    }

    /// The pod's own verdict on `node`: its thresholds (the node's where it has
    /// its own), with its estimate added where it counts.
    fn own_metric_code(&self, state: &BatchState, pod: &PodView, node: usize) -> u32 {
        let load = self.metrics.load.as_ref().expect("an own metric filter implies load inputs");
        let specs = &self.metrics.specs;
        let (m, r) = (specs.len(), self.resources);
        metrics::filter_with(
            specs,
            &state.values[node * m..(node + 1) * m],
            r,
            |k| pod_lines(load, m, pod.index, node, k),
            |k| self.own_share(pod.index, node, k, load.amounts),
        )
    }

    /// What pod `index` adds to metric `k` of `node` where its own estimate
    /// counts (load estimate v2): its `amounts` (the filter's) or `expected`
    /// (the scores') entry over the node's allocatable of the estimate's
    /// resource; 0 elsewhere.
    #[inline]
    fn own_share(&self, index: usize, node: usize, k: usize, amounts: &[i64]) -> f64 {
        share(amounts[index * self.metrics.specs.len() + k], self.capacity(node, k))
    }

    /// The node's allocatable of metric `k`'s estimate resource where the
    /// incoming pod's estimate counts; 0 where it does not (no share).
    #[inline]
    fn capacity(&self, node: usize, k: usize) -> i64 {
        match (&self.metrics.load, self.metrics.specs[k].estimate) {
            (Some(load), Some((column, _))) if load.incoming[k] => self.nodes.allocatable[node * self.resources + column],
            _ => 0,
        }
    }

    /// Whose estimate pod `index`'s metric scores add to the nodes' values:
    /// its own where its filter counts it (`MetricFilter::Own` with a non-zero
    /// estimate), so a node is scored, as it is filtered, by the value it would
    /// have with the pod (as NodeResourcesFit scores the requests with the
    /// pod's); None: the batch's values, as every other pod sees them.
    pub(super) fn incoming(&self, index: usize, filter: MetricFilter) -> Incoming {
        let load = self.metrics.load.as_ref()?;
        let m = self.metrics.specs.len();
        let counts = |k: usize| counts_own_estimate(load, &self.metrics.specs[k], index * m + k, k);
        (filter == MetricFilter::Own && (0..m).any(counts)).then_some(index)
    }

    /// Metric `k` of `node` as a pod's scores read it (`Incoming`): the expected
    /// value, with the pod's expected usage where its own estimate counts.
    ///
    /// Where the metric weighs risk (`LoadInputs::risk`), the pod's caution
    /// counts too, weighed by the chance that the node ends past the line the
    /// filter holds the pod to there, times the metric's risk weight. The node's
    /// reading with the pod is taken as normal, at its mean (node and pod less
    /// their caution) with one standard deviation of the node's caution and the
    /// pod's together (independent: the root of the sum of their squares). The
    /// node's caution is what its estimate added for the pods no sample shows
    /// yet, whether or not the scores keep it (`kept_caution`), and what the
    /// batch's placements there add over their expected usage. Among nodes that
    /// all hold the pod's cautious figure, one where its tail would cross the
    /// line (a small node, or one near its line) ranks below one that absorbs
    /// it; far from the line the chance is nil and the pod is scored at its
    /// expected usage alone. A node whose reading is already one caution above
    /// its mean is not taken to hold that caution for certain.
    #[inline]
    pub(super) fn scored_value(&self, state: &BatchState, incoming: Incoming, node: usize, k: usize) -> f64 {
        let v = state.metric_value(node, k);
        let (Some(index), Some(load)) = (incoming, &self.metrics.load) else {
            return v;
        };
        let m = self.metrics.specs.len();
        let (at, capacity) = (index * m + k, self.capacity(node, k));
        let expected = v + share(load.expected[at], capacity);
        let weight = load.risk.get(k).copied().unwrap_or(0.0);
        if !(weight > 0.0 && weight.is_finite()) {
            return expected;
        }
        let Some(lines) = pod_lines(load, m, index, node, k) else {
            return expected;
        };
        let cell = node * m + k;
        let pod_caution = share(load.amounts[at], capacity) - share(load.expected[at], capacity);
        let node_caution = state.values[cell] - v + state.kept_caution[cell];
        let mean = expected - state.kept_caution[cell];
        // The side the pod's caution takes the node to: a pod expected above its cautious
        // figure (a prior's quantile under the typical figure) has no line to weigh there.
        let up = pod_caution > 0.0;
        expected + weight * crossing(mean, node_caution.hypot(pod_caution), up, lines) * pod_caution
    }

    /// The badness min–max normalization reads of metric `k` of `node` for a pod (`Incoming`).
    #[inline]
    pub(super) fn scored_badness(&self, state: &BatchState, incoming: Incoming, node: usize, k: usize) -> f64 {
        match incoming {
            Some(_) => metrics::badness(self.metrics.specs[k].prefer, self.scored_value(state, incoming, node, k)),
            None => state.badness[node * self.metrics.specs.len() + k],
        }
    }

    /// What the pod's metric filter reads of the pod, for its signature: nothing
    /// where it sees the shared verdicts, else its kind and, for its own verdict,
    /// each metric's exemption, thresholds and estimate: a length fixed by the
    /// kind, so the
    /// host ports that follow cannot be read as part of it.
    pub(super) fn metric_key_part(&self, pod: &PodView, key: &mut Vec<i64>) {
        match pod.metric {
            MetricFilter::Shared => key.push(0),
            MetricFilter::Exempt => key.push(1),
            MetricFilter::Own => {
                key.push(2);
                let load = self.metrics.load.as_ref().expect("an own metric filter implies load inputs");
                let m = self.metrics.specs.len();
                for at in pod.index * m..(pod.index + 1) * m {
                    key.extend([
                        load.exempt[at] as i64,
                        load.pod_above[at].to_bits() as i64,
                        load.pod_below[at].to_bits() as i64,
                        load.amounts[at],
                        load.expected[at],
                    ]);
                }
            }
        }
    }
}

impl BatchState {
    /// The metric filter's verdict for `pod` on `node` as the batch has it now.
    #[inline]
    pub(super) fn metric_code(&self, engine: &Engine, pod: &PodView, node: usize) -> u32 {
        match pod.metric {
            MetricFilter::Shared => self.metric_codes[node],
            MetricFilter::Exempt => FEASIBLE,
            MetricFilter::Own => engine.own_metric_code(self, pod, node),
        }
    }
}
