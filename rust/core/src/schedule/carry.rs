//! What one scheduling call leaves for the next: the class caches, the class
//! bases and the signature caches, with everything they were computed from.
//!
//! A later call reuses them only where that gives the verdicts and scores a
//! fresh call would. The engine is a function of its integer inputs, so the
//! rule is by content, never by what the caller says changed:
//! - the inputs no placement changes (the node table's static columns:
//!   allocatable, allowed pods, labels, taints, images, names and keys; the
//!   profile's addedAffinity terms; the profile; the metric specs) must equal
//!   the previous call's, else everything is dropped;
//! - a constraint class is known by its content (tolerations, node name,
//!   node selector, required and preferred terms with their requirements,
//!   NodeAffinity's PreFilter nodes), not by its index in the batch, and a
//!   signature by its class's slot, so a class cache or signature is only
//!   reused for the same class;
//! - a node whose per-node state differs from where the previous call left
//!   it (requested resources, non-zero requests, pod count, host ports in
//!   use, metric values), or that holds a nominated pod at the end of that
//!   call or at the start of this one, is dirty: every signature re-evaluates
//!   it (`refresh`), as it does a node placed on within a call;
//! - a metric value that differs anywhere (or any herd estimate) drops the
//!   classes' bases and makes every carried signature recompute its maxima
//!   and rescore every node before it is used.
//!
//! A signature not used in a call carries that call's changed nodes along as
//! pending; one with too many pending is dropped (evaluating it afresh costs
//! no more). Signatures of nominated pods (whose verdicts depend on the pod's
//! own nomination) are never kept.

use std::collections::HashMap;
use std::sync::Arc;

use super::engine::Engine;
use super::filtering::ClassCache;
use super::signature::{Base, SignatureCache};
use super::state::BatchState;
use crate::model::{row, Classes, MetricSpec, Ports, Profile};
use crate::plugins::node_ports::HostPort;
use crate::registry::CLASS_SCORES;

/// Class caches kept between calls, bounded by the memory they take.
const CLASS_CACHE_BYTES: usize = 64 << 20;

/// The caches one scheduling call leaves for the next (`schedule_batch_cached`).
/// Empty until the first call; a call that fails validation leaves it as it was.
#[derive(Default)]
pub struct ScheduleCache {
    kept: Option<Kept>,
}

impl ScheduleCache {
    pub fn new() -> ScheduleCache {
        ScheduleCache::default()
    }

    /// Drop everything kept: the next call evaluates from scratch.
    pub fn clear(&mut self) {
        self.kept = None;
    }

    /// Whether the next call starts with nothing kept.
    pub fn is_empty(&self) -> bool {
        self.kept.is_none()
    }

    /// How many signature caches are kept.
    pub fn signatures(&self) -> usize {
        self.kept.as_ref().map_or(0, |k| k.signatures.len())
    }

    /// How many signatures the last call evaluated on every node (those it
    /// did not find kept, or found first in that call).
    pub fn evaluated(&self) -> usize {
        self.kept.as_ref().map_or(0, |k| k.fresh)
    }

    pub(super) fn take(&mut self) -> Option<Kept> {
        self.kept.take()
    }

    pub(super) fn put(&mut self, kept: Kept) {
        self.kept = Some(kept);
    }
}

/// The inputs no placement changes, as the kept caches saw them.
#[derive(PartialEq)]
struct World {
    count: usize,
    resources: usize,
    allocatable: Vec<i64>,
    allowed_pods: Vec<i64>,
    unschedulable: Vec<u8>,
    names: Vec<i32>,
    keys: Vec<u64>,
    label_offsets: Vec<i64>,
    label_keys: Vec<i32>,
    label_values: Vec<i32>,
    label_int_values: Vec<i64>,
    label_int_valid: Vec<u8>,
    taint_offsets: Vec<i64>,
    taint_keys: Vec<i32>,
    taint_values: Vec<i32>,
    taint_effects: Vec<u8>,
    image_offsets: Vec<i64>,
    image_ids: Vec<i32>,
    image_sizes: Vec<i64>,
    image_node_counts: Vec<i64>,
    strings: [i32; 3],
    enforced: Vec<i64>,
    profile: Profile,
    specs: Vec<MetricSpec>,
}

