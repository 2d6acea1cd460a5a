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
//! pod-level plugin applies to are evaluated afresh (`pod_level`); those whose
//! one pod-level score is spread's select by ranked nodes (`spread_ranking`).
//! Nodes are evaluated in parallel chunks. With a `ScheduleCache`, the class
//! and signature caches outlive the call, for the next one to reuse where its
//! inputs show that sound (`carry`).
//!
//! The loop below reads as those steps (`PodStep`: evaluate, select, then
//! commit or preempt); each pod's result is appended in one place (`outcome`).

mod base;
mod carry;
mod engine;
mod explain;
mod filtering;
mod load;
mod nominated;
mod outcome;
mod pod_level;
mod preemption;
pub(crate) mod select;
mod signature;
mod spread_ranking;
mod state;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::hash_map::{Entry, HashMap};
use std::sync::Arc;
use std::time::Instant;

use crate::model::error::{self, EngineError};
use crate::model::{Classes, Metrics, Nodes, Pods, Profile};
use crate::registry::PodLevelKept;
use base::Base;
use carry::Kept;
pub use carry::ScheduleCache;
pub use engine::ScheduleOptions;
use engine::{Engine, PodView};
pub use explain::Explanation;
use filtering::ClassCache;
pub use outcome::{Outcome, NOT_ATTEMPTED, UNSCHEDULABLE};
use outcome::{OutcomeBuilder, PodOutcome};
use pod_level::{PodLevel, PodScores};
use select::{tie_key, Best};
use signature::SignatureCache;
use spread_ranking::SpreadSelection;
use state::BatchState;

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
    if let Some(load) = &metrics_in.load {
        load.validate(pods.count, nodes.count, m)?;
    }
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
    let engine = Engine::new(nodes, classes, pods, metrics_in, profile, options);
    let mut state = BatchState::new(&engine);
    // Taken out for the call, so a call that panics leaves nothing behind.
    let mut kept = Kept::resume(carried.as_mut().and_then(|c| c.take()), &engine, &mut state);
    let slots: Vec<usize> = (0..classes.count).map(|class| kept.slot_of(classes, class)).collect();
    let Kept {
        caches,
        bases,
        signatures,
        fresh,
        call,
        ..
    } = &mut kept;
    let mut signatures = Signatures {
        map: signatures,
        max: signature::max_signatures(nodes.count, nodes.resources),
        call: *call,
        fresh,
    };
    let pod_level_kept = RefCell::new(PodLevelKept::default());
    let mut spread = SpreadSelection::default();
    let mut outcome = OutcomeBuilder::new();
    for index in 0..pods.count {
        if options.deadline.is_some_and(|d| Instant::now() >= d) {
            outcome.push(PodOutcome::not_attempted());
            continue;
        }
        let pod = engine.pod_view(index);
        let slot = slots[pod.class];
        let step = PodStep {
            engine: &engine,
            cache: &*caches[slot].get_or_insert_with(|| engine.class_cache(pod.class)),
            pod_level: engine.pod_level(&state, &pod, &pod_level_kept),
            explained: options.explain == Some(index),
            pod,
            slot,
        };
        // A pod nominated by an earlier preemption takes its node where every filter
        // passes there, without scoring, as upstream. An explained pod is evaluated on
        // every node for its explanation, and still goes to its nominated node.
        let on_nominated = engine.nominated_node_fits(&state, step.cache, &step.pod, step.pod_level.as_ref());
        if let (Some(node), false) = (on_nominated, step.explained) {
            outcome.push(step.commit(&mut state, node, f64::NAN, 1, &[]));
            continue;
        }
        let evaluation = step.evaluate(&state, &mut bases[slot], &mut signatures, &mut spread);
        let best = step.select(&evaluation, &spread, on_nominated);
        let explanation = step.explained.then(|| step.explain(&state, &evaluation, best));
        let sig = &*evaluation.sig;
        let mut pod_outcome = match best {
            Some(b) => step.commit(&mut state, b.node, b.total, sig.feasible, &sig.histogram),
            None => step.preempt(&mut state, sig),
        };
        pod_outcome.explanation = explanation;
        outcome.push(pod_outcome);
    }
    if let Some(c) = carried {
        c.put(kept.suspend(&engine, &state));
    }
    Ok(outcome.finish())
}

/// The call's signature caches (`carry::Kept::signatures`), bounded by `max`.
struct Signatures<'k> {
    map: &'k mut HashMap<Vec<i64>, SignatureCache>,
    max: usize,
    /// The call (`Kept::call`), and the signatures it evaluated on every node.
    call: u64,
    fresh: &'k mut usize,
}

