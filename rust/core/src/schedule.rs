//! One scheduling call: place a batch of pending pods, in the order given,
//! against the whole node table.
//!
//! For each pod: run the filters on every node in upstream's order (the
//! node-level ones that cannot change within a batch are computed once per
//! constraint class), count the first failing plugin's reasons per node,
//! score the feasible nodes, pick the best (seeded tie-break), then commit
//! the placement to the batch's own accounting (requests, pod count, host
//! ports) so later pods see it. Nodes are evaluated in parallel chunks.

use std::time::Instant;

use rayon::prelude::*;

use crate::error::EngineError;
use crate::model::{row, Classes, Metrics, Nodes, Pods, Profile};
use crate::node_ports::HostPort;
use crate::reasons::{self, FEASIBLE, NODE_AFFINITY_PREFILTER};
use crate::select::{tie_key, Best};
use crate::{
    balanced_allocation, metrics, node_affinity, node_name, node_ports, node_resources_fit, node_unschedulable, normalize, taint_toleration,
};

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
}

/// Per-chunk scratch, reused across pods.
struct Chunk {
    start: usize,
    end: usize,
    feasible: Vec<(u32, i64, i64)>,
    histogram: Vec<i64>,
    taint_max: i64,
    affinity_max: i64,
    metric_min: Vec<f64>,
    metric_max: Vec<f64>,
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
                if p.filter_node_unschedulable {
                    c = node_unschedulable::filter(self.nodes, node, tolerations, class);
                }
                if c == FEASIBLE && p.filter_node_name {
                    c = node_name::filter(self.nodes, node, wanted_name);
                }
                if c == FEASIBLE && p.filter_taint_toleration {
                    c = taint_toleration::filter(self.nodes, node, tolerations, class);
                }
                if c == FEASIBLE && p.filter_node_affinity {
                    c = node_affinity::filter(self.classes, class, self.nodes, node);
                }
                *code = c as u8;
            });
        let taint_raw = if p.taint_toleration_weight != 0 {
            (0..n)
                .into_par_iter()
                .with_min_len(NODES_PER_CHUNK)
                .map(|node| taint_toleration::score(self.nodes, node, tolerations, class))
                .collect()
        } else {
            vec![0; n]
        };
        let has_preferred = !row(self.classes.preferred_offsets, class).is_empty();
        let affinity_raw = if p.node_affinity_weight != 0 && has_preferred {
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
            balanced: self.profile.balanced_weight != 0 && balanced_allocation::applies(&self.profile.balanced_resources, request),
        }
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
        report: &mut impl FnMut(u32),
    ) -> Option<NodeScores> {
        let code = cache.codes[node] as u32;
        if code != FEASIBLE {
            report(code);
            return None;
        }
        let p = self.profile;
        if p.filter_node_ports && pod.has_ports {
            let code = node_ports::filter(self.nodes, node, &self.pods.host_ports, pod.index, &state.placed_ports[node]);
            if code != FEASIBLE {
                report(code);
                return None;
            }
        }
        let r = self.resources;
        let allocatable = &self.nodes.allocatable[node * r..(node + 1) * r];
        let requested = &state.requested[node * r..(node + 1) * r];
        if p.filter_node_resources_fit
            && !node_resources_fit::filter(
                allocatable,
                requested,
                self.nodes.allowed_pods[node],
                state.pod_count[node],
                pod.request,
                &pod.columns,
                report,
            )
        {
            return None;
        }
        let specs = &self.metrics.specs;
        if !specs.is_empty() {
            let values = &self.metrics.values[node * specs.len()..(node + 1) * specs.len()];
            let code = metrics::filter(specs, values, r);
            if code != FEASIBLE {
                report(code);
                return None;
            }
        }
        let fit = if p.fit_weight != 0 {
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
            balanced_allocation::score(&p.balanced_resources, allocatable, requested, pod.request)
        } else {
            0
        };
        Some(NodeScores { fit, balanced })
    }

    fn metric_value(&self, node: usize, m: usize) -> f64 {
        self.metrics.values[node * self.metrics.specs.len() + m]
    }

    /// Every plugin's normalized score of a feasible node, in explanation order.
    fn plugin_scores(&self, cache: &ClassCache, node: usize, s: &NodeScores, maxima: &Maxima, out: &mut Vec<(f64, f64, f64)>) {
        out.clear();
        let p = self.profile;
        let taint = cache.taint_raw[node];
        out.push((
            taint as f64,
            normalize::default_normalize(taint, maxima.taint, true) as f64,
            p.taint_toleration_weight as f64,
        ));
        let affinity = cache.affinity_raw[node];
        out.push((
            affinity as f64,
            normalize::default_normalize(affinity, maxima.affinity, false) as f64,
            p.node_affinity_weight as f64,
        ));
        out.push((s.fit as f64, s.fit as f64, p.fit_weight as f64));
        out.push((s.balanced as f64, s.balanced as f64, p.balanced_weight as f64));
        for (m, spec) in self.metrics.specs.iter().enumerate() {
            let v = self.metric_value(node, m);
            out.push((v, metrics::score(spec, v, maxima.metric_min[m], maxima.metric_max[m]), spec.weight));
        }
    }
}

