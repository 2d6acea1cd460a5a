//! Nominated pods in every filter (upstream's `RunFilterPluginsWithNominatedPods`):
//! pods nominated to a node count there in the filters of pods of lower or
//! equal priority (requests, host ports, inter-pod affinity, spread), and a
//! node passes only if the filters pass both with and without them.

use super::*;
use crate::plugins::inter_pod_affinity::{EXISTING_ANTI_AFFINITY, POD_AFFINITY};
use crate::plugins::pod_topology_spread::SPREAD;

const APP: i32 = 20;
const WEB: i32 = 200;
const DB: i32 = 201;
const CACHE: i32 = 202;

// Label sets.
const L_WEB: i64 = 0;
const L_DB: i64 = 1;
// Term sets: required anti-affinity to app=web per host; required affinity
// to app=web per host; required anti-affinity to app=cache (no such pod).
const ANTI_WEB: i64 = 0;
const WITH_WEB: i64 = 1;
const ANTI_CACHE: i64 = 2;
const NO_TERMS: i64 = -1;

/// A pod of the batch or a nominated pod outside it.
#[derive(Clone)]
struct P {
    priority: i64,
    labels: i64,
    terms: i64,
    /// DoNotSchedule maxSkew 1 per host over app=web.
    spread: bool,
    cpu: i64,
    port: Option<i32>,
    /// The node it is nominated to (-1: none).
    nominated: i64,
}

fn p(priority: i64, labels: i64, terms: i64) -> P {
    P {
        priority,
        labels,
        terms,
        spread: false,
        cpu: 100,
        port: None,
        nominated: -1,
    }
}

fn held(node: i64, priority: i64, labels: i64, terms: i64) -> P {
    P {
        nominated: node,
        ..p(priority, labels, terms)
    }
}

/// Two empty 4-cpu nodes, each its own host; the pod table has the batch's
/// pods, then the nominated pods outside it. Returns each batch pod's node,
/// feasible count and (reason, count) list.
/// Per batch pod: its node, feasible count and (reason, node count) list.
type Verdicts = Vec<(i64, i64, Vec<(u32, i64)>)>;

fn schedule(batch: &[P], outside: &[P]) -> Verdicts {
    let nodes = zoned_nodes(&[None, None]).build();
    let mut classes = OwnedClasses::default();
    classes.add(|_| {});
    let rows: Vec<&P> = batch.iter().chain(outside).collect();
    let mut t = OwnedPodTable {
        label_sets: vec![vec![(APP, WEB)], vec![(APP, DB)]],
        selectors: vec![label_is(APP, WEB), label_is(APP, CACHE)],
        terms: vec![term(0, HOSTNAME), term(1, HOSTNAME)],
        term_sets: vec![
            [vec![], vec![0], vec![], vec![]],
            [vec![0], vec![], vec![], vec![]],
            [vec![], vec![1], vec![], vec![]],
        ],
        label_sets_of_pods: rows.iter().map(|r| r.labels).collect(),
        term_sets_of_pods: rows.iter().map(|r| r.terms).collect(),
        namespaces: vec![1; rows.len()],
        terminating: vec![0; rows.len()],
        spread: batch
            .iter()
            .map(|b| if b.spread { vec![spread(1, HOSTNAME, true, 0)] } else { vec![] })
            .collect(),
        hostname_key: HOSTNAME,
        ..OwnedPodTable::default()
    };
    t.flatten();
    let test_pods: Vec<TestPod> = batch
        .iter()
        .enumerate()
        .map(|(k, b)| TestPod {
            ports: b.port.map(|port| vec![(PROTOCOL_TCP, 1, port)]).unwrap_or_default(),
            ..pod(b.cpu, k as u64)
        })
        .collect();
    let owned = OwnedPods::new(&test_pods);
    let mut pods = owned.view();
    pods.table = Some(t.view());
    let no_victims = OwnedVictims::new(&[], 4, vec![]);
    let held_ports = OwnedPorts::new(
        outside
            .iter()
            .map(|o| o.port.map(|port| vec![(PROTOCOL_TCP, 1, port)]).unwrap_or_default())
            .collect(),
    );
    let allowed = vec![0; batch.len()];
    let priorities: Vec<i64> = batch.iter().map(|b| b.priority).collect();
    let nominated: Vec<i64> = batch.iter().map(|b| b.nominated).collect();
    let r_nodes: Vec<i64> = outside.iter().map(|o| o.nominated).collect();
    let r_rows: Vec<i64> = (0..outside.len()).map(|k| (batch.len() + k) as i64).collect();
    let r_priorities: Vec<i64> = outside.iter().map(|o| o.priority).collect();
    let r_requests: Vec<i64> = outside.iter().flat_map(|o| [o.cpu, 0, 0, 0]).collect();
    pods.preemption = Some(crate::model::Preemption {
        priorities: &priorities,
        allowed: &allowed,
        nominated: &nominated,
        victims: no_victims.view(),
        reservations: crate::model::Reservations {
            nodes: &r_nodes,
            rows: &r_rows,
            priorities: &r_priorities,
            requests: &r_requests,
            ports: held_ports.view(),
        },
    });
    let out = schedule_batch(
        &nodes.view(),
        &classes.view(),
        &pods,
        &no_metrics(),
        &Profile::default(),
        &ScheduleOptions::default(),
    )
    .unwrap();
    (0..batch.len())
        .map(|i| {
            let r = row(&out.reason_offsets, i);
            let reasons = out.reason_codes[r.clone()]
                .iter()
                .copied()
                .zip(out.reason_counts[r].iter().copied())
                .collect();
            (out.nodes[i], out.feasible[i], reasons)
        })
        .collect()
}

