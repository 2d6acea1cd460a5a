//! DefaultPreemption (PostFilter) for a pod that fits nowhere: on each node
//! whose failure evicting pods could resolve, a dry run of the registry's
//! filters with victims removed decides which pods must go
//! (`plugins::default_preemption` chooses among them and among nodes).

use std::collections::HashSet;

use super::engine::{Engine, PodView};
use super::filtering::ClassCache;
use super::pod_level::PodLevel;
use super::select::splitmix64;
use super::signature::SignatureCache;
use super::state::BatchState;
use crate::model::{row, Victims};
use crate::plugins::node_ports::HostPort;
use crate::plugins::{default_preemption, FEASIBLE};
use crate::registry::{self, NodeInput};

impl Engine<'_, '_> {
    /// The candidate node and its victims, or None (not allowed, nothing to
    /// evict, or no node where the pod would fit).
    pub(super) fn preempt(
        &self,
        state: &BatchState,
        cache: &ClassCache,
        pod: &PodView,
        sig: &SignatureCache,
        seed: u64,
    ) -> Option<default_preemption::Candidate> {
        let pre = self.pods.preemption.as_ref()?;
        if !self.profile.preemption || pre.allowed[pod.index] == 0 {
            return None;
        }
        let v = &pre.victims;
        // A pod whose earlier preemption is still evicting waits for it, keeping its
        // nomination (upstream PodEligibleToPreemptOthers): no new victims. Unless its
        // nominated node now fails a filter no eviction resolves: then it may preempt again.
        let nominated = pre.nominated[pod.index];
        if nominated >= 0
            && sig
                .first_reason(nominated as usize, self.resources)
                .is_none_or(|code| registry::resolvable(code, self.resources))
            && state.victims_on[nominated as usize]
                .iter()
                .any(|&i| v.terminating[i] != 0 && v.priorities[i] < pod.priority)
        {
            return Some(default_preemption::Candidate {
                node: nominated as usize,
                victims: Vec::new(),
                pdb_violations: 0,
            });
        }
        // Upstream findCandidates and DryRunPreemption: the nodes whose failure evicting
        // pods could resolve, tried from a random offset (the seeded tie-break's hash, so
        // reproducible) until candidates are found on `num_candidates` of them, at least one
        // of which violates no PodDisruptionBudget.
        let potential: Vec<usize> = (0..self.nodes.count)
            .filter(|&node| matches!(sig.first_reason(node, self.resources), Some(code) if registry::resolvable(code, self.resources)))
            .collect();
        if potential.is_empty() {
            return None;
        }
        let wanted = default_preemption::num_candidates(potential.len());
        let offset = (splitmix64(seed ^ splitmix64(self.pods.keys[pod.index])) % potential.len() as u64) as usize;
        let mut candidates = Vec::new();
        let mut non_violating = 0;
        for i in 0..potential.len() {
            let node = potential[(offset + i) % potential.len()];
            let on_node: Vec<usize> = state.victims_on[node].iter().copied().filter(|&i| !state.taken[i]).collect();
            let mut fits = |removed: &[usize]| self.fits_without(state, cache, pod, node, removed, v);
            if let Some(c) = default_preemption::select_victims(v, node, &on_node, pod.priority, &mut fits) {
                non_violating += usize::from(c.pdb_violations == 0);
                candidates.push(c);
                if non_violating > 0 && candidates.len() >= wanted {
                    break;
                }
            }
        }
        let best = default_preemption::pick(v, &candidates)?;
        Some(candidates.swap_remove(best))
    }

    /// Whether the pod passes every filter on `node` with the `removed`
    /// victims gone: the class verdict and metric thresholds (no eviction
    /// changes them), then the registry's node-level filters on the node's
    /// requests, pod count and host ports without the victims, then the
    /// pod-level ones over the pods on nodes without them. Where nominated
    /// pods count for the pod there, twice as `evaluate`: with them, then
    /// without them (upstream's dry run runs the filters with nominated pods).
    fn fits_without(&self, state: &BatchState, cache: &ClassCache, pod: &PodView, node: usize, removed: &[usize], v: &Victims) -> bool {
        if cache.codes[node] != FEASIBLE as u8 || state.metric_codes[node] != FEASIBLE {
            return false;
        }
        let r = self.resources;
        let without_victims = |requested: &[i64]| -> Vec<i64> {
            let mut requested = requested.to_vec();
            for &i in removed {
                for (c, q) in requested.iter_mut().enumerate() {
                    if default_preemption::counted(&v.requests[i * r..(i + 1) * r], c) {
                        *q -= v.requests[i * r + c];
                    }
                }
            }
            requested
        };
        let freed: Vec<HostPort> = removed
            .iter()
            .flat_map(|&i| row(v.ports.offsets, i))
            .map(|j| (v.ports.protocols[j], v.ports.ips[j], v.ports.ports[j]))
            .collect();
        let gone: HashSet<u32> = removed.iter().filter(|&&i| v.rows[i] >= 0).map(|&i| v.rows[i] as u32).collect();
        // The pod-level state without the victims, computed once when first needed.
        let mut pod_level: Option<Option<PodLevel>> = None;
        let mut pod_level_of = || -> Option<PodLevel> {
            let on_nodes: Vec<(u32, u32)> = state.on_nodes.iter().copied().filter(|(row, _)| !gone.contains(row)).collect();
            let affine: Vec<(u32, u32)> = state.affine.iter().copied().filter(|(row, _)| !gone.contains(row)).collect();
            self.pod_level_on(state, pod, &on_nodes, &affine, &|row| gone.contains(&row))
        };
        let mut passes = |requested: &[i64], count: i64, placed_ports: &[HostPort], nominated: bool| -> bool {
            let requested = without_victims(requested);
            let count = count - removed.len() as i64;
            let input = self.node_input(state, pod, node, &requested, count, placed_ports, &freed, None);
            if !self.passes_node_level(&input, &mut |_| {}) {
                return false;
            }
            if self.pods.table.is_none() {
                return true;
            }
            let Some(pl) = pod_level.get_or_insert_with(&mut pod_level_of) else {
                return true;
            };
            let with = nominated.then(|| self.with_nominated(state, pod, node, &pl.prefilter));
            let input = NodeInput {
                prefilter: Some(&pl.prefilter),
                with_nominated: with.as_ref(),
                ..input
            };
            self.passes_pod_level(&input, &mut |_| {})
        };
        if state.has_nominated_for(pod, node) {
            let (mut buf, mut ports_buf) = (Vec::new(), Vec::new());
            let (requested, count) = state.requested_with_nominated(self, pod, node, &mut buf);
            let placed_ports = state.ports_with_nominated(self, pod, node, &mut ports_buf);
            if !passes(requested, count, placed_ports, true) {
                return false;
            }
        }
        let requested = &state.requested[node * r..(node + 1) * r];
        passes(requested, state.pod_count[node], &state.placed_ports[node], false)
    }
}
