//! The pod-level plugins (PodTopologySpread, InterPodAffinity: every row of
//! `Level::Pod`): their PreFilter and PreScore for one pod over the pods on
//! nodes, and their scores added to the pod's totals.

use std::cell::RefCell;
use std::collections::HashMap;

use super::engine::{Engine, PodView};
use super::select::Best;
use super::signature::SignatureCache;
use super::state::BatchState;
use crate::model::PluginId;
use crate::model::PodTable;
use crate::plugins::{node_affinity, pod_topology_spread, taint_toleration, FEASIBLE};
use crate::registry::{self, PodContext, PodLevelKept, PreFilter, PreScore, POD_FILTERS, POD_SCORERS, POD_SCORES};

/// A signature's `Ranked` nodes for one `ScheduleAnyway` group, kept through a call
/// (`Engine::select_spread`).
pub(super) struct Ranking {
    /// The signature's totals it ranks (`SignatureCache::generation`).
    generation: u64,
    ranked: Option<pod_topology_spread::Ranked>,
    /// The group's pods so far in the call, and the rankings built for them.
    pods: usize,
    builds: usize,
}

/// Pods a ranking must have served, per ranking built, before the next is built:
/// building one costs about what scoring every node does for a dozen pods.
const REBUILD_PODS: usize = 16;

