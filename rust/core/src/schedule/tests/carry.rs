//! A `ScheduleCache` carried from call to call: every call must give exactly
//! the outcome of a call without it, whatever changed in between (placements
//! committed or not, bound pods added and removed, metric values, host ports,
//! node labels and allocatable, the order of the classes, preemption data and
//! nominated pods, the nodes' own metric thresholds), with or without load
//! inputs, and it must actually reuse what it kept.

use super::load::{pod_load, OwnedLoad};
use super::*;
use crate::model::{EFFECT_PREFER_NO_SCHEDULE, PROTOCOL_TCP};
use crate::test_support::{Req, TestClass, TestNode};

const TAINT_KEY: i32 = 30;
const ZONES: [i32; 4] = [110, 111, 112, 113];
const NODES: usize = 90;

/// xorshift64: the test's choices, reproducible.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn cluster() -> NodeBuilder {
    let mut b = NodeBuilder {
        image_sizes: vec![800 << 20, 300 << 20],
        ..NodeBuilder::default()
    };
    for i in 0..NODES {
        b.node(|n| {
            n.allocatable[CPU] = 1000 * (2 + (i % 4) as i64);
            n.allocatable[MEMORY] = (4 + (i % 3) as i64) << 30;
            n.allowed_pods = 3 + (i % 5) as i64;
            n.labels.push((ZONE, ZONES[i % 4], None));
            if i % 7 == 0 {
                n.taints.push((TAINT_KEY, 0, EFFECT_PREFER_NO_SCHEDULE));
            }
            if i % 5 == 0 {
                n.images = vec![(i % 2) as i32];
            }
            if i % 11 == 0 {
                n.ports.push((PROTOCOL_TCP, 1, 8080));
            }
        });
    }
    b
}

fn classes() -> Vec<TestClass> {
    vec![
        TestClass::default(),
        TestClass {
            node_selector: Some(vec![Req::In(ZONE, vec![110, 111])]),
            ..TestClass::default()
        },
        TestClass {
            tolerations: vec![(TAINT_KEY, crate::model::TOLERATION_EXISTS, 0, EFFECT_PREFER_NO_SCHEDULE)],
            preferred: vec![(5, vec![Req::In(ZONE, vec![112])])],
            ..TestClass::default()
        },
        TestClass {
            required: Some(vec![vec![Req::NotIn(ZONE, vec![113])]]),
            preferred: vec![(3, vec![Req::In(ZONE, vec![110])])],
            ..TestClass::default()
        },
    ]
}

/// `count` pods of a few shapes (so they share signatures), some with a host port or an image.
fn pending(rng: &mut Rng, count: usize, first_key: u64) -> Vec<TestPod> {
    (0..count)
        .map(|i| {
            let shape = rng.below(6);
            let mut p = TestPod {
                request: vec![
                    [100, 250, 500, 1000, 250, 500][shape as usize],
                    [256 << 20, 1 << 30][(shape % 2) as usize],
                    0,
                    0,
                ],
                class: rng.below(4) as i64,
                key: first_key + i as u64,
                ..pod(0, 0)
            };
            if shape == 4 {
                p.ports = vec![(PROTOCOL_TCP, 1, 8080)];
            }
            if shape == 5 {
                p.images = vec![1];
                p.containers = 2;
            }
            p
        })
        .collect()
}

fn same(cached: &Outcome, fresh: &Outcome, what: &str) {
    assert_eq!(cached.nodes, fresh.nodes, "{what}: nodes");
    let bits = |o: &Outcome| o.scores.iter().map(|s| s.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(cached), bits(fresh), "{what}: scores");
    assert_eq!(cached.feasible, fresh.feasible, "{what}: feasible");
    assert_eq!(cached.reason_offsets, fresh.reason_offsets, "{what}: reasons");
    assert_eq!(cached.reason_codes, fresh.reason_codes, "{what}: reasons");
    assert_eq!(cached.reason_counts, fresh.reason_counts, "{what}: reasons");
    assert_eq!(cached.nominated, fresh.nominated, "{what}: nominated");
    assert_eq!(cached.victims, fresh.victims, "{what}: victims");
}

