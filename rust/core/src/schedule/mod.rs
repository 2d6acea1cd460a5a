//! One scheduling call: place a batch of pending pods, in the order given,
//! against the whole node table.
//!
//! For each pod: run the filters on every node in upstream's order (the
//! node-level ones that cannot change within a batch are computed once per
//! constraint class), count the first failing plugin's reasons per node,
//! score the feasible nodes, pick the best (seeded tie-break), then commit
//! the placement to the batch's own accounting (requests, pod count, host
//! ports) so later pods see it. Nodes are evaluated in parallel chunks.

use std::collections::hash_map::{Entry, HashMap};
use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;

mod select;

use crate::model::error::{self, EngineError};
use crate::model::{row, Classes, Metrics, Nodes, PluginId, PodTable, Pods, Profile, Victims};
use crate::plugins::node_ports::HostPort;
use crate::plugins::{
    balanced_allocation, default_preemption, inter_pod_affinity, metrics, node_affinity, node_name, node_ports, node_resources_fit,
    node_unschedulable, normalize, pod_topology_spread, taint_toleration,
};
use crate::reasons::{self, FEASIBLE, NODE_AFFINITY_PREFILTER};
use crate::registry;
use select::{tie_key, Best};

/// `Outcome::nodes` value of a pod that fits no node.
pub const UNSCHEDULABLE: i64 = -1;
/// `Outcome::nodes` value of a pod not attempted because the deadline passed.
pub const NOT_ATTEMPTED: i64 = -2;

/// Nodes per parallel work item: small enough to balance two to a few dozen
/// threads, large enough that scheduling overhead stays under the work.
const NODES_PER_CHUNK: usize = 256;

#[derive(Clone, Debug, Default)]
pub struct ScheduleOptions {
    pub seed: u64,
    /// Stop placing pods after this instant; the rest are `NOT_ATTEMPTED`.
    pub deadline: Option<Instant>,
    /// Record a per-node explanation for this pod (index in the batch).
    pub explain: Option<usize>,
    /// Evaluate nodes in parallel on rayon's pool.
    pub parallel: bool,
}

/// Per-node detail of one pod's scheduling, for `ksched explain`.
#[derive(Clone, Debug, Default)]
pub struct Explanation {
    pub pod: usize,
    /// Node -> the failing plugin's reason codes (empty where feasible).
    pub reason_offsets: Vec<i64>,
    pub reason_codes: Vec<u32>,
    /// Score plugins: name, weight, and `plugins × nodes` raw and normalized
    /// scores (NaN for infeasible nodes). Metric plugins are named `metric:<index>`.
    pub plugins: Vec<String>,
    pub weights: Vec<f64>,
    pub raw: Vec<f64>,
    pub normalized: Vec<f64>,
    pub totals: Vec<f64>,
}

#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Chosen node per pod, or `UNSCHEDULABLE` / `NOT_ATTEMPTED`.
    pub nodes: Vec<i64>,
    /// Total weighted score of the chosen node (NaN when none).
    pub scores: Vec<f64>,
    /// Number of feasible nodes per pod.
    pub feasible: Vec<i64>,
    /// Pod -> (reason code, number of nodes) for the nodes that failed a filter.
    pub reason_offsets: Vec<i64>,
    pub reason_codes: Vec<u32>,
    pub reason_counts: Vec<i64>,
    pub explanation: Option<Explanation>,
    /// Node nominated by preemption per pod (-1 for none), and the chosen
    /// victims (`Victims` indices) per pod.
    pub nominated: Vec<i64>,
    pub victim_offsets: Vec<i64>,
    pub victims: Vec<i64>,
}

/// Node-level filter verdicts and raw scores of one constraint class.
struct ClassCache {
    codes: Vec<u8>,
    taint_raw: Vec<i64>,
    affinity_raw: Vec<i64>,
}

/// What placements earlier in the batch changed.
struct BatchState {
    requested: Vec<i64>,
    nonzero_requested: Vec<i64>,
    pod_count: Vec<i64>,
    placed_ports: Vec<Vec<HostPort>>,
    /// Nodes placed on, in order; signature caches re-evaluate what they have not seen.
    log: Vec<u32>,
    /// Each node's BalancedAllocation balance without the pod, for pods where
    /// it depends on the node alone (empty when the plugin is off).
    balance_without: Vec<i64>,
    /// Metric values, `metrics` per node: the caller's, plus herd estimates of placements.
    values: Vec<f64>,
    /// Each value's badness (NaN where missing) and each node's threshold verdict.
    badness: Vec<f64>,
    metric_codes: Vec<u32>,
    /// Bumped when a herd estimate changes a node's values (see `Base::epochs`).
    metric_epoch: Vec<u32>,
    /// Whether any metric has a herd estimate.
    herd: bool,
    /// Every pod on a node (pod table row, node): bound pods, then placements.
    on_nodes: Vec<(u32, u32)>,
    /// The subset with affinity terms.
    affine: Vec<(u32, u32)>,
    /// Per node: the reservations (nominated pods) held on it; empty when there are none.
    reserved: Vec<Vec<usize>>,
    /// Per node: the evictable bound pods (`Victims` indices) on it.
    victims_on: Vec<Vec<usize>>,
    /// Victims a preemption earlier in the batch already chose.
    taken: Vec<bool>,
}

/// The pod-level plugins' state for one pod (their PreFilter and PreScore).
struct PodLevel {
    row: usize,
    spread: Option<pod_topology_spread::Filter>,
    affinity: Option<inter_pod_affinity::Filter>,
    affinity_scores: Option<std::collections::HashMap<i32, std::collections::HashMap<i32, i64>>>,
    spread_scores: bool,
}

impl PodLevel {
    /// PodTopologySpread, then InterPodAffinity, as upstream orders them.
    #[inline]
    fn filter(&self, nodes: &Nodes, node: usize) -> u32 {
        if let Some(f) = &self.spread {
            let code = f.filter(nodes, node);
            if code != FEASIBLE {
                return code;
            }
        }
        match &self.affinity {
            Some(f) => f.filter(nodes, node),
            None => FEASIBLE,
        }
    }
}

/// Raw and normalized pod-level scores per node (NaN where infeasible), for explanations.
struct PodScores {
    affinity: Vec<(f64, f64)>,
    spread: Vec<(f64, f64)>,
}

struct Engine<'a, 'm> {
    nodes: &'a Nodes<'a>,
    classes: &'a Classes<'a>,
    pods: &'a Pods<'a>,
    metrics: &'a Metrics<'m>,
    profile: &'a Profile,
    resources: usize,
}

/// Per-pod facts reused across all nodes.
struct PodView<'p> {
    index: usize,
    class: usize,
    request: &'p [i64],
    nonzero_request: &'p [i64],
    columns: Vec<usize>,
    has_ports: bool,
    balanced: bool,
    /// The balance without the pod is the node's cached one.
    balanced_node_only: bool,
    priority: i64,
}

struct NodeScores {
    fit: i64,
    balanced: i64,
}

impl Engine<'_, '_> {
    fn class_cache(&self, class: usize) -> ClassCache {
        let n = self.nodes.count;
        let mut codes = vec![FEASIBLE as u8; n];
        if self.classes.has_prefilter[class] != 0 {
            codes.iter_mut().for_each(|c| *c = NODE_AFFINITY_PREFILTER as u8);
            for &node in &self.classes.prefilter_nodes[row(self.classes.prefilter_offsets, class)] {
                codes[node as usize] = FEASIBLE as u8;
            }
        }
        let p = self.profile;
        let tolerations = &self.classes.tolerations;
        let wanted_name = self.classes.node_names[class];
        codes
            .par_iter_mut()
            .with_min_len(NODES_PER_CHUNK)
            .enumerate()
            .for_each(|(node, code)| {
                if *code != FEASIBLE as u8 {
                    return;
                }
                let mut c = FEASIBLE;
                if p.filters(PluginId::NodeUnschedulable) {
                    c = node_unschedulable::filter(self.nodes, node, tolerations, class);
                }
                if c == FEASIBLE && p.filters(PluginId::NodeName) {
                    c = node_name::filter(self.nodes, node, wanted_name);
                }
                if c == FEASIBLE && p.filters(PluginId::TaintToleration) {
                    c = taint_toleration::filter(self.nodes, node, tolerations, class);
                }
                if c == FEASIBLE && p.filters(PluginId::NodeAffinity) {
                    c = node_affinity::filter(self.classes, class, self.nodes, node);
                }
                *code = c as u8;
            });
        let taint_raw = if p.weight_of(PluginId::TaintToleration) != 0 {
            (0..n)
                .into_par_iter()
                .with_min_len(NODES_PER_CHUNK)
                .map(|node| taint_toleration::score(self.nodes, node, tolerations, class))
                .collect()
        } else {
            vec![0; n]
        };
        let has_preferred = !row(self.classes.preferred_offsets, class).is_empty();
        let affinity_raw = if p.weight_of(PluginId::NodeAffinity) != 0 && has_preferred {
            (0..n)
                .into_par_iter()
                .with_min_len(NODES_PER_CHUNK)
                .map(|node| node_affinity::score(self.classes, class, self.nodes, node))
                .collect()
        } else {
            vec![0; n]
        };
        ClassCache {
            codes,
            taint_raw,
            affinity_raw,
        }
    }

