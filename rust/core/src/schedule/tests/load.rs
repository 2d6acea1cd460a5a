//! Load estimate v2 in the batch: the incoming pod's estimate counted against
//! the thresholds and in its score, thresholds per pod (priority bands) and per node, exempt
//! pods, and placements counted by each pod's estimate; and a batch that mixes
//! all of them places exactly as its pods scheduled one at a time.

use super::*;
use crate::model::{LoadInputs, METRIC_EXEMPT, METRIC_POD_THRESHOLDS, METRIC_STRICTER_THRESHOLDS};
use crate::reasons::METRIC_BELOW;

/// Load inputs for one call, owned.
#[derive(Clone)]
pub(super) struct OwnedLoad {
    pub incoming: Vec<bool>,
    pub risk: Vec<f64>,
    pub amounts: Vec<i64>,
    /// What each pod's scores count (None: its `amounts`).
    pub expected: Option<Vec<i64>>,
    pub pod_above: Vec<f64>,
    pub pod_below: Vec<f64>,
    pub exempt: Vec<u8>,
    pub node_above: Vec<f64>,
    pub node_below: Vec<f64>,
    pub caution: Vec<f64>,
    pub scores_caution: Vec<bool>,
}

impl OwnedLoad {
    /// Every pod with the specs' thresholds and no estimate, no node with its own thresholds.
    pub fn new(specs: &[MetricSpec], pods: usize, nodes: usize, incoming: bool) -> OwnedLoad {
        let m = specs.len();
        let pod_above = (0..pods).flat_map(|_| specs.iter().map(|s| s.above.unwrap_or(f64::NAN))).collect();
        let pod_below = (0..pods).flat_map(|_| specs.iter().map(|s| s.below.unwrap_or(f64::NAN))).collect();
        OwnedLoad {
            incoming: vec![incoming; m],
            risk: vec![0.0; m],
            amounts: vec![0; pods * m],
            expected: None,
            pod_above,
            pod_below,
            exempt: vec![0; pods * m],
            node_above: vec![f64::NAN; nodes * m],
            node_below: vec![f64::NAN; nodes * m],
            caution: vec![0.0; nodes * m],
            scores_caution: vec![false; m],
        }
    }

    pub fn view(&self) -> LoadInputs<'_> {
        LoadInputs {
            incoming: self.incoming.clone(),
            risk: self.risk.clone(),
            amounts: &self.amounts,
            expected: self.expected.as_deref().unwrap_or(&self.amounts),
            pod_above: &self.pod_above,
            pod_below: &self.pod_below,
            exempt: &self.exempt,
            node_above: &self.node_above,
            node_below: &self.node_below,
            caution: &self.caution,
            scores_caution: self.scores_caution.clone(),
        }
    }

    /// Pod `i`'s rows only (a batch of that pod alone).
    pub fn pod(&self, i: usize) -> OwnedLoad {
        let m = self.incoming.len();
        OwnedLoad {
            amounts: self.amounts[i * m..(i + 1) * m].to_vec(),
            expected: self.expected.as_ref().map(|e| e[i * m..(i + 1) * m].to_vec()),
            pod_above: self.pod_above[i * m..(i + 1) * m].to_vec(),
            pod_below: self.pod_below[i * m..(i + 1) * m].to_vec(),
            exempt: self.exempt[i * m..(i + 1) * m].to_vec(),
            ..self.clone()
        }
    }
}

fn cpu_metric(above: Option<f64>, below: Option<f64>) -> MetricSpec {
    MetricSpec {
        prefer: Prefer::Lower,
        range: None,
        above,
        below,
        missing: Missing::Neutral,
        weight: 5.0,
        estimate: Some((CPU, 1.0)),
    }
}

/// Three nodes of 1000m CPU whose metric reads 0.3, 0.6 and 0.85.
fn three_nodes() -> (NodeBuilder, [f64; 3]) {
    let mut b = NodeBuilder::default();
    for _ in 0..3 {
        b.node(|n| n.allocatable[CPU] = 1000);
    }
    (b, [0.3, 0.6, 0.85])
}

