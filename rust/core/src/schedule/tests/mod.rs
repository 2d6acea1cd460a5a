//! The batch loop's behaviour as a whole: placements, reasons, caches;
//! preemption and nominated pods in `preemption.rs`, volumes in `volumes.rs`.

mod carry;
mod load;
mod nominated;
mod numeric;
mod preemption;
mod spread_ranking;
mod volumes;

use super::*;
use crate::model::{row, MetricSpec, Metrics, Missing, Prefer, CPU, EFFECT_NO_SCHEDULE, MEMORY, PROTOCOL_TCP};
use crate::plugins::inter_pod_affinity::POD_ANTI_AFFINITY;
use crate::plugins::node_ports::NODE_PORTS;
use crate::plugins::taint_toleration::TAINT_TOLERATION;
use crate::reasons::{insufficient, metric, METRIC_ABOVE};
use crate::test_support::{
    label_is, no_metrics, pod, spread, term, zoned_nodes, NodeBuilder, OwnedClasses, OwnedPodTable, OwnedPods, OwnedPorts, OwnedVictims,
    TestPod, TestSpread, TestVictim, HOSTNAME, ZONE,
};

pub(super) fn run(b: &NodeBuilder, pods: &[TestPod], metrics: &Metrics, seed: u64) -> Outcome {
    let options = ScheduleOptions {
        seed,
        parallel: true,
        ..ScheduleOptions::default()
    };
    try_run(b, pods, metrics, &options).expect("valid input")
}

/// Schedule `pods`, all of one unconstrained class, on `b`'s nodes under the default profile.
pub(super) fn try_run(b: &NodeBuilder, pods: &[TestPod], metrics: &Metrics, options: &ScheduleOptions) -> Result<Outcome, EngineError> {
    let nodes = b.build();
    let mut classes = OwnedClasses::default();
    classes.add(|_| {});
    let pods = OwnedPods::new(pods);
    schedule_batch(&nodes.view(), &classes.view(), &pods.view(), metrics, &Profile::default(), options)
}

