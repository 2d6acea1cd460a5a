//! The pod-level plugins (PodTopologySpread, InterPodAffinity: every row of
//! `Level::Pod`): their PreFilter and PreScore for one pod over the pods on
//! nodes, and their scores added to the pod's totals.

use std::cell::RefCell;

use super::engine::{Engine, PodView};
use super::state::BatchState;
use crate::model::PodTable;
use crate::plugins::{node_affinity, taint_toleration, FEASIBLE};
use crate::registry::{self, PodContext, PodLevelKept, PreFilter, PreScore, POD_FILTERS, POD_SCORERS, POD_SCORES};

/// The pod-level plugins' state for one pod.
pub(super) struct PodLevel {
    pub prefilter: PreFilter,
    pub prescore: PreScore,
}

/// The pods on nodes the pod-level plugins count (bound pods, then the batch's
/// placements; `affine`: those with inter-pod affinity terms), and whether a bound
/// pod, by pod table row, is `removed` (preemption's dry run leaves victims out).
#[derive(Clone, Copy)]
pub(super) struct OnNodes<'c> {
    pub pods: &'c [(u32, u32)],
    pub affine: &'c [(u32, u32)],
    pub removed: &'c dyn Fn(u32) -> bool,
}

impl<'c> OnNodes<'c> {
    /// The batch's, none removed.
    pub fn batch(state: &'c BatchState) -> Self {
        OnNodes {
            pods: &state.on_nodes,
            affine: &state.affine,
            removed: &|_| false,
        }
    }
}

/// Raw and normalized pod-level scores per node (`score_slot` order; NaN
/// where infeasible), for explanations.
pub(super) struct PodScores {
    pub scores: [Vec<(f64, f64)>; POD_SCORES],
}

impl<'a> Engine<'a, '_> {
    /// Whether a node passes spread constraint `c`'s inclusion policies
    /// (`nodeAffinityPolicy`, `nodeTaintsPolicy`) for pods of `class`.
    pub(super) fn inclusion(&self, table: &'a PodTable<'a>, class: usize) -> impl Fn(usize, usize) -> bool + Sync + 'a {
        let (classes, nodes, sp) = (self.classes, self.nodes, &table.spread);
        move |c: usize, node: usize| {
            (sp.honor_affinity[c] == 0 || node_affinity::required_matches(classes, class, nodes, node))
                && (sp.honor_taints[c] == 0 || taint_toleration::filter(nodes, node, &classes.tolerations, class) == FEASIBLE)
        }
    }

    /// The pod-level plugins' PreFilter and PreScore for a pod, or None when
    /// none of them has anything to do for it (then the signature caches hold).
    /// `kept` carries the plugins' counts from the call's earlier pods.
    pub(super) fn pod_level(&self, state: &BatchState, pod: &PodView, kept: &RefCell<PodLevelKept>) -> Option<PodLevel> {
        self.pod_level_with(state, pod, OnNodes::batch(state), Some(kept), true)
    }

    /// `pod_level`'s filters with the pods on nodes given (preemption's dry run leaves
    /// victims out). Nothing is scored there, so no PreScore is computed.
    pub(super) fn pod_level_on(&self, state: &BatchState, pod: &PodView, on: OnNodes) -> Option<PodLevel> {
        self.pod_level_with(state, pod, on, None, false)
    }

    fn pod_level_with(
        &self,
        state: &BatchState,
        pod: &PodView,
        on: OnNodes,
        kept: Option<&RefCell<PodLevelKept>>,
        scored: bool,
    ) -> Option<PodLevel> {
        let table = self.pods.table.as_ref()?;
        let include = self.inclusion(table, pod.class);
        let mut ctx = self.pod_context(table, state, pod, on, &include);
        ctx.kept = kept;
        let mut prefilter = PreFilter::default();
        for &id in POD_FILTERS.iter().filter(|&&id| self.profile.filters(id)) {
            registry::prefilter(id, &ctx, &mut prefilter);
        }
        let mut prescore = PreScore::default();
        for &id in POD_SCORERS.iter().filter(|&&id| scored && self.profile.weight_of(id) != 0) {
            registry::prescore(id, &ctx, &mut prescore);
        }
        if prefilter.is_empty() && prescore.is_empty() {
            return None;
        }
        Some(PodLevel { prefilter, prescore })
    }

    pub(super) fn pod_context<'c>(
        &'c self,
        table: &'c PodTable<'a>,
        state: &'c BatchState,
        pod: &PodView,
        on: OnNodes<'c>,
        include: &'c (dyn Fn(usize, usize) -> bool + Sync),
    ) -> PodContext<'c, 'a> {
        PodContext {
            table,
            volumes: self.pods.volumes.as_ref(),
            taken_volumes: &state.taken_volumes,
            taken_claims: &state.taken_claims,
            placed_attachments: &state.placed_attachments,
            removed: on.removed,
            nodes: self.nodes,
            on_nodes: on.pods,
            affine: on.affine,
            row: table.bound + pod.index,
            index: pod.index,
            class: pod.class,
            include,
            kept: None,
            hard_pod_affinity_weight: self.profile.hard_pod_affinity_weight,
            ignore_preferred_terms_of_existing_pods: self.profile.ignore_preferred_terms_of_existing_pods,
        }
    }

    /// Add the pod-level plugins' weighted scores to the totals of a pod's
    /// `feasible` nodes; with `explain`, returns each node's raw and normalized
    /// scores for its explanation (two node-sized columns, built only then).
    pub(super) fn add_pod_level_scores(
        &self,
        state: &BatchState,
        pod: &PodView,
        pl: &PodLevel,
        feasible: &[usize],
        totals: &mut [f64],
        explain: bool,
    ) -> Option<PodScores> {
        let n = self.nodes.count;
        let mut out = explain.then(|| PodScores {
            scores: std::array::from_fn(|_| vec![(f64::NAN, f64::NAN); n]),
        });
        for column in out.iter_mut().flat_map(|o| o.scores.iter_mut()) {
            for &node in feasible {
                column[node] = (0.0, 0.0);
            }
        }
        let table = self.pods.table.as_ref().expect("pod level implies a pod table");
        let include = self.inclusion(table, pod.class);
        let ctx = self.pod_context(table, state, pod, OnNodes::batch(state), &include);
        // Summed as integers, then added to each total once.
        let mut weighted = vec![0i64; feasible.len()];
        for (slot, &id) in POD_SCORERS.iter().enumerate() {
            let weight = self.profile.weight_of(id);
            if weight == 0 {
                continue;
            }
            if let Some((raw, normalized)) = registry::score_pod(id, &ctx, &pl.prescore, feasible) {
                for (w, &s) in weighted.iter_mut().zip(&normalized) {
                    *w += s * weight;
                }
                if let Some(out) = out.as_mut() {
                    for (i, &node) in feasible.iter().enumerate() {
                        out.scores[slot][node] = (raw[i] as f64, normalized[i] as f64);
                    }
                }
            }
        }
        for (&node, &w) in feasible.iter().zip(&weighted) {
            totals[node] += w as f64;
        }
        out
    }
}
