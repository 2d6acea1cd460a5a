//! DefaultPreemption (PostFilter) for a pod that fits nowhere: on each node
//! whose failure evicting pods could resolve, a dry run of the registry's
//! filters with victims removed decides which pods must go
//! (`plugins::default_preemption` chooses among them and among nodes).

use std::collections::HashSet;

use super::engine::{Engine, PodView};
use super::filtering::{ClassCache, Usage};
use super::pod_level::{OnNodes, PodLevel};
use super::select::splitmix64;
use super::signature::SignatureCache;
use super::state::BatchState;
use crate::model::row;
use crate::plugins::default_preemption::{verdict, Rejected};
use crate::plugins::node_ports::HostPort;
use crate::plugins::{default_preemption, node_resources_fit, FEASIBLE};
use crate::reasons;
use crate::registry::NodeInput;

/// DefaultPreemption's PostFilter verdict for a pod that fits nowhere.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct PostFilter {
    /// A `default_preemption::verdict` code, 0 when preemption is disabled.
    pub verdict: u8,
    /// The node to nominate (with victims, or none while earlier ones terminate).
    pub candidate: Option<default_preemption::Candidate>,
    /// `NO_CANDIDATE`'s FitError: (reason code, nodes) by code, over every node.
    pub histogram: Vec<(u32, i64)>,
}

impl PostFilter {
    fn verdict(verdict: u8) -> Self {
        PostFilter {
            verdict,
            ..PostFilter::default()
        }
    }
}

impl Engine<'_, '_> {
    /// Upstream `DefaultPreemption.PostFilter` (`Evaluator.Preempt`): the candidate
    /// node and its victims, or why there is none.
    pub(super) fn preempt(&self, state: &BatchState, cache: &ClassCache, pod: &PodView, sig: &SignatureCache) -> PostFilter {
        if !self.profile.preemption {
            return PostFilter::default();
        }
        // Upstream PodEligibleToPreemptOthers, first: preemptionPolicy Never.
        if self.pods.preemption.as_ref().is_some_and(|pre| pre.allowed[pod.index] == 0) {
            return PostFilter::verdict(verdict::NEVER);
        }
        // The nodes whose failure evicting pods could resolve (upstream: status
        // Unschedulable); the others are "not helpful" in the FitError.
        let potential: Vec<usize> = (0..self.nodes.count).filter(|&node| self.resolvable_on(sig, pod, node)).collect();
        let mut why: Vec<u32> = vec![default_preemption::NOT_HELPFUL; self.nodes.count - potential.len()];
        let Some(pre) = self.pods.preemption.as_ref() else {
            // The caller leaves the input out when no pod of the batch has a pod of
            // lower priority to evict (and none is nominated): nothing to evict anywhere.
            why.extend(potential.iter().map(|_| default_preemption::NO_VICTIMS));
            return no_candidate(why);
        };
        let v = &pre.victims;
        // A pod whose earlier preemption is still evicting waits for it, keeping its
        // nomination (upstream PodEligibleToPreemptOthers): no new victims. Unless its
        // nominated node now fails a filter no eviction resolves: then it may preempt again.
        let nominated = pre.nominated[pod.index];
        if nominated >= 0
            && (sig.first_reason(nominated as usize, self.resources).is_none() || self.resolvable_on(sig, pod, nominated as usize))
            && state.victims_on[nominated as usize]
                .iter()
                .any(|&i| v.terminating[i] != 0 && v.priorities[i] < pod.priority)
        {
            return PostFilter {
                verdict: verdict::TERMINATING,
                candidate: Some(default_preemption::Candidate {
                    node: nominated as usize,
                    victims: Vec::new(),
                    pdb_violations: 0,
                }),
                histogram: Vec::new(),
            };
        }
        if potential.is_empty() {
            return no_candidate(why);
        }
        // Upstream findCandidates and DryRunPreemption: the potential nodes, tried from
        // a random offset (the seeded tie-break's hash, so reproducible) until candidates
        // are found on `num_candidates` of them, at least one of which violates no
        // PodDisruptionBudget. Each node that yields none records why (upstream's
        // per-node dry-run status) for the FitError when no node does.
        let wanted = default_preemption::num_candidates(potential.len());
        let offset = (splitmix64(self.seed ^ splitmix64(self.pods.keys[pod.index])) % potential.len() as u64) as usize;
        let mut candidates = Vec::new();
        let mut non_violating = 0;
        let mut unfit = Vec::new();
        for i in 0..potential.len() {
            let node = potential[(offset + i) % potential.len()];
            let on_node: Vec<usize> = state.victims_on[node].iter().copied().filter(|&i| !state.taken[i]).collect();
            let mut fits = |removed: &[usize]| self.fits_without(state, cache, pod, node, removed, &mut unfit);
            match default_preemption::select_victims(v, node, &on_node, pod.priority, &mut fits) {
                Ok(c) => {
                    non_violating += usize::from(c.pdb_violations == 0);
                    candidates.push(c);
                    if non_violating > 0 && candidates.len() >= wanted {
                        break;
                    }
                }
                Err(Rejected::NoVictims) => why.push(default_preemption::NO_VICTIMS),
                // The first failing filter's reasons with every lower-priority pod removed.
                Err(Rejected::StillUnfit) => why.extend_from_slice(&unfit),
            }
        }
        match default_preemption::pick(v, &candidates) {
            Some(best) => PostFilter {
                verdict: verdict::NOMINATED,
                candidate: Some(candidates.swap_remove(best)),
                histogram: Vec::new(),
            },
            None => no_candidate(why),
        }
    }