#[test]
fn thresholds_per_pod_and_node_with_the_incoming_pod() {
    const NONE: f64 = f64::NAN;
    struct Case {
        name: &'static str,
        incoming: bool,
        /// The pod's estimate (millicores), thresholds (NaN: none) and exemption
        /// (`LoadInputs::exempt`).
        amount: i64,
        above: f64,
        below: f64,
        exempt: u8,
        node_above: [f64; 3],
        /// Feasible nodes, and each reason with the nodes it rejected.
        feasible: i64,
        reasons: Vec<(u32, i64)>,
    }
    let base = || Case {
        name: "",
        incoming: true,
        amount: 0,
        above: 0.9,
        below: NONE,
        exempt: 0,
        node_above: [NONE; 3],
        feasible: 3,
        reasons: vec![],
    };
    let above = metric(4, 0, METRIC_ABOVE);
    let cases = [
        Case {
            name: "legacy: the incoming pod is not counted",
            incoming: false,
            amount: 200,
            ..base()
        },
        Case {
            name: "the incoming pod tips the hottest node over",
            amount: 200,
            feasible: 2,
            reasons: vec![(above, 1)],
            ..base()
        },
        Case {
            name: "a bigger pod tips two",
            amount: 400,
            feasible: 1,
            reasons: vec![(above, 2)],
            ..base()
        },
        Case {
            name: "a band's own threshold",
            above: 0.5,
            feasible: 1,
            reasons: vec![(above, 2)],
            ..base()
        },
        Case {
            name: "a band without a threshold",
            above: NONE,
            amount: 400,
            ..base()
        },
        Case {
            name: "a band's lower threshold",
            above: NONE,
            below: 0.5,
            feasible: 2,
            reasons: vec![(metric(4, 0, METRIC_BELOW), 1)],
            ..base()
        },
        Case {
            name: "an exempt pod passes every node",
            amount: 400,
            above: 0.1,
            exempt: METRIC_EXEMPT,
            ..base()
        },
        Case {
            name: "a saturated pod's own threshold wins over the node's",
            above: 0.5,
            exempt: METRIC_POD_THRESHOLDS,
            node_above: [NONE, 0.95, 0.2],
            feasible: 1,
            reasons: vec![(above, 2)],
            ..base()
        },
        Case {
            name: "a move's replacement: a node's looser threshold does not let it through",
            above: 0.5,
            exempt: METRIC_STRICTER_THRESHOLDS,
            node_above: [NONE, 0.95, 0.2],
            feasible: 1,
            reasons: vec![(above, 2)],
            ..base()
        },
        Case {
            name: "a move's replacement: a node's stricter threshold holds it back",
            above: 0.9,
            exempt: METRIC_STRICTER_THRESHOLDS,
            node_above: [0.2, NONE, NONE],
            feasible: 2,
            reasons: vec![(above, 1)],
            ..base()
        },
        Case {
            name: "a move's replacement: its own estimate counts against the stricter line",
            amount: 200,
            above: 0.9,
            exempt: METRIC_STRICTER_THRESHOLDS,
            node_above: [0.45, NONE, NONE],
            feasible: 1,
            reasons: vec![(above, 2)],
            ..base()
        },
        Case {
            name: "a node's own threshold replaces the spec's",
            amount: 200,
            node_above: [NONE, NONE, 2.0],
            ..base()
        },
        Case {
            name: "a node's own threshold wins over the band's",
            above: 0.5,
            node_above: [NONE, 0.95, 0.2],
            feasible: 2,
            reasons: vec![(above, 1)],
            ..base()
        },
    ];
    let (b, values) = three_nodes();
    for c in cases {
        let spec = cpu_metric(Some(0.9), None);
        let mut load = OwnedLoad::new(&[spec], 1, 3, c.incoming);
        load.amounts[0] = c.amount;
        load.pod_above[0] = c.above;
        load.pod_below[0] = c.below;
        load.exempt[0] = c.exempt;
        load.node_above = c.node_above.to_vec();
        let metrics = Metrics {
            load: Some(load.view()),
            ..Metrics::new(&values, vec![spec])
        };
        let out = run(&b, &[pod(100, 1)], &metrics, 0);
        let got: Vec<(u32, i64)> = out.reason_codes.iter().copied().zip(out.reason_counts.iter().copied()).collect();
        assert_eq!((out.feasible[0], got), (c.feasible, c.reasons), "{}", c.name);
    }
}

