//! Preemption and nominated pods: victims, candidate sampling, the nominated node first, what nominated pods hold.

use super::*;
use crate::plugins::default_preemption::{verdict, NOT_HELPFUL, NO_VICTIMS};

/// DefaultPreemption's PostFilter verdict for `pod` and its FitError histogram (None: not run).
fn postfilter(out: &Outcome, pod: usize) -> Option<(u8, Vec<(u32, i64)>)> {
    let k = out.postfilter_pods.iter().position(|&p| p == pod as i64)?;
    let (lo, hi) = (out.postfilter_offsets[k] as usize, out.postfilter_offsets[k + 1] as usize);
    let histogram = (lo..hi).map(|i| (out.postfilter_codes[i], out.postfilter_counts[i])).collect();
    Some((out.postfilter_verdicts[k], histogram))
}

#[test]
fn preemption_evicts_the_fewest_lowest_priority_pods_and_reserves_the_node() {
    // Two 4-cpu nodes. Node 0 runs pods of priority 1, 1 and 5 (1 cpu each) with
    // 1 cpu free; node 1 is full with one 4-cpu pod of priority 5. A 2-cpu pod of
    // priority 10 fits nowhere: on node 0 evicting one priority-1 pod frees enough.
    let mut b = NodeBuilder::default();
    b.node(|n| {
        n.requested[CPU] = 3000;
        n.pod_count = 3;
    });
    b.node(|n| {
        n.requested[CPU] = 4000;
        n.pod_count = 1;
    });
    let nodes = b.build();
    let mut classes = OwnedClasses::default();
    classes.add(|_| {});
    let test_pods = vec![pod(2000, 1), pod(1000, 2)];
    let owned = OwnedPods::new(&test_pods);
    let mut pods = owned.view();
    let victim = |node, priority, cpu, start_time| TestVictim {
        row: -1,
        node,
        priority,
        request: vec![cpu],
        start_time,
        ..TestVictim::default()
    };
    let owned_victims = OwnedVictims::new(
        &[
            victim(0, 1, 1000, 10),
            victim(0, 1, 1000, 20),
            victim(0, 5, 1000, 0),
            victim(1, 5, 4000, 0),
        ],
        4,
        vec![],
    );
    let victims = owned_victims.view();
    let no_ports = OwnedPorts::new(vec![]);
    pods.preemption = Some(crate::model::Preemption {
        priorities: &[10, 0],
        allowed: &[1, 1],
        nominated: &[-1, -1],
        victims,
        reservations: crate::model::Reservations {
            nodes: &[],
            rows: &[],
            priorities: &[],
            requests: &[],
            ports: no_ports.view(),
        },
    });
    let mut schedule = |nodes: &Nodes, pods: &Pods| {
        schedule_batch(
            nodes,
            &classes.view(),
            pods,
            &no_metrics(),
            &Profile::default(),
            &ScheduleOptions::default(),
        )
        .unwrap()
    };
    let out = schedule(&nodes.view(), &pods);
    assert_eq!(out.nodes[0], UNSCHEDULABLE);
    assert_eq!(out.nominated[0], 0);
    // Of the two priority-1 pods the one that started later goes.
    assert_eq!(&out.victims[row(&out.victim_offsets, 0)], &[1]);
    // The 1-cpu pod of priority 0 would have fit node 0; the nomination holds it.
    assert_eq!(out.nodes[1], UNSCHEDULABLE, "node 0 is held for the nominated pod");
    assert_eq!(out.nominated[1], -1);
    // Upstream TestPostFilter "pod with higher priority can be made schedulable" (Success)
    // and "pod with tied priority is still unschedulable": nothing of lower priority anywhere.
    assert_eq!(postfilter(&out, 0), Some((verdict::NOMINATED, vec![])));
    assert_eq!(postfilter(&out, 1), Some((verdict::NO_CANDIDATE, vec![(NO_VICTIMS, 2)])));

    // Already nominated to node 0 while a victim there is still terminating:
    // it waits, keeping the nomination, and evicts nobody else.
    if let Some(pre) = pods.preemption.as_mut() {
        pre.nominated = &[0, -1];
        pre.victims.terminating = &[1, 0, 0, 0];
    }
    let out = schedule(&nodes.view(), &pods);
    assert_eq!(out.nominated[0], 0);
    assert!(row(&out.victim_offsets, 0).is_empty());
    assert_eq!(postfilter(&out, 0), Some((verdict::TERMINATING, vec![])));

    // The same, but node 0 was cordoned since: a failure no eviction resolves,
    // so the pod may preempt again (upstream PodEligibleToPreemptOthers), on node 1.
    b.nodes[0].unschedulable = true;
    let cordoned = b.build();
    let out = schedule(&cordoned.view(), &pods);
    assert_eq!(out.nominated[0], 1, "preempts again elsewhere");
    assert_eq!(&out.victims[row(&out.victim_offsets, 0)], &[3]);
    b.nodes[0].unschedulable = false;
    if let Some(pre) = pods.preemption.as_mut() {
        pre.nominated = &[-1, -1];
        pre.victims.terminating = &[0, 0, 0, 0];
    }

    // preemptionPolicy: Never.
    if let Some(pre) = pods.preemption.as_mut() {
        pre.allowed = &[0, 1];
    }
    let out = schedule(&nodes.view(), &pods);
    assert_eq!(out.nominated[0], -1);
    assert_eq!(out.nodes[1], 0);
    assert_eq!(postfilter(&out, 0), Some((verdict::NEVER, vec![])));

    // Disabled in the profile: no verdict at all.
    let profile = Profile {
        preemption: false,
        ..Profile::default()
    };
    let out = schedule_batch(
        &nodes.view(),
        &classes.view(),
        &pods,
        &no_metrics(),
        &profile,
        &ScheduleOptions::default(),
    )
    .unwrap();
    assert_eq!(postfilter(&out, 0), None);
}