/// One pod's pass through the call, in named steps: `evaluate` every node,
/// `select` the best, then `commit` the placement or `preempt`.
struct PodStep<'p, 'a, 'm> {
    engine: &'p Engine<'a, 'm>,
    pod: PodView<'p>,
    /// Its constraint class's cache, and the class's `carry` slot.
    cache: &'p ClassCache,
    slot: usize,
    pod_level: Option<PodLevel>,
    /// Whether the call explains this pod (`ScheduleOptions::explain`).
    explained: bool,
}

/// A pod's evaluation: its verdicts and where its totals are.
struct Evaluation<'s> {
    /// Its signature's evaluation, or its own where pod-level filters apply or it has no signature.
    sig: Cow<'s, SignatureCache>,
    totals: Totals,
    /// Each node's pod-level scores, for an explanation.
    pod_scores: Option<PodScores>,
}

/// Where a pod's totals with its pod-level scores are.
enum Totals {
    /// In `Evaluation::sig`: its own evaluation's, or its signature's where it has no pod-level score.
    InEvaluation,
    /// A copy of the signature's totals with the pod-level scores added.
    Copied(Vec<f64>),
    /// In `SpreadSelection::totals` (`Engine::add_spread_scores`).
    Spread,
    /// Not computed: the spread ranking selected (`Engine::select_spread`).
    Ranked(Option<Best>),
}

