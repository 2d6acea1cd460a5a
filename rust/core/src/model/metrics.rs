//! ksched's metric plugins' inputs: per-node values, how each is scored, and
//! load estimate v2's per-pod and per-node parts (`LoadInputs`).

use super::error::{check_len, EngineError};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Prefer {
    Lower,
    Higher,
    Target(f64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    /// Score a node without a value at the middle of the range.
    Neutral,
    /// Score it as the worst node.
    Worst,
    /// Filter it out.
    Exclude,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MetricSpec {
    pub prefer: Prefer,
    /// Fixed normalization range; min–max over the feasible nodes when None.
    pub range: Option<(f64, f64)>,
    /// Filter out nodes whose value is above this.
    pub above: Option<f64>,
    /// Filter out nodes whose value is below this.
    pub below: Option<f64>,
    pub missing: Missing,
    pub weight: f64,
    /// Load estimate: the resource column whose share of allocatable a pod
    /// placed in the batch adds to its node's value, and the factor (the
    /// request times the factor where no `LoadInputs` give the pod's estimate).
    pub estimate: Option<(usize, f64)>,
}

/// Per-node metric values, `nodes × specs.len()`, NaN where missing.
#[derive(Clone)]
pub struct Metrics<'a> {
    pub values: &'a [f64],
    pub specs: Vec<MetricSpec>,
    /// Load estimate v2 (None: every pod and node has the specs' thresholds, and a
    /// placement's estimate is its request times the factor).
    pub load: Option<LoadInputs<'a>>,
}

/// What makes the metric filter depend on the pod and the node: each pod's
/// estimate and thresholds, the pods it does not apply to, and the nodes'
/// own thresholds. Matrices are row-major, one column per metric; NaN stands
/// for "no threshold".
#[derive(Clone)]
pub struct LoadInputs<'a> {
    /// Per metric: the incoming pod's estimate counts against the thresholds
    /// (the legacy `herdEstimate` does not).
    pub incoming: Vec<bool>,
    /// Per metric: an incoming pod's score weighs its caution by the chance
    /// that it takes the node past the metric's line (`scoreRisk`): the
    /// score reads the node's expected value with the pod, plus that chance
    /// times the pod's caution (its `amounts` over its `expected`), times this
    /// weight (0: not at all). The chance reads the node's caution too
    /// (`Engine::scored_value`).
    pub risk: Vec<f64>,
    /// `pods × metrics`: each pod's estimated usage of the estimate's column
    /// (counted as `amount / allocatable` where it is placed, and where
    /// `incoming`, against the thresholds before).
    pub amounts: &'a [i64],
    /// `pods × metrics`: what each pod adds to the values its scores read: its
    /// expected usage, at most `amounts` (the caller leaves out caution the
    /// filter holds it to: its deviations, or a prior's margin).
    pub expected: &'a [i64],
    /// `pods × metrics`: each pod's thresholds (its priority band's).
    pub pod_above: &'a [f64],
    pub pod_below: &'a [f64],
    /// `pods × metrics`: `METRIC_EXEMPT`, `METRIC_POD_THRESHOLDS`,
    /// `METRIC_STRICTER_THRESHOLDS`, or 0 where the metric filters the pod as usual.
    pub exempt: &'a [u8],
    /// `nodes × metrics`: thresholds that replace the pod's on that node (NaN: none).
    pub node_above: &'a [f64],
    pub node_below: &'a [f64],
    /// `nodes × metrics`: the caution in each node's value (the deviations its
    /// estimate adds for pods that no sample shows yet, where the caller scores
    /// by the mean or weighs risk; else 0). The filter reads a node's value;
    /// its scores read the value less this, what the node is expected to read,
    /// so that caution keeps a node from going hot without skewing where pods
    /// go among the nodes it lets through, unless `scores_caution`.
    pub caution: &'a [f64],
    /// Per metric: the scores read each node's value with its caution (every
    /// estimate but `scoreByMean: true`), which then only widens the deviation
    /// that `risk` weighs.
    pub scores_caution: Vec<bool>,
}

/// `LoadInputs::exempt`: the metric does not filter the pod (its owner's kind
/// is exempt, a mirror pod); its scores still apply.
pub const METRIC_EXEMPT: u8 = 1;
/// `LoadInputs::exempt`: only the pod's own thresholds apply, not the node's
/// (a saturated pod placed on the least-loaded node); a missing value still
/// excludes where the metric says so.
pub const METRIC_POD_THRESHOLDS: u8 = 2;
/// `LoadInputs::exempt`: the pod's own thresholds and the node's, whichever is
/// stricter on each side (a rebalancing move's replacement: it must end on the
/// cool side of the move's line, and of a node's own line where that is
/// stricter, but a node's looser line never lets it through).
pub const METRIC_STRICTER_THRESHOLDS: u8 = 3;

impl<'a> Metrics<'a> {
    /// No load estimate v2 inputs: the specs alone.
    pub fn new(values: &'a [f64], specs: Vec<MetricSpec>) -> Metrics<'a> {
        Metrics { values, specs, load: None }
    }
}

impl LoadInputs<'_> {
    pub fn validate(&self, pods: usize, nodes: usize, metrics: usize) -> Result<(), EngineError> {
        check_len("metric load incoming", self.incoming.len(), metrics)?;
        check_len("metric load risk", self.risk.len(), metrics)?;
        check_len("metric load amounts", self.amounts.len(), pods * metrics)?;
        check_len("metric load expected", self.expected.len(), pods * metrics)?;
        check_len("metric load pod_above", self.pod_above.len(), pods * metrics)?;
        check_len("metric load pod_below", self.pod_below.len(), pods * metrics)?;
        check_len("metric load exempt", self.exempt.len(), pods * metrics)?;
        check_len("metric load node_above", self.node_above.len(), nodes * metrics)?;
        check_len("metric load node_below", self.node_below.len(), nodes * metrics)?;
        check_len("metric load caution", self.caution.len(), nodes * metrics)?;
        check_len("metric load scores_caution", self.scores_caution.len(), metrics)
    }
}