#[test]
fn a_placement_counts_as_its_estimate() {
    // Two pods of 100m: the first goes to the cooler node. Counted by its estimate of
    // 10m it leaves that node cooler than the other, so the second follows it; counted
    // as its request times the factor (no load inputs), it does not.
    let mut b = NodeBuilder::default();
    for _ in 0..2 {
        b.node(|n| n.allocatable[CPU] = 1000);
    }
    let values = [0.5, 0.55];
    let spec = cpu_metric(None, None);
    let pods = [pod(100, 1), pod(100, 2)];
    let mut load = OwnedLoad::new(&[spec], 2, 2, true);
    load.amounts = vec![10, 10];
    let by_estimate = Metrics {
        load: Some(load.view()),
        ..Metrics::new(&values, vec![spec])
    };
    assert_eq!(run(&b, &pods, &by_estimate, 0).nodes, vec![0, 0], "by estimate");
    let by_request = Metrics::new(&values, vec![spec]);
    assert_eq!(run(&b, &pods, &by_request, 0).nodes, vec![0, 1], "by request × factor");
}

#[test]
fn the_incoming_pod_counts_in_its_score() {
    // A node of 1000m CPU at 0.40 and one of 2000m at 0.42. A pod estimated at 500m
    // leaves them at 0.90 and 0.67: scored by the value it would leave (as its filter
    // reads it, and as NodeResourcesFit scores requests with the pod's), it goes to the
    // larger node, whichever the normalization. The legacy estimate, which does not
    // count the incoming pod, scores the values as they are.
    let mut b = NodeBuilder::default();
    b.node(|n| n.allocatable[CPU] = 1000);
    b.node(|n| n.allocatable[CPU] = 2000);
    let values = [0.40, 0.42];
    for range in [None, Some((0.0, 1.0))] {
        let spec = MetricSpec {
            range,
            ..cpu_metric(None, None)
        };
        for (incoming, want) in [(true, 1), (false, 0)] {
            let mut load = OwnedLoad::new(&[spec], 1, 2, incoming);
            load.amounts = vec![500];
            let metrics = Metrics {
                load: Some(load.view()),
                ..Metrics::new(&values, vec![spec])
            };
            let out = run(&b, &[pod(100, 1)], &metrics, 0);
            assert_eq!(out.nodes, vec![want], "range {range:?}, incoming {incoming}");
        }
    }
}

#[test]
fn the_filter_reads_the_cautious_figures_and_the_scores_the_expected_ones() {
    // Two nodes of 1000m CPU. Node 0 reads 0.60, of which 0.25 is caution (pods no
    // sample shows yet, counted with a deviation): expected at 0.35. Node 1 reads
    // 0.50, all of it measured. A pod estimated at 200m with a deviation, 100m
    // expected: the filter (above 0.85) reads 0.80 and 0.70 and passes both; the scores
    // read 0.45 and 0.60, and take node 0. Scored by the cautious figures it took node
    // 1, the node that measures more: nodes whose new pods count with a deviation end
    // cooler than the rest. Node 0 at 0.70 (0.45 expected) is filtered out: the
    // caution still keeps a node from going hot.
    let mut b = NodeBuilder::default();
    for _ in 0..2 {
        b.node(|n| n.allocatable[CPU] = 1000);
    }
    let spec = cpu_metric(Some(0.85), None);
    for (values, caution, want) in [
        ([0.60, 0.50], [0.25, 0.0], 0),
        ([0.60, 0.50], [0.0, 0.0], 1),
        ([0.70, 0.50], [0.25, 0.0], 1),
    ] {
        let mut load = OwnedLoad::new(&[spec], 1, 2, true);
        load.amounts = vec![200];
        load.expected = Some(vec![100]);
        load.caution = caution.to_vec();
        let metrics = Metrics {
            load: Some(load.view()),
            ..Metrics::new(&values, vec![spec])
        };
        let out = run(&b, &[pod(100, 1)], &metrics, 0);
        assert_eq!(out.nodes, vec![want], "values {values:?}, caution {caution:?}");
    }
}

