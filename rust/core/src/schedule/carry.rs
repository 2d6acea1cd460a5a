//! What one scheduling call leaves for the next: the class caches, the class
//! bases and the signature caches, with everything they were computed from.
//!
//! A later call reuses them only where that gives the verdicts and scores a
//! fresh call would. The engine is a function of its integer inputs, so the
//! rule is by content, never by what the caller says changed:
//! - the inputs no placement changes (the node table's static columns:
//!   allocatable, allowed pods, labels, taints, images, names and keys; the
//!   profile's addedAffinity terms; the profile; the metric specs and the
//!   nodes' own metric thresholds) must equal the previous call's, else
//!   everything is dropped;
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
//! - a metric value that differs anywhere (or any load estimate) drops the
//!   classes' bases and makes every carried signature recompute its maxima
//!   and rescore every node before it is used.
//!
//! A signature not used in a call carries that call's changed nodes along as
//! pending; one with too many pending is dropped (evaluating it afresh costs
//! no more). Signatures of nominated pods (whose verdicts depend on the pod's
//! own nomination) are never kept.

use std::collections::HashMap;
use std::sync::Arc;

use super::base::Base;
use super::engine::Engine;
use super::filtering::ClassCache;
use super::signature::SignatureCache;
use super::state::BatchState;
use crate::model::{row, Classes, LoadInputs, MetricSpec, Nodes, Ports, Profile};
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

/// `World` and its two readings of an engine: `of` copies the node table's
/// columns, `matches` compares them in place. Each call compares, and copies
/// only a world that changed: at 5,000 nodes the copy was half the engine's
/// time for a batch of one pod (megabytes copied into fresh pages each call).
macro_rules! world {
    ($($field:ident: $ty:ty = $($path:ident).+;)*) => {
        /// The inputs no placement changes, as the kept caches saw them.
        struct World {
            count: usize,
            resources: usize,
            $($field: Vec<$ty>,)*
            strings: [i32; 3],
            enforced: Vec<i64>,
            profile: Profile,
            specs: Vec<MetricSpec>,
            load: Option<LoadWorld>,
        }

        impl World {
            fn of(engine: &Engine) -> World {
                let n = engine.nodes;
                World {
                    count: n.count,
                    resources: n.resources,
                    $($field: n.$($path).+.to_vec(),)*
                    strings: strings(n),
                    enforced: enforced(engine.classes),
                    profile: engine.profile.clone(),
                    specs: engine.metrics.specs.clone(),
                    load: engine.metrics.load.as_ref().map(LoadWorld::of),
                }
            }

            /// Whether `engine`'s world is this one (`World::of(engine) == *self`, copying nothing).
            fn matches(&self, engine: &Engine) -> bool {
                let n = engine.nodes;
                self.count == n.count
                    && self.resources == n.resources
                    $(&& self.$field[..] == n.$($path).+[..])*
                    && self.strings == strings(n)
                    && self.enforced == enforced(engine.classes)
                    && self.profile == *engine.profile
                    && self.specs == engine.metrics.specs
                    && match (&self.load, &engine.metrics.load) {
                        (None, None) => true,
                        (Some(kept), Some(load)) => kept.matches(load),
                        _ => false,
                    }
            }
        }
    };
}

world! {
    allocatable: i64 = allocatable;
    allowed_pods: i64 = allowed_pods;
    unschedulable: u8 = unschedulable;
    names: i32 = names;
    keys: u64 = keys;
    label_offsets: i64 = labels.offsets;
    label_keys: i32 = labels.keys;
    label_values: i32 = labels.values;
    label_int_values: i64 = labels.int_values;
    label_int_valid: u8 = labels.int_valid;
    taint_offsets: i64 = taints.offsets;
    taint_keys: i32 = taints.keys;
    taint_values: i32 = taints.values;
    taint_effects: u8 = taints.effects;
    image_offsets: i64 = images.offsets;
    image_ids: i32 = images.ids;
    image_sizes: i64 = images.sizes;
    image_node_counts: i64 = images.node_counts;
}

/// The load inputs no placement changes: which metrics count the incoming pod
/// and weigh its risk, and the nodes' own thresholds (as bits, so a NaN equals itself). The pods'
/// estimates and thresholds are part of their signatures.
struct LoadWorld {
    incoming: Vec<bool>,
    risk: Vec<u64>,
    node_above: Vec<u64>,
    node_below: Vec<u64>,
}

