//! One scheduling call: place a batch of pending pods, in the order given,
//! against the whole node table (upstream's `schedule_one.go`, once per pod).
//!
//! For each pod: run the Filter plugins on every node in the registry's order
//! (the class-level ones, which cannot change within a batch, once per
//! constraint class: `filtering`), count the first failing plugin's reasons
//! per node, score the feasible nodes, select the best (seeded tie-break),
//! then commit the placement to the batch's own accounting (`state`) so later
//! pods see it — or, for a pod that fits nowhere, run preemption's dry run
//! (`preemption`) and hold the nominated node. Pods whose verdicts depend on
//! the node alone share evaluations by signature (`signature`); pods a
//! pod-level plugin applies to are evaluated afresh (`pod_level`). Nodes are
//! evaluated in parallel chunks.

mod explain;
mod filtering;
mod pod_level;
mod preemption;
mod select;
mod signature;
mod state;
#[cfg(test)]
mod tests;

use std::collections::hash_map::{Entry, HashMap};
use std::sync::Arc;
use std::time::Instant;

use crate::model::error::{self, EngineError};
use crate::model::{row, Classes, Level, Metrics, Nodes, PluginId, Pods, Profile};
use crate::plugins::{balanced_allocation, node_resources_fit};
use crate::registry::{self, Filters, PLUGINS};
use filtering::ClassCache;
use select::{select, tie_key};
use signature::{Base, SignatureCache};
use state::BatchState;

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
    /// Score plugins (registry order, then the metrics, named `metric:<index>`):
    /// name, weight, and `plugins × nodes` raw and normalized scores (NaN for
    /// infeasible nodes).
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

/// The batch's inputs, and the registry's rows the profile turns on.
struct Engine<'a, 'm> {
    nodes: &'a Nodes<'a>,
    classes: &'a Classes<'a>,
    pods: &'a Pods<'a>,
    metrics: &'a Metrics<'m>,
    profile: &'a Profile,
    resources: usize,
    filters: Filters,
    /// Score plugins with a non-zero weight, per level: (plugin, its slot in
    /// that level's score arrays, weight).
    class_scores: Vec<(PluginId, usize, i64)>,
    node_scores: Vec<(PluginId, usize, i64)>,
    pod_scores: Vec<(PluginId, usize, i64)>,
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

impl<'a, 'm> Engine<'a, 'm> {
    fn new(nodes: &'a Nodes, classes: &'a Classes, pods: &'a Pods, metrics: &'a Metrics<'m>, profile: &'a Profile) -> Self {
        let scores = |level: Level| -> Vec<(PluginId, usize, i64)> {
            PLUGINS
                .iter()
                .filter(|p| p.score && p.level == level && profile.weight_of(p.id) != 0)
                .map(|p| (p.id, registry::score_slot(p.id), profile.weight_of(p.id)))
                .collect()
        };
        Engine {
            nodes,
            classes,
            pods,
            metrics,
            profile,
            resources: nodes.resources,
            filters: Filters::of(profile),
            class_scores: scores(Level::Class),
            node_scores: scores(Level::Node),
            pod_scores: scores(Level::Pod),
        }
    }

    fn pod_view(&self, index: usize) -> PodView<'_> {
        let r = self.resources;
        let request = &self.pods.requests[index * r..(index + 1) * r];
        let balanced_resources = &self.profile.balanced_resources;
        PodView {
            index,
            class: self.pods.classes[index] as usize,
            request,
            nonzero_request: &self.pods.nonzero_requests[index * 2..index * 2 + 2],
            columns: node_resources_fit::requested_columns(request),
            has_ports: !row(self.pods.host_ports.offsets, index).is_empty(),
            balanced: self.profile.weight_of(PluginId::NodeResourcesBalancedAllocation) != 0
                && balanced_allocation::applies(balanced_resources, request),
            balanced_node_only: balanced_allocation::node_only(balanced_resources, request),
            priority: self.pods.preemption.as_ref().map_or(0, |pre| pre.priorities[index]),
        }
    }

    fn metric_value(&self, state: &BatchState, node: usize, m: usize) -> f64 {
        state.values[node * self.metrics.specs.len() + m]
    }
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

fn validate(
    nodes: &Nodes,
    classes: &Classes,
    pods: &Pods,
    metrics_in: &Metrics,
    profile: &Profile,
    options: &ScheduleOptions,
) -> Result<(), EngineError> {
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
    if let Some(pre) = &pods.preemption {
        pre.validate(pods.count, nodes.count, nodes.resources)?;
    }
    Ok(())
}

fn schedule_on_this_thread(
    nodes: &Nodes,
    classes: &Classes,
    pods: &Pods,
    metrics_in: &Metrics,
    profile: &Profile,
    options: &ScheduleOptions,
) -> Result<Outcome, EngineError> {
    validate(nodes, classes, pods, metrics_in, profile, options)?;
    let engine = Engine::new(nodes, classes, pods, metrics_in, profile);
    let mut state = BatchState::new(&engine);
    let n = nodes.count;
    let chunk = if options.parallel { NODES_PER_CHUNK } else { n.max(1) };
    let parallel = options.parallel && n > chunk;
    let max_signatures = signature::max_signatures(n, nodes.resources);
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
        let cache = &*caches[pod.class].get_or_insert_with(|| engine.class_cache(pod.class));

        // Filter and score. A pod that a pod-level plugin applies to is
        // evaluated afresh; the signature caches serve the pods whose
        // verdicts depend on the node alone.
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

        // Select.
        let best = select(&sig.totals, sig.feasible, |node| {
            tie_key(options.seed, pods.keys[index], nodes.keys[node])
        });

        if options.explain == Some(index) {
            let pod_level = pod_level.as_ref().zip(pod_scores.as_ref());
            outcome.explanation = Some(engine.explain(&state, cache, &pod, &sig.maxima, pod_level, best.map(|b| b.node)));
        }

        for (code, &count) in sig.histogram.iter().enumerate() {
            if count > 0 {
                outcome.reason_codes.push(code as u32);
                outcome.reason_counts.push(count);
            }
        }
        outcome.reason_offsets.push(outcome.reason_codes.len() as i64);
        outcome.feasible.push(sig.feasible as i64);

        // Commit, or preempt (PostFilter) for a pod that fits nowhere.
        let mut nominated = -1;
        match best {
            Some(b) => {
                state.commit(&engine, &pod, b.node);
                outcome.nodes.push(b.node as i64);
                outcome.scores.push(b.total);
            }
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
                    state.commit(&engine, &pod, c.node);
                }
            }
        }
        outcome.nominated.push(nominated);
        outcome.victim_offsets.push(outcome.victims.len() as i64);
    }
    Ok(outcome)
}