    fn pod_view(&self, index: usize) -> PodView<'_> {
        let r = self.resources;
        let request = &self.pods.requests[index * r..(index + 1) * r];
        PodView {
            index,
            class: self.pods.classes[index] as usize,
            request,
            nonzero_request: &self.pods.nonzero_requests[index * 2..index * 2 + 2],
            columns: node_resources_fit::requested_columns(request),
            has_ports: !row(self.pods.host_ports.offsets, index).is_empty(),
            balanced: self.profile.weight_of(PluginId::NodeResourcesBalancedAllocation) != 0
                && balanced_allocation::applies(&self.profile.balanced_resources, request),
            balanced_node_only: balanced_allocation::node_only(&self.profile.balanced_resources, request),
            priority: self.pods.preemption.as_ref().map_or(0, |pre| pre.priorities[index]),
        }
    }

    /// The node's requested resources and pod count for a pod's filters: the
    /// batch's, plus the reservations of nominated pods of equal or higher priority.
    #[inline]
    fn requested_for_filter<'s>(&self, state: &'s BatchState, pod: &PodView, node: usize, buf: &'s mut Vec<i64>) -> (&'s [i64], i64) {
        let r = self.resources;
        let requested = &state.requested[node * r..(node + 1) * r];
        if state.reserved.is_empty() || state.reserved[node].is_empty() {
            return (requested, state.pod_count[node]);
        }
        let reserved = &state.reserved[node];
        let res = &self
            .pods
            .preemption
            .as_ref()
            .expect("reservations imply preemption data")
            .reservations;
        buf.clear();
        buf.extend_from_slice(requested);
        let mut count = state.pod_count[node];
        for &k in reserved {
            if res.priorities[k] >= pod.priority {
                buf.iter_mut().zip(&res.requests[k * r..(k + 1) * r]).for_each(|(b, &q)| *b += q);
                count += 1;
            }
        }
        (&buf[..], count)
    }

    /// Filters, then the per-node scores that need no normalization.
    /// `report` receives the failing plugin's reason codes.
    #[inline]
    fn evaluate(
        &self,
        state: &BatchState,
        cache: &ClassCache,
        pod: &PodView,
        node: usize,
        pod_level: Option<&PodLevel>,
        report: &mut impl FnMut(u32),
    ) -> Option<NodeScores> {
        let code = cache.codes[node] as u32;
        if code != FEASIBLE {
            report(code);
            return None;
        }
        let p = self.profile;
        if p.filters(PluginId::NodePorts) && pod.has_ports {
            let code = node_ports::filter(self.nodes, node, &self.pods.host_ports, pod.index, &state.placed_ports[node], &[]);
            if code != FEASIBLE {
                report(code);
                return None;
            }
        }
        let r = self.resources;
        let allocatable = &self.nodes.allocatable[node * r..(node + 1) * r];
        let requested = &state.requested[node * r..(node + 1) * r];
        let mut buf = Vec::new();
        let (filter_requested, filter_count) = self.requested_for_filter(state, pod, node, &mut buf);
        if p.filters(PluginId::NodeResourcesFit)
            && !node_resources_fit::filter(
                allocatable,
                filter_requested,
                self.nodes.allowed_pods[node],
                filter_count,
                pod.request,
                &pod.columns,
                report,
            )
        {
            return None;
        }
        if let Some(pl) = pod_level {
            let code = pl.filter(self.nodes, node);
            if code != FEASIBLE {
                report(code);
                return None;
            }
        }
        let code = state.metric_codes[node];
        if code != FEASIBLE {
            report(code);
            return None;
        }
        let fit = if p.weight_of(PluginId::NodeResourcesFit) != 0 {
            node_resources_fit::score(
                &p.fit_strategy,
                &p.fit_resources,
                allocatable,
                requested,
                &state.nonzero_requested[node * 2..node * 2 + 2],
                pod.request,
                pod.nonzero_request,
            )
        } else {
            0
        };
        let balanced = if pod.balanced {
            let without = pod.balanced_node_only.then(|| state.balance_without[node]);
            balanced_allocation::score(&p.balanced_resources, allocatable, requested, pod.request, without)
        } else {
            0
        };
        Some(NodeScores { fit, balanced })
    }

    fn metric_value(&self, state: &BatchState, node: usize, m: usize) -> f64 {
        state.values[node * self.metrics.specs.len() + m]
    }

    /// Every plugin's (raw, normalized) score of a feasible node, in explanation order
    /// (the weights are the explanation's own column).
    #[allow(clippy::too_many_arguments)]
    fn plugin_scores(
        &self,
        state: &BatchState,
        cache: &ClassCache,
        node: usize,
        s: &NodeScores,
        maxima: &Maxima,
        pod_affinity: (f64, f64),
        spread: (f64, f64),
        out: &mut Vec<(f64, f64)>,
    ) {
        out.clear();
        let taint = cache.taint_raw[node];
        out.push((taint as f64, normalize::default_normalize(taint, maxima.taint, true) as f64));
        let affinity = cache.affinity_raw[node];
        out.push((
            affinity as f64,
            normalize::default_normalize(affinity, maxima.affinity, false) as f64,
        ));
        out.push((s.fit as f64, s.fit as f64));
        out.push((s.balanced as f64, s.balanced as f64));
        out.push(pod_affinity);
        out.push(spread);
        for (m, spec) in self.metrics.specs.iter().enumerate() {
            let v = self.metric_value(state, node, m);
            out.push((v, metrics::score(spec, v, maxima.metric_min[m], maxima.metric_max[m])));
        }
    }
}

/// Maxima and minima over a pod's feasible nodes, for normalization.
#[derive(Clone, Debug, PartialEq)]
struct Maxima {
    taint: i64,
    affinity: i64,
    metric_min: Vec<f64>,
    metric_max: Vec<f64>,
}

impl Maxima {
    fn empty(metrics: usize) -> Maxima {
        Maxima {
            taint: 0,
            affinity: 0,
            metric_min: vec![f64::INFINITY; metrics],
            metric_max: vec![f64::NEG_INFINITY; metrics],
        }
    }

    #[inline]
    fn add_node(&mut self, state: &BatchState, cache: &ClassCache, node: usize) {
        self.taint = self.taint.max(cache.taint_raw[node]);
        self.affinity = self.affinity.max(cache.affinity_raw[node]);
        let m = self.metric_min.len();
        // f64::min and max ignore a NaN operand: a missing value changes nothing.
        for (k, &b) in state.badness[node * m..(node + 1) * m].iter().enumerate() {
            self.metric_min[k] = self.metric_min[k].min(b);
            self.metric_max[k] = self.metric_max[k].max(b);
        }
    }

    /// Whether the node holds one of the maxima or minima.
    fn held_by(&self, state: &BatchState, cache: &ClassCache, node: usize) -> bool {
        let m = self.metric_min.len();
        let held = |(k, &b): (usize, &f64)| b == self.metric_min[k] || b == self.metric_max[k];
        // Maxima start at 0 and raw scores are never negative: a maximum of 0 cannot move.
        (self.taint > 0 && cache.taint_raw[node] == self.taint)
            || (self.affinity > 0 && cache.affinity_raw[node] == self.affinity)
            || state.badness[node * m..(node + 1) * m].iter().enumerate().any(held)
    }

    fn merge(&mut self, other: &Maxima) {
        self.taint = self.taint.max(other.taint);
        self.affinity = self.affinity.max(other.affinity);
        for k in 0..self.metric_min.len() {
            self.metric_min[k] = self.metric_min[k].min(other.metric_min[k]);
            self.metric_max[k] = self.metric_max[k].max(other.metric_max[k]);
        }
    }
}

/// One node's verdict and scores for one pod signature.
#[derive(Clone, Copy, Debug, Default)]
struct NodeEval {
    feasible: bool,
    /// Number of reason codes in the node's slot of `SignatureCache::reasons`.
    reasons: u8,
    fit: i32,
    balanced: i32,
}