impl World {
    fn of(engine: &Engine) -> World {
        let n = engine.nodes;
        let mut enforced = Vec::new();
        enforced.push(engine.classes.enforced_terms.len() as i64);
        for &t in engine.classes.enforced_terms {
            push_term(&mut enforced, engine.classes, t as usize);
        }
        World {
            count: n.count,
            resources: n.resources,
            allocatable: n.allocatable.to_vec(),
            allowed_pods: n.allowed_pods.to_vec(),
            unschedulable: n.unschedulable.to_vec(),
            names: n.names.to_vec(),
            keys: n.keys.to_vec(),
            label_offsets: n.labels.offsets.to_vec(),
            label_keys: n.labels.keys.to_vec(),
            label_values: n.labels.values.to_vec(),
            label_int_values: n.labels.int_values.to_vec(),
            label_int_valid: n.labels.int_valid.to_vec(),
            taint_offsets: n.taints.offsets.to_vec(),
            taint_keys: n.taints.keys.to_vec(),
            taint_values: n.taints.values.to_vec(),
            taint_effects: n.taints.effects.to_vec(),
            image_offsets: n.images.offsets.to_vec(),
            image_ids: n.images.ids.to_vec(),
            image_sizes: n.images.sizes.to_vec(),
            image_node_counts: n.images.node_counts.to_vec(),
            strings: [n.wildcard_ip, n.unschedulable_key, n.empty_string],
            enforced,
            profile: engine.profile.clone(),
            specs: engine.metrics.specs.clone(),
        }
    }
}

/// One selector term's content: its requirements with their operators and values.
fn push_term(out: &mut Vec<i64>, classes: &Classes, term: usize) {
    let s = &classes.selectors;
    let reqs = row(s.term_offsets, term);
    out.push(reqs.len() as i64);
    for r in reqs {
        let values = &s.values[row(s.value_offsets, r)];
        out.extend([
            s.keys[r] as i64,
            s.is_field[r] as i64,
            s.operators[r] as i64,
            s.int_values[r],
            values.len() as i64,
        ]);
        out.extend(values.iter().map(|&v| v as i64));
    }
}

/// A constraint class's content: everything a class-level plugin reads of it.
/// Every list is preceded by its length, so two different classes never share a key.
fn class_key(classes: &Classes, class: usize) -> Vec<i64> {
    let mut key = vec![classes.node_names[class] as i64];
    let t = &classes.tolerations;
    let tolerations = row(t.offsets, class);
    key.push(tolerations.len() as i64);
    for i in tolerations {
        key.extend([t.keys[i] as i64, t.operators[i] as i64, t.values[i] as i64, t.effects[i] as i64]);
    }
    match classes.node_selector_term[class] {
        term if term >= 0 => {
            key.push(1);
            push_term(&mut key, classes, term as usize);
        }
        _ => key.push(0),
    }
    key.push(classes.has_required[class] as i64);
    let required = &classes.required_terms[row(classes.required_offsets, class)];
    key.push(required.len() as i64);
    for &term in required {
        push_term(&mut key, classes, term as usize);
    }
    let preferred = &classes.preferred_terms[row(classes.preferred_offsets, class)];
    key.push(preferred.len() as i64);
    for &term in preferred {
        key.push(classes.selectors.term_weights[term as usize]);
        push_term(&mut key, classes, term as usize);
    }
    key.push(classes.has_prefilter[class] as i64);
    let prefilter = &classes.prefilter_nodes[row(classes.prefilter_offsets, class)];
    key.push(prefilter.len() as i64);
    key.extend_from_slice(prefilter);
    key
}

/// Each node's state as a call left it: what a signature's node evaluations depend on
/// besides the `World` and the pod.
struct EndState {
    requested: Vec<i64>,
    nonzero_requested: Vec<i64>,
    pod_count: Vec<i64>,
    /// Host ports in use: the node table's, then those placed in the call.
    ports: Vec<Vec<HostPort>>,
    /// Metric values (with herd estimates), as bits so a NaN equals itself.
    values: Vec<u64>,
    /// Nodes with a nominated pod held on them.
    held: Vec<u32>,
}