#[test]
fn a_risky_pod_is_scored_by_the_chance_its_caution_takes_the_node_past_the_line() {
    // A node of 1000m CPU and one of 2000m, the filter at 0.80. A pod expected at 100m
    // that may use 300m (its caution: a workload nothing measured). At 0.40 and 0.46 the
    // small node reads cooler with the pod at its expected usage (0.50 against 0.51), but
    // its caution reaches 0.70 there, 1.5 deviations short of the line (a 7 % chance of
    // crossing it), and 0.61 on the large node, 2.9 deviations short (0.2 %): weighing
    // risk, the large node takes it. Where the small node is far from its line (0.20: 2.5
    // deviations at 0.30) it keeps it, and without a line there is no risk to weigh.
    // At 0.35 the small node reads 0.45 with the pod against the large node's 0.51, and
    // its 4 % chance of crossing, times its 0.20 of caution, adds 0.008: it keeps the pod
    // at weight 1, and loses it where a crossing weighs 16 times as much (0.58).
    let mut b = NodeBuilder::default();
    b.node(|n| n.allocatable[CPU] = 1000);
    b.node(|n| n.allocatable[CPU] = 2000);
    for (above, values, risk, want) in [
        (Some(0.80), [0.40, 0.46], 0.0, 0),
        (Some(0.80), [0.40, 0.46], 1.0, 1),
        (Some(0.80), [0.20, 0.46], 1.0, 0),
        (None, [0.40, 0.46], 1.0, 0),
        (Some(0.80), [0.35, 0.46], 1.0, 0),
        (Some(0.80), [0.35, 0.46], 16.0, 1),
        (Some(0.80), [0.35, 0.46], f64::NAN, 0),
    ] {
        let spec = MetricSpec {
            range: Some((0.0, 1.0)),
            ..cpu_metric(above, None)
        };
        let mut load = OwnedLoad::new(&[spec], 1, 2, true);
        load.amounts = vec![300];
        load.expected = Some(vec![100]);
        load.risk = vec![risk];
        let metrics = Metrics {
            load: Some(load.view()),
            ..Metrics::new(&values, vec![spec])
        };
        let out = run(&b, &[pod(100, 1)], &metrics, 0);
        assert_eq!(out.nodes, vec![want], "line {above:?}, values {values:?}, risk {risk}");
    }
}

#[test]
fn the_chance_of_crossing_is_the_normal_tail_past_either_line() {
    use crate::schedule::load::crossing;
    let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
    // A mean of 0.5, one deviation 0.1: a line at 0.5 is crossed half the time, one a
    // deviation above 16 %, three deviations 0.13 %; a line below counts the same way.
    assert!(close(crossing(0.5, 0.1, true, (Some(0.5), None)), 0.5));
    assert!(close(crossing(0.5, 0.1, true, (Some(0.6), None)), 0.158_655));
    assert!(close(crossing(0.5, 0.1, true, (Some(0.8), None)), 0.001_350));
    assert!(close(crossing(0.5, 0.1, false, (None, Some(0.4))), 0.158_655));
    assert!(close(crossing(0.5, 0.1, true, (Some(0.4), None)), 0.841_345));
    // Only the line on the caution's side: a node with a line below too is not pushed by it.
    assert!(close(crossing(0.5, 0.1, true, (Some(0.8), Some(0.45))), 0.001_350));
    assert!(close(crossing(0.5, 0.1, false, (Some(0.55), Some(0.4))), 0.158_655));
    // No spread, no line, or no value: no chance to weigh.
    assert_eq!(crossing(0.5, 0.0, true, (Some(0.4), None)), 0.0);
    assert_eq!(crossing(0.5, 0.1, true, (None, None)), 0.0);
    assert_eq!(crossing(f64::NAN, 0.1, true, (Some(0.4), None)), 0.0);
    assert_eq!(crossing(0.5, f64::INFINITY, true, (Some(0.4), None)), 0.0);
}

