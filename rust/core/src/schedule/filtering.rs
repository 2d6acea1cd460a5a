//! Filtering one pod on one node, in the registry's order: the class-level
//! plugins' verdicts and raw scores, computed once per constraint class for
//! the whole batch, then the node- and pod-level plugins per pod, then the
//! metric thresholds; and the node-level scores of a node that passes.

use rayon::prelude::*;

use super::engine::{Engine, PodView, NODES_PER_CHUNK};
use super::state::BatchState;
use crate::model::row;
use crate::plugins::node_affinity::NODE_AFFINITY_PREFILTER;
use crate::plugins::node_ports::HostPort;
use crate::plugins::FEASIBLE;
use crate::registry::{
    self, NodeInput, PreFilter, WithNominated, CLASS_FILTERS, CLASS_SCORERS, CLASS_SCORES, NODE_FILTERS, NODE_SCORERS, NODE_SCORES,
    POD_FILTERS,
};

/// The class-level filters' verdicts (first failing reason code per node)
/// and the class-level plugins' raw scores (`score_slot` order; zeros where
/// a plugin is off or cannot score the class).
pub(super) struct ClassCache {
    pub codes: Vec<u8>,
    pub raw: [Vec<i64>; CLASS_SCORES],
}

/// A node's usage as the resource and port filters check it: the batch's, or
/// preemption's dry run's with victims removed (their host ports `freed_ports`).
pub(super) struct Usage<'x> {
    pub requested: &'x [i64],
    pub pod_count: i64,
    pub placed_ports: &'x [HostPort],
    pub freed_ports: &'x [HostPort],
}

/// The node-level plugins' scores of a feasible node (`score_slot` order, 0..=100).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct NodeScores(pub [i64; NODE_SCORES]);

impl Engine<'_, '_> {
    pub(super) fn class_cache(&self, class: usize) -> ClassCache {
        let n = self.nodes.count;
        let mut codes = vec![FEASIBLE as u8; n];
        // The class's matchFields restriction (NodeAffinity's PreFilter), resolved by the caller.
        if self.classes.has_prefilter[class] != 0 {
            codes.iter_mut().for_each(|c| *c = NODE_AFFINITY_PREFILTER as u8);
            for &node in &self.classes.prefilter_nodes[row(self.classes.prefilter_offsets, class)] {
                codes[node as usize] = FEASIBLE as u8;
            }
        }
        let (nodes, classes, on) = (self.nodes, self.classes, &self.profile.filter);
        codes
            .par_iter_mut()
            .with_min_len(NODES_PER_CHUNK)
            .enumerate()
            .for_each(|(node, code)| {
                if *code != FEASIBLE as u8 {
                    return;
                }
                let mut c = FEASIBLE;
                for &id in &CLASS_FILTERS {
                    if on[id as usize] {
                        c = registry::filter_class(id, nodes, classes, class, node);
                        if c != FEASIBLE {
                            break;
                        }
                    }
                }
                *code = c as u8;
            });
        let mut raw: [Vec<i64>; CLASS_SCORES] = std::array::from_fn(|_| Vec::new());
        for (slot, &id) in CLASS_SCORERS.iter().enumerate() {
            if self.profile.weight_of(id) != 0 && registry::scores_class(id, classes, class) {
                raw[slot] = (0..n)
                    .into_par_iter()
                    .with_min_len(NODES_PER_CHUNK)
                    .map(|node| registry::score_class(id, nodes, classes, class, node))
                    .collect();
            }
        }
        for r in raw.iter_mut().filter(|r| r.is_empty()) {
            *r = vec![0; n];
        }
        ClassCache { codes, raw }
    }

