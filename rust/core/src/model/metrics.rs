//! ksched's metric plugins' inputs: per-node values and how each is scored.

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
    /// Herd estimate: each pod placed in the batch adds request / allocatable of
    /// this resource column, times the factor, to its node's value.
    pub herd: Option<(usize, f64)>,
}

/// Per-node metric values, `nodes × specs.len()`, NaN where missing.
#[derive(Clone)]
pub struct Metrics<'a> {
    pub values: &'a [f64],
    pub specs: Vec<MetricSpec>,
}
