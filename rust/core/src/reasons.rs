//! Filter failure reasons as dense integer codes, so a per-pod histogram is
//! a plain array.
//!
//! Each code, its plugin and upstream's message live in the plugin's file.
//! The space: 0 is `FEASIBLE`, then the fixed codes (`registry::FIXED_REASONS`),
//! then one "Insufficient <resource>" code per resource column (NodeResourcesFit),
//! then `PER_METRIC` codes per metric (ksched's metric plugins).

pub use crate::plugins::metrics::{metric, METRIC_ABOVE, METRIC_BELOW, METRIC_MISSING, PER_METRIC};
pub use crate::plugins::node_resources_fit::{insufficient, FIRST_INSUFFICIENT};
pub use crate::plugins::FEASIBLE;

/// Size of the dense reason-code space.
pub fn count(resources: usize, metrics: usize) -> usize {
    FIRST_INSUFFICIENT as usize + resources + metrics * PER_METRIC as usize
}