    /// `node_input` on the node as the batch has it now: its requests, pod count and host
    /// ports, none freed.
    #[inline(always)]
    pub(super) fn current_input<'x>(
        &'x self,
        state: &'x BatchState,
        pod: &'x PodView,
        node: usize,
        prefilter: Option<&'x PreFilter>,
    ) -> NodeInput<'x> {
        let r = self.resources;
        let requested = &state.requested[node * r..(node + 1) * r];
        let usage = Usage {
            requested,
            pod_count: state.pod_count[node],
            placed_ports: &state.placed_ports[node],
            freed_ports: &[],
        };
        self.node_input(state, pod, node, usage, prefilter)
    }

    /// What the node- and pod-level plugins read about `pod` on `node`, whose
    /// usage the filters check is `usage`.
    #[inline(always)]
    pub(super) fn node_input<'x>(
        &'x self,
        state: &'x BatchState,
        pod: &'x PodView,
        node: usize,
        usage: Usage<'x>,
        prefilter: Option<&'x PreFilter>,
    ) -> NodeInput<'x> {
        let Usage {
            requested: filter_requested,
            pod_count: filter_pod_count,
            placed_ports,
            freed_ports,
        } = usage;
        NodeInput {
            nodes: self.nodes,
            volumes: self.pods.volumes.as_ref(),
            selectors: &self.classes.selectors,
            node,
            profile: self.profile,
            pod: pod.index,
            pod_ports: &self.pods.host_ports,
            has_ports: pod.has_ports,
            request: pod.request,
            nonzero_request: pod.nonzero_request,
            columns: &pod.fit_columns,
            filter_requested,
            filter_pod_count,
            placed_ports,
            freed_ports,
            requested: &state.requested,
            nonzero_requested: &state.nonzero_requested,
            balanced: pod.balanced,
            balanced_node_only: pod.balanced_node_only,
            balance_without: &state.balance_without,
            images: pod.images,
            containers: pod.containers,
            prefilter,
            with_nominated: None,
        }
    }

    /// Every filter on one node, then the node-level scores of a node that
    /// passes. `report` receives the failing plugin's reason codes.
    ///
    /// Upstream's `RunFilterPluginsWithNominatedPods`: where nominated pods of
    /// equal or higher priority are held on the node, the filters run first
    /// with them counted (requests, pod count, host ports, and added to the
    /// spread and affinity state), then again without them; the node passes
    /// only if both passes do (a nominated pod may never land there).
    #[inline]
    pub(super) fn evaluate(
        &self,
        state: &BatchState,
        cache: &ClassCache,
        pod: &PodView,
        node: usize,
        prefilter: Option<&PreFilter>,
        report: &mut impl FnMut(u32),
    ) -> Option<NodeScores> {
        let code = cache.codes[node] as u32;
        if code != FEASIBLE {
            report(code);
            return None;
        }
        let input = self.current_input(state, pod, node, prefilter);
        if state.has_nominated_for(pod, node) {
            let (mut buf, mut ports_buf) = (Vec::new(), Vec::new());
            let (filter_requested, filter_pod_count) = state.requested_with_nominated(self, pod, node, &mut buf);
            let placed_ports = state.ports_with_nominated(self, pod, node, &mut ports_buf);
            let with = prefilter.map(|pf| self.with_nominated(state, pod, node, pf));
            let first = NodeInput {
                filter_requested,
                filter_pod_count,
                placed_ports,
                with_nominated: with.as_ref(),
                ..input
            };
            if !self.passes(&first, report) {
                return None;
            }
        }
        if !self.passes(&input, report) {
            return None;
        }
        let code = state.metric_code(self, pod, node);
        if code != FEASIBLE {
            report(code);
            return None;
        }
        Some(self.node_scores(&input))
    }

    /// The spread and affinity PreFilter state with the nominated pods that
    /// count for `pod` on `node` added (upstream's AddPod for each).
    pub(super) fn with_nominated(&self, state: &BatchState, pod: &PodView, node: usize, prefilter: &PreFilter) -> WithNominated {
        let mut out = WithNominated {
            spread: prefilter.spread.clone(),
            affinity: prefilter.affinity.clone(),
        };
        let Some(table) = self.pods.table.as_ref() else {
            return out;
        };
        if out.spread.is_none() && out.affinity.is_none() {
            return out;
        }
        let include = self.inclusion(table, pod.class);
        let row = table.bound + pod.index;
        for other in state.nominated_for(pod, node).filter_map(|h| h.table_row(self)) {
            if let Some(f) = &mut out.spread {
                f.add_pod(table, self.nodes, &include, row, other, node);
            }
            if let Some(f) = &mut out.affinity {
                f.add_pod(table, self.nodes, row, other, node);
            }
        }
        out
    }

    /// The node-level filters, then (where the pod has pod-level state) the
    /// pod-level ones: the registry's order after the class-level filters.
    #[inline(always)]
    pub(super) fn passes(&self, input: &NodeInput, report: &mut impl FnMut(u32)) -> bool {
        self.passes_node_level(input, report) && (input.prefilter.is_none() || self.passes_pod_level(input, report))
    }

    #[inline(always)]
    pub(super) fn passes_node_level(&self, input: &NodeInput, report: &mut impl FnMut(u32)) -> bool {
        let on = &self.profile.filter;
        NODE_FILTERS
            .iter()
            .all(|&id| !on[id as usize] || registry::filter(id, input, report))
    }

    #[inline(always)]
    pub(super) fn passes_pod_level(&self, input: &NodeInput, report: &mut impl FnMut(u32)) -> bool {
        let on = &self.profile.filter;
        POD_FILTERS
            .iter()
            .all(|&id| !on[id as usize] || registry::filter(id, input, report))
    }

    #[inline(always)]
    fn node_scores(&self, input: &NodeInput) -> NodeScores {
        let mut s = NodeScores::default();
        for (slot, &id) in NODE_SCORERS.iter().enumerate() {
            if self.profile.weight_of(id) != 0 {
                s.0[slot] = registry::score_node(id, input);
            }
        }
        s
    }
}
