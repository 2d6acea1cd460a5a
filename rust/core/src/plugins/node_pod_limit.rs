//! NodePodLimit (ksched's own, off in the default-equivalent profile): a node
//! takes a pod only while it holds fewer pods than the profile's `maxPods`,
//! counted as NodeResourcesFit counts them for "Too many pods" (bound and
//! assumed pods, nominated pods held there, and pods placed earlier in the
//! batch; a preemption dry run leaves its victims out). It keeps nodes below
//! the kubelet's own limit, e.g. to leave room for pods placed by others.

use super::{Reason, FEASIBLE};
use crate::model::{reason_code, PluginId};

/// Its reasons by local index; evicting pods frees a place, so preemption may try the node.
pub const REASONS: &[Reason] = &[Reason::resolvable("node(s) had reached the profile's pod limit")];

pub const POD_LIMIT: u32 = reason_code(PluginId::NodePodLimit, 0);

/// `pod_count`: the pods the node holds; `max_pods`: the profile's limit.
#[inline]
pub fn filter(pod_count: i64, max_pods: i64) -> u32 {
    if pod_count < max_pods {
        FEASIBLE
    } else {
        POD_LIMIT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let cases = [
            ("empty node", 0, 3, FEASIBLE),
            ("one place left", 2, 3, FEASIBLE),
            ("at the limit", 3, 3, POD_LIMIT),
            ("over the limit (the limit was lowered)", 5, 3, POD_LIMIT),
            ("a limit of one takes a pod on an empty node only", 0, 1, FEASIBLE),
            ("a limit of one, one pod there", 1, 1, POD_LIMIT),
        ];
        for (name, pod_count, max_pods, want) in cases {
            let got = filter(pod_count, max_pods);
            assert_eq!(got, want, "{name}: want {want} got {got}");
        }
    }
}