impl LoadWorld {
    fn of(load: &LoadInputs) -> LoadWorld {
        LoadWorld {
            incoming: load.incoming.clone(),
            risk: load.risk.iter().map(|v| v.to_bits()).collect(),
            node_above: load.node_above.iter().map(|v| v.to_bits()).collect(),
            node_below: load.node_below.iter().map(|v| v.to_bits()).collect(),
        }
    }

    fn matches(&self, load: &LoadInputs) -> bool {
        let same = |kept: &[u64], now: &[f64]| kept.len() == now.len() && kept.iter().zip(now).all(|(&k, v)| k == v.to_bits());
        self.incoming == load.incoming
            && same(&self.risk, &load.risk)
            && same(&self.node_above, load.node_above)
            && same(&self.node_below, load.node_below)
    }
}

fn strings(n: &Nodes) -> [i32; 3] {
    [n.wildcard_ip, n.unschedulable_key, n.empty_string]
}

/// The enforced selector terms' content, each term after their number.
fn enforced(classes: &Classes) -> Vec<i64> {
    let mut enforced = vec![classes.enforced_terms.len() as i64];
    for &t in classes.enforced_terms {
        push_term(&mut enforced, classes, t as usize);
    }
    enforced
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
#[derive(Default)]
struct EndState {
    requested: Vec<i64>,
    nonzero_requested: Vec<i64>,
    pod_count: Vec<i64>,
    /// Host ports in use: the node table's, then those placed in the call.
    ports: Vec<Vec<HostPort>>,
    /// Metric values (with load estimates), the scored ones, then the caution
    /// the scores keep, as bits so a NaN equals itself: `3 × metrics` per node.
    values: Vec<u64>,
    /// Nodes with a nominated pod held on them.
    held: Vec<u32>,
}

impl EndState {
    /// The state `state` ends in, written over this one's buffers (a call of one pod
    /// would otherwise spend more on fresh pages for them than on the pod).
    fn fill(&mut self, engine: &Engine, state: &BatchState) {
        self.requested.clone_from(&state.requested);
        self.nonzero_requested.clone_from(&state.nonzero_requested);
        self.pod_count.clone_from(&state.pod_count);
        self.ports.resize_with(engine.nodes.count, Vec::new);
        for (node, ports) in self.ports.iter_mut().enumerate() {
            ports.clear();
            ports.extend(ports_of(engine.nodes.used_ports, node).chain(state.placed_ports[node].iter().copied()));
        }
        self.values.clear();
        let m = state.metrics;
        for node in 0..engine.nodes.count {
            let cells = node * m..(node + 1) * m;
            self.values.extend(
                state.values[cells.clone()]
                    .iter()
                    .chain(&state.scored[cells.clone()])
                    .chain(&state.kept_caution[cells])
                    .map(|v| v.to_bits()),
            );
        }
        self.held.clear();
        self.held.extend(
            (0..state.reserved.len())
                .filter(|&node| !state.reserved[node].is_empty())
                .map(|node| node as u32),
        );
    }
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
    /// The last `end`, once read: its buffers take the next one.
    spare: EndState,
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
        let class_bytes = engine.nodes.count * (1 + 8 * CLASS_SCORES);
        let kept = carried.filter(|k| k.end.is_some() && k.caches.len() * class_bytes <= CLASS_CACHE_BYTES && k.world.matches(engine));
        let Some(mut kept) = kept else {
            return Kept {
                world: World::of(engine),
                end: None,
                spare: EndState::default(),
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
        kept.spare = end;
        if metrics_changed || state.has_estimates {
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
            let cells = node * m..(node + 1) * m;
            let values_differ = state.values[cells.clone()]
                .iter()
                .chain(&state.scored[cells.clone()])
                .chain(&state.kept_caution[cells])
                .zip(&end.values[3 * node * m..3 * (node + 1) * m])
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
        let mut end = std::mem::take(&mut self.spare);
        end.fill(engine, state);
        self.end = Some(end);
        // What each signature has not seen of this call stays pending for the next.
        let limit = engine.nodes.count / 2;
        self.signatures.retain(|_, sig| sig.suspend(&state.log, limit));
        self
    }
}