/// A batch must place exactly as scheduling its pods one by one against the
/// updated node table would: same node, score, feasible count and reasons.
/// Pods share a few signatures, nodes fill up (feasibility changes) and the
/// metric's min over feasible nodes moves, so every cache path is taken.
#[test]
fn batch_equals_one_pod_at_a_time() {
    for (parallel, estimate) in [(false, false), (true, false), (false, true), (true, true)] {
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
        // With a load estimate each placement raises the node's value by its cpu share,
        // which also pushes nodes over the `above` threshold.
        let estimate_factor = 0.5;
        let spec = MetricSpec {
            prefer: Prefer::Lower,
            range: None,
            above: Some(0.9),
            below: None,
            missing: Missing::Neutral,
            weight: 3.0,
            estimate: estimate.then_some((CPU, estimate_factor)),
        };
        let start = values.clone();
        let metrics = Metrics::new(&start, vec![spec]);
        let pods: Vec<TestPod> = (0..700)
            .map(|i| TestPod {
                request: vec![[250, 500, 1000][i % 3], [256 << 20, 1 << 30, 0][i % 3], 0, 0],
                class: 0,
                key: i as u64,
                ..pod(0, 0)
            })
            .collect();
        let options = ScheduleOptions {
            seed: 3,
            parallel,
            ..ScheduleOptions::default()
        };
        let batch = try_run(&b, &pods, &metrics, &options).unwrap();
        assert!(batch.nodes.contains(&UNSCHEDULABLE), "the cluster fills up");
        for (i, p) in pods.iter().enumerate() {
            let now = Metrics::new(&values, vec![spec]);
            let one = try_run(&b, std::slice::from_ref(p), &now, &options).unwrap();
            assert_eq!(one.nodes[0], batch.nodes[i], "pod {i}");
            assert_eq!(one.feasible[0], batch.feasible[i], "pod {i}");
            let (lo, hi) = (batch.reason_offsets[i] as usize, batch.reason_offsets[i + 1] as usize);
            assert_eq!(one.reason_codes, batch.reason_codes[lo..hi], "pod {i}");
            assert_eq!(one.reason_counts, batch.reason_counts[lo..hi], "pod {i}");
            if one.nodes[0] >= 0 {
                assert_eq!(one.scores[0].to_bits(), batch.scores[i].to_bits(), "pod {i}");
                let chosen = one.nodes[0] as usize;
                let node = &mut b.nodes[chosen];
                if estimate && !values[chosen].is_nan() {
                    values[chosen] += p.request[CPU] as f64 / node.allocatable[CPU] as f64 * estimate_factor;
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

const APP: i32 = 20;
const WEB: i32 = 200;

/// `nodes` nodes, zone A (110) for the first `in_a`, zone B (111) for the rest.
pub(super) fn zoned(nodes: usize, in_a: usize) -> NodeBuilder {
    let zones: Vec<Option<i32>> = (0..nodes).map(|i| Some(if i < in_a { 110 } else { 111 })).collect();
    zoned_nodes(&zones)
}

/// `count` pending pods labelled app=web, with the given term set / spread constraints.
pub(super) fn web_table(count: usize, term_set: i64, spread: Vec<TestSpread>) -> OwnedPodTable {
    let mut t = OwnedPodTable {
        label_sets: vec![vec![(APP, WEB)]],
        selectors: vec![label_is(APP, WEB)],
        terms: vec![term(0, HOSTNAME)],
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

pub(super) fn run_with_table(b: &NodeBuilder, count: usize, table: &OwnedPodTable) -> Outcome {
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
    assert_eq!(&out.reason_codes[r.clone()], &[POD_ANTI_AFFINITY]);
    assert_eq!(&out.reason_counts[r], &[3]);
}

#[test]
fn spread_counts_pods_placed_earlier_in_the_batch() {
    // Zone A has three nodes, zone B one: least-allocated alone would fill zone A.
    let out = run_with_table(&zoned(4, 3), 6, &web_table(6, -1, vec![spread(1, ZONE, true, 0)]));
    let in_b = out.nodes.iter().filter(|&&n| n == 3).count();
    assert!(out.nodes.iter().all(|&n| n >= 0));
    assert_eq!(in_b, 3, "maxSkew 1 over two zones: 3 and 3, got {:?}", out.nodes);
    // ScheduleAnyway does not filter, but scores the emptier zone higher.
    let out = run_with_table(&zoned(4, 3), 2, &web_table(2, -1, vec![spread(1, ZONE, false, 0)]));
    assert!(out.nodes.contains(&3), "one of two pods goes to zone B: {:?}", out.nodes);
}

/// A call of many ReplicaSet-like pods (the profile's system-default spreading:
/// ScheduleAnyway by hostname and zone) selects through ranked nodes from its
/// second pod on (debug builds check each pick against scoring every node): 48
/// identical pods over 12 identical nodes in two zones end up 4 to a node.
#[test]
fn a_call_of_default_spread_pods_spreads_over_hosts_and_zones() {
    let mut table = web_table(48, -1, vec![spread(3, HOSTNAME, false, 0), spread(5, ZONE, false, 0)]);
    table.system_default = vec![1; 48];
    table.flatten();
    let out = run_with_table(&zoned(12, 6), 48, &table);
    let mut per_node = [0; 12];
    for &n in &out.nodes {
        assert!(n >= 0, "every pod fits: {:?}", out.nodes);
        per_node[n as usize] += 1;
    }
    assert_eq!(per_node, [4; 12], "placements {:?}", out.nodes);
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

/// A metric that prefers lower values and filters nodes above 0.9, weighted `weight`.
fn lower_above_0_9(weight: f64) -> MetricSpec {
    MetricSpec {
        prefer: Prefer::Lower,
        range: None,
        above: Some(0.9),
        below: None,
        missing: Missing::Neutral,
        weight,
        estimate: None,
    }
}

#[test]
fn metrics_filter_and_prefer_lower() {
    let mut b = NodeBuilder::default();
    for _ in 0..3 {
        b.node(|_| {});
    }
    let values = [0.95, 0.5, 0.2];
    let spec = lower_above_0_9(5.0);
    let metrics = Metrics::new(&values, vec![spec]);
    let out = run(&b, &[pod(100, 1)], &metrics, 0);
    assert_eq!(out.nodes, vec![2]);
    assert_eq!(out.reason_codes, vec![metric(4, 0, METRIC_ABOVE)]);
    assert_eq!(out.feasible, vec![2]);
}

#[test]
fn a_pod_that_fits_nowhere_names_the_nodes_only_a_threshold_refused() {
    // Node 0 is tainted and node 3 too small: their own filters refuse them whatever they
    // read. Nodes 1 and 2 passed every other filter and read over the line: those are the
    // nodes a relaxed threshold could open, and the only ones listed, where the call asks
    // for that metric's. A pod placed lists none.
    let mut b = NodeBuilder::default();
    b.node(|n| n.taints = vec![(5, 6, EFFECT_NO_SCHEDULE)]);
    b.node(|_| {});
    b.node(|_| {});
    b.node(|n| n.allocatable[CPU] = 10);
    let spec = lower_above_0_9(1.0);
    let listed = ScheduleOptions {
        threshold_metrics: vec![0],
        ..ScheduleOptions::default()
    };
    let over = Metrics::new(&[0.95, 0.95, 0.97, 0.2], vec![spec]);
    let out = try_run(&b, &[pod(1000, 1)], &over, &listed).unwrap();
    assert_eq!(out.nodes, vec![UNSCHEDULABLE]);
    let above = metric(4, 0, METRIC_ABOVE);
    assert_eq!(out.threshold_offsets, vec![0, 2]);
    assert_eq!(out.threshold_nodes, vec![1, 2]);
    assert_eq!(out.threshold_codes, vec![above, above]);
    // A metric the call does not ask for lists nothing (a `pending` policy's: nothing reads it).
    let out = run(&b, &[pod(1000, 1)], &over, 0);
    assert_eq!((out.nodes, out.threshold_offsets), (vec![UNSCHEDULABLE], vec![0, 0]));
    let under = Metrics::new(&[0.95, 0.5, 0.97, 0.2], vec![spec]);
    let out = try_run(&b, &[pod(1000, 1)], &under, &listed).unwrap();
    assert_eq!(out.nodes, vec![1]);
    assert_eq!(out.threshold_offsets, vec![0, 0]);
    assert!(out.threshold_nodes.is_empty());
}

#[test]
fn deadline_leaves_rest_not_attempted() {
    let mut b = NodeBuilder::default();
    b.node(|_| {});
    let options = ScheduleOptions {
        deadline: Some(Instant::now()),
        ..ScheduleOptions::default()
    };
    let out = try_run(&b, &[pod(1, 1), pod(1, 2)], &no_metrics(), &options).expect("valid");
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
    let options = ScheduleOptions {
        explain: Some(0),
        ..ScheduleOptions::default()
    };
    let out = try_run(&b, &[pod(500, 1)], &no_metrics(), &options).expect("valid");
    let ex = out.explanation.expect("explained");
    assert_eq!(out.nodes, vec![1]);
    assert!(ex.totals[1] > ex.totals[0]);
    assert_eq!(ex.totals[1], out.scores[0]);
}

#[test]
fn bad_shapes_are_errors() {
    let mut b = NodeBuilder::default();
    b.node(|_| {});
    let mut bad = pod(1, 1);
    bad.class = 3;
    let err = try_run(&b, &[bad], &no_metrics(), &ScheduleOptions::default());
    assert!(matches!(err, Err(EngineError::Index { what: "pod class", .. })), "{:?}", err.err());
}

#[test]
fn image_locality_prefers_the_node_with_the_pods_image() {
    use crate::test_support::{explain_first, scores_of};
    let mut b = NodeBuilder {
        image_sizes: vec![2000 << 20, 500 << 20],
        ..NodeBuilder::default()
    };
    b.node(|n| n.images = vec![1]);
    b.node(|n| n.images = vec![0, 1]);
    b.node(|_| {});
    let with_image = |images: Vec<i32>| TestPod {
        images,
        containers: 1,
        ..pod(500, 1)
    };
    let cases = [
        // 2000Mi × 1/3 = 666Mi on node 1 only: 100 × (666 − 23) / (1000 − 23) = 65.
        ("an image one node has", with_image(vec![0]), vec![0.0, 65.0, 0.0], Some(1)),
        // 500Mi × 2/3 = 333Mi on nodes 0 and 1: 100 × (333 − 23) / 977 = 31.
        ("an image two nodes have", with_image(vec![1]), vec![31.0, 31.0, 0.0], None),
        ("no image any node has", with_image(vec![]), vec![0.0, 0.0, 0.0], None),
    ];
    for (name, p, want, chosen) in cases {
        let mut classes = OwnedClasses::default();
        classes.add(|_| {});
        let (out, ex) = explain_first(&b, &mut classes, &[p], None);
        let (raw, normalized) = scores_of(&ex, "ImageLocality");
        assert_eq!(raw, want, "{name}: raw");
        assert_eq!(normalized, want, "{name}: normalized");
        if let Some(node) = chosen {
            assert_eq!(out.nodes, vec![node], "{name}: chosen");
        }
    }
}

/// Pods with pod-level filters take their signature's evaluation and apply
/// those filters on top; each pod's verdicts, feasible count and choice must
/// be what evaluating every filter on every node afresh gives (the
/// explanation's). Zone spread with the counts kept across the batch, host
/// anti-affinity, and a metric threshold that fails some nodes on its own.
#[test]
fn pod_filters_over_the_signature_match_a_fresh_evaluation() {
    let nodes = 12;
    let zones: Vec<Option<i32>> = (0..nodes).map(|i| (i != 11).then_some(110 + (i % 3) as i32)).collect();
    let mut b = zoned_nodes(&zones);
    for (i, n) in b.nodes.iter_mut().enumerate() {
        n.allocatable[CPU] = 500 + 250 * (i as i64 % 3);
    }
    let values: Vec<f64> = (0..nodes).map(|i| if i % 4 == 1 { 0.95 } else { 0.1 * (i % 5) as f64 }).collect();
    let spec = lower_above_0_9(2.0);
    let metrics = Metrics::new(&values, vec![spec]);
    let count = 18;
    let mut table = web_table(count, -1, vec![spread(1, ZONE, true, 0)]);
    // Every third pod also keeps away from web pods on its host.
    for i in (0..count).step_by(3) {
        table.term_sets_of_pods[i] = 0;
    }
    table.flatten();
    let built = b.build();
    let mut classes = OwnedClasses::default();
    classes.add(|_| {});
    let test_pods: Vec<TestPod> = (0..count as u64).map(|k| pod(200 + 50 * (k as i64 % 2), k)).collect();
    let owned = OwnedPods::new(&test_pods);
    let mut pods = owned.view();
    pods.table = Some(table.view());
    let mut placed = 0;
    for i in 0..count {
        let options = ScheduleOptions {
            seed: 5,
            explain: Some(i),
            parallel: i % 2 == 0,
            ..ScheduleOptions::default()
        };
        let out = schedule_batch(&built.view(), &classes.view(), &pods, &metrics, &Profile::default(), &options).unwrap();
        let ex = out.explanation.as_ref().expect("explained");
        let mut histogram: Vec<(u32, i64)> = Vec::new();
        for node in 0..nodes {
            for &code in &ex.reason_codes[row(&ex.reason_offsets, node)] {
                match histogram.iter_mut().find(|(c, _)| *c == code) {
                    Some((_, n)) => *n += 1,
                    None => histogram.push((code, 1)),
                }
            }
        }
        histogram.sort_unstable();
        let r = row(&out.reason_offsets, i);
        let got: Vec<(u32, i64)> = out.reason_codes[r.clone()]
            .iter()
            .copied()
            .zip(out.reason_counts[r].iter().copied())
            .collect();
        assert_eq!(got, histogram, "pod {i}: reasons");
        let feasible: Vec<usize> = (0..nodes).filter(|&n| row(&ex.reason_offsets, n).is_empty()).collect();
        assert_eq!(out.feasible[i], feasible.len() as i64, "pod {i}: feasible");
        if out.nodes[i] >= 0 {
            placed += 1;
            let best = feasible.iter().map(|&n| ex.totals[n]).fold(f64::NEG_INFINITY, f64::max);
            assert_eq!(out.scores[i].to_bits(), best.to_bits(), "pod {i}: score");
            assert_eq!(ex.totals[out.nodes[i] as usize].to_bits(), best.to_bits(), "pod {i}: node");
        }
    }
    assert!(placed > 3, "pods placed: {placed}");
}
