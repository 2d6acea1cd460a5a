//! The nominated node first (upstream's `evaluateNominatedNode`): a pod an
//! earlier preemption nominated to a node tries that node alone before the
//! others, and goes there without scoring any other node when it passes
//! every filter.

use super::engine::{Engine, PodView};
use super::filtering::ClassCache;
use super::pod_level::PodLevel;
use super::state::BatchState;

impl Engine<'_, '_> {
    /// The pod's nominated node when it passes every filter there, else None
    /// (no nomination, or the node does not fit: all nodes are evaluated).
    pub(super) fn nominated_node_fits(
        &self,
        state: &BatchState,
        cache: &ClassCache,
        pod: &PodView,
        pod_level: Option<&PodLevel>,
    ) -> Option<usize> {
        let nominated = self.pods.preemption.as_ref()?.nominated[pod.index];
        if nominated < 0 {
            return None;
        }
        let node = nominated as usize;
        self.evaluate(state, cache, pod, node, pod_level.map(|pl| &pl.prefilter), &mut |_| {})
            .map(|_| node)
    }
}
