//! One scheduling call: place a batch of pending pods, in the order given,
//! against the whole node table (upstream's `schedule_one.go`, once per pod).
//!
//! A pod nominated to a node by an earlier preemption tries that node first
//! and takes it when every filter passes there (`nominated`). Otherwise, for
//! each pod: run the Filter plugins on every node in the registry's order
//! (the class-level ones, which cannot change within a batch, once per
//! constraint class: `filtering`), count the first failing plugin's reasons
//! per node, score the feasible nodes, select the best (seeded tie-break),
//! then commit the placement to the batch's own accounting (`state`) so later
//! pods see it — or, for a pod that fits nowhere, run preemption's dry run
//! (`preemption`) and hold the nominated node. Pods whose verdicts depend on
//! the node alone share evaluations by signature (`signature`); pods a
//! pod-level plugin applies to are evaluated afresh (`pod_level`). Nodes are
//! evaluated in parallel chunks. With a `ScheduleCache`, the class and
//! signature caches outlive the call, for the next one to reuse where its
//! inputs show that sound (`carry`).

mod carry;
mod engine;
mod explain;
mod filtering;
mod nominated;
mod pod_level;
mod preemption;
pub(crate) mod select;
mod signature;
mod spread_ranking;
mod state;
#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::collections::hash_map::{Entry, HashMap};
use std::sync::Arc;
use std::time::Instant;

use crate::model::error::{self, EngineError};
use crate::model::{Classes, Metrics, Nodes, Pods, Profile};
use crate::registry::PodLevelKept;
use carry::Kept;
pub use carry::ScheduleCache;
use engine::{Engine, NODES_PER_CHUNK};
pub use explain::Explanation;
use filtering::ClassCache;
use select::{select, tie_key};
use signature::{Base, SignatureCache};
use state::BatchState;

/// `Outcome::nodes` value of a pod that fits no node.
pub const UNSCHEDULABLE: i64 = -1;
/// `Outcome::nodes` value of a pod not attempted because the deadline passed.
pub const NOT_ATTEMPTED: i64 = -2;

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
    /// DefaultPreemption's PostFilter per pod that fits nowhere (none where
    /// preemption is disabled): the pod, its `default_preemption::verdict`, and
    /// for `NO_CANDIDATE` the (reason code, nodes) of its FitError, where
    /// `default_preemption::NOT_HELPFUL` and `NO_VICTIMS` are pseudo-codes.
    pub postfilter_pods: Vec<i64>,
    pub postfilter_verdicts: Vec<u8>,
    pub postfilter_offsets: Vec<i64>,
    pub postfilter_codes: Vec<u32>,
    pub postfilter_counts: Vec<i64>,
    /// Per placed pod, per claim (in `Volumes` order): the PersistentVolume
    /// it binds (`Volumes` index), or `volume_binding::PROVISION`. Empty for
    /// pods not placed.
    pub volume_offsets: Vec<i64>,
    pub volumes: Vec<i64>,
}

/// The pods left in a call from which a spread pod's signature ranks its nodes
/// (`Engine::select_spread`), at the second pod of its group: building a ranking
/// costs about what scoring every node does for a dozen pods.
const RANKED_PODS: usize = 16;

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
    schedule_batch_with(nodes, classes, pods, metrics_in, profile, options, None)
}

/// `schedule_batch`, reusing what earlier calls with the same `cache` evaluated
/// where that gives the same result, and leaving this call's evaluations for the
/// next. The outcome is the one `schedule_batch` gives.
pub fn schedule_batch_cached(
    nodes: &Nodes,
    classes: &Classes,
    pods: &Pods,
    metrics_in: &Metrics,
    profile: &Profile,
    options: &ScheduleOptions,
    cache: &mut ScheduleCache,
) -> Result<Outcome, EngineError> {
    schedule_batch_with(nodes, classes, pods, metrics_in, profile, options, Some(cache))
}