#[test]
fn nominated_pods_count_in_every_filter() {
    let cpu_heavy = P {
        cpu: 3500,
        ..p(5, L_DB, NO_TERMS)
    };
    let holds_cpu = P {
        cpu: 1000,
        ..held(0, 10, L_DB, NO_TERMS)
    };
    let port = |q: P| P { port: Some(80), ..q };
    let spreads = |q: P| P { spread: true, ..q };
    // (name, batch, nominated pods outside it, per batch pod: node, feasible, reasons)
    let cases: Vec<(&str, Vec<P>, Vec<P>, Verdicts)> = vec![
        (
            "resources: a higher-priority nominee's request is held",
            vec![cpu_heavy.clone()],
            vec![holds_cpu.clone()],
            vec![(1, 1, vec![(insufficient(CPU), 1)])],
        ),
        (
            "resources: nothing held for a pod of higher priority",
            vec![P {
                priority: 20,
                ..cpu_heavy.clone()
            }],
            vec![holds_cpu.clone()],
            vec![(0, 2, vec![])],
        ),
        (
            "ports: an equal-priority nominee's host port is held",
            vec![port(p(10, L_DB, NO_TERMS))],
            vec![port(held(0, 10, L_DB, NO_TERMS))],
            vec![(1, 1, vec![(NODE_PORTS, 1)])],
        ),
        (
            "anti-affinity: the pod's own term matches the nominee as if it ran there",
            vec![p(5, L_DB, ANTI_WEB)],
            vec![held(0, 10, L_WEB, NO_TERMS)],
            vec![(1, 1, vec![(POD_ANTI_AFFINITY, 1)])],
        ),
        (
            "anti-affinity: a lower-priority nominee does not count",
            vec![p(20, L_DB, ANTI_WEB)],
            vec![held(0, 10, L_WEB, NO_TERMS)],
            vec![(0, 2, vec![])],
        ),
        (
            "existing anti-affinity: the nominee's term rejects the pod",
            vec![p(5, L_WEB, ANTI_CACHE)],
            vec![held(0, 10, L_DB, ANTI_WEB)],
            vec![(1, 1, vec![(EXISTING_ANTI_AFFINITY, 1)])],
        ),
        (
            "existing anti-affinity: skipped for a pod with no terms, as upstream skips InterPodAffinity and its AddPod",
            vec![p(5, L_WEB, NO_TERMS)],
            vec![held(0, 10, L_DB, ANTI_WEB)],
            vec![(0, 2, vec![])],
        ),
        (
            "affinity, two passes: a nominee that may never land there does not satisfy a required term",
            vec![p(5, L_DB, WITH_WEB)],
            vec![held(0, 10, L_WEB, NO_TERMS)],
            vec![(UNSCHEDULABLE, 0, vec![(POD_AFFINITY, 2)])],
        ),
        (
            "spread: the nominee counts in its node's domain",
            vec![spreads(p(5, L_WEB, NO_TERMS))],
            vec![held(0, 10, L_WEB, NO_TERMS)],
            vec![(1, 1, vec![(SPREAD, 1)])],
        ),
        (
            "spread: a nominee of lower priority does not",
            vec![spreads(p(20, L_WEB, NO_TERMS))],
            vec![held(0, 10, L_WEB, NO_TERMS)],
            vec![(0, 2, vec![])],
        ),
        (
            "batch: an equal-priority pod later in the batch holds its nominated node for the pods before it, then takes it",
            vec![p(10, L_DB, ANTI_WEB), held(0, 10, L_WEB, NO_TERMS)],
            vec![],
            vec![(1, 1, vec![(POD_ANTI_AFFINITY, 1)]), (0, 1, vec![])],
        ),
        (
            "batch: a placed nominee counts as placed, its nomination released",
            vec![
                held(1, 10, L_WEB, NO_TERMS),
                P {
                    cpu: 3500,
                    ..p(5, L_DB, NO_TERMS)
                },
            ],
            vec![held(1, 10, L_DB, NO_TERMS)],
            vec![(1, 1, vec![]), (0, 2, vec![])],
        ),
    ];
    for (name, batch, outside, want) in cases {
        let got = schedule(&batch, &outside);
        assert_eq!(got, want, "{name}");
    }
}
