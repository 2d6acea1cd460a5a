//! Volumes across a batch: one volume per claim, one pod per ReadWriteOncePod claim.

use super::*;

/// Claims in one batch: two pods whose claims could each take either local
/// volume get one each, on that volume's node; the third finds none left
/// and reports it; a pod without claims beside them is placed as ever.
#[test]
fn batch_never_gives_one_volume_twice() {
    use crate::plugins::volume_binding::VOLUME_BIND_CONFLICT;
    use crate::test_support::{wffc, OwnedVolumes, Req, TablePod};
    let b = zoned_nodes(&[None, None, None]);
    let nodes = b.build();
    let mut classes = OwnedClasses::default();
    classes.add(|_| {});
    let local = |h: i32| Some(vec![vec![Req::In(HOSTNAME, vec![h])]]);
    let claims = vec![vec![wffc(&[0, 1])], vec![wffc(&[0, 1])], vec![wffc(&[0, 1])], vec![]];
    let volumes = OwnedVolumes::new(&mut classes, &[local(100), local(101)], &claims, &[], [-1; 4]);
    let mut table = OwnedPodTable::with_pods(&[], &vec![TablePod::new(&[], 0); 4]);
    table.flatten();
    let owned = OwnedPods::new(&[pod(100, 1), pod(100, 2), pod(100, 3), pod(100, 4)]);
    let mut pods = owned.view();
    pods.table = Some(table.view());
    pods.volumes = Some(volumes.view());
    let out = schedule_batch(
        &nodes.view(),
        &classes.view(),
        &pods,
        &no_metrics(),
        &Profile::default(),
        &ScheduleOptions::default(),
    )
    .expect("valid");
    let mut placed: Vec<(i64, i64)> = (0..2).map(|p| (out.nodes[p], out.volumes[p])).collect();
    placed.sort();
    assert_eq!(placed, vec![(0, 0), (1, 1)], "each claim's volume on its node");
    assert_eq!(out.nodes[2], UNSCHEDULABLE);
    let reasons: Vec<(u32, i64)> = row(&out.reason_offsets, 2)
        .map(|i| (out.reason_codes[i], out.reason_counts[i]))
        .collect();
    assert_eq!(reasons, vec![(VOLUME_BIND_CONFLICT, 3)]);
    assert_ne!(out.nodes[3], UNSCHEDULABLE);
    assert_eq!(out.volume_offsets, vec![0, 1, 2, 2, 2]);
}

/// ReadWriteOncePod: a claim in use by a bound pod rejects the pod on every
/// node; of two pending pods sharing a free claim only the first is placed;
/// a higher-priority pod evicts the lower-priority pod that holds its claim
/// (on that pod's node), as upstream's RemovePod in the dry run.
#[test]
fn read_write_once_pod_claims_serve_one_pod() {
    use crate::plugins::volume_restrictions::RWOP_CONFLICT;
    use crate::test_support::{OwnedVolumes, TablePod};
    let b = zoned_nodes(&[None, None]);
    let nodes = b.build();
    let mut classes = OwnedClasses::default();
    classes.add(|_| {});
    // Row 0 is a bound pod on node 1 that uses claim 0; claim 1 is free.
    let mut volumes = OwnedVolumes::new(&mut classes, &[], &[vec![], vec![], vec![]], &[], [-1; 4]);
    volumes.set_rwop(&[vec![0], vec![1], vec![1]], &[vec![0], vec![]]);
    let mut table = OwnedPodTable::with_pods(&[(1, TablePod::new(&[], 0))], &vec![TablePod::new(&[], 0); 3]);
    table.flatten();
    let owned = OwnedPods::new(&[pod(100, 1), pod(100, 2), pod(100, 3)]);
    let mut run = |preemption: Option<crate::model::Preemption>| {
        let mut pods = owned.view();
        pods.table = Some(table.view());
        pods.volumes = Some(volumes.view());
        pods.preemption = preemption;
        schedule_batch(
            &nodes.view(),
            &classes.view(),
            &pods,
            &no_metrics(),
            &Profile::default(),
            &ScheduleOptions::default(),
        )
        .expect("valid")
    };
    let out = run(None);
    assert_eq!(out.nodes[0], UNSCHEDULABLE);
    let reasons: Vec<(u32, i64)> = row(&out.reason_offsets, 0)
        .map(|i| (out.reason_codes[i], out.reason_counts[i]))
        .collect();
    assert_eq!(reasons, vec![(RWOP_CONFLICT, 2)]);
    assert_ne!(out.nodes[1], UNSCHEDULABLE, "the first pod of a free claim is placed");
    assert_eq!(out.nodes[2], UNSCHEDULABLE, "the second finds the claim in use");

    let holder = TestVictim {
        row: 0,
        node: 1,
        priority: 0,
        request: vec![100],
        ..TestVictim::default()
    };
    let owned_victims = OwnedVictims::new(&[holder], 4, vec![]);
    let no_ports = OwnedPorts::new(vec![]);
    let out = run(Some(crate::model::Preemption {
        priorities: &[10, 0, 0],
        allowed: &[1, 1, 1],
        nominated: &[-1, -1, -1],
        victims: owned_victims.view(),
        reservations: crate::model::Reservations {
            nodes: &[],
            rows: &[],
            priorities: &[],
            requests: &[],
            ports: no_ports.view(),
        },
    }));
    assert_eq!(out.nominated[0], 1, "nominated where the claim's holder runs");
    assert_eq!(&out.victims[row(&out.victim_offsets, 0)], &[0]);
}