/// Where a 100m pod counted at `amount` by the filter and `expected` by the score goes
/// among two nodes of 1000m CPU reading `values` (node 0's `caution` of it, kept in its score
/// where `kept`), the filter at 0.80 and a crossing weighing 16.
fn risky_choice(values: [f64; 2], caution: f64, kept: bool, amount: i64, expected: i64) -> Vec<i64> {
    let mut b = NodeBuilder::default();
    for _ in 0..2 {
        b.node(|n| n.allocatable[CPU] = 1000);
    }
    let spec = MetricSpec {
        range: Some((0.0, 1.0)),
        ..cpu_metric(Some(0.80), None)
    };
    let mut load = OwnedLoad::new(&[spec], 1, 2, true);
    load.amounts = vec![amount];
    load.expected = Some(vec![expected]);
    load.risk = vec![16.0];
    load.caution = vec![caution, 0.0];
    load.scores_caution = vec![kept];
    let metrics = Metrics {
        load: Some(load.view()),
        ..Metrics::new(&values, vec![spec])
    };
    run(&b, &[pod(100, 1)], &metrics, 0).nodes
}

#[test]
fn a_nodes_caution_widens_the_risks_deviation_rather_than_counting_for_certain() {
    // A pod expected at 100m that may use 300m (0.20 of caution). Node 0 reads 0.50, of which
    // 0.10 is the caution of pods no sample shows yet; node 1 measures 0.48. With the pod,
    // node 0's mean is 0.50 with a deviation of 0.22 (the root of 0.10 and 0.20 squared),
    // 1.34 deviations short of the line (a 9 % chance of crossing it, adding 0.29 to the 0.60
    // it is scored at); node 1's is 0.58 with 0.20, 1.1 deviations short (14 %: 0.43 on
    // 0.58). Node 0 takes the pod whether the scores keep its caution or read its mean (0.50
    // + 0.29). Were node 0's reading one caution above its mean taken for certain (its mean
    // at 0.60, 1.0 deviation short: 16 %, 0.51 on 0.60), node 1 would.
    for (kept, caution, want) in [(true, 0.10, 0), (false, 0.10, 0), (true, 0.0, 1)] {
        assert_eq!(
            risky_choice([0.50, 0.48], caution, kept, 300, 100),
            vec![want],
            "kept {kept}, caution {caution}"
        );
    }
}

#[test]
fn a_pod_expected_above_its_cautious_figure_weighs_no_risk() {
    // A pod the filter counts at 100m but the score at 300m (a prior's quantile under the
    // typical figure): its caution is below its mean, on the side with no line, and no
    // chance of crossing discounts a node. Node 0 reads 0.50 with 0.30 of caution its score
    // keeps, node 1 measures 0.49: by what they read with the pod (0.80 against 0.79), node 1
    // takes it.
    assert_eq!(risky_choice([0.50, 0.49], 0.30, true, 100, 300), vec![1]);
}

#[test]
fn the_tables_tail_is_the_normal_tail_between_its_points_too() {
    use crate::schedule::load::{normal_tail, upper_tail};
    // Off the table's points (steps of 1/256), on both sides of the mean, and past its end.
    for i in 0..8000 {
        let z = i as f64 * 0.001_013;
        let tail = normal_tail(z);
        assert!((upper_tail(z) - tail).abs() < 1e-6, "z {z}: {} against {tail}", upper_tail(z));
        assert!((upper_tail(-z) - (1.0 - tail)).abs() < 1e-6, "z -{z}");
    }
    assert!((upper_tail(1.959_964) - 0.025).abs() < 1e-6);
    assert_eq!((upper_tail(8.5), upper_tail(-8.5), upper_tail(f64::NAN)), (0.0, 1.0, 0.0));
}