/// Maxima and minima over a pod's feasible nodes, for normalization.
struct Maxima {
    taint: i64,
    affinity: i64,
    metric_min: Vec<f64>,
    metric_max: Vec<f64>,
}

/// Schedule a batch. Pods are placed in the order given (the caller orders
/// them by priority, then arrival).
pub fn schedule_batch(
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
    let m = metrics_in.specs.len();
    crate::error::check_len("metric values", metrics_in.values.len(), nodes.count * m)?;
    for &(column, _) in &profile.fit_resources {
        crate::error::check_index("fit resource column", column as i64, nodes.resources)?;
    }
    for &column in &profile.balanced_resources {
        crate::error::check_index("balanced resource column", column as i64, nodes.resources)?;
    }
    if let Some(e) = options.explain {
        crate::error::check_index("explained pod", e as i64, pods.count)?;
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
    };
    let reason_space = reasons::count(nodes.resources, m);
    let chunk_size = if options.parallel { NODES_PER_CHUNK } else { n.max(1) };
    let mut chunks: Vec<Chunk> = (0..n.div_ceil(chunk_size).max(1))
        .map(|i| Chunk {
            start: i * chunk_size,
            end: ((i + 1) * chunk_size).min(n),
            feasible: Vec::with_capacity(chunk_size.min(n)),
            histogram: vec![0; reason_space],
            taint_max: 0,
            affinity_max: 0,
            metric_min: vec![f64::INFINITY; m],
            metric_max: vec![f64::NEG_INFINITY; m],
        })
        .collect();
    let mut caches: Vec<Option<ClassCache>> = (0..classes.count).map(|_| None).collect();
    let mut outcome = Outcome {
        reason_offsets: vec![0],
        ..Outcome::default()
    };
    let mut histogram = vec![0i64; reason_space];
    let mut feasible: Vec<(u32, i64, i64)> = Vec::with_capacity(n);
    let mut scratch = Vec::new();

    for index in 0..pods.count {
        if options.deadline.is_some_and(|d| Instant::now() >= d) {
            outcome.nodes.push(NOT_ATTEMPTED);
            outcome.scores.push(f64::NAN);
            outcome.feasible.push(0);
            outcome.reason_offsets.push(outcome.reason_codes.len() as i64);
            continue;
        }
        let pod = engine.pod_view(index);
        if caches[pod.class].is_none() {
            caches[pod.class] = Some(engine.class_cache(pod.class));
        }
        let cache = caches[pod.class].as_ref().expect("class cache was just filled");

        let evaluate_chunk = |chunk: &mut Chunk| {
            chunk.feasible.clear();
            chunk.histogram.iter_mut().for_each(|h| *h = 0);
            chunk.taint_max = 0;
            chunk.affinity_max = 0;
            chunk.metric_min.iter_mut().for_each(|v| *v = f64::INFINITY);
            chunk.metric_max.iter_mut().for_each(|v| *v = f64::NEG_INFINITY);
            for node in chunk.start..chunk.end {
                let histogram = &mut chunk.histogram;
                if let Some(s) = engine.evaluate(&state, cache, &pod, node, &mut |code| histogram[code as usize] += 1) {
                    chunk.feasible.push((node as u32, s.fit, s.balanced));
                    chunk.taint_max = chunk.taint_max.max(cache.taint_raw[node]);
                    chunk.affinity_max = chunk.affinity_max.max(cache.affinity_raw[node]);
                    for (k, spec) in metrics_in.specs.iter().enumerate() {
                        let v = engine.metric_value(node, k);
                        if !v.is_nan() {
                            let b = metrics::badness(spec.prefer, v);
                            chunk.metric_min[k] = chunk.metric_min[k].min(b);
                            chunk.metric_max[k] = chunk.metric_max[k].max(b);
                        }
                    }
                }
            }
        };
        if options.parallel && chunks.len() > 1 {
            chunks.par_iter_mut().for_each(evaluate_chunk);
        } else {
            chunks.iter_mut().for_each(evaluate_chunk);
        }

        histogram.iter_mut().for_each(|h| *h = 0);
        feasible.clear();
        let mut maxima = Maxima {
            taint: 0,
            affinity: 0,
            metric_min: vec![f64::INFINITY; m],
            metric_max: vec![f64::NEG_INFINITY; m],
        };
        for chunk in &chunks {
            feasible.extend_from_slice(&chunk.feasible);
            for (h, c) in histogram.iter_mut().zip(&chunk.histogram) {
                *h += c;
            }
            maxima.taint = maxima.taint.max(chunk.taint_max);
            maxima.affinity = maxima.affinity.max(chunk.affinity_max);
            for k in 0..m {
                maxima.metric_min[k] = maxima.metric_min[k].min(chunk.metric_min[k]);
                maxima.metric_max[k] = maxima.metric_max[k].max(chunk.metric_max[k]);
            }
        }

        let mut best: Option<Best> = None;
        for &(node, fit, balanced) in &feasible {
            let node = node as usize;
            engine.plugin_scores(cache, node, &NodeScores { fit, balanced }, &maxima, &mut scratch);
            let total: f64 = scratch.iter().map(|&(_, normalized, weight)| normalized * weight).sum();
            Best::offer(&mut best, node, total, || tie_key(options.seed, pods.keys[index], nodes.keys[node]));
        }

        if options.explain == Some(index) {
            outcome.explanation = Some(explain(&engine, &state, cache, &pod, &maxima, best.map(|b| b.node)));
        }

        for (code, &count) in histogram.iter().enumerate() {
            if count > 0 {
                outcome.reason_codes.push(code as u32);
                outcome.reason_counts.push(count);
            }
        }
        outcome.reason_offsets.push(outcome.reason_codes.len() as i64);
        outcome.feasible.push(feasible.len() as i64);
        match best {
            None => {
                outcome.nodes.push(UNSCHEDULABLE);
                outcome.scores.push(f64::NAN);
            }
            Some(b) => {
                commit(&engine, &mut state, &pod, b.node);
                outcome.nodes.push(b.node as i64);
                outcome.scores.push(b.total);
            }
        }
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
    let ports = &engine.pods.host_ports;
    for i in row(ports.offsets, pod.index) {
        if ports.ports[i] > 0 {
            state.placed_ports[node].push((ports.protocols[i], ports.ips[i], ports.ports[i]));
        }
    }
}

fn explain(engine: &Engine, state: &BatchState, cache: &ClassCache, pod: &PodView, maxima: &Maxima, chosen: Option<usize>) -> Explanation {
    let n = engine.nodes.count;
    let mut plugins = vec![
        taint_toleration::NAME.to_string(),
        node_affinity::NAME.to_string(),
        node_resources_fit::NAME.to_string(),
        balanced_allocation::NAME.to_string(),
    ];
    plugins.extend((0..engine.metrics.specs.len()).map(|m| format!("metric:{m}")));
    let k = plugins.len();
    let p = engine.profile;
    let mut weights = vec![
        p.taint_toleration_weight as f64,
        p.node_affinity_weight as f64,
        p.fit_weight as f64,
        p.balanced_weight as f64,
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
    for node in 0..n {
        let mut codes = Vec::new();
        if let Some(s) = engine.evaluate(state, cache, pod, node, &mut |c| codes.push(c)) {
            engine.plugin_scores(cache, node, &s, maxima, &mut scratch);
            let mut total = 0.0;
            for (i, &(raw, normalized, weight)) in scratch.iter().enumerate() {
                ex.raw[i * n + node] = raw;
                ex.normalized[i * n + node] = normalized;
                total += normalized * weight;
            }
            ex.totals[node] = total;
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
    use crate::model::{MetricSpec, Metrics, Missing, Prefer, CPU, EFFECT_NO_SCHEDULE, MEMORY, PROTOCOL_TCP};
    use crate::reasons::{insufficient, metric, METRIC_ABOVE, NODE_PORTS, TAINT_TOLERATION};
    use crate::test_support::{NodeBuilder, OwnedClasses, OwnedPods, TestPod};

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