    /// Whether evicting pods could resolve the node's filter failure (upstream: its
    /// status is Unschedulable, not UnschedulableAndUnresolvable): a reason eviction
    /// can resolve, and for NodeResourcesFit no request above the node's allocatable.
    fn resolvable_on(&self, sig: &SignatureCache, pod: &PodView, node: usize) -> bool {
        let r = self.resources;
        match sig.first_reason(node, r) {
            Some(code) if node_resources_fit::reports(code, r) => {
                !node_resources_fit::exceeds_allocatable(&self.nodes.allocatable[node * r..(node + 1) * r], pod.request, &pod.fit_columns)
            }
            Some(code) => reasons::resolvable(code, r),
            None => false,
        }
    }

    /// Whether the pod passes every filter on `node` with the `removed`
    /// victims gone: the class verdict and metric thresholds (no eviction
    /// changes them), then the registry's node-level filters on the node's
    /// requests, pod count and host ports without the victims, then the
    /// pod-level ones over the pods on nodes without them. Where nominated
    /// pods count for the pod there, twice as `evaluate`: with them, then
    /// without them (upstream's dry run runs the filters with nominated pods).
    /// `why` gets the failing filter's reason codes.
    fn fits_without(
        &self,
        state: &BatchState,
        cache: &ClassCache,
        pod: &PodView,
        node: usize,
        removed: &[usize],
        why: &mut Vec<u32>,
    ) -> bool {
        let v = &self
            .pods
            .preemption
            .as_ref()
            .expect("victims come with the preemption input")
            .victims;
        why.clear();
        if cache.codes[node] != FEASIBLE as u8 {
            why.push(cache.codes[node] as u32);
            return false;
        }
        let metric_code = state.metric_code(self, pod, node);
        if metric_code != FEASIBLE {
            why.push(metric_code);
            return false;
        }
        let r = self.resources;
        let without_victims = |requested: &[i64]| -> Vec<i64> {
            let mut requested = requested.to_vec();
            for &i in removed {
                for (c, q) in requested.iter_mut().enumerate() {
                    // A saturated sum no longer knows what it holds: it stays full.
                    if default_preemption::counted(&v.requests[i * r..(i + 1) * r], c) && *q != i64::MAX {
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
            let on = OnNodes {
                pods: &on_nodes,
                affine: &affine,
                removed: &|row| gone.contains(&row),
            };
            self.pod_level_on(state, pod, on)
        };
        let mut passes = |requested: &[i64], count: i64, placed_ports: &[HostPort], nominated: bool| -> bool {
            let requested = without_victims(requested);
            let count = count - removed.len() as i64;
            let usage = Usage {
                requested: &requested,
                pod_count: count,
                placed_ports,
                freed_ports: &freed,
            };
            let input = self.node_input(state, pod, node, usage, None);
            if !self.passes_node_level(&input, &mut |code| why.push(code)) {
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
            self.passes_pod_level(&input, &mut |code| why.push(code))
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

/// `NO_CANDIDATE` with the per-node reasons counted by code (upstream FitError's histogram).
fn no_candidate(mut why: Vec<u32>) -> PostFilter {
    why.sort_unstable();
    let mut histogram: Vec<(u32, i64)> = Vec::new();
    for code in why {
        match histogram.last_mut() {
            Some((c, n)) if *c == code => *n += 1,
            _ => histogram.push((code, 1)),
        }
    }
    PostFilter {
        verdict: verdict::NO_CANDIDATE,
        candidate: None,
        histogram,
    }
}
