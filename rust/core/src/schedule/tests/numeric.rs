//! Values at the edges of the number types (issue 48): counts near or at i64's
//! largest. A node whose requests saturate is full; no total wraps.

use super::*;

const SATURATED: i64 = i64::MAX;
/// Python's `QUANTITY_MAX`: where the node table clamps one count.
const QUANTITY_MAX: i64 = i64::MAX / 4;

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
