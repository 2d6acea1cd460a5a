//! Evaluating every node for a pod, and keeping those evaluations in step
//! with the batch for the pods that share a signature.
//!
//! Pods of one signature (constraint class, requests, host ports) see the
//! same verdicts and scores on a node until a placement changes that node,
//! so a later pod of the signature re-evaluates only the nodes placed on
//! since, and re-scores every node only when the feasible set's maxima (the
//! normalization inputs) move. The node-only part of the totals is the
//! class's (`base`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rayon::prelude::*;

use super::base::{class_base, Base, Maxima};
use super::engine::{Engine, Incoming, PodView};
use super::filtering::{ClassCache, NodeScores};
use super::state::BatchState;
use crate::model::row;
use crate::plugins::FEASIBLE;
use crate::reasons;
use crate::registry::{PreFilter, NODE_SCORES};

/// Signature caches kept (within a call, and between calls with a `ScheduleCache`),
/// bounded by the memory they take: about 44 bytes a node each in `ksched bench`,
/// so 128 MiB holds ~600 signatures at 5,000 nodes and ~200 at 15,000, more than
/// the distinct pod shapes of typical workloads (`ksched bench` has 112); beyond
/// that, the signatures not used in the current call are dropped first.
const SIGNATURE_CACHE_BYTES: usize = 128 << 20;

/// Reason codes one node can report for one pod: NodeResourcesFit reports
/// "Too many pods" and every insufficient resource; the other filters one code.
fn reason_slots(resources: usize) -> usize {
    resources + 1
}

/// How many signature caches fit in `SIGNATURE_CACHE_BYTES`.
pub(super) fn max_signatures(nodes: usize, resources: usize) -> usize {
    let per_signature = nodes * (std::mem::size_of::<NodeEval>() + std::mem::size_of::<f64>() + 4 * reason_slots(resources)) + 1;
    (SIGNATURE_CACHE_BYTES / per_signature).max(1)
}

/// One node's verdict and node-level scores for one pod signature.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct NodeEval {
    pub feasible: bool,
    /// Number of reason codes in the node's slot of `SignatureCache::reasons`.
    pub reasons: u8,
    pub scores: [i32; NODE_SCORES],
}

/// Histogram, feasible count and maxima of a run of nodes.
struct Summary {
    histogram: Vec<i64>,
    feasible: usize,
    maxima: Maxima,
}

impl Summary {
    fn merge(mut self, other: Summary) -> Summary {
        for (h, c) in self.histogram.iter_mut().zip(&other.histogram) {
            *h += c;
        }
        self.feasible += other.feasible;
        self.maxima.merge(&other.maxima);
        self
    }
}

/// A run of nodes (its index) in a signature cache: evals, reason slots, totals.
type NodeRun<'r> = (usize, ((&'r mut [NodeEval], &'r mut [u32]), &'r mut [f64]));

/// What applying a pod's pod-level filters changed in a run of nodes: the
/// histogram's counts, the nodes that left the feasible set, and whether one
/// of them held one of the maxima.
type RunChange = (Vec<i64>, usize, bool);

/// Every node's evaluation for one pod signature, kept in step with the batch's placements.
#[derive(Clone)]
pub(super) struct SignatureCache {
    /// Placements (`BatchState::log`) already reflected.
    synced: usize,
    pub evals: Vec<NodeEval>,
    /// Weighted totals, minus infinity where infeasible: a flat array, so
    /// selection is two vectorized passes with no branch on feasibility.
    pub totals: Vec<f64>,
    /// `reason_slots(resources)` codes per node.
    reasons: Vec<u32>,
    pub histogram: Vec<i64>,
    pub feasible: usize,
    pub maxima: Maxima,
    /// The class base the totals were computed with (its maxima equal `maxima`).
    base: Arc<Base>,
    /// Nodes changed in earlier calls that this cache has not re-evaluated
    /// (they come before `BatchState::log[synced..]`), see `carry`.
    pending: Vec<u32>,
    /// The metric values moved since `base` was built: the maxima are
    /// recomputed and every node rescored before the cache is used.
    rebase: bool,
    /// The call (`carry::Kept::call`) that last used the cache.
    pub used: u64,
    /// The cache's own number, and one that changes whenever every total is
    /// computed afresh, so a structure built on the totals knows to rebuild; in
    /// between, only the totals of the nodes in `BatchState::log` change.
    pub id: u64,
    pub generation: u64,
}