fn schedule_batch_with(
    nodes: &Nodes,
    classes: &Classes,
    pods: &Pods,
    metrics_in: &Metrics,
    profile: &Profile,
    options: &ScheduleOptions,
    cache: Option<&mut ScheduleCache>,
) -> Result<Outcome, EngineError> {
    if options.parallel && rayon::current_thread_index().is_none() {
        rayon::scope(|_| schedule_on_this_thread(nodes, classes, pods, metrics_in, profile, options, cache))
    } else {
        schedule_on_this_thread(nodes, classes, pods, metrics_in, profile, options, cache)
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
    for &id in pods.images.ids {
        error::check_index("pod image", id as i64, nodes.images.sizes.len())?;
    }
    if let Some(table) = &pods.table {
        table.validate(nodes.count, pods.count)?;
    }
    let m = metrics_in.specs.len();
    error::check_len("metric values", metrics_in.values.len(), nodes.count * m)?;
    for &(column, _) in &profile.fit_resources {
        error::check_index("fit resource column", column as i64, nodes.resources)?;
    }
    for &column in &profile.fit_ignored {
        error::check_index("fit ignored resource column", column as i64, nodes.resources)?;
    }
    for &column in &profile.balanced_resources {
        error::check_index("balanced resource column", column as i64, nodes.resources)?;
    }
    if let Some(e) = options.explain {
        error::check_index("explained pod", e as i64, pods.count)?;
    }
    if let Some(pre) = &pods.preemption {
        pre.validate(pods.count, nodes.count, nodes.resources)?;
        let rows = pods.table.as_ref().map_or(0, |t| t.rows());
        for &row in pre.reservations.rows {
            if row >= 0 {
                error::check_index("reservation row", row, rows)?;
            }
        }
    }
    if let Some(v) = &pods.volumes {
        if pods.table.is_none() {
            return Err(EngineError::Shape {
                what: "pod table (required with volumes)",
                expected: 1,
                got: 0,
            });
        }
        v.validate(pods.count, nodes.count, classes.selectors.term_weights.len())?;
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
    mut carried: Option<&mut ScheduleCache>,
) -> Result<Outcome, EngineError> {
    validate(nodes, classes, pods, metrics_in, profile, options)?;
    let engine = Engine::new(nodes, classes, pods, metrics_in, profile);
    let mut state = BatchState::new(&engine);
    let n = nodes.count;
    let chunk = if options.parallel { NODES_PER_CHUNK } else { n.max(1) };
    let parallel = options.parallel && n > chunk;
    let max_signatures = signature::max_signatures(n, nodes.resources);
    // Taken out for the call, so a call that panics leaves nothing behind.
    let mut kept = Kept::resume(carried.as_mut().and_then(|c| c.take()), &engine, &mut state);
    let slots: Vec<usize> = (0..classes.count).map(|class| kept.slot_of(classes, class)).collect();
    let call = kept.call;
    let Kept {
        caches,
        bases,
        signatures,
        fresh,
        ..
    } = &mut kept;
    let pod_level_kept = RefCell::new(PodLevelKept::default());
    // A spread pod's totals (`Engine::add_spread_scores`), kept from pod to pod.
    let mut spread_totals: Vec<f64> = Vec::new();
    let mut spread_scratch = spread_ranking::Scratch::default();
    // The call's rankings of spread pods' nodes (`Engine::select_spread`).
    let mut ranked = HashMap::new();
    let mut outcome = Outcome {
        reason_offsets: vec![0],
        victim_offsets: vec![0],
        volume_offsets: vec![0],
        postfilter_offsets: vec![0],
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
            outcome.volume_offsets.push(outcome.volumes.len() as i64);
            continue;
        }
        let pod = engine.pod_view(index);
        let slot = slots[pod.class];
        let cache = &*caches[slot].get_or_insert_with(|| engine.class_cache(pod.class));

        // Filter and score. A pod that a pod-level plugin applies to is
        // evaluated afresh; the signature caches serve the pods whose
        // verdicts depend on the node alone.
        let pod_level = engine.pod_level(&state, &pod, &pod_level_kept);
        let on_nominated = engine.nominated_node_fits(&state, cache, &pod, pod_level.as_ref());
        // An explained pod is evaluated on every node for its explanation, and
        // still goes to its nominated node (below).
        if let (Some(node), false) = (on_nominated, options.explain == Some(index)) {
            let volumes = state.bind_volumes(&engine, &pod, node);
            outcome.volumes.extend(volumes);
            outcome.volume_offsets.push(outcome.volumes.len() as i64);
            state.commit(&engine, &pod, node);
            outcome.nodes.push(node as i64);
            outcome.scores.push(f64::NAN); // placed without scoring, as upstream
            outcome.feasible.push(1);
            outcome.reason_offsets.push(outcome.reason_codes.len() as i64);
            outcome.nominated.push(-1);
            outcome.victim_offsets.push(outcome.victims.len() as i64);
            continue;
        }
        let mut own: SignatureCache;
        let mut pod_scores = None;
        // The totals with pod-level scores added, where the signature's cache serves the rest.
        let mut pod_totals: Option<Vec<f64>> = None;
        let mut in_spread_totals = false;
        // The pod's best node, where selected by ranked nodes.
        let mut ranked_best = None;
        let tie = |node: usize| tie_key(options.seed, pods.keys[index], nodes.keys[node]);
        let explained = options.explain == Some(index);
        let key = signature::key(&engine, &pod, slot);
        let sig = match (&pod_level, key) {
            // Pod-level filters: the signature's evaluation with them applied.
            (Some(pl), Some(key)) if !pl.prefilter.is_empty() => {
                let shared = shared_signature(
                    &engine,
                    signatures,
                    max_signatures,
                    key,
                    (call, fresh),
                    &state,
                    cache,
                    &mut bases[slot],
                    &pod,
                    chunk,
                    parallel,
                );
                own = engine.with_pod_filters(shared, &state, cache, &mut bases[slot], &pod, &pl.prefilter, chunk, parallel);
                // Without pod-level scores every node scores 0 there (an explanation still shows them).
                if !pl.prescore.is_empty() || explained {
                    let feasible = own.feasible_nodes();
                    pod_scores = engine.add_pod_level_scores(&state, &pod, pl, &feasible, &mut own.totals, explained);
                }
                &own
            }
            (Some(pl), None) if !pl.prefilter.is_empty() => {
                own = engine.evaluate_all(&state, cache, &mut bases[slot], &pod, Some(&pl.prefilter), chunk, parallel);
                let feasible = own.feasible_nodes();
                pod_scores = engine.add_pod_level_scores(&state, &pod, pl, &feasible, &mut own.totals, explained);
                &own
            }
            (_, None) => {
                own = engine.evaluate_all(&state, cache, &mut bases[slot], &pod, None, chunk, parallel);
                if let Some(pl) = &pod_level {
                    let feasible = own.feasible_nodes();
                    pod_scores = engine.add_pod_level_scores(&state, &pod, pl, &feasible, &mut own.totals, explained);
                }
                &own
            }
            (_, Some(key)) => {
                let shared = shared_signature(
                    &engine,
                    signatures,
                    max_signatures,
                    key,
                    (call, fresh),
                    &state,
                    cache,
                    &mut bases[slot],
                    &pod,
                    chunk,
                    parallel,
                );
                // Pod-level scores only (ScheduleAnyway spreading, the default constraints,
                // preferred affinity): the node-level verdicts and scores are the signature's,
                // so only a copy of its totals gets the pod-level scores added.
                if let (Some(pl), false) = (&pod_level, explained) {
                    // A ranking pays for its building over many pods of the call.
                    let build = pods.count - index >= RANKED_PODS;
                    ranked_best = engine.select_spread(&state, &pod, pl, shared, &mut ranked, build, tie);
                    in_spread_totals = ranked_best.is_none()
                        && engine.add_spread_scores(&state, &pod, pl, shared, &mut spread_totals, &mut spread_scratch);
                }
                if let (Some(pl), false, None) = (&pod_level, in_spread_totals, ranked_best) {
                    let feasible = shared.feasible_nodes();
                    let mut totals = shared.totals.clone();
                    pod_scores = engine.add_pod_level_scores(&state, &pod, pl, &feasible, &mut totals, explained);
                    pod_totals = Some(totals);
                }
                shared
            }
        };

        // Select.
        let totals = match (in_spread_totals, pod_totals.as_deref()) {
            (true, _) => &spread_totals[..],
            (false, Some(totals)) => totals,
            (false, None) => &sig.totals[..],
        };
        let best = match (on_nominated, ranked_best) {
            (Some(node), _) => Some(select::Best {
                node,
                total: totals[node],
                tie: 0,
            }),
            (None, Some(best)) => best,
            (None, None) => select(totals, sig.feasible, tie),
        };

        if explained {
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
                let volumes = state.bind_volumes(&engine, &pod, b.node);
                outcome.volumes.extend(volumes);
                state.commit(&engine, &pod, b.node);
                outcome.nodes.push(b.node as i64);
                outcome.scores.push(b.total);
            }
            None => {
                outcome.nodes.push(UNSCHEDULABLE);
                outcome.scores.push(f64::NAN);
                let post = engine.preempt(&state, cache, &pod, sig, options.seed);
                if post.verdict != 0 {
                    outcome.postfilter_pods.push(index as i64);
                    outcome.postfilter_verdicts.push(post.verdict);
                    for &(code, count) in &post.histogram {
                        outcome.postfilter_codes.push(code);
                        outcome.postfilter_counts.push(count);
                    }
                    outcome.postfilter_offsets.push(outcome.postfilter_codes.len() as i64);
                }
                if let Some(c) = post.candidate {
                    nominated = c.node as i64;
                    for &v in &c.victims {
                        state.taken[v] = true;
                        outcome.victims.push(v as i64);
                    }
                    // The nominated pod holds its place for the rest of the batch
                    // (upstream adds nominated pods to their node for lower priorities).
                    state.nominate(&pod, c.node);
                }
            }
        }
        outcome.nominated.push(nominated);
        outcome.victim_offsets.push(outcome.victims.len() as i64);
        outcome.volume_offsets.push(outcome.volumes.len() as i64);
    }
    if let Some(c) = carried {
        c.put(kept.suspend(&engine, &state));
    }
    Ok(outcome)
}

