//! Filter failure reasons as dense integer codes.
//!
//! The caller turns codes into upstream's reason strings (the strings live
//! beside the Python message builder, so nothing but integers crosses the
//! boundary). Codes are dense so a per-pod histogram is a plain array.

pub const FEASIBLE: u32 = 0;
/// NodeUnschedulable: "node(s) were unschedulable".
pub const NODE_UNSCHEDULABLE: u32 = 1;
/// NodeName: "node(s) didn't match the requested node name".
pub const NODE_NAME: u32 = 2;
/// TaintToleration: "node(s) had untolerated taint(s)".
pub const TAINT_TOLERATION: u32 = 3;
/// NodeAffinity: "node(s) didn't match Pod's node affinity/selector".
pub const NODE_AFFINITY: u32 = 4;
/// Nodes left out by NodeAffinity's PreFilter (matchFields on metadata.name):
/// "node(s) didn't satisfy plugin(s) [NodeAffinity]".
pub const NODE_AFFINITY_PREFILTER: u32 = 5;
/// NodePorts: "node(s) didn't have free ports for the requested pod ports".
pub const NODE_PORTS: u32 = 6;
/// NodeResourcesFit: "Too many pods".
pub const TOO_MANY_PODS: u32 = 7;
/// PodTopologySpread: "node(s) didn't match pod topology spread constraints".
pub const SPREAD: u32 = 8;
/// PodTopologySpread: "... (missing required label)".
pub const SPREAD_MISSING_LABEL: u32 = 9;
/// InterPodAffinity: "node(s) didn't match pod affinity rules".
pub const POD_AFFINITY: u32 = 10;
/// InterPodAffinity: "node(s) didn't match pod anti-affinity rules".
pub const POD_ANTI_AFFINITY: u32 = 11;
/// InterPodAffinity: "node(s) didn't satisfy existing pods anti-affinity rules".
pub const EXISTING_ANTI_AFFINITY: u32 = 12;
/// NodeResourcesFit: "Insufficient <resource>", one code per resource column.
pub const FIRST_INSUFFICIENT: u32 = 13;

/// Metric threshold reasons, three per metric after the resource codes.
pub const METRIC_ABOVE: u32 = 0;
pub const METRIC_BELOW: u32 = 1;
pub const METRIC_MISSING: u32 = 2;
pub const PER_METRIC: u32 = 3;

#[inline]
pub fn insufficient(resource: usize) -> u32 {
    FIRST_INSUFFICIENT + resource as u32
}

#[inline]
pub fn metric(resources: usize, metric: usize, kind: u32) -> u32 {
    FIRST_INSUFFICIENT + resources as u32 + metric as u32 * PER_METRIC + kind
}

/// Size of the dense reason-code space.
pub fn count(resources: usize, metrics: usize) -> usize {
    FIRST_INSUFFICIENT as usize + resources + metrics * PER_METRIC as usize
}