#[test]
fn a_placement_adds_its_expected_usage_to_the_scores_and_its_estimate_to_the_filter() {
    // Two nodes of 1000m CPU at 0.30 and 0.35, the filter at 0.85. Pods estimated at
    // 200m, 40m expected. The first takes node 0; counted at 40m there (0.34) for the
    // scores, node 0 still reads cooler, so the second follows it there (counted by
    // its estimate, it would have gone to node 1: 0.50 against 0.35); counted at 200m
    // for the filter, node 0 (0.70 + 0.20) is full for the third, which goes to node 1.
    let mut b = NodeBuilder::default();
    for _ in 0..2 {
        b.node(|n| n.allocatable[CPU] = 1000);
    }
    let values = [0.30, 0.35];
    let spec = cpu_metric(Some(0.85), None);
    let pods = [pod(100, 1), pod(100, 2), pod(100, 3)];
    let mut load = OwnedLoad::new(&[spec], 3, 2, true);
    load.amounts = vec![200, 200, 200];
    for (expected, want) in [
        (vec![40, 40, 40], vec![0, 0, 1]),
        (vec![200, 200, 200], vec![0, 1, 0]),
        // Pods of one shape whose estimates agree and expected usages differ are told
        // apart (the signature caches read both): the first counts 0.50 on node 0.
        (vec![200, 40, 40], vec![0, 1, 1]),
    ] {
        load.expected = Some(expected.clone());
        let metrics = Metrics {
            load: Some(load.view()),
            ..Metrics::new(&values, vec![spec])
        };
        assert_eq!(run(&b, &pods, &metrics, 0).nodes, want, "expected {expected:?}");
    }
}

/// Each pod's load row from its key: a third keep the specs' thresholds, a
/// third have a band's own, a third none; some estimate nothing; a few are exempt.
pub(super) fn pod_load(load: &mut OwnedLoad, specs: &[MetricSpec], i: usize, p: &TestPod) {
    let m = specs.len();
    for (k, spec) in specs.iter().enumerate() {
        let at = i * m + k;
        let (above, below) = match p.key % 3 {
            0 => (spec.above, spec.below),
            1 => (Some(0.7), spec.below),
            _ => (None, None),
        };
        load.pod_above[at] = above.unwrap_or(f64::NAN);
        load.pod_below[at] = below.unwrap_or(f64::NAN);
        load.amounts[at] = if p.key % 5 == 0 {
            0
        } else {
            p.request[CPU] * (1 + (p.key % 2) as i64)
        };
        // Some pods are exempt from every metric, some from the first alone.
        load.exempt[at] = if p.key % 17 == 0 || (k == 0 && p.key % 13 == 0) {
            METRIC_EXEMPT
        } else {
            0
        };
    }
}