/// The signature cache of the pod's signature, brought up to date with the batch's
/// placements (evaluated on every node the first time).
/// Over the bound, the caches this call has not used go first, then all.
#[allow(clippy::too_many_arguments)]
fn shared_signature<'s>(
    engine: &Engine,
    signatures: &'s mut HashMap<Vec<i64>, SignatureCache>,
    max_signatures: usize,
    key: Vec<i64>,
    (call, fresh): (u64, &mut usize),
    state: &BatchState,
    cache: &ClassCache,
    base: &mut Option<Arc<Base>>,
    pod: &engine::PodView,
    chunk: usize,
    parallel: bool,
) -> &'s SignatureCache {
    if !signatures.contains_key(&key) && signatures.len() >= max_signatures {
        signatures.retain(|_, sig| sig.used == call);
        if signatures.len() >= max_signatures {
            signatures.clear();
        }
    }
    let sig = match signatures.entry(key) {
        Entry::Occupied(e) => {
            let sig = e.into_mut();
            engine.refresh(sig, state, cache, base, pod, chunk, parallel);
            sig
        }
        Entry::Vacant(e) => {
            *fresh += 1;
            e.insert(engine.evaluate_all(state, cache, base, pod, None, chunk, parallel))
        }
    };
    sig.used = call;
    &*sig
}