/// Count a placed pod on its node, as the caller's node table would.
fn commit(node: &mut TestNode, p: &TestPod) {
    node.requested[CPU] += p.request[CPU];
    node.requested[MEMORY] += p.request[MEMORY];
    node.nonzero_requested[0] += p.request[CPU].max(100);
    node.nonzero_requested[1] += p.request[MEMORY].max(200 << 20);
    node.pod_count += 1;
    node.ports.extend(&p.ports);
}

/// What changes between two calls.
#[derive(Clone, Copy, Debug)]
enum Change {
    Nothing,
    /// Every other placement is not committed (its bind failed).
    BindsFail,
    /// Pods bound by someone else: requests and pod counts up on a few nodes.
    BoundElsewhere,
    /// Bound pods deleted: requests and pod counts down.
    Deleted,
    MetricValues,
    HostPort,
    /// Node object changes the cache must not survive.
    Label,
    Allocatable,
    /// The same classes, listed in another order.
    ClassOrder,
    /// A pod outside the batch nominated to a node, for one call.
    Nominated,
}

const CHANGES: [Change; 10] = [
    Change::Nothing,
    Change::BindsFail,
    Change::BoundElsewhere,
    Change::Deleted,
    Change::MetricValues,
    Change::HostPort,
    Change::Label,
    Change::Allocatable,
    Change::ClassOrder,
    Change::Nominated,
];

struct Call<'a> {
    b: &'a NodeBuilder,
    order: &'a [usize],
    pods: &'a [TestPod],
    values: &'a [f64],
    spec: MetricSpec,
    /// The nodes' own thresholds; each pod's load row follows from its key (`pod_load`).
    load: Option<&'a OwnedLoad>,
    /// Priorities and a nominated pod outside the batch (node, priority, cpu).
    preemption: Option<Option<(i64, i64, i64)>>,
    parallel: bool,
}

impl Call<'_> {
    fn run(&self, cache: Option<&mut ScheduleCache>) -> Outcome {
        let nodes = self.b.build();
        let all = classes();
        let mut owned_classes = OwnedClasses::default();
        for &c in self.order {
            let class = all[c].clone();
            owned_classes.add(|t| *t = class);
        }
        // Pod class c is listed at position order⁻¹(c).
        let pods: Vec<TestPod> = self
            .pods
            .iter()
            .map(|p| TestPod {
                class: self.order.iter().position(|&c| c == p.class as usize).expect("listed") as i64,
                ..p.clone()
            })
            .collect();
        let owned = OwnedPods::new(&pods);
        let mut view = owned.view();
        let victims = OwnedVictims::new(&[], 4, vec![]);
        let held_ports = OwnedPorts::new(vec![vec![]; self.preemption.flatten().map_or(0, |_| 1)]);
        let priorities: Vec<i64> = pods.iter().map(|p| (p.key % 3) as i64).collect();
        let allowed = vec![0; pods.len()];
        let nominated = vec![-1; pods.len()];
        let held = self.preemption.flatten();
        let r_nodes: Vec<i64> = held.iter().map(|h| h.0).collect();
        let r_rows = vec![-1; r_nodes.len()];
        let r_priorities: Vec<i64> = held.iter().map(|h| h.1).collect();
        let r_requests: Vec<i64> = held.iter().flat_map(|h| [h.2, 0, 0, 0]).collect();
        if self.preemption.is_some() {
            view.preemption = Some(crate::model::Preemption {
                priorities: &priorities,
                allowed: &allowed,
                nominated: &nominated,
                victims: victims.view(),
                reservations: crate::model::Reservations {
                    nodes: &r_nodes,
                    rows: &r_rows,
                    priorities: &r_priorities,
                    requests: &r_requests,
                    ports: held_ports.view(),
                },
            });
        }
        let load = self.load.map(|nodes| {
            let mut load = OwnedLoad {
                node_above: nodes.node_above.clone(),
                node_below: nodes.node_below.clone(),
                ..OwnedLoad::new(&[self.spec], pods.len(), NODES, nodes.incoming[0])
            };
            for (i, p) in pods.iter().enumerate() {
                pod_load(&mut load, &[self.spec], i, p);
            }
            load
        });
        let metrics = Metrics {
            load: load.as_ref().map(OwnedLoad::view),
            ..Metrics::new(self.values, vec![self.spec])
        };
        let options = ScheduleOptions {
            seed: 5,
            parallel: self.parallel,
            ..ScheduleOptions::default()
        };
        let profile = Profile::default();
        let classes = owned_classes.view();
        match cache {
            Some(c) => schedule_batch_cached(&nodes.view(), &classes, &view, &metrics, &profile, &options, c),
            None => schedule_batch(&nodes.view(), &classes, &view, &metrics, &profile, &options),
        }
        .expect("valid input")
    }
}