/// The node-only part of the totals for one constraint class and one set of
/// maxima: weighted TaintToleration and NodeAffinity (integers) and each
/// metric's weighted score. Every signature of the class shares it.
struct Base {
    maxima: Maxima,
    static_int: Vec<i64>,
    /// `metrics` weighted scores per node.
    metric: Vec<f64>,
    /// `BatchState::metric_epoch` when built (herd estimates only): a node whose
    /// epoch moved since has its metric scores computed afresh.
    epochs: Vec<u32>,
}

/// The class's current base if it was built for `maxima`, else a new one (kept as current).
fn class_base(
    slot: &mut Option<Arc<Base>>,
    engine: &Engine,
    state: &BatchState,
    cache: &ClassCache,
    maxima: &Maxima,
    parallel: bool,
) -> Arc<Base> {
    match slot {
        Some(base) if base.maxima == *maxima => Arc::clone(base),
        _ => {
            let base = Arc::new(engine.base(state, cache, maxima, parallel));
            *slot = Some(Arc::clone(&base));
            base
        }
    }
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

/// Every node's evaluation for one pod signature (constraint class, requests,
/// host ports), kept in step with the batch's placements. Pods of one
/// signature see the same verdicts and scores on a node until a placement
/// changes that node, so a later pod of the signature re-evaluates only the
/// nodes placed on since, and re-scores every node only when the feasible
/// set's maxima (the normalization inputs) move.
struct SignatureCache {
    /// Placements (`BatchState::log`) already reflected.
    synced: usize,
    evals: Vec<NodeEval>,
    /// Weighted totals, minus infinity where infeasible: a flat array, so
    /// selection is two vectorized passes with no branch on feasibility.
    totals: Vec<f64>,
    /// `reason_slots(resources)` codes per node.
    reasons: Vec<u32>,
    histogram: Vec<i64>,
    feasible: usize,
    maxima: Maxima,
    /// The class base the totals were computed with (its maxima equal `maxima`).
    base: Arc<Base>,
}

/// Reason codes one node can report for one pod: NodeResourcesFit reports
/// "Too many pods" and every insufficient resource; the other filters one code.
fn reason_slots(resources: usize) -> usize {
    resources + 1
}

/// Signature caches kept per batch, bounded by the memory they take.
const SIGNATURE_CACHE_BYTES: usize = 64 << 20;

impl Engine<'_, '_> {
    /// Evaluate one node into its eval and reason slot.
    fn evaluate_node(
        &self,
        state: &BatchState,
        cache: &ClassCache,
        pod: &PodView,
        node: usize,
        pod_level: Option<&PodLevel>,
        slot: &mut [u32],
    ) -> NodeEval {
        let mut count = 0usize;
        let scores = self.evaluate(state, cache, pod, node, pod_level, &mut |code| {
            slot[count] = code;
            count += 1;
        });
        match scores {
            Some(s) => NodeEval {
                feasible: true,
                fit: s.fit as i32,
                balanced: s.balanced as i32,
                ..NodeEval::default()
            },
            None => NodeEval {
                reasons: count as u8,
                ..NodeEval::default()
            },
        }
    }

    /// The node-only part of the totals of a class's nodes under `maxima`.
    fn base(&self, state: &BatchState, cache: &ClassCache, maxima: &Maxima, parallel: bool) -> Base {
        let n = self.nodes.count;
        let m = self.metrics.specs.len();
        let p = self.profile;
        let static_int = |node: usize| {
            normalize::default_normalize(cache.taint_raw[node], maxima.taint, true) * p.weight_of(PluginId::TaintToleration)
                + normalize::default_normalize(cache.affinity_raw[node], maxima.affinity, false) * p.weight_of(PluginId::NodeAffinity)
        };
        let mut metric = vec![0.0; n * m];
        let weighted = |(node, row): (usize, &mut [f64])| {
            for (k, spec) in self.metrics.specs.iter().enumerate() {
                row[k] = metrics::score(spec, self.metric_value(state, node, k), maxima.metric_min[k], maxima.metric_max[k]) * spec.weight;
            }
        };
        let static_int = if parallel {
            if m > 0 {
                metric
                    .par_chunks_mut(m)
                    .with_min_len(NODES_PER_CHUNK)
                    .enumerate()
                    .for_each(weighted);
            }
            (0..n).into_par_iter().with_min_len(NODES_PER_CHUNK).map(static_int).collect()
        } else {
            if m > 0 {
                metric.chunks_mut(m).enumerate().for_each(weighted);
            }
            (0..n).map(static_int).collect()
        };
        Base {
            maxima: maxima.clone(),
            static_int,
            metric,
            epochs: if state.herd { state.metric_epoch.clone() } else { Vec::new() },
        }
    }

    /// Weighted total of a feasible node. The integer plugins are summed
    /// exactly, then each metric's weighted score is added in order.
    #[inline]
    fn total(&self, state: &BatchState, base: &Base, node: usize, fit: i64, balanced: i64) -> f64 {
        let p = self.profile;
        let m = self.metrics.specs.len();
        let mut total = (base.static_int[node]
            + fit * p.weight_of(PluginId::NodeResourcesFit)
            + balanced * p.weight_of(PluginId::NodeResourcesBalancedAllocation)) as f64;
        if state.herd && base.epochs[node] != state.metric_epoch[node] {
            let mx = &base.maxima;
            for (k, spec) in self.metrics.specs.iter().enumerate() {
                total += metrics::score(spec, self.metric_value(state, node, k), mx.metric_min[k], mx.metric_max[k]) * spec.weight;
            }
            return total;
        }
        for &score in &base.metric[node * m..(node + 1) * m] {
            total += score;
        }
        total
    }

    /// Evaluate every node for a pod (in parallel chunks), then its totals.
    #[allow(clippy::too_many_arguments)]
    fn evaluate_all(
        &self,
        state: &BatchState,
        cache: &ClassCache,
        base_slot: &mut Option<Arc<Base>>,
        pod: &PodView,
        pod_level: Option<&PodLevel>,
        chunk: usize,
        parallel: bool,
    ) -> SignatureCache {
        let n = self.nodes.count;
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
                *e = self.evaluate_node(state, cache, pod, node, pod_level, slot);
                if e.feasible {
                    s.feasible += 1;
                    s.maxima.add_node(state, cache, node);
                } else {
                    slot[..e.reasons as usize].iter().for_each(|&c| s.histogram[c as usize] += 1);
                }
            }
            s
        };
        let summary = if parallel {
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
        let base = class_base(base_slot, self, state, cache, &summary.maxima, parallel);
        let mut sig = SignatureCache {
            synced: state.log.len(),
            evals,
            totals: vec![f64::NEG_INFINITY; n],
            reasons,
            histogram: summary.histogram,
            feasible: summary.feasible,
            maxima: summary.maxima,
            base,
        };
        self.rescore_all(state, &mut sig, chunk, parallel);
        sig
    }

    fn rescore_all(&self, state: &BatchState, sig: &mut SignatureCache, chunk: usize, parallel: bool) {
        let base = &sig.base;
        let rescore = |(i, (totals, evals)): (usize, (&mut [f64], &[NodeEval]))| {
            for (k, (t, e)) in totals.iter_mut().zip(evals).enumerate() {
                if e.feasible {
                    *t = self.total(state, base, i * chunk + k, e.fit as i64, e.balanced as i64);
                }
            }
        };
        if parallel {
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

    /// Bring a signature's cache up to date with the placements made since it was last used.
    #[allow(clippy::too_many_arguments)]
    fn refresh(
        &self,
        sig: &mut SignatureCache,
        state: &BatchState,
        cache: &ClassCache,
        base_slot: &mut Option<Arc<Base>>,
        pod: &PodView,
        chunk: usize,
        parallel: bool,
    ) {
        let w = reason_slots(self.resources);
        let dirty = &state.log[sig.synced..];
        if dirty.is_empty() {
            return;
        }
        // A node leaving the feasible set moves the maxima only if it held one.
        let mut maxima_may_move = false;
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
            // A herd estimate moved the node's metric values: the maxima may follow.
            maxima_may_move |= state.herd && (old.feasible || new.feasible);
            if old.feasible != new.feasible {
                maxima_may_move |= new.feasible || sig.maxima.held_by(state, cache, node);
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
                    maxima.add_node(state, cache, node);
                }
            }
            if maxima != sig.maxima {
                sig.base = class_base(base_slot, self, state, cache, &maxima, parallel);
                sig.maxima = maxima;
                self.rescore_all(state, sig, chunk, parallel);
                return;
            }
        }
        for &node in dirty {
            let node = node as usize;
            let e = sig.evals[node];
            if e.feasible && cache.codes[node] == FEASIBLE as u8 {
                sig.totals[node] = self.total(state, &sig.base, node, e.fit as i64, e.balanced as i64);
            }
        }
    }
}