/// A new `SignatureCache::id` or `generation`, unique in the process.
fn next_generation() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl SignatureCache {
    pub fn feasible_nodes(&self) -> Vec<usize> {
        (0..self.evals.len()).filter(|&node| self.evals[node].feasible).collect()
    }

    /// The first reason code of an infeasible node (the failing plugin's).
    pub fn first_reason(&self, node: usize, resources: usize) -> Option<u32> {
        let e = self.evals[node];
        (!e.feasible && e.reasons > 0).then(|| self.reasons[node * reason_slots(resources)])
    }

    /// The next call's metric values differ from those `base` was built with.
    pub fn must_rebase(&mut self) {
        self.rebase = true;
    }

    /// The call that logged `log` ends: the nodes it changed that the cache has
    /// not seen become pending for the next call. Whether the cache is worth
    /// keeping (no more than `limit` nodes pending).
    pub fn suspend(&mut self, log: &[u32], limit: usize) -> bool {
        self.pending.extend_from_slice(&log[self.synced..]);
        self.pending.sort_unstable();
        self.pending.dedup();
        self.synced = 0;
        self.pending.len() <= limit
    }
}

/// A pod's signature: everything besides the node table its verdicts and
/// scores depend on (its metric filter's part: `load`). `slot` stands for the pod's constraint class (its
/// `carry` slot: one per class content). None for a nominated pod, which
/// does not count its own nomination: it shares no signature.
pub(super) fn key(engine: &Engine, pod: &PodView, slot: usize) -> Option<Vec<i64>> {
    let ports = &engine.pods.host_ports;
    let mut key = Vec::with_capacity(4 + pod.request.len());
    key.push(slot as i64);
    // Whether a priority ends the key (below), so keys of calls with and
    // without preemption data never meet.
    key.push(engine.pods.preemption.is_some() as i64);
    key.extend_from_slice(pod.request);
    key.extend_from_slice(pod.nonzero_request);
    engine.metric_key_part(pod, &mut key);
    for i in row(ports.offsets, pod.index) {
        key.extend([ports.protocols[i] as i64, ports.ips[i] as i64, ports.ports[i] as i64]);
    }
    // ImageLocality: the container count (negative, so it cannot be read as
    // a port) and the images, for pods with any.
    if !pod.images.is_empty() {
        key.push(-1 - pod.containers);
        key.extend(pod.images.iter().map(|&id| id as i64));
    }
    // Which nominated pods hold back a node depends on the pod's priority
    // (and preemptions in the batch nominate more).
    if let Some(pre) = &engine.pods.preemption {
        if pre.nominated[pod.index] >= 0 {
            return None;
        }
        key.push(pod.priority);
    }
    Some(key)
}

impl Engine<'_, '_> {
    /// Evaluate one node into its eval and reason slot.
    fn evaluate_node(
        &self,
        state: &BatchState,
        cache: &ClassCache,
        pod: &PodView,
        node: usize,
        prefilter: Option<&PreFilter>,
        slot: &mut [u32],
    ) -> NodeEval {
        let mut count = 0usize;
        let scores = self.evaluate(state, cache, pod, node, prefilter, &mut |code| {
            slot[count] = code;
            count += 1;
        });
        match scores {
            Some(NodeScores(s)) => NodeEval {
                feasible: true,
                scores: s.map(|v| v as i32),
                ..NodeEval::default()
            },
            None => NodeEval {
                reasons: count as u8,
                ..NodeEval::default()
            },
        }
    }

    /// Evaluate every node for a pod (in parallel chunks), then its totals.
    pub(super) fn evaluate_all(
        &self,
        state: &BatchState,
        cache: &ClassCache,
        base_slot: &mut Option<Arc<Base>>,
        pod: &PodView,
        prefilter: Option<&PreFilter>,
    ) -> SignatureCache {
        let (n, chunk) = (self.nodes.count, self.chunk);
        let w = reason_slots(self.resources);
        let m = self.metrics.specs.len();
        let space = reasons::count(self.resources, m);
        let mut evals = vec![NodeEval::default(); n];
        let mut reasons = vec![0u32; n * w];
        let empty = || Summary {
            histogram: vec![0; space],
            feasible: 0,
            maxima: Maxima::empty(m),
        };
        let summarize = |(i, (evals, reasons)): (usize, (&mut [NodeEval], &mut [u32]))| {
            let mut s = empty();
            for (k, e) in evals.iter_mut().enumerate() {
                let node = i * chunk + k;
                let slot = &mut reasons[k * w..(k + 1) * w];
                *e = self.evaluate_node(state, cache, pod, node, prefilter, slot);
                if e.feasible {
                    s.feasible += 1;
                    s.maxima.add_node(self, state, cache, pod.incoming, node);
                } else {
                    slot[..e.reasons as usize].iter().for_each(|&c| s.histogram[c as usize] += 1);
                }
            }
            s
        };
        let summary = if self.parallel {
            evals
                .par_chunks_mut(chunk)
                .zip(reasons.par_chunks_mut(chunk * w))
                .enumerate()
                .map(summarize)
                .reduce(empty, Summary::merge)
        } else {
            evals
                .chunks_mut(chunk)
                .zip(reasons.chunks_mut(chunk * w))
                .enumerate()
                .map(summarize)
                .fold(empty(), Summary::merge)
        };
        let base = class_base(base_slot, self, state, cache, &summary.maxima);
        let mut sig = SignatureCache {
            synced: state.log.len(),
            evals,
            totals: vec![f64::NEG_INFINITY; n],
            reasons,
            histogram: summary.histogram,
            feasible: summary.feasible,
            maxima: summary.maxima,
            base,
            pending: Vec::new(),
            rebase: false,
            used: 0,
            id: next_generation(),
            generation: 0,
        };
        self.rescore_all(state, &mut sig, pod.incoming);
        sig
    }

