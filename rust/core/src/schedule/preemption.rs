//! DefaultPreemption (PostFilter) for a pod that fits nowhere: on each node
//! whose failure evicting pods could resolve, a dry run of the registry's
//! filters with victims removed decides which pods must go
//! (`plugins::default_preemption` chooses among them and among nodes).

use std::collections::HashSet;

use super::engine::{Engine, PodView};
use super::filtering::ClassCache;
use super::select::splitmix64;
use super::signature::SignatureCache;
use super::state::BatchState;
use crate::model::{row, Victims};
use crate::plugins::node_ports::HostPort;
use crate::plugins::{default_preemption, FEASIBLE};
use crate::registry;

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
    /// pod-level ones over the pods on nodes without them.
    fn fits_without(&self, state: &BatchState, cache: &ClassCache, pod: &PodView, node: usize, removed: &[usize], v: &Victims) -> bool {
        if cache.codes[node] != FEASIBLE as u8 || state.metric_codes[node] != FEASIBLE {
            return false;
        }
        let r = self.resources;
        let mut buf = Vec::new();
        let (requested, count) = state.requested_for_filter(self, pod, node, &mut buf);
        let mut requested = requested.to_vec();
        for &i in removed {
            for (c, q) in requested.iter_mut().enumerate() {
                if default_preemption::counted(&v.requests[i * r..(i + 1) * r], c) {
                    *q -= v.requests[i * r + c];
                }
            }
        }
        let freed: Vec<HostPort> = removed
            .iter()
            .flat_map(|&i| row(v.ports.offsets, i))
            .map(|j| (v.ports.protocols[j], v.ports.ips[j], v.ports.ports[j]))
            .collect();
        let mut ports_buf = Vec::new();
        let placed_ports = state.ports_for_filter(self, pod, node, &mut ports_buf);
        let count = count - removed.len() as i64;
        let input = |prefilter| self.node_input(state, pod, node, &requested, count, placed_ports, &freed, prefilter);
        if !self.passes_node_level(&input(None), &mut |_| {}) {
            return false;
        }
        if self.pods.table.is_none() {
            return true;
        }
        let gone: HashSet<u32> = removed.iter().filter(|&&i| v.rows[i] >= 0).map(|&i| v.rows[i] as u32).collect();
        let on_nodes: Vec<(u32, u32)> = state.on_nodes.iter().copied().filter(|(row, _)| !gone.contains(row)).collect();
        let affine: Vec<(u32, u32)> = state.affine.iter().copied().filter(|(row, _)| !gone.contains(row)).collect();
        match self.pod_level_on(state, pod, &on_nodes, &affine, &|row| gone.contains(&row)) {
            Some(pl) => self.passes_pod_level(&input(Some(&pl.prefilter)), &mut |_| {}),
            None => true,
        }
    }
}