impl<'a> Engine<'a, '_> {
    /// Whether a node passes spread constraint `c`'s inclusion policies
    /// (`nodeAffinityPolicy`, `nodeTaintsPolicy`) for pods of `class`.
    fn inclusion(&self, table: &'a PodTable<'a>, class: usize) -> impl Fn(usize, usize) -> bool + Sync + 'a {
        let (classes, nodes, sp) = (self.classes, self.nodes, &table.spread);
        move |c: usize, node: usize| {
            (sp.honor_affinity[c] == 0 || node_affinity::filter(classes, class, nodes, node) == FEASIBLE)
                && (sp.honor_taints[c] == 0 || taint_toleration::filter(nodes, node, &classes.tolerations, class) == FEASIBLE)
        }
    }

    /// The pod-level plugins' PreFilter and PreScore for a pod, or None when
    /// none of them has anything to do for it (then the signature caches hold).
    fn pod_level(&self, state: &BatchState, pod: &PodView) -> Option<PodLevel> {
        self.pod_level_on(pod, &state.on_nodes, &state.affine)
    }

    /// `pod_level` with the pods on nodes given (preemption removes some).
    fn pod_level_on(&self, pod: &PodView, on_nodes: &[(u32, u32)], affine: &[(u32, u32)]) -> Option<PodLevel> {
        let table = self.pods.table.as_ref()?;
        let p = self.profile;
        let pod_row = table.bound + pod.index;
        let nodes = self.nodes;
        let sp = &table.spread;
        let include = self.inclusion(table, pod.class);
        let ctx = pod_topology_spread::Context {
            table,
            nodes,
            placed: on_nodes,
            row: pod_row,
            index: pod.index,
            include: &include,
        };
        let spread = if p.filters(PluginId::PodTopologySpread) {
            pod_topology_spread::prefilter(&ctx)
        } else {
            None
        };
        let spread_scores = p.weight_of(PluginId::PodTopologySpread) != 0 && row(sp.offsets, pod.index).any(|c| sp.hard[c] == 0);
        let affinity = if p.filters(PluginId::InterPodAffinity) {
            inter_pod_affinity::prefilter(table, nodes, on_nodes, affine, pod_row)
        } else {
            None
        };
        let affinity_scores = if p.weight_of(PluginId::InterPodAffinity) != 0 {
            inter_pod_affinity::prescore(table, nodes, on_nodes, affine, pod_row, p.hard_pod_affinity_weight)
        } else {
            None
        };
        if spread.is_none() && affinity.is_none() && affinity_scores.is_none() && !spread_scores {
            return None;
        }
        Some(PodLevel {
            row: pod_row,
            spread,
            affinity,
            affinity_scores,
            spread_scores,
        })
    }

    /// Add the pod-level plugins' weighted scores to a pod's totals; returns
    /// each node's raw and normalized scores for an explanation.
    fn add_pod_level_scores(&self, state: &BatchState, pod: &PodView, pl: &PodLevel, sig: &mut SignatureCache) -> PodScores {
        let n = self.nodes.count;
        let p = self.profile;
        let feasible: Vec<usize> = (0..n).filter(|&node| sig.evals[node].feasible).collect();
        let mut out = PodScores {
            affinity: vec![(f64::NAN, f64::NAN); n],
            spread: vec![(f64::NAN, f64::NAN); n],
        };
        for &node in &feasible {
            out.affinity[node] = (0.0, 0.0);
            out.spread[node] = (0.0, 0.0);
        }
        if let Some(map) = &pl.affinity_scores {
            let raw: Vec<i64> = feasible
                .iter()
                .map(|&node| inter_pod_affinity::score(map, self.nodes, node))
                .collect();
            let mut normalized = raw.clone();
            inter_pod_affinity::normalize(&mut normalized);
            for (i, &node) in feasible.iter().enumerate() {
                out.affinity[node] = (raw[i] as f64, normalized[i] as f64);
                sig.totals[node] += (normalized[i] * p.weight_of(PluginId::InterPodAffinity)) as f64;
            }
        }
        if pl.spread_scores {
            let table = self.pods.table.as_ref().expect("pod level implies a pod table");
            let nodes = self.nodes;
            let include = self.inclusion(table, pod.class);
            let ctx = pod_topology_spread::Context {
                table,
                nodes,
                placed: &state.on_nodes,
                row: pl.row,
                index: pod.index,
                include: &include,
            };
            if let Some((raw, normalized)) = pod_topology_spread::score(&ctx, &feasible) {
                for (i, &node) in feasible.iter().enumerate() {
                    out.spread[node] = (raw[i] as f64, normalized[i] as f64);
                    sig.totals[node] += (normalized[i] * p.weight_of(PluginId::PodTopologySpread)) as f64;
                }
            }
        }
        out
    }
}

impl Engine<'_, '_> {
    /// DefaultPreemption for a pod that fits nowhere: the candidate node and its
    /// victims, or None (not allowed, nothing to evict, or no node it would fit).
    fn preempt(
        &self,
        state: &BatchState,
        cache: &ClassCache,
        pod: &PodView,
        sig: &SignatureCache,
    ) -> Option<default_preemption::Candidate> {
        let pre = self.pods.preemption.as_ref()?;
        if !self.profile.preemption || pre.allowed[pod.index] == 0 {
            return None;
        }
        let v = &pre.victims;
        // A pod whose earlier preemption is still evicting waits for it, keeping its
        // nomination (upstream PodEligibleToPreemptOthers): no new victims.
        let nominated = pre.nominated[pod.index];
        if nominated >= 0
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
        let w = reason_slots(self.resources);
        let mut candidates = Vec::new();
        for node in 0..self.nodes.count {
            let e = sig.evals[node];
            if e.feasible || e.reasons == 0 || !registry::resolvable(sig.reasons[node * w], self.resources) {
                continue;
            }
            let on_node: Vec<usize> = state.victims_on[node].iter().copied().filter(|&i| !state.taken[i]).collect();
            let mut fits = |removed: &[usize]| self.fits_without(state, cache, pod, node, removed, v);
            if let Some(c) = default_preemption::select_victims(v, node, &on_node, pod.priority, &mut fits) {
                candidates.push(c);
            }
        }
        let best = default_preemption::pick(v, &candidates)?;
        Some(candidates.swap_remove(best))
    }

    /// Whether the pod passes every filter on `node` with the `removed` victims gone.
    fn fits_without(&self, state: &BatchState, cache: &ClassCache, pod: &PodView, node: usize, removed: &[usize], v: &Victims) -> bool {
        if cache.codes[node] != FEASIBLE as u8 || state.metric_codes[node] != FEASIBLE {
            return false;
        }
        let p = self.profile;
        if p.filters(PluginId::NodePorts) && pod.has_ports {
            let used = &self.nodes.used_ports;
            let mut ports: Vec<HostPort> = row(used.offsets, node)
                .map(|j| (used.protocols[j], used.ips[j], used.ports[j]))
                .chain(state.placed_ports[node].iter().copied())
                .collect();
            for &i in removed {
                for j in row(v.ports.offsets, i) {
                    let port = (v.ports.protocols[j], v.ports.ips[j], v.ports.ports[j]);
                    if let Some(k) = ports.iter().position(|&q| q == port) {
                        ports.swap_remove(k);
                    }
                }
            }
            let hp = &self.pods.host_ports;
            let wildcard = self.nodes.wildcard_ip;
            for i in row(hp.offsets, pod.index) {
                let want = (hp.protocols[i], hp.ips[i], hp.ports[i]);
                if want.2 > 0 && ports.iter().any(|&q| node_ports::conflict(wildcard, want, q)) {
                    return false;
                }
            }
        }
        let r = self.resources;
        let mut buf = Vec::new();
        let (requested, count) = self.requested_for_filter(state, pod, node, &mut buf);
        let mut requested = requested.to_vec();
        for &i in removed {
            for (c, q) in requested.iter_mut().enumerate() {
                if default_preemption::counted(&v.requests[i * r..(i + 1) * r], c) {
                    *q -= v.requests[i * r + c];
                }
            }
        }
        if p.filters(PluginId::NodeResourcesFit)
            && !node_resources_fit::filter(
                &self.nodes.allocatable[node * r..(node + 1) * r],
                &requested,
                self.nodes.allowed_pods[node],
                count - removed.len() as i64,
                pod.request,
                &pod.columns,
                &mut |_| {},
            )
        {
            return false;
        }
        if self.pods.table.is_some() {
            let gone: std::collections::HashSet<u32> = removed.iter().filter(|&&i| v.rows[i] >= 0).map(|&i| v.rows[i] as u32).collect();
            let on_nodes: Vec<(u32, u32)> = state.on_nodes.iter().copied().filter(|(row, _)| !gone.contains(row)).collect();
            let affine: Vec<(u32, u32)> = state.affine.iter().copied().filter(|(row, _)| !gone.contains(row)).collect();
            if let Some(pl) = self.pod_level_on(pod, &on_nodes, &affine) {
                if pl.filter(self.nodes, node) != FEASIBLE {
                    return false;
                }
            }
        }
        true
    }
}