/// The pod-level plugins' state for one pod.
pub(super) struct PodLevel {
    pub prefilter: PreFilter,
    pub prescore: PreScore,
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
        self.pod_level_with(state, pod, &state.on_nodes, &state.affine, &|_| false, Some(kept), true)
    }

    /// `pod_level`'s filters with the pods on nodes given (preemption's dry run leaves
    /// victims out; `removed` says whether a bound pod, by pod table row, is one of them).
    /// Nothing is scored there, so no PreScore is computed.
    pub(super) fn pod_level_on(
        &self,
        state: &BatchState,
        pod: &PodView,
        on_nodes: &[(u32, u32)],
        affine: &[(u32, u32)],
        removed: &dyn Fn(u32) -> bool,
    ) -> Option<PodLevel> {
        self.pod_level_with(state, pod, on_nodes, affine, removed, None, false)
    }

    #[allow(clippy::too_many_arguments)]
    fn pod_level_with(
        &self,
        state: &BatchState,
        pod: &PodView,
        on_nodes: &[(u32, u32)],
        affine: &[(u32, u32)],
        removed: &dyn Fn(u32) -> bool,
        kept: Option<&RefCell<PodLevelKept>>,
        scored: bool,
    ) -> Option<PodLevel> {
        let table = self.pods.table.as_ref()?;
        let include = self.inclusion(table, pod.class);
        let mut ctx = self.pod_context(table, state, pod, on_nodes, affine, &include, removed);
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

    #[allow(clippy::too_many_arguments)]
    fn pod_context<'c>(
        &'c self,
        table: &'c PodTable<'a>,
        state: &'c BatchState,
        pod: &PodView,
        on_nodes: &'c [(u32, u32)],
        affine: &'c [(u32, u32)],
        include: &'c (dyn Fn(usize, usize) -> bool + Sync),
        removed: &'c dyn Fn(u32) -> bool,
    ) -> PodContext<'c, 'a> {
        PodContext {
            table,
            volumes: self.pods.volumes.as_ref(),
            taken_volumes: &state.taken_volumes,
            taken_claims: &state.taken_claims,
            placed_attachments: &state.placed_attachments,
            removed,
            nodes: self.nodes,
            on_nodes,
            affine,
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
        let ctx = self.pod_context(table, state, pod, &state.on_nodes, &state.affine, &include, &|_| false);
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

    /// `add_pod_level_scores` for a pod whose one pod-level score is PodTopologySpread's
    /// (the profile's system defaults, or `ScheduleAnyway` constraints, and no inter-pod
    /// affinity score), over `sig`'s feasible nodes: `sig`'s totals with the spread
    /// scores added, into `out`, reused from pod to pod. False, and nothing written,
    /// for any other pod.
    pub(super) fn add_spread_scores(
        &self,
        state: &BatchState,
        pod: &PodView,
        pl: &PodLevel,
        sig: &SignatureCache,
        out: &mut Vec<f64>,
        scratch: &mut pod_topology_spread::Scratch,
    ) -> bool {
        let (Some(spread), None) = (&pl.prescore.spread, &pl.prescore.affinity) else {
            return false;
        };
        let table = self.pods.table.as_ref().expect("pod level implies a pod table");
        let include = self.inclusion(table, pod.class);
        let ctx = self.pod_context(table, state, pod, &state.on_nodes, &state.affine, &include, &|_| false);
        let weight = self.profile.weight_of(PluginId::PodTopologySpread);
        let (evals, totals) = (&sig.evals, &sig.totals);
        // An infeasible node's total is minus infinity, so the evals are read only there.
        let feasible = |node: usize| totals[node] != f64::NEG_INFINITY || evals[node].feasible;
        pod_topology_spread::add_scores(spread, &ctx.spread(), weight, feasible, totals, out, scratch);
        true
    }

    /// `add_spread_scores` then `select::select` for the same pods, through the
    /// signature's `Ranked` nodes for its `ScheduleAnyway` group (`ranked`, the
    /// call's; built here from the group's second pod on where `build`): the best
    /// node, None where no node is feasible. None for any other pod, where no
    /// ranking is kept (and none is built), or where a total is not finite.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn select_spread(
        &self,
        state: &BatchState,
        pod: &PodView,
        pl: &PodLevel,
        sig: &SignatureCache,
        ranked: &mut HashMap<(u64, usize), Ranking>,
        build: bool,
        tie: impl Fn(usize) -> u64,
    ) -> Option<Option<Best>> {
        let (Some(spread), None) = (&pl.prescore.spread, &pl.prescore.affinity) else {
            return None;
        };
        let (evals, totals) = (&sig.evals, &sig.totals);
        let feasible = |node: usize| totals[node] != f64::NEG_INFINITY || evals[node].feasible;
        let entry = ranked.entry((sig.id, spread.shape_id())).or_insert_with(|| Ranking {
            generation: sig.generation,
            ranked: None,
            pods: 0,
            builds: 0,
        });
        if entry.generation != sig.generation {
            // Every total moved (`rescore_all`): the ranking is rebuilt, if it pays.
            entry.generation = sig.generation;
            entry.ranked = None;
        }
        entry.pods += 1;
        // Built at the group's second pod (the first may be the only one), and after a
        // rescore only where the group's pods so far paid for the builds before.
        if entry.ranked.is_none() && build && entry.pods >= 2 && entry.pods >= REBUILD_PODS * entry.builds {
            let new = pod_topology_spread::Ranked::new(spread, feasible, totals, sig.generation, state.log.len());
            entry.ranked = Some(new);
            entry.builds += 1;
        }
        let ranking = entry.ranked.as_mut()?;
        debug_assert!(ranking.fits(spread, sig.generation));
        let table = self.pods.table.as_ref().expect("pod level implies a pod table");
        let include = self.inclusion(table, pod.class);
        let ctx = self.pod_context(table, state, pod, &state.on_nodes, &state.affine, &include, &|_| false);
        let weight = self.profile.weight_of(PluginId::PodTopologySpread);
        let best = ranking
            .select(spread, &ctx.spread(), weight, feasible, totals, &state.log, &tie)
            .ok()?
            .map(|(node, total, tie)| Best { node, total, tie });
        #[cfg(debug_assertions)]
        {
            // Every node scored, as `add_spread_scores` and `select` do.
            let (mut out, mut scratch) = (Vec::new(), pod_topology_spread::Scratch::default());
            pod_topology_spread::add_scores(spread, &ctx.spread(), weight, feasible, totals, &mut out, &mut scratch);
            let want = super::select::select(&out, sig.feasible, &tie);
            let key = |b: Option<Best>| b.map(|b| (b.node, b.total.to_bits(), b.tie));
            assert_eq!(key(best), key(want), "ranked selection differs from scoring every node");
        }
        Some(best)
    }
}