/// The host ports in use on `node` in the node table.
fn ports_of(used: Ports<'_>, node: usize) -> impl Iterator<Item = HostPort> + '_ {
    row(used.offsets, node).map(move |j| (used.protocols[j], used.ips[j], used.ports[j]))
}

/// The caches kept across calls. Class caches and bases are indexed by slot
/// (one per class content); signature keys start with the slot.
pub(super) struct Kept {
    world: World,
    end: Option<EndState>,
    slot_ids: HashMap<Vec<i64>, usize>,
    pub caches: Vec<Option<ClassCache>>,
    pub bases: Vec<Option<Arc<Base>>>,
    pub signatures: HashMap<Vec<i64>, SignatureCache>,
    /// Bumped every call; a signature records the call that last used it.
    pub call: u64,
    /// Signatures this call evaluated on every node.
    pub fresh: usize,
}

impl Kept {
    /// The caches for this call: `carried` if its world is this call's (with the
    /// nodes that changed since pushed on `state.log`), else empty.
    pub fn resume(carried: Option<Kept>, engine: &Engine, state: &mut BatchState) -> Kept {
        let world = World::of(engine);
        let class_bytes = engine.nodes.count * (1 + 8 * CLASS_SCORES);
        let kept = carried.filter(|k| k.world == world && k.end.is_some() && k.caches.len() * class_bytes <= CLASS_CACHE_BYTES);
        let Some(mut kept) = kept else {
            return Kept {
                world,
                end: None,
                slot_ids: HashMap::new(),
                caches: Vec::new(),
                bases: Vec::new(),
                signatures: HashMap::new(),
                call: 0,
                fresh: 0,
            };
        };
        kept.call += 1;
        kept.fresh = 0;
        let end = kept.end.take().expect("checked above");
        let metrics_changed = kept.seed_dirty(&end, engine, state);
        if metrics_changed || state.herd {
            kept.bases.iter_mut().for_each(|b| *b = None);
            kept.signatures.values_mut().for_each(SignatureCache::must_rebase);
        }
        kept
    }

    /// Push the nodes whose state differs from `end` on `state.log`; whether any metric value differs.
    fn seed_dirty(&self, end: &EndState, engine: &Engine, state: &mut BatchState) -> bool {
        let (n, r, m) = (engine.nodes.count, engine.resources, state.metrics);
        let mut metrics_changed = false;
        for node in 0..n {
            let values_differ = state.values[node * m..(node + 1) * m]
                .iter()
                .zip(&end.values[node * m..(node + 1) * m])
                .any(|(v, &e)| v.to_bits() != e);
            metrics_changed |= values_differ;
            let differs = values_differ
                || state.requested[node * r..(node + 1) * r] != end.requested[node * r..(node + 1) * r]
                || state.nonzero_requested[node * 2..node * 2 + 2] != end.nonzero_requested[node * 2..node * 2 + 2]
                || state.pod_count[node] != end.pod_count[node]
                || !ports_of(engine.nodes.used_ports, node).eq(end.ports[node].iter().copied())
                || state.reserved.get(node).is_some_and(|held| !held.is_empty());
            if differs {
                state.log.push(node as u32);
            }
        }
        state.log.extend_from_slice(&end.held);
        metrics_changed
    }

    /// The slot of this call's class `class`, found by content (a new slot if unseen).
    pub fn slot_of(&mut self, classes: &Classes, class: usize) -> usize {
        let next = self.caches.len();
        let slot = *self.slot_ids.entry(class_key(classes, class)).or_insert(next);
        if slot == next {
            self.caches.push(None);
            self.bases.push(None);
        }
        slot
    }

    /// Keep the caches for the next call, with the state this one ends in.
    pub fn suspend(mut self, engine: &Engine, state: &BatchState) -> Kept {
        let n = engine.nodes.count;
        self.end = Some(EndState {
            requested: state.requested.clone(),
            nonzero_requested: state.nonzero_requested.clone(),
            pod_count: state.pod_count.clone(),
            ports: (0..n)
                .map(|node| {
                    ports_of(engine.nodes.used_ports, node)
                        .chain(state.placed_ports[node].iter().copied())
                        .collect()
                })
                .collect(),
            values: state.values.iter().map(|v| v.to_bits()).collect(),
            held: (0..state.reserved.len())
                .filter(|&node| !state.reserved[node].is_empty())
                .map(|node| node as u32)
                .collect(),
        });
        // What each signature has not seen of this call stays pending for the next.
        let limit = n / 2;
        self.signatures.retain(|_, sig| sig.suspend(&state.log, limit));
        self
    }
}