/// The feasible node with the highest total; among equal totals, the highest
/// tie key (the first such node if keys collide). Two flat passes: the maximum,
/// then the tie keys of the nodes that reach it.
fn select(totals: &[f64], feasible: usize, tie: impl Fn(usize) -> u64) -> Option<Best> {
    if feasible == 0 {
        return None;
    }
    const LANES: usize = 8;
    let mut lanes = [f64::NEG_INFINITY; LANES];
    let chunks = totals.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (l, &t) in lanes.iter_mut().zip(c) {
            *l = if t > *l { t } else { *l };
        }
    }
    let max = lanes.iter().chain(rest).fold(f64::NEG_INFINITY, |a, &t| if t > a { t } else { a });
    let mut best: Option<Best> = None;
    for (node, &t) in totals.iter().enumerate() {
        if t == max {
            Best::offer(&mut best, node, max, || tie(node));
        }
    }
    best
}

/// A pod's signature: everything besides the node table its verdicts and scores depend on.
fn signature(engine: &Engine, pod: &PodView) -> Vec<i64> {
    let ports = &engine.pods.host_ports;
    let mut key = Vec::with_capacity(3 + pod.request.len());
    key.push(pod.class as i64);
    key.extend_from_slice(pod.request);
    key.extend_from_slice(pod.nonzero_request);
    for i in row(ports.offsets, pod.index) {
        key.extend([ports.protocols[i] as i64, ports.ips[i] as i64, ports.ports[i] as i64]);
    }
    // Which reservations hold back a node depends on the pod's priority.
    if engine
        .pods
        .preemption
        .as_ref()
        .is_some_and(|pre| !pre.reservations.nodes.is_empty())
    {
        key.push(pod.priority);
    }
    key
}

/// Schedule a batch. Pods are placed in the order given (the caller orders
/// them by priority, then arrival).
///
/// With `options.parallel` the whole batch runs on one of rayon's worker
/// threads, so the per-pod parallel passes fork and join among the pool's
/// own threads instead of waking the pool from outside for every pod (on two
/// cores that wake-up traffic was a quarter of the batch's time).
pub fn schedule_batch(
    nodes: &Nodes,
    classes: &Classes,
    pods: &Pods,
    metrics_in: &Metrics,
    profile: &Profile,
    options: &ScheduleOptions,
) -> Result<Outcome, EngineError> {
    if options.parallel && rayon::current_thread_index().is_none() {
        rayon::scope(|_| schedule_on_this_thread(nodes, classes, pods, metrics_in, profile, options))
    } else {
        schedule_on_this_thread(nodes, classes, pods, metrics_in, profile, options)
    }
}

fn schedule_on_this_thread(
    nodes: &Nodes,
    classes: &Classes,
    pods: &Pods,
    metrics_in: &Metrics,
    profile: &Profile,
    options: &ScheduleOptions,
) -> Result<Outcome, EngineError> {
    nodes.validate()?;
    classes.validate(nodes.count)?;
    pods.validate(nodes.resources, classes.count)?;
    if let Some(table) = &pods.table {
        table.validate(nodes.count, pods.count)?;
    }
    let m = metrics_in.specs.len();
    error::check_len("metric values", metrics_in.values.len(), nodes.count * m)?;
    for &(column, _) in &profile.fit_resources {
        error::check_index("fit resource column", column as i64, nodes.resources)?;
    }
    for &column in &profile.balanced_resources {
        error::check_index("balanced resource column", column as i64, nodes.resources)?;
    }
    if let Some(e) = options.explain {
        error::check_index("explained pod", e as i64, pods.count)?;
    }

    let engine = Engine {
        nodes,
        classes,
        pods,
        metrics: metrics_in,
        profile,
        resources: nodes.resources,
    };
    let n = nodes.count;
    let mut state = BatchState {
        requested: nodes.requested.to_vec(),
        nonzero_requested: nodes.nonzero_requested.to_vec(),
        pod_count: nodes.pod_count.to_vec(),
        placed_ports: vec![Vec::new(); n],
        log: Vec::new(),
        balance_without: Vec::new(),
        values: metrics_in.values.to_vec(),
        badness: metrics_in
            .values
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                if v.is_nan() {
                    v
                } else {
                    metrics::badness(metrics_in.specs[i % m].prefer, v)
                }
            })
            .collect(),
        metric_codes: (0..n)
            .map(|node| metrics::filter(&metrics_in.specs, &metrics_in.values[node * m..(node + 1) * m], nodes.resources))
            .collect(),
        metric_epoch: vec![0; n],
        herd: metrics_in.specs.iter().any(|s| s.herd.is_some()),
        on_nodes: Vec::new(),
        affine: Vec::new(),
        reserved: Vec::new(),
        victims_on: vec![Vec::new(); n],
        taken: Vec::new(),
    };
    if let Some(pre) = &pods.preemption {
        pre.validate(pods.count, n, nodes.resources)?;
        if !pre.reservations.nodes.is_empty() {
            state.reserved = vec![Vec::new(); n];
            for (k, &node) in pre.reservations.nodes.iter().enumerate() {
                state.reserved[node as usize].push(k);
            }
        }
        for (i, &node) in pre.victims.nodes.iter().enumerate() {
            state.victims_on[node as usize].push(i);
        }
        state.taken = vec![false; pre.victims.count];
    }
    if let Some(table) = &pods.table {
        state.on_nodes = (0..table.bound).map(|r| (r as u32, table.nodes[r] as u32)).collect();
        state.affine = state
            .on_nodes
            .iter()
            .copied()
            .filter(|&(r, _)| table.term_sets[r as usize] >= 0)
            .collect();
    }
    if profile.weight_of(PluginId::NodeResourcesBalancedAllocation) != 0 {
        let r = nodes.resources;
        state.balance_without = (0..n)
            .map(|node| {
                balanced_allocation::without_pod(
                    &profile.balanced_resources,
                    &nodes.allocatable[node * r..(node + 1) * r],
                    &state.requested[node * r..(node + 1) * r],
                )
            })
            .collect();
    }
    let chunk = if options.parallel { NODES_PER_CHUNK } else { n.max(1) };
    let parallel = options.parallel && n > chunk;
    let per_signature = n * (std::mem::size_of::<NodeEval>() + 4 * reason_slots(nodes.resources)) + 1;
    let max_signatures = (SIGNATURE_CACHE_BYTES / per_signature).max(1);
    let mut caches: Vec<Option<ClassCache>> = (0..classes.count).map(|_| None).collect();
    let mut bases: Vec<Option<Arc<Base>>> = (0..classes.count).map(|_| None).collect();
    let mut signatures: HashMap<Vec<i64>, SignatureCache> = HashMap::new();
    let mut outcome = Outcome {
        reason_offsets: vec![0],
        victim_offsets: vec![0],
        ..Outcome::default()
    };

    for index in 0..pods.count {
        if options.deadline.is_some_and(|d| Instant::now() >= d) {
            outcome.nodes.push(NOT_ATTEMPTED);
            outcome.scores.push(f64::NAN);
            outcome.feasible.push(0);
            outcome.reason_offsets.push(outcome.reason_codes.len() as i64);
            outcome.nominated.push(-1);
            outcome.victim_offsets.push(outcome.victims.len() as i64);
            continue;
        }
        let pod = engine.pod_view(index);
        if caches[pod.class].is_none() {
            caches[pod.class] = Some(engine.class_cache(pod.class));
        }
        let cache = caches[pod.class].as_ref().expect("class cache was just filled");
        // A pod that a pod-level plugin applies to is evaluated afresh; the
        // signature caches serve the pods whose verdicts depend on the node alone.
        let pod_level = engine.pod_level(&state, &pod);
        let mut own: SignatureCache;
        let mut pod_scores = None;
        let sig = match &pod_level {
            Some(pl) => {
                own = engine.evaluate_all(&state, cache, &mut bases[pod.class], &pod, Some(pl), chunk, parallel);
                pod_scores = Some(engine.add_pod_level_scores(&state, &pod, pl, &mut own));
                &own
            }
            None => {
                let key = signature(&engine, &pod);
                if !signatures.contains_key(&key) && signatures.len() >= max_signatures {
                    signatures.clear();
                }
                match signatures.entry(key) {
                    Entry::Occupied(e) => {
                        let sig = e.into_mut();
                        engine.refresh(sig, &state, cache, &mut bases[pod.class], &pod, chunk, parallel);
                        &*sig
                    }
                    Entry::Vacant(e) => &*e.insert(engine.evaluate_all(&state, cache, &mut bases[pod.class], &pod, None, chunk, parallel)),
                }
            }
        };

        let best = select(&sig.totals, sig.feasible, |node| {
            tie_key(options.seed, pods.keys[index], nodes.keys[node])
        });

        if options.explain == Some(index) {
            let pod_level = pod_level.as_ref().zip(pod_scores.as_ref());
            outcome.explanation = Some(explain(&engine, &state, cache, &pod, &sig.maxima, pod_level, best.map(|b| b.node)));
        }

        for (code, &count) in sig.histogram.iter().enumerate() {
            if count > 0 {
                outcome.reason_codes.push(code as u32);
                outcome.reason_counts.push(count);
            }
        }
        outcome.reason_offsets.push(outcome.reason_codes.len() as i64);
        outcome.feasible.push(sig.feasible as i64);
        let mut nominated = -1;
        match best {
            None => {
                outcome.nodes.push(UNSCHEDULABLE);
                outcome.scores.push(f64::NAN);
                if let Some(c) = engine.preempt(&state, cache, &pod, sig) {
                    nominated = c.node as i64;
                    for &v in &c.victims {
                        state.taken[v] = true;
                        outcome.victims.push(v as i64);
                    }
                    // The nominated pod holds its place for the rest of the batch
                    // (upstream adds nominated pods to their node for lower priorities).
                    commit(&engine, &mut state, &pod, c.node);
                }
            }
            Some(b) => {
                commit(&engine, &mut state, &pod, b.node);
                outcome.nodes.push(b.node as i64);
                outcome.scores.push(b.total);
            }
        }
        outcome.nominated.push(nominated);
        outcome.victim_offsets.push(outcome.victims.len() as i64);
    }
    Ok(outcome)
}