    /// A pod's evaluation where it has pod-level filters, from its signature's
    /// (`evaluate_all` with `prefilter` gives the same). The pod-level filters
    /// run after every class- and node-level one and before the metric
    /// thresholds, so on a node without nominated pods they decide only where
    /// the signature found the node feasible or failing a metric threshold
    /// alone; they only take nodes out, and the node-level scores stay. A
    /// node with nominated pods held for the pod is evaluated afresh (its
    /// first pass counts them in the pod-level state too).
    pub(super) fn with_pod_filters(
        &self,
        shared: &SignatureCache,
        state: &BatchState,
        cache: &ClassCache,
        base_slot: &mut Option<Arc<Base>>,
        pod: &PodView,
        prefilter: &PreFilter,
    ) -> SignatureCache {
        let chunk = self.chunk;
        let mut sig = shared.clone();
        let w = reason_slots(self.resources);
        let space = sig.histogram.len();
        let maxima = &sig.maxima;
        // One run of nodes: their evals, reason slots and totals updated; the
        // histogram's and the feasible count's changes, and whether a node
        // that left held one of the maxima.
        let apply = |(i, ((evals, reasons), totals)): NodeRun| {
            let mut change = vec![0i64; space];
            let mut left = 0usize;
            let mut held = false;
            let mut codes = vec![0u32; w];
            for (k, e) in evals.iter_mut().enumerate() {
                let node = i * chunk + k;
                if cache.codes[node] != FEASIBLE as u8 {
                    continue;
                }
                let old = *e;
                let slot = &mut reasons[k * w..(k + 1) * w];
                let new = if state.has_nominated_for(pod, node) {
                    self.evaluate_node(state, cache, pod, node, Some(prefilter), &mut codes)
                } else if old.feasible || (old.reasons == 1 && slot[0] == state.metric_code(self, pod, node) && slot[0] != FEASIBLE) {
                    let input = self.current_input(state, pod, node, Some(prefilter));
                    let mut count = 0;
                    if self.passes_pod_level(&input, &mut |code| {
                        codes[count] = code;
                        count += 1;
                    }) {
                        continue;
                    }
                    NodeEval {
                        reasons: count as u8,
                        ..NodeEval::default()
                    }
                } else {
                    continue;
                };
                // Pod-level filters take nodes out, never in: a node feasible now was before, with these scores.
                debug_assert!(old.feasible || !new.feasible, "a pod-level filter let a node in");
                slot[..old.reasons as usize].iter().for_each(|&c| change[c as usize] -= 1);
                slot[..new.reasons as usize].copy_from_slice(&codes[..new.reasons as usize]);
                slot[..new.reasons as usize].iter().for_each(|&c| change[c as usize] += 1);
                if old.feasible && !new.feasible {
                    left += 1;
                    totals[k] = f64::NEG_INFINITY;
                    held |= maxima.held_by(self, state, cache, pod.incoming, node);
                }
                *e = new;
            }
            (change, left, held)
        };
        let merge = |(mut a, left_a, held_a): RunChange, (b, left_b, held_b): RunChange| {
            a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
            (a, left_a + left_b, held_a || held_b)
        };
        let none = || (vec![0i64; space], 0, false);
        let (change, left, maxima_may_move) = if self.parallel {
            sig.evals
                .par_chunks_mut(chunk)
                .zip(sig.reasons.par_chunks_mut(chunk * w))
                .zip(sig.totals.par_chunks_mut(chunk))
                .enumerate()
                .map(apply)
                .reduce(none, merge)
        } else {
            sig.evals
                .chunks_mut(chunk)
                .zip(sig.reasons.chunks_mut(chunk * w))
                .zip(sig.totals.chunks_mut(chunk))
                .enumerate()
                .map(apply)
                .fold(none(), merge)
        };
        for (h, c) in sig.histogram.iter_mut().zip(&change) {
            *h += c;
        }
        sig.feasible -= left;
        if maxima_may_move {
            let mut maxima = Maxima::empty(self.metrics.specs.len());
            for (node, e) in sig.evals.iter().enumerate() {
                if e.feasible {
                    maxima.add_node(self, state, cache, pod.incoming, node);
                }
            }
            if maxima != sig.maxima {
                sig.base = class_base(base_slot, self, state, cache, &maxima);
                sig.maxima = maxima;
                self.rescore_all(state, &mut sig, pod.incoming);
            }
        }
        sig
    }