impl PodStep<'_, '_, '_> {
    fn tie(&self) -> impl Fn(usize) -> u64 + '_ {
        let (pods, nodes) = (self.engine.pods, self.engine.nodes);
        move |node: usize| tie_key(self.engine.seed, pods.keys[self.pod.index], nodes.keys[node])
    }

    /// Filter and score every node. A pod that a pod-level plugin filters is
    /// evaluated afresh (from its signature's evaluation where it has one); the
    /// signature caches serve the pods whose verdicts depend on the node alone,
    /// and their pod-level scores, if any, are added to a copy of the totals.
    fn evaluate<'s>(
        &self,
        state: &BatchState,
        base: &mut Option<Arc<Base>>,
        signatures: &'s mut Signatures,
        spread: &mut SpreadSelection,
    ) -> Evaluation<'s> {
        let (engine, pod, cache) = (self.engine, &self.pod, self.cache);
        let pod_level = self.pod_level.as_ref();
        let pod_filters = pod_level.map(|pl| &pl.prefilter).filter(|pf| !pf.is_empty());
        let key = signature::key(engine, pod, self.slot);
        let (mut own, scored) = match (pod_filters, key) {
            (Some(prefilter), Some(key)) => {
                let shared = signatures.get(engine, state, cache, base, pod, key);
                let own = engine.with_pod_filters(shared, state, cache, base, pod, prefilter);
                // Without pod-level scores every node scores 0 there (an explanation still shows them).
                let scored = pod_level.is_some_and(|pl| !pl.prescore.is_empty()) || self.explained;
                (own, scored)
            }
            (prefilter, None) => (engine.evaluate_all(state, cache, base, pod, prefilter), true),
            (None, Some(key)) => {
                let shared = signatures.get(engine, state, cache, base, pod, key);
                return self.score_shared(state, shared, spread);
            }
        };
        let pod_scores = match pod_level {
            Some(pl) if scored => {
                let feasible = own.feasible_nodes();
                engine.add_pod_level_scores(state, pod, pl, &feasible, &mut own.totals, self.explained)
            }
            _ => None,
        };
        Evaluation {
            sig: Cow::Owned(own),
            totals: Totals::InEvaluation,
            pod_scores,
        }
    }

    /// The pod-level scores of a pod its signature's evaluation serves (`ScheduleAnyway`
    /// spreading, the default constraints, preferred affinity): the node-level verdicts
    /// and scores are the signature's, so only its totals get the pod-level scores
    /// added: by the spread ranking or into the spread buffer where spread's is the
    /// pod's one pod-level score, else into a copy.
    fn score_shared<'s>(&self, state: &BatchState, shared: &'s SignatureCache, spread: &mut SpreadSelection) -> Evaluation<'s> {
        let (engine, pod) = (self.engine, &self.pod);
        let mut evaluation = Evaluation {
            sig: Cow::Borrowed(shared),
            totals: Totals::InEvaluation,
            pod_scores: None,
        };
        let Some(pl) = &self.pod_level else {
            return evaluation;
        };
        if !self.explained {
            if let Some(best) = engine.select_spread(state, pod, pl, shared, spread, self.tie()) {
                evaluation.totals = Totals::Ranked(best);
                return evaluation;
            }
            if engine.add_spread_scores(state, pod, pl, shared, spread) {
                evaluation.totals = Totals::Spread;
                return evaluation;
            }
        }
        let feasible = shared.feasible_nodes();
        let mut totals = shared.totals.clone();
        evaluation.pod_scores = engine.add_pod_level_scores(state, pod, pl, &feasible, &mut totals, self.explained);
        evaluation.totals = Totals::Copied(totals);
        evaluation
    }

    /// The feasible node with the highest total (ties broken by the seeded key),
    /// or the pod's nominated node where it is placed there.
    fn select(&self, evaluation: &Evaluation, spread: &SpreadSelection, on_nominated: Option<usize>) -> Option<Best> {
        let sig = &*evaluation.sig;
        let totals = match &evaluation.totals {
            Totals::Copied(totals) => &totals[..],
            Totals::Spread => &spread.totals[..],
            Totals::InEvaluation | Totals::Ranked(_) => &sig.totals[..],
        };
        match (on_nominated, &evaluation.totals) {
            (Some(node), _) => Some(Best {
                node,
                total: totals[node],
                tie: 0,
            }),
            (None, Totals::Ranked(best)) => *best,
            (None, _) => select::select(totals, sig.feasible, self.tie()),
        }
    }

    fn explain(&self, state: &BatchState, evaluation: &Evaluation, best: Option<Best>) -> Explanation {
        let pod_level = self.pod_level.as_ref().zip(evaluation.pod_scores.as_ref());
        let chosen = best.map(|b| b.node);
        self.engine
            .explain(state, self.cache, &self.pod, &evaluation.sig.maxima, pod_level, chosen)
    }

    /// Place the pod on `node`: its volumes bound, and the placement committed to
    /// the batch's accounting so later pods see it.
    fn commit<'s>(&self, state: &mut BatchState, node: usize, score: f64, feasible: usize, histogram: &'s [i64]) -> PodOutcome<'s> {
        let volumes = state.bind_volumes(self.engine, &self.pod, node);
        state.commit(self.engine, &self.pod, node);
        PodOutcome {
            node: node as i64,
            score,
            feasible,
            histogram,
            volumes,
            postfilter: None,
            explanation: None,
            thresholds: Vec::new(),
        }
    }

    /// PostFilter for a pod that fits nowhere: preemption's dry run. A pod
    /// nominated to a node holds its place there for the rest of the batch
    /// (upstream adds nominated pods to their node for lower priorities), and
    /// its victims are taken.
    fn preempt<'s>(&self, state: &mut BatchState, sig: &'s SignatureCache) -> PodOutcome<'s> {
        let thresholds = self.engine.threshold_nodes(sig);
        let post = self.engine.preempt(state, self.cache, &self.pod, sig);
        if let Some(c) = &post.candidate {
            for &v in &c.victims {
                state.taken[v] = true;
            }
            state.nominate(&self.pod, c.node);
        }
        PodOutcome {
            node: UNSCHEDULABLE,
            score: f64::NAN,
            feasible: sig.feasible,
            histogram: &sig.histogram,
            volumes: Vec::new(),
            postfilter: Some(post),
            explanation: None,
            thresholds,
        }
    }
}

impl Signatures<'_> {
    /// The signature cache of the pod's signature, brought up to date with the batch's
    /// placements (evaluated on every node the first time).
    /// Over the bound, the caches this call has not used go first, then all.
    fn get(
        &mut self,
        engine: &Engine,
        state: &BatchState,
        cache: &ClassCache,
        base: &mut Option<Arc<Base>>,
        pod: &PodView,
        key: Vec<i64>,
    ) -> &SignatureCache {
        let call = self.call;
        if !self.map.contains_key(&key) && self.map.len() >= self.max {
            self.map.retain(|_, sig| sig.used == call);
            if self.map.len() >= self.max {
                self.map.clear();
            }
        }
        let sig = match self.map.entry(key) {
            Entry::Occupied(e) => {
                let sig = e.into_mut();
                engine.refresh(sig, state, cache, base, pod);
                sig
            }
            Entry::Vacant(e) => {
                *self.fresh += 1;
                e.insert(engine.evaluate_all(state, cache, base, pod, None))
            }
        };
        sig.used = call;
        sig
    }
}