/// Calls in sequence, each after one of `CHANGES` (every change several times,
/// in varying order), each compared with a call without the cache.
fn sequence(seed: u64, estimate: bool, parallel: bool, preemption: bool, load: bool) {
    let mut rng = Rng(seed);
    let mut b = cluster();
    let mut values: Vec<f64> = (0..NODES)
        .map(|i| if i % 13 == 0 { f64::NAN } else { (i * 37 % 100) as f64 / 100.0 })
        .collect();
    let spec = MetricSpec {
        prefer: Prefer::Lower,
        range: None,
        above: Some(0.95),
        below: None,
        missing: Missing::Neutral,
        weight: 2.0,
        estimate: estimate.then_some((CPU, 0.3)),
    };
    let mut node_load = OwnedLoad::new(&[spec], 0, NODES, true);
    for (i, (above, below)) in node_load.node_above.iter_mut().zip(&mut node_load.node_below).enumerate() {
        if i % 9 == 0 {
            *above = 0.99;
        }
        if i % 10 == 3 {
            *below = 0.1;
        }
    }
    let mut order: Vec<usize> = (0..4).collect();
    let mut cache = ScheduleCache::new();
    let mut reused = false;
    for step in 0..40 {
        if load && step % 8 == 3 {
            // A node's own threshold changes: nothing kept may serve.
            let i = rng.below(NODES as u64) as usize;
            node_load.node_above[i] = if node_load.node_above[i].is_nan() { 0.5 } else { f64::NAN };
        }
        let change = CHANGES[(step + rng.below(3) as usize) % CHANGES.len()];
        let mut held = None;
        match change {
            Change::Nothing | Change::BindsFail => {}
            Change::BoundElsewhere => {
                for _ in 0..3 {
                    let node = &mut b.nodes[rng.below(NODES as u64) as usize];
                    commit(node, &pod(300, 0));
                }
            }
            Change::Deleted => {
                for node in b.nodes.iter_mut().filter(|n| n.pod_count > 0).take(4) {
                    let p = pod(node.requested[CPU].min(100), 0);
                    node.requested[CPU] -= p.request[CPU];
                    node.requested[MEMORY] = (node.requested[MEMORY] - p.request[MEMORY]).max(0);
                    node.pod_count -= 1;
                }
            }
            Change::MetricValues => {
                for _ in 0..3 {
                    let i = rng.below(NODES as u64) as usize;
                    values[i] = rng.below(100) as f64 / 100.0;
                }
            }
            Change::HostPort => b.nodes[rng.below(NODES as u64) as usize].ports.push((PROTOCOL_TCP, 1, 8080)),
            Change::Label => {
                let node = &mut b.nodes[rng.below(NODES as u64) as usize];
                node.labels[0].1 = ZONES[rng.below(4) as usize];
            }
            Change::Allocatable => b.nodes[rng.below(NODES as u64) as usize].allocatable[CPU] += 1000,
            Change::ClassOrder => order.rotate_left(1 + rng.below(3) as usize),
            Change::Nominated => held = Some((rng.below(NODES as u64) as i64, 2, 1500)),
        }
        let count = 12 + rng.below(20) as usize;
        let pods = pending(&mut rng, count, 1000 * step as u64);
        let call = Call {
            b: &b,
            order: &order,
            pods: &pods,
            values: &values,
            spec,
            load: load.then_some(&node_load),
            preemption: (preemption && step % 3 != 0).then_some(held),
            parallel,
        };
        let kept = cache.signatures();
        let cached = call.run(Some(&mut cache));
        let fresh = call.run(None);
        same(&cached, &fresh, &format!("step {step} after {change:?}"));
        reused |= kept > 0 && cache.evaluated() < cache.signatures();
        for (i, p) in pods.iter().enumerate() {
            let skip = matches!(change, Change::BindsFail) && i % 2 == 0;
            if cached.nodes[i] >= 0 && !skip {
                commit(&mut b.nodes[cached.nodes[i] as usize], p);
            }
        }
    }
    assert!(reused, "later calls reuse kept signatures");
}