/// Count the pod on its node for the rest of the batch.
fn commit(engine: &Engine, state: &mut BatchState, pod: &PodView, node: usize) {
    let r = engine.resources;
    for &c in &pod.columns {
        state.requested[node * r + c] += pod.request[c];
    }
    state.nonzero_requested[node * 2] += pod.nonzero_request[0];
    state.nonzero_requested[node * 2 + 1] += pod.nonzero_request[1];
    state.pod_count[node] += 1;
    state.log.push(node as u32);
    if let Some(table) = &engine.pods.table {
        let row = (table.bound + pod.index) as u32;
        state.on_nodes.push((row, node as u32));
        if table.term_sets[row as usize] >= 0 {
            state.affine.push((row, node as u32));
        }
    }
    if state.herd {
        herd_estimate(engine, state, pod, node);
    }
    if !state.balance_without.is_empty() {
        state.balance_without[node] = balanced_allocation::without_pod(
            &engine.profile.balanced_resources,
            &engine.nodes.allocatable[node * r..(node + 1) * r],
            &state.requested[node * r..(node + 1) * r],
        );
    }
    let ports = &engine.pods.host_ports;
    for i in row(ports.offsets, pod.index) {
        if ports.ports[i] > 0 {
            state.placed_ports[node].push((ports.protocols[i], ports.ips[i], ports.ports[i]));
        }
    }
}

/// Add the placed pod's estimated load to its node's herd-estimated metrics, so
/// later pods of the batch do not all chase the value of the last scrape.
fn herd_estimate(engine: &Engine, state: &mut BatchState, pod: &PodView, node: usize) {
    let specs = &engine.metrics.specs;
    let (m, r) = (specs.len(), engine.resources);
    for (k, spec) in specs.iter().enumerate() {
        let Some((column, factor)) = spec.herd else { continue };
        let capacity = engine.nodes.allocatable[node * r + column];
        let v = &mut state.values[node * m + k];
        if capacity > 0 && !v.is_nan() {
            *v += pod.request[column] as f64 / capacity as f64 * factor;
            state.badness[node * m + k] = metrics::badness(spec.prefer, *v);
        }
    }
    state.metric_codes[node] = metrics::filter(specs, &state.values[node * m..(node + 1) * m], r);
    state.metric_epoch[node] += 1;
}

