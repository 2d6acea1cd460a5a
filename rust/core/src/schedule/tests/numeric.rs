//! Values at the edges of the number types (issue 48): counts near or at i64's
//! largest, metric values at f64's. A node whose requests saturate is full; a
//! metric value that is infinite is no value; no total is NaN; a pod with a
//! feasible node is placed, and one without has reasons.

use super::*;

const SATURATED: i64 = i64::MAX;
/// Python's `QUANTITY_MAX`: where the node table clamps one count.
const QUANTITY_MAX: i64 = i64::MAX / 4;

fn spec(missing: Missing) -> MetricSpec {
    MetricSpec {
        prefer: Prefer::Lower,
        range: None,
        above: None,
        below: None,
        missing,
        weight: 2.0,
        estimate: None,
    }
}

#[test]
fn counts_at_the_edge_table() {
    struct Case {
        name: &'static str,
        nodes: Vec<fn(&mut crate::test_support::TestNode)>,
        pods: Vec<TestPod>,
        /// Chosen node per pod (`UNSCHEDULABLE`: none), and the first pod's reasons.
        want: Vec<i64>,
        want_reasons: Vec<u32>,
    }
    let cases = vec![
        Case {
            name: "saturated cpu requests: full, not empty",
            nodes: vec![|n| n.requested[CPU] = SATURATED],
            pods: vec![pod(100, 1)],
            want: vec![UNSCHEDULABLE],
            want_reasons: vec![insufficient(CPU)],
        },
        Case {
            name: "saturated node passed over for a roomy one",
            nodes: vec![|n| n.requested[CPU] = SATURATED, |_| {}],
            pods: vec![pod(100, 1)],
            want: vec![1],
            want_reasons: vec![insufficient(CPU)],
        },
        Case {
            name: "non-zero sums at the edge saturate on commit",
            nodes: vec![|n| n.nonzero_requested = [SATURATED - 50, SATURATED - 50]],
            pods: vec![pod(0, 1), pod(0, 2), pod(0, 3)],
            want: vec![0, 0, 0],
            want_reasons: vec![],
        },
        Case {
            name: "exabyte memory scores, and scores highest",
            nodes: vec![|_| {}, |n| n.allocatable[MEMORY] = QUANTITY_MAX],
            pods: vec![pod(100, 1)],
            want: vec![1],
            want_reasons: vec![],
        },
        Case {
            name: "every count clamped: placed, not wrapped",
            nodes: vec![|n| {
                n.allocatable[CPU] = QUANTITY_MAX;
                n.allocatable[MEMORY] = QUANTITY_MAX;
                n.requested[CPU] = QUANTITY_MAX - 1000;
                n.nonzero_requested = [QUANTITY_MAX - 1000, QUANTITY_MAX];
            }],
            pods: vec![pod(1000, 1), pod(1000, 2)],
            want: vec![0, UNSCHEDULABLE],
            want_reasons: vec![],
        },
    ];
    for case in cases {
        let mut b = NodeBuilder::default();
        for f in &case.nodes {
            b.node(*f);
        }
        let got = run(&b, &case.pods, &no_metrics(), 0);
        assert_eq!(got.nodes, case.want, "{}: want {:?} got {:?}", case.name, case.want, got.nodes);
        let (lo, hi) = (got.reason_offsets[0] as usize, got.reason_offsets[1] as usize);
        assert_eq!(got.reason_codes[lo..hi], case.want_reasons, "{}: reasons", case.name);
        for (i, &node) in got.nodes.iter().enumerate() {
            if node >= 0 {
                assert!(got.scores[i].is_finite(), "{}: pod {i} scored {}", case.name, got.scores[i]);
            }
        }
    }
}

#[test]
fn metric_values_at_the_edge_table() {
    let cases: [(&str, Missing, [f64; 3], i64); 6] = [
        ("finite extremes: the lowest wins", Missing::Neutral, [1.7e308, -1.7e308, 0.3], 1),
        ("largest finite values only", Missing::Neutral, [f64::MAX, f64::MAX, -f64::MAX], 2),
        (
            "+inf is no value: the lowest finite wins",
            Missing::Worst,
            [f64::INFINITY, 0.5, 0.3],
            2,
        ),
        ("-inf is no value, not the best", Missing::Worst, [f64::NEG_INFINITY, 0.5, 0.3], 2),
        (
            "only infinite values: all missing, still placed",
            Missing::Worst,
            [f64::INFINITY, f64::NEG_INFINITY, f64::INFINITY],
            -1,
        ),
        (
            "infinite under exclude: that node is filtered",
            Missing::Exclude,
            [f64::NEG_INFINITY, 0.5, 0.9],
            1,
        ),
    ];
    for (name, missing, values, want) in cases {
        let mut b = NodeBuilder::default();
        for _ in 0..3 {
            b.node(|_| {});
        }
        let metrics = Metrics::new(&values, vec![spec(missing)]);
        let got = run(&b, &[pod(100, 7)], &metrics, 0);
        if want >= 0 {
            assert_eq!(got.nodes[0], want, "{name}");
        } else {
            assert!(got.nodes[0] >= 0, "{name}: left pending");
        }
        assert!(got.scores[0].is_finite(), "{name}: total {}", got.scores[0]);
    }
}