#[test]
fn carried_cache_gives_a_fresh_calls_outcome() {
    for (seed, estimate, parallel, preemption, load) in [
        (1, false, false, false, false),
        (2, false, true, false, false),
        (3, true, false, false, false),
        (4, false, false, true, false),
        (5, true, true, true, false),
        (6, true, false, false, true),
        (7, true, true, true, true),
    ] {
        sequence(seed, estimate, parallel, preemption, load);
    }
}

#[test]
fn carried_cache_is_dropped_when_a_node_changes() {
    let mut b = cluster();
    let values = vec![0.5; NODES];
    let spec = MetricSpec {
        prefer: Prefer::Lower,
        range: None,
        above: None,
        below: None,
        missing: Missing::Neutral,
        weight: 1.0,
        estimate: None,
    };
    let pods: Vec<TestPod> = (0..8).map(|k| pod(200, k)).collect();
    let order = [0, 1, 2, 3];
    let mut cache = ScheduleCache::new();
    let call = |b: &NodeBuilder, cache: &mut ScheduleCache| {
        Call {
            b,
            order: &order,
            pods: &pods,
            values: &values,
            spec,
            load: None,
            preemption: None,
            parallel: false,
        }
        .run(Some(cache))
    };
    call(&b, &mut cache);
    assert_eq!((cache.evaluated(), cache.signatures()), (1, 1), "one signature, evaluated once");
    call(&b, &mut cache);
    assert_eq!(cache.evaluated(), 0, "the same nodes: reused");
    // A taint the pods do not tolerate on every node: nothing kept may serve.
    for n in &mut b.nodes {
        n.taints.push((TAINT_KEY + 1, 0, crate::model::EFFECT_NO_SCHEDULE));
    }
    let out = call(&b, &mut cache);
    assert_eq!(cache.evaluated(), 1, "evaluated afresh");
    assert!(out.nodes.iter().all(|&n| n == UNSCHEDULABLE), "{:?}", out.nodes);
}

#[test]
fn signature_bound_holds_typical_workloads_within_its_memory() {
    // 15,000 nodes, cpu/memory/pods/one extended resource: `ksched bench --nodes 15000`'s
    // 112 distinct signatures must all be kept, in at most 128 MiB.
    let (nodes, resources) = (15_000, 4);
    let kept = crate::schedule::signature::max_signatures(nodes, resources);
    assert!(kept >= 112, "only {kept} signatures kept at {nodes} nodes");
    let per_node = std::mem::size_of::<crate::schedule::signature::NodeEval>() + std::mem::size_of::<f64>() + 4 * (resources + 1);
    assert!(kept * nodes * per_node <= 128 << 20, "{kept} signatures take over 128 MiB");
}