fn explain(
    engine: &Engine,
    state: &BatchState,
    cache: &ClassCache,
    pod: &PodView,
    maxima: &Maxima,
    pod_level: Option<(&PodLevel, &PodScores)>,
    chosen: Option<usize>,
) -> Explanation {
    let n = engine.nodes.count;
    let mut plugins = vec![
        PluginId::TaintToleration.name().to_string(),
        PluginId::NodeAffinity.name().to_string(),
        PluginId::NodeResourcesFit.name().to_string(),
        PluginId::NodeResourcesBalancedAllocation.name().to_string(),
        PluginId::InterPodAffinity.name().to_string(),
        PluginId::PodTopologySpread.name().to_string(),
    ];
    plugins.extend((0..engine.metrics.specs.len()).map(|m| format!("metric:{m}")));
    let k = plugins.len();
    let p = engine.profile;
    let mut weights = vec![
        p.weight_of(PluginId::TaintToleration) as f64,
        p.weight_of(PluginId::NodeAffinity) as f64,
        p.weight_of(PluginId::NodeResourcesFit) as f64,
        p.weight_of(PluginId::NodeResourcesBalancedAllocation) as f64,
        p.weight_of(PluginId::InterPodAffinity) as f64,
        p.weight_of(PluginId::PodTopologySpread) as f64,
    ];
    weights.extend(engine.metrics.specs.iter().map(|s| s.weight));
    let mut ex = Explanation {
        pod: pod.index,
        reason_offsets: vec![0],
        plugins,
        weights,
        raw: vec![f64::NAN; k * n],
        normalized: vec![f64::NAN; k * n],
        totals: vec![f64::NAN; n],
        ..Explanation::default()
    };
    let mut scratch = Vec::new();
    let base = engine.base(state, cache, maxima, false);
    for node in 0..n {
        let mut codes = Vec::new();
        if let Some(s) = engine.evaluate(state, cache, pod, node, pod_level.map(|(pl, _)| pl), &mut |c| codes.push(c)) {
            let (affinity, spread) = match pod_level {
                Some((_, ps)) => (ps.affinity[node], ps.spread[node]),
                None => ((0.0, 0.0), (0.0, 0.0)),
            };
            engine.plugin_scores(state, cache, node, &s, maxima, affinity, spread, &mut scratch);
            for (i, &(raw, normalized)) in scratch.iter().enumerate() {
                ex.raw[i * n + node] = raw;
                ex.normalized[i * n + node] = normalized;
            }
            let p = engine.profile;
            let extra =
                affinity.1 as i64 * p.weight_of(PluginId::InterPodAffinity) + spread.1 as i64 * p.weight_of(PluginId::PodTopologySpread);
            ex.totals[node] = engine.total(state, &base, node, s.fit, s.balanced) + extra as f64;
        }
        ex.reason_codes.extend(codes);
        ex.reason_offsets.push(ex.reason_codes.len() as i64);
    }
    debug_assert!(chosen.is_none_or(|c| !ex.totals[c].is_nan()));
    ex
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{MetricSpec, Metrics, Missing, Ports, Prefer, CPU, EFFECT_NO_SCHEDULE, MEMORY, PROTOCOL_TCP};
    use crate::reasons::{insufficient, metric, METRIC_ABOVE, NODE_PORTS, TAINT_TOLERATION};
    use crate::test_support::{NodeBuilder, OwnedClasses, OwnedPodTable, OwnedPods, TestPod, TestSpread};

    fn pod(cpu: i64, key: u64) -> TestPod {
        TestPod {
            request: vec![cpu, 1 << 30, 0, 0],
            class: 0,
            key,
            ports: vec![],
        }
    }

    fn run(b: &NodeBuilder, pods: &[TestPod], metrics: &Metrics, seed: u64) -> Outcome {
        let nodes = b.build();
        let mut classes = OwnedClasses::default();
        classes.add(|_| {});
        let pods = OwnedPods::new(pods);
        let options = ScheduleOptions {
            seed,
            parallel: true,
            ..ScheduleOptions::default()
        };
        schedule_batch(&nodes.view(), &classes.view(), &pods.view(), metrics, &Profile::default(), &options).expect("valid input")
    }

    fn no_metrics() -> Metrics<'static> {
        Metrics {
            values: &[],
            specs: vec![],
        }
    }

    /// A batch must place exactly as scheduling its pods one by one against the
    /// updated node table would: same node, score, feasible count and reasons.
    /// Pods share a few signatures, nodes fill up (feasibility changes) and the
    /// metric's min over feasible nodes moves, so every cache path is taken.
    #[test]
    fn batch_equals_one_pod_at_a_time() {
        for (parallel, herd) in [(false, false), (true, false), (false, true), (true, true)] {
            let mut b = NodeBuilder::default();
            for i in 0..300 {
                b.node(|n| {
                    n.allocatable[CPU] = 1000 + 500 * (i % 4);
                    n.allocatable[MEMORY] = (2 + (i % 3)) << 30;
                    n.allowed_pods = 1 + (i % 3);
                });
            }
            let mut values: Vec<f64> = (0..300)
                .map(|i| if i % 11 == 0 { f64::NAN } else { (i * 37 % 100) as f64 / 100.0 })
                .collect();
            // With a herd estimate each placement raises the node's value by its cpu share,
            // which also pushes nodes over the `above` threshold.
            let herd_factor = 0.5;
            let spec = MetricSpec {
                prefer: Prefer::Lower,
                range: None,
                above: Some(0.9),
                below: None,
                missing: Missing::Neutral,
                weight: 3.0,
                herd: herd.then_some((CPU, herd_factor)),
            };
            let start = values.clone();
            let metrics = Metrics {
                values: &start,
                specs: vec![spec],
            };
            let pods: Vec<TestPod> = (0..700)
                .map(|i| TestPod {
                    request: vec![[250, 500, 1000][i % 3], [256 << 20, 1 << 30, 0][i % 3], 0, 0],
                    class: 0,
                    key: i as u64,
                    ports: vec![],
                })
                .collect();
            let mut classes = OwnedClasses::default();
            classes.add(|_| {});
            let options = ScheduleOptions {
                seed: 3,
                parallel,
                ..ScheduleOptions::default()
            };
            let owned = OwnedPods::new(&pods);
            let batch = schedule_batch(
                &b.build().view(),
                &classes.view(),
                &owned.view(),
                &metrics,
                &Profile::default(),
                &options,
            )
            .unwrap();
            assert!(batch.nodes.contains(&UNSCHEDULABLE), "the cluster fills up");
            for (i, p) in pods.iter().enumerate() {
                let single = OwnedPods::new(std::slice::from_ref(p));
                let now = Metrics {
                    values: &values,
                    specs: vec![spec],
                };
                let one = schedule_batch(
                    &b.build().view(),
                    &classes.view(),
                    &single.view(),
                    &now,
                    &Profile::default(),
                    &options,
                )
                .unwrap();
                assert_eq!(one.nodes[0], batch.nodes[i], "pod {i}");
                assert_eq!(one.feasible[0], batch.feasible[i], "pod {i}");
                let (lo, hi) = (batch.reason_offsets[i] as usize, batch.reason_offsets[i + 1] as usize);
                assert_eq!(one.reason_codes, batch.reason_codes[lo..hi], "pod {i}");
                assert_eq!(one.reason_counts, batch.reason_counts[lo..hi], "pod {i}");
                if one.nodes[0] >= 0 {
                    assert_eq!(one.scores[0].to_bits(), batch.scores[i].to_bits(), "pod {i}");
                    let chosen = one.nodes[0] as usize;
                    let node = &mut b.nodes[chosen];
                    if herd && !values[chosen].is_nan() {
                        values[chosen] += p.request[CPU] as f64 / node.allocatable[CPU] as f64 * herd_factor;
                    }
                    node.requested[CPU] += p.request[CPU];
                    node.requested[MEMORY] += p.request[MEMORY];
                    node.nonzero_requested[0] += p.request[CPU].max(100);
                    node.nonzero_requested[1] += p.request[MEMORY].max(200 << 20);
                    node.pod_count += 1;
                }
            }
        }
    }

    const HOSTNAME: i32 = 10;
    const ZONE: i32 = 11;
    const APP: i32 = 20;
    const WEB: i32 = 200;

    /// `nodes` nodes named by hostname, zone A for the first `in_a`, zone B for the rest.
    fn zoned(nodes: usize, in_a: usize) -> NodeBuilder {
        let mut b = NodeBuilder::default();
        for i in 0..nodes {
            b.node(|n| {
                n.labels = vec![(HOSTNAME, 100 + i as i32, None), (ZONE, if i < in_a { 110 } else { 111 }, None)];
            });
        }
        b
    }

    /// `count` pending pods labelled app=web, with the given term set / spread constraints.
    fn web_table(count: usize, term_set: i64, spread: Vec<TestSpread>) -> OwnedPodTable {
        let mut t = OwnedPodTable {
            label_sets: vec![vec![(APP, WEB)]],
            selectors: vec![(APP, WEB)],
            terms: vec![(0, HOSTNAME, 0)],
            term_sets: vec![[vec![], vec![0], vec![], vec![]]],
            label_sets_of_pods: vec![0; count],
            term_sets_of_pods: vec![term_set; count],
            namespaces: vec![1; count],
            terminating: vec![0; count],
            spread: vec![spread; count],
            hostname_key: HOSTNAME,
            ..OwnedPodTable::default()
        };
        t.flatten();
        t
    }

    fn run_with_table(b: &NodeBuilder, count: usize, table: &OwnedPodTable) -> Outcome {
        let nodes = b.build();
        let mut classes = OwnedClasses::default();
        classes.add(|_| {});
        let test_pods: Vec<TestPod> = (0..count as u64).map(|k| pod(100, k)).collect();
        let owned = OwnedPods::new(&test_pods);
        let mut pods = owned.view();
        pods.table = Some(table.view());
        let options = ScheduleOptions {
            seed: 3,
            ..ScheduleOptions::default()
        };
        schedule_batch(&nodes.view(), &classes.view(), &pods, &no_metrics(), &Profile::default(), &options).unwrap()
    }

    #[test]
    fn anti_affinity_sees_pods_placed_earlier_in_the_batch() {
        let out = run_with_table(&zoned(3, 3), 4, &web_table(4, 0, vec![]));
        let mut placed: Vec<i64> = out.nodes[..3].to_vec();
        placed.sort();
        assert_eq!(placed, vec![0, 1, 2], "one web pod per host");
        assert_eq!(out.nodes[3], UNSCHEDULABLE);
        let r = row(&out.reason_offsets, 3);
        assert_eq!(&out.reason_codes[r.clone()], &[reasons::POD_ANTI_AFFINITY]);
        assert_eq!(&out.reason_counts[r], &[3]);
    }

    #[test]
    fn spread_counts_pods_placed_earlier_in_the_batch() {
        // Zone A has three nodes, zone B one: least-allocated alone would fill zone A.
        let out = run_with_table(&zoned(4, 3), 6, &web_table(6, -1, vec![(1, 1, ZONE, 1, 0)]));
        let in_b = out.nodes.iter().filter(|&&n| n == 3).count();
        assert!(out.nodes.iter().all(|&n| n >= 0));
        assert_eq!(in_b, 3, "maxSkew 1 over two zones: 3 and 3, got {:?}", out.nodes);
        // ScheduleAnyway does not filter, but scores the emptier zone higher.
        let out = run_with_table(&zoned(4, 3), 2, &web_table(2, -1, vec![(1, 1, ZONE, 0, 0)]));
        assert!(out.nodes.contains(&3), "one of two pods goes to zone B: {:?}", out.nodes);
    }

    #[test]
    fn preemption_evicts_the_fewest_lowest_priority_pods_and_reserves_the_node() {
        // Two 4-cpu nodes. Node 0 runs pods of priority 1, 1 and 5 (1 cpu each) with
        // 1 cpu free; node 1 is full with one 4-cpu pod of priority 5. A 2-cpu pod of
        // priority 10 fits nowhere: on node 0 evicting one priority-1 pod frees enough.
        let mut b = NodeBuilder::default();
        b.node(|n| {
            n.requested[CPU] = 3000;
            n.pod_count = 3;
        });
        b.node(|n| {
            n.requested[CPU] = 4000;
            n.pod_count = 1;
        });
        let nodes = b.build();
        let mut classes = OwnedClasses::default();
        classes.add(|_| {});
        let test_pods = vec![pod(2000, 1), pod(1000, 2)];
        let owned = OwnedPods::new(&test_pods);
        let mut pods = owned.view();
        let r = 4;
        let mut requests = vec![0i64; 4 * r];
        for (i, cpu) in [1000, 1000, 1000, 4000].into_iter().enumerate() {
            requests[i * r + CPU] = cpu;
        }
        let none = Ports {
            offsets: &[0, 0, 0, 0, 0],
            protocols: &[],
            ips: &[],
            ports: &[],
        };
        let victims = crate::model::Victims {
            count: 4,
            rows: &[-1, -1, -1, -1],
            nodes: &[0, 0, 0, 1],
            priorities: &[1, 1, 5, 5],
            requests: &requests,
            start_times: &[10, 20, 0, 0],
            terminating: &[0, 0, 0, 0],
            ports: none,
            pdb_offsets: &[0, 0, 0, 0, 0],
            pdbs: &[],
            pdb_allowed: &[],
        };
        pods.preemption = Some(crate::model::Preemption {
            priorities: &[10, 0],
            allowed: &[1, 1],
            nominated: &[-1, -1],
            victims,
            reservations: crate::model::Reservations {
                nodes: &[],
                priorities: &[],
                requests: &[],
            },
        });
        let out = schedule_batch(
            &nodes.view(),
            &classes.view(),
            &pods,
            &no_metrics(),
            &Profile::default(),
            &ScheduleOptions::default(),
        )
        .unwrap();
        assert_eq!(out.nodes[0], UNSCHEDULABLE);
        assert_eq!(out.nominated[0], 0);
        // Of the two priority-1 pods the one that started later goes.
        assert_eq!(&out.victims[row(&out.victim_offsets, 0)], &[1]);
        // The 1-cpu pod of priority 0 would have fit node 0; the nomination holds it.
        assert_eq!(out.nodes[1], UNSCHEDULABLE, "node 0 is held for the nominated pod");
        assert_eq!(out.nominated[1], -1);

        // Already nominated to node 0 while a victim there is still terminating:
        // it waits, keeping the nomination, and evicts nobody else.
        if let Some(pre) = pods.preemption.as_mut() {
            pre.nominated = &[0, -1];
            pre.victims.terminating = &[1, 0, 0, 0];
        }
        let out = schedule_batch(
            &nodes.view(),
            &classes.view(),
            &pods,
            &no_metrics(),
            &Profile::default(),
            &ScheduleOptions::default(),
        )
        .unwrap();
        assert_eq!(out.nominated[0], 0);
        assert!(row(&out.victim_offsets, 0).is_empty());
        if let Some(pre) = pods.preemption.as_mut() {
            pre.nominated = &[-1, -1];
            pre.victims.terminating = &[0, 0, 0, 0];
        }

        // preemptionPolicy: Never.
        if let Some(pre) = pods.preemption.as_mut() {
            pre.allowed = &[0, 1];
        }
        let out = schedule_batch(
            &nodes.view(),
            &classes.view(),
            &pods,
            &no_metrics(),
            &Profile::default(),
            &ScheduleOptions::default(),
        )
        .unwrap();
        assert_eq!(out.nominated[0], -1);
        assert_eq!(out.nodes[1], 0);
    }

    #[test]
    fn batch_never_overcommits_a_node() {
        let mut b = NodeBuilder::default();
        b.node(|n| n.allocatable[CPU] = 3000);
        b.node(|n| n.allocatable[CPU] = 2000);
        let pods: Vec<TestPod> = (0..6).map(|i| pod(1000, i)).collect();
        let out = run(&b, &pods, &no_metrics(), 1);
        let mut per_node = [0i64; 2];
        for &n in &out.nodes[..5] {
            per_node[n as usize] += 1000;
        }
        assert_eq!(per_node, [3000, 2000], "placements {:?}", out.nodes);
        assert_eq!(out.nodes[5], UNSCHEDULABLE);
        let reasons: Vec<(u32, i64)> = out.reason_codes[out.reason_offsets[5] as usize..]
            .iter()
            .copied()
            .zip(out.reason_counts[out.reason_offsets[5] as usize..].iter().copied())
            .collect();
        assert_eq!(reasons, vec![(insufficient(CPU), 2)]);
    }

    #[test]
    fn least_allocated_spreads_and_ties_are_seeded() {
        let mut b = NodeBuilder::default();
        for _ in 0..4 {
            b.node(|_| {});
        }
        let pods: Vec<TestPod> = (0..4).map(|i| pod(500, i)).collect();
        let first = run(&b, &pods, &no_metrics(), 7);
        let mut sorted = first.nodes.clone();
        sorted.sort();
        assert_eq!(sorted, vec![0, 1, 2, 3], "identical pods spread over identical nodes");
        assert_eq!(run(&b, &pods, &no_metrics(), 7).nodes, first.nodes, "same seed, same result");
        let differs = (0..20).any(|seed| run(&b, &pods, &no_metrics(), seed).nodes != first.nodes);
        assert!(differs, "the seed changes the tie-break");
    }

    #[test]
    fn host_ports_in_batch() {
        let mut b = NodeBuilder::default();
        b.node(|_| {});
        let mut p = pod(100, 1);
        p.ports = vec![(PROTOCOL_TCP, 1, 8080)];
        let mut q = p.clone();
        q.key = 2;
        let out = run(&b, &[p, q], &no_metrics(), 0);
        assert_eq!(out.nodes, vec![0, UNSCHEDULABLE]);
        assert_eq!(out.reason_codes, vec![NODE_PORTS]);
    }

    #[test]
    fn first_failing_plugin_reports() {
        let mut b = NodeBuilder::default();
        b.node(|n| {
            n.taints = vec![(5, 6, EFFECT_NO_SCHEDULE)];
            n.allocatable[CPU] = 10;
        });
        b.node(|n| n.allocatable[MEMORY] = 10);
        let out = run(&b, &[pod(1000, 1)], &no_metrics(), 0);
        assert_eq!(out.nodes, vec![UNSCHEDULABLE]);
        let mut got: Vec<(u32, i64)> = out.reason_codes.iter().copied().zip(out.reason_counts.iter().copied()).collect();
        got.sort();
        assert_eq!(got, vec![(TAINT_TOLERATION, 1), (insufficient(MEMORY), 1)]);
    }

    #[test]
    fn metrics_filter_and_prefer_lower() {
        let mut b = NodeBuilder::default();
        for _ in 0..3 {
            b.node(|_| {});
        }
        let values = [0.95, 0.5, 0.2];
        let spec = MetricSpec {
            prefer: Prefer::Lower,
            range: None,
            above: Some(0.9),
            below: None,
            missing: Missing::Neutral,
            weight: 5.0,
            herd: None,
        };
        let metrics = Metrics {
            values: &values,
            specs: vec![spec],
        };
        let out = run(&b, &[pod(100, 1)], &metrics, 0);
        assert_eq!(out.nodes, vec![2]);
        assert_eq!(out.reason_codes, vec![metric(4, 0, METRIC_ABOVE)]);
        assert_eq!(out.feasible, vec![2]);
    }

    #[test]
    fn deadline_leaves_rest_not_attempted() {
        let mut b = NodeBuilder::default();
        b.node(|_| {});
        let nodes = b.build();
        let mut classes = OwnedClasses::default();
        classes.add(|_| {});
        let pods = OwnedPods::new(&[pod(1, 1), pod(1, 2)]);
        let options = ScheduleOptions {
            deadline: Some(Instant::now()),
            ..ScheduleOptions::default()
        };
        let out = schedule_batch(
            &nodes.view(),
            &classes.view(),
            &pods.view(),
            &no_metrics(),
            &Profile::default(),
            &options,
        )
        .expect("valid");
        assert_eq!(out.nodes, vec![NOT_ATTEMPTED, NOT_ATTEMPTED]);
    }

    #[test]
    fn explanation_matches_choice() {
        let mut b = NodeBuilder::default();
        b.node(|n| {
            n.requested[CPU] = 3000;
            n.nonzero_requested[0] = 3000;
        });
        b.node(|_| {});
        let nodes = b.build();
        let mut classes = OwnedClasses::default();
        classes.add(|_| {});
        let pods = OwnedPods::new(&[pod(500, 1)]);
        let options = ScheduleOptions {
            explain: Some(0),
            ..ScheduleOptions::default()
        };
        let out = schedule_batch(
            &nodes.view(),
            &classes.view(),
            &pods.view(),
            &no_metrics(),
            &Profile::default(),
            &options,
        )
        .expect("valid");
        let ex = out.explanation.expect("explained");
        assert_eq!(out.nodes, vec![1]);
        assert!(ex.totals[1] > ex.totals[0]);
        assert_eq!(ex.totals[1], out.scores[0]);
    }

    #[test]
    fn bad_shapes_are_errors() {
        let mut b = NodeBuilder::default();
        b.node(|_| {});
        let nodes = b.build();
        let mut classes = OwnedClasses::default();
        classes.add(|_| {});
        let mut bad = pod(1, 1);
        bad.class = 3;
        let pods = OwnedPods::new(&[bad]);
        let err = schedule_batch(
            &nodes.view(),
            &classes.view(),
            &pods.view(),
            &no_metrics(),
            &Profile::default(),
            &ScheduleOptions::default(),
        );
        assert!(matches!(err, Err(EngineError::Index { what: "pod class", .. })), "{:?}", err.err());
    }
}
