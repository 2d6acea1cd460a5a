//! Filter failure reasons as dense integer codes, so a per-pod histogram is
//! a plain array.
//!
//! Each reason's message, and whether preemption could resolve it, live in the
//! plugin's file (its `REASONS`, which `registry::reasons_of` finds by plugin);
//! this module numbers them. The space: 0 is `FEASIBLE`, then the fixed codes
//! (`FIXED_REASONS`: each plugin's reasons in registry order, so adding a plugin
//! renumbers none by hand), then one "Insufficient <resource>" code per resource
//! column (NodeResourcesFit), then `PER_METRIC` codes per metric (ksched's
//! metric plugins).

use crate::model::{reason_code, PluginId, FIXED_REASON_COUNT, PLUGINS, PLUGIN_COUNT};
use crate::registry::reasons_of;

pub use crate::plugins::metrics::{metric, METRIC_ABOVE, METRIC_BELOW, METRIC_MISSING, PER_METRIC};
pub use crate::plugins::node_resources_fit::{insufficient, FIRST_INSUFFICIENT};
pub use crate::plugins::FEASIBLE;

/// Size of the dense reason-code space.
pub fn count(resources: usize, metrics: usize) -> usize {
    FIRST_INSUFFICIENT as usize + resources + metrics * PER_METRIC as usize
}

/// A fixed filter failure reason with its dense code and the plugin that reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReasonInfo {
    pub code: u32,
    pub plugin: PluginId,
    pub message: &'static str,
    /// Whether evicting pods could resolve it (see `plugins::Reason`).
    pub resolvable: bool,
}

const fn collect_fixed_reasons() -> [ReasonInfo; FIXED_REASON_COUNT as usize] {
    let first = ReasonInfo {
        code: 0,
        plugin: PluginId::NodeUnschedulable,
        message: "",
        resolvable: false,
    };
    let mut out = [first; FIXED_REASON_COUNT as usize];
    let mut i = 0;
    while i < PLUGIN_COUNT {
        let id = PLUGINS[i].id;
        let reasons = reasons_of(id);
        let mut j = 0;
        while j < reasons.len() {
            let code = reason_code(id, j as u32);
            out[code as usize - 1] = ReasonInfo {
                code,
                plugin: id,
                message: reasons[j].message,
                resolvable: reasons[j].resolvable,
            };
            j += 1;
        }
        i += 1;
    }
    out
}

/// Every fixed reason, in registry order, which is also code order: codes
/// 1..=N, then `FIRST_INSUFFICIENT` (checked by a test).
pub const FIXED_REASONS: &[ReasonInfo] = &collect_fixed_reasons();

/// Whether evicting pods could resolve a node's failure with `code`.
pub fn resolvable(code: u32, resources: usize) -> bool {
    match code.checked_sub(1).and_then(|i| FIXED_REASONS.get(i as usize)) {
        Some(r) => r.resolvable,
        None => (FIRST_INSUFFICIENT..FIRST_INSUFFICIENT + resources as u32).contains(&code),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_reasons_are_dense_and_come_before_the_resource_codes() {
        let codes: Vec<u32> = FIXED_REASONS.iter().map(|r| r.code).collect();
        let want: Vec<u32> = (1..=FIXED_REASONS.len() as u32).collect();
        assert_eq!(codes, want);
        assert_eq!(FIRST_INSUFFICIENT, FIXED_REASONS.len() as u32 + 1);
    }

    #[test]
    fn a_plugins_code_constants_name_their_messages() {
        use crate::plugins::{node_affinity, node_resources_fit, pod_topology_spread, volume_binding, volume_zone};
        let cases = [
            (
                node_affinity::NODE_AFFINITY_PREFILTER,
                "node(s) didn't satisfy plugin(s) [NodeAffinity]",
            ),
            (node_resources_fit::TOO_MANY_PODS, "Too many pods"),
            (
                volume_binding::VOLUME_PV_MISSING,
                "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)",
            ),
            (volume_zone::VOLUME_ZONE_CONFLICT, "node(s) had no available volume zone"),
            (
                pod_topology_spread::SPREAD_MISSING_LABEL,
                "node(s) didn't match pod topology spread constraints (missing required label)",
            ),
        ];
        for (code, want) in cases {
            let got = FIXED_REASONS[code as usize - 1];
            assert_eq!((got.code, got.message), (code, want));
        }
    }

    #[test]
    fn every_reason_belongs_to_a_filter_plugin() {
        for r in FIXED_REASONS {
            assert!(r.plugin.info().filter, "{} reports {:?}", r.plugin.name(), r.message);
        }
    }

    #[test]
    fn resolvable_by_preemption() {
        use crate::plugins::inter_pod_affinity::{EXISTING_ANTI_AFFINITY, POD_AFFINITY, POD_ANTI_AFFINITY};
        use crate::plugins::node_affinity::NODE_AFFINITY;
        use crate::plugins::node_ports::NODE_PORTS;
        use crate::plugins::node_resources_fit::TOO_MANY_PODS;
        use crate::plugins::node_unschedulable::NODE_UNSCHEDULABLE;
        use crate::plugins::pod_topology_spread::{SPREAD, SPREAD_MISSING_LABEL};
        let cases = [
            ("NodeUnschedulable", NODE_UNSCHEDULABLE, false),
            ("NodeAffinity", NODE_AFFINITY, false),
            ("NodePorts", NODE_PORTS, true),
            ("Too many pods", TOO_MANY_PODS, true),
            ("spread skew", SPREAD, true),
            ("spread missing label", SPREAD_MISSING_LABEL, false),
            ("pod affinity", POD_AFFINITY, false),
            ("pod anti-affinity", POD_ANTI_AFFINITY, true),
            ("existing anti-affinity", EXISTING_ANTI_AFFINITY, true),
            ("Insufficient cpu", insufficient(0), true),
            ("Insufficient last resource", insufficient(3), true),
            ("a metric", metric(4, 0, METRIC_ABOVE), false),
        ];
        for (name, code, want) in cases {
            assert_eq!(resolvable(code, 4), want, "{name}");
        }
    }
}