/// A batch with load inputs places as its pods one by one against the node
/// table and metric values each placement leaves: the signature caches serve
/// pods of one shape whose thresholds and estimates differ, and must keep
/// them apart.
#[test]
fn batch_with_load_equals_one_pod_at_a_time() {
    for (parallel, incoming) in [(false, true), (true, true), (false, false)] {
        let n = 200;
        let mut b = NodeBuilder::default();
        for i in 0..n {
            b.node(|node| {
                node.allocatable[CPU] = 1000 + 500 * (i % 4);
                node.allocatable[MEMORY] = (2 + (i % 3)) << 30;
                node.allowed_pods = 2 + (i % 3);
            });
        }
        let mut values: Vec<f64> = (0..n)
            .flat_map(|i| {
                let a = if i % 11 == 0 { f64::NAN } else { (i * 37 % 100) as f64 / 100.0 };
                [a, (i * 53 % 100) as f64 / 100.0, (i * 29 % 100) as f64 / 100.0]
            })
            .collect();
        let specs = vec![
            MetricSpec {
                weight: 3.0,
                ..cpu_metric(Some(0.9), None)
            },
            MetricSpec {
                prefer: Prefer::Higher,
                estimate: None,
                ..cpu_metric(None, Some(0.05))
            },
            // Scored over a fixed range: no extremes to keep, its estimate-moved values rescore only their nodes.
            MetricSpec {
                range: Some((0.0, 1.0)),
                weight: 2.0,
                ..cpu_metric(None, None)
            },
        ];
        let m = specs.len();
        let pods: Vec<TestPod> = (0..600)
            .map(|i| TestPod {
                request: vec![[250, 500, 1000][i % 3], [256 << 20, 1 << 30, 0][i % 3], 0, 0],
                key: i as u64,
                ..pod(0, 0)
            })
            .collect();
        let mut load = OwnedLoad::new(&specs, pods.len(), n as usize, incoming);
        for (i, p) in pods.iter().enumerate() {
            pod_load(&mut load, &specs, i, p);
        }
        for node in 0..n as usize {
            if node % 9 == 0 {
                load.node_above[node * m] = 0.99;
            }
            if node % 10 == 3 {
                load.node_below[node * m + 1] = 0.3;
            }
        }
        let options = ScheduleOptions {
            seed: 3,
            parallel,
            threshold_metrics: vec![0, 1],
            ..ScheduleOptions::default()
        };
        let start = values.clone();
        let metrics = Metrics {
            load: Some(load.view()),
            ..Metrics::new(&start, specs.clone())
        };
        let batch = try_run(&b, &pods, &metrics, &options).unwrap();
        assert!(batch.nodes.contains(&UNSCHEDULABLE), "the cluster fills up");
        let above = metric(4, 0, METRIC_ABOVE);
        assert!(batch.reason_codes.contains(&above), "thresholds reject nodes");
        assert!(
            !batch.threshold_nodes.is_empty(),
            "and some only by a threshold for a pod that fits nowhere"
        );
        for (i, p) in pods.iter().enumerate() {
            let own = load.pod(i);
            let now = Metrics {
                load: Some(own.view()),
                ..Metrics::new(&values, specs.clone())
            };
            let one = try_run(&b, std::slice::from_ref(p), &now, &options).unwrap();
            assert_eq!(one.nodes[0], batch.nodes[i], "pod {i}");
            assert_eq!(one.feasible[0], batch.feasible[i], "pod {i}");
            let (lo, hi) = (batch.reason_offsets[i] as usize, batch.reason_offsets[i + 1] as usize);
            assert_eq!(one.reason_codes, batch.reason_codes[lo..hi], "pod {i}");
            assert_eq!(one.reason_counts, batch.reason_counts[lo..hi], "pod {i}");
            let (lo, hi) = (batch.threshold_offsets[i] as usize, batch.threshold_offsets[i + 1] as usize);
            assert_eq!(one.threshold_nodes, batch.threshold_nodes[lo..hi], "pod {i}");
            assert_eq!(one.threshold_codes, batch.threshold_codes[lo..hi], "pod {i}");
            if one.nodes[0] >= 0 {
                assert_eq!(one.scores[0].to_bits(), batch.scores[i].to_bits(), "pod {i}");
                let chosen = one.nodes[0] as usize;
                let node = &mut b.nodes[chosen];
                for k in [0, 2] {
                    if !values[chosen * m + k].is_nan() {
                        values[chosen * m + k] += load.amounts[i * m + k] as f64 / node.allocatable[CPU] as f64;
                    }
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

#[test]
fn load_inputs_of_the_wrong_shape_are_rejected() {
    let (b, values) = three_nodes();
    let spec = cpu_metric(Some(0.9), None);
    let mut load = OwnedLoad::new(&[spec], 1, 3, true);
    load.node_above.pop();
    let metrics = Metrics {
        load: Some(load.view()),
        ..Metrics::new(&values, vec![spec])
    };
    let got = try_run(&b, &[pod(100, 1)], &metrics, &ScheduleOptions::default());
    assert!(
        matches!(
            got,
            Err(EngineError::Shape {
                what: "metric load node_above",
                expected: 3,
                got: 2
            })
        ),
        "{:?}",
        got.err()
    );
}