    fn rescore_all(&self, state: &BatchState, sig: &mut SignatureCache, incoming: Incoming) {
        let chunk = self.chunk;
        sig.generation = next_generation();
        let base = &sig.base;
        let rescore = |(i, (totals, evals)): (usize, (&mut [f64], &[NodeEval]))| {
            for (k, (t, e)) in totals.iter_mut().zip(evals).enumerate() {
                if e.feasible {
                    *t = self.total(state, base, incoming, i * chunk + k, &e.scores);
                }
            }
        };
        if self.parallel {
            sig.totals
                .par_chunks_mut(chunk)
                .zip(sig.evals.par_chunks(chunk))
                .enumerate()
                .for_each(rescore);
        } else {
            sig.totals
                .chunks_mut(chunk)
                .zip(sig.evals.chunks(chunk))
                .enumerate()
                .for_each(rescore);
        }
    }

    /// Bring a signature's cache up to date with the placements made since it
    /// was last used (and the nodes pending from earlier calls).
    pub(super) fn refresh(
        &self,
        sig: &mut SignatureCache,
        state: &BatchState,
        cache: &ClassCache,
        base_slot: &mut Option<Arc<Base>>,
        pod: &PodView,
    ) {
        let w = reason_slots(self.resources);
        let pending = std::mem::take(&mut sig.pending);
        let with_pending: Vec<u32>;
        let dirty = if pending.is_empty() {
            &state.log[sig.synced..]
        } else {
            with_pending = [&pending[..], &state.log[sig.synced..]].concat();
            &with_pending[..]
        };
        if dirty.is_empty() && !sig.rebase {
            return;
        }
        // A node leaving the feasible set moves the maxima only if it held one
        // (metric values that moved since the last call may move them anywhere).
        let mut maxima_may_move = sig.rebase;
        for &node in dirty {
            let node = node as usize;
            if cache.codes[node] != FEASIBLE as u8 {
                continue; // the class's own verdict: no placement changes it
            }
            let old = sig.evals[node];
            let slot = &mut sig.reasons[node * w..(node + 1) * w];
            slot[..old.reasons as usize].iter().for_each(|&c| sig.histogram[c as usize] -= 1);
            let new = self.evaluate_node(state, cache, pod, node, None, slot);
            slot[..new.reasons as usize].iter().for_each(|&c| sig.histogram[c as usize] += 1);
            // A placement's estimate moved the node's metric values: the maxima may follow.
            maxima_may_move |= state.has_estimates && (old.feasible || new.feasible);
            if old.feasible != new.feasible {
                maxima_may_move |= new.feasible || sig.maxima.held_by(self, state, cache, pod.incoming, node);
                if new.feasible {
                    sig.feasible += 1;
                } else {
                    sig.feasible -= 1;
                }
            }
            sig.evals[node] = new;
            if !new.feasible {
                sig.totals[node] = f64::NEG_INFINITY;
            }
        }
        sig.synced = state.log.len();
        if maxima_may_move {
            let mut maxima = Maxima::empty(self.metrics.specs.len());
            for (node, e) in sig.evals.iter().enumerate() {
                if e.feasible {
                    maxima.add_node(self, state, cache, pod.incoming, node);
                }
            }
            if sig.rebase || maxima != sig.maxima {
                sig.base = class_base(base_slot, self, state, cache, &maxima);
                sig.maxima = maxima;
                sig.rebase = false;
                self.rescore_all(state, sig, pod.incoming);
                return;
            }
        }
        for &node in dirty {
            let node = node as usize;
            let e = sig.evals[node];
            if e.feasible && cache.codes[node] == FEASIBLE as u8 {
                sig.totals[node] = self.total(state, &sig.base, pod.incoming, node, &e.scores);
            }
        }
    }
}
