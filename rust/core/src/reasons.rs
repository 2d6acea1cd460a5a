//! Filter failure reasons as dense integer codes, so a per-pod histogram is
//! a plain array.
//!
//! Each code, its plugin and upstream's message live in the plugin's file;
//! this module gathers the codes into one namespace and sizes the space:
//! the fixed codes (`registry::FIXED_REASONS`), then one "Insufficient
//! <resource>" code per resource column, then `PER_METRIC` per metric.

pub use crate::plugins::inter_pod_affinity::{EXISTING_ANTI_AFFINITY, POD_AFFINITY, POD_ANTI_AFFINITY};
pub use crate::plugins::metrics::{metric, METRIC_ABOVE, METRIC_BELOW, METRIC_MISSING, PER_METRIC};
pub use crate::plugins::node_affinity::{NODE_AFFINITY, NODE_AFFINITY_PREFILTER};
pub use crate::plugins::node_name::NODE_NAME;
pub use crate::plugins::node_ports::NODE_PORTS;
pub use crate::plugins::node_resources_fit::{insufficient, FIRST_INSUFFICIENT, TOO_MANY_PODS};
pub use crate::plugins::node_unschedulable::NODE_UNSCHEDULABLE;
pub use crate::plugins::pod_topology_spread::{SPREAD, SPREAD_MISSING_LABEL};
pub use crate::plugins::taint_toleration::TAINT_TOLERATION;
pub use crate::plugins::FEASIBLE;

/// Size of the dense reason-code space.
pub fn count(resources: usize, metrics: usize) -> usize {
    FIRST_INSUFFICIENT as usize + resources + metrics * PER_METRIC as usize
}