#[test]
fn no_candidate_reports_each_nodes_dry_run_status() {
    // Upstream TestPostFilter "no candidate nodes found with mixed reason, 2
    // UnschedulableAndUnresolvable nodes and 2 nodes don't have enough CPU resource":
    // nodes 0 and 1 (4 cpu) each run a 1-cpu pod of priority 0 and 2 cpu of pods
    // that may not be evicted, nodes 2 and 3 are cordoned. A 3-cpu pod of priority
    // 10 fits nowhere, even with the 1-cpu pods gone.
    let mut b = NodeBuilder::default();
    for i in 0..4 {
        b.node(|n| {
            n.allocatable[CPU] = 4000;
            n.unschedulable = i >= 2;
            if i < 2 {
                n.requested[CPU] = 3000;
                n.pod_count = 2;
            }
        });
    }
    let nodes = b.build();
    let mut classes = OwnedClasses::default();
    classes.add(|_| {});
    let owned = OwnedPods::new(&[pod(3000, 1), pod(1500, 2)]);
    let mut pods = owned.view();
    let victim = |node| TestVictim {
        row: -1,
        node,
        priority: 0,
        request: vec![1000],
        ..TestVictim::default()
    };
    let owned_victims = OwnedVictims::new(&[victim(0), victim(1)], 4, vec![]);
    let no_ports = OwnedPorts::new(vec![]);
    pods.preemption = Some(crate::model::Preemption {
        priorities: &[10, 10],
        allowed: &[1, 1],
        nominated: &[-1, -1],
        victims: owned_victims.view(),
        reservations: crate::model::Reservations {
            nodes: &[],
            rows: &[],
            priorities: &[],
            requests: &[],
            ports: no_ports.view(),
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
    assert_eq!(out.nominated[0], -1);
    assert_eq!(
        postfilter(&out, 0),
        Some((verdict::NO_CANDIDATE, vec![(insufficient(CPU), 2), (NOT_HELPFUL, 2)]))
    );
    // The 1.5-cpu pod fits once the 1-cpu pod leaves: nominated.
    assert_eq!(postfilter(&out, 1), Some((verdict::NOMINATED, vec![])));

    // Asking more than a node's whole allocatable (upstream InsufficientResource.Unresolvable):
    // no eviction helps there.
    let big = OwnedPods::new(&[pod(5000, 1)]);
    let mut pods = big.view();
    pods.preemption = Some(crate::model::Preemption {
        priorities: &[10],
        allowed: &[1],
        nominated: &[-1],
        victims: owned_victims.view(),
        reservations: crate::model::Reservations {
            nodes: &[],
            rows: &[],
            priorities: &[],
            requests: &[],
            ports: no_ports.view(),
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
    assert_eq!(postfilter(&out, 0), Some((verdict::NO_CANDIDATE, vec![(NOT_HELPFUL, 4)])));
}

#[test]
fn nominated_node_is_tried_first() {
    // Node 0 is empty (LeastAllocated's favourite), node 1 has room for the
    // 500m pod, node 2 has not. Upstream's evaluateNominatedNode: a pod
    // nominated to a node that passes every filter goes there, no other node
    // scored; otherwise every node is evaluated as usual.
    let mut b = NodeBuilder::default();
    b.node(|_| {});
    b.node(|n| {
        n.requested[CPU] = 3000;
        n.nonzero_requested[0] = 3000;
        n.pod_count = 1;
    });
    b.node(|n| {
        n.requested[CPU] = 3900;
        n.nonzero_requested[0] = 3900;
        n.pod_count = 1;
    });
    let nodes = b.build();
    let mut classes = OwnedClasses::default();
    classes.add(|_| {});
    let owned = OwnedPods::new(&[pod(500, 1)]);
    let no_victims = OwnedVictims::new(&[], 4, vec![]);
    let held = [1000, 0, 0, 0];
    let held_ports = OwnedPorts::new(vec![vec![]]);
    let no_ports = OwnedPorts::new(vec![]);
    // (name, nominated node, a higher-priority reservation on node 1, explain,
    //  want node, want feasible, want unscored)
    let cases: [(&str, i64, bool, bool, i64, i64, bool); 5] = [
        ("no nomination", -1, false, false, 0, 2, false),
        ("nominated node fits: taken unscored", 1, false, false, 1, 1, true),
        ("explained: every node evaluated, nominated node taken", 1, false, true, 1, 2, false),
        ("nominated node full: every node evaluated", 2, false, false, 0, 2, false),
        ("nominated node held by a higher-priority nominee", 1, true, false, 0, 1, false),
    ];
    for (name, nominated, reserved, explain, want_node, want_feasible, want_unscored) in cases {
        let mut pods = owned.view();
        let nominated = [nominated];
        pods.preemption = Some(crate::model::Preemption {
            priorities: &[5],
            allowed: &[1],
            nominated: &nominated,
            victims: no_victims.view(),
            reservations: crate::model::Reservations {
                nodes: if reserved { &[1] } else { &[] },
                rows: if reserved { &[-1] } else { &[] },
                priorities: if reserved { &[10] } else { &[] },
                requests: if reserved { &held } else { &[] },
                ports: if reserved { held_ports.view() } else { no_ports.view() },
            },
        });
        let options = ScheduleOptions {
            explain: explain.then_some(0),
            ..ScheduleOptions::default()
        };
        let out = schedule_batch(&nodes.view(), &classes.view(), &pods, &no_metrics(), &Profile::default(), &options).unwrap();
        assert_eq!(
            (out.nodes[0], out.feasible[0]),
            (want_node, want_feasible),
            "{name}: (node, feasible)"
        );
        assert_eq!(out.scores[0].is_nan(), want_unscored, "{name}: unscored");
        assert_eq!(out.explanation.is_some(), explain, "{name}: explanation");
    }
}

#[test]
fn preemption_samples_candidates_from_a_seeded_offset() {
    // 300 full nodes, each with one evictable pod of priority 5; one node's pod
    // has priority 1 (the better candidate). Upstream's dry run starts at a
    // random offset and stops after num_candidates(300) = 100 candidates: a
    // better node beyond them is never seen.
    const N: usize = 300;
    let mut b = NodeBuilder::default();
    for _ in 0..N {
        b.node(|n| {
            n.requested[CPU] = 4000;
            n.pod_count = 1;
        });
    }
    let nodes = b.build();
    let mut classes = OwnedClasses::default();
    classes.add(|_| {});
    let owned = OwnedPods::new(&[pod(1000, 42)]);
    let seed = 7;
    let offset = (select::splitmix64(seed ^ select::splitmix64(42)) % N as u64) as usize;
    // (name, distance from the offset of the cheaper victim's node, want the nominated node at distance)
    let cases = [
        ("cheaper node inside the sample", 50, 50),
        ("cheaper node beyond the sample: the first candidate", 200, 0),
        ("cheaper node is the last of the sample", 99, 99),
        ("cheaper node just past the sample", 100, 0),
    ];
    for (name, cheaper_at, want_at) in cases {
        let cheaper = (offset + cheaper_at) % N;
        let victims: Vec<TestVictim> = (0..N)
            .map(|node| TestVictim {
                row: -1,
                node: node as i64,
                priority: if node == cheaper { 1 } else { 5 },
                request: vec![4000],
                ..TestVictim::default()
            })
            .collect();
        let owned_victims = OwnedVictims::new(&victims, 4, vec![]);
        let no_ports = OwnedPorts::new(vec![]);
        let mut pods = owned.view();
        pods.preemption = Some(crate::model::Preemption {
            priorities: &[10],
            allowed: &[1],
            nominated: &[-1],
            victims: owned_victims.view(),
            reservations: crate::model::Reservations {
                nodes: &[],
                rows: &[],
                priorities: &[],
                requests: &[],
                ports: no_ports.view(),
            },
        });
        let options = ScheduleOptions {
            seed,
            ..ScheduleOptions::default()
        };
        let out = schedule_batch(&nodes.view(), &classes.view(), &pods, &no_metrics(), &Profile::default(), &options).unwrap();
        assert_eq!(out.nominated[0], ((offset + want_at) % N) as i64, "{name}");
    }
}

#[test]
fn nominated_pods_hold_their_host_ports() {
    // Two empty nodes; a pod nominated to node 0 (priority 10) holds host port
    // 80 there. Upstream runs every filter with the nominated pods of equal or
    // higher priority added: NodePorts rejects node 0 for them, not for pods
    // of higher priority or without that port.
    let mut b = NodeBuilder::default();
    b.node(|_| {});
    b.node(|_| {});
    let nodes = b.build();
    let mut classes = OwnedClasses::default();
    classes.add(|_| {});
    let http = (PROTOCOL_TCP, 1, 80);
    let no_victims = OwnedVictims::new(&[], 4, vec![]);
    let held_ports = OwnedPorts::new(vec![vec![http]]);
    let cases = [
        ("lower priority, same port", 5, vec![http], 1),
        ("equal priority, same port", 10, vec![http], 1),
        ("higher priority, same port: nothing held", 20, vec![http], 0),
        ("lower priority, another port", 5, vec![(PROTOCOL_TCP, 1, 443)], 0),
    ];
    for (name, priority, ports, want) in cases {
        let owned = OwnedPods::new(&[TestPod { ports, ..pod(100, 3) }]);
        let mut pods = owned.view();
        let priorities = [priority];
        pods.preemption = Some(crate::model::Preemption {
            priorities: &priorities,
            allowed: &[0],
            nominated: &[-1],
            victims: no_victims.view(),
            reservations: crate::model::Reservations {
                nodes: &[0],
                rows: &[-1],
                priorities: &[10],
                requests: &[0, 0, 0, 0],
                ports: held_ports.view(),
            },
        });
        // Both nodes tie on score: the seed that puts the pod on node 0 when
        // nothing holds it, so node 1 shows the held port.
        let options = ScheduleOptions {
            seed: (0..64)
                .find(|&seed| select::tie_key(seed, 3, nodes.view().keys[0]) > select::tie_key(seed, 3, nodes.view().keys[1]))
                .expect("a seed preferring node 0"),
            ..ScheduleOptions::default()
        };
        let out = schedule_batch(&nodes.view(), &classes.view(), &pods, &no_metrics(), &Profile::default(), &options).unwrap();
        assert_eq!(out.nodes[0], want, "{name}");
    }
}
