//! VolumeBinding: a pod's PersistentVolumeClaims on a node (upstream
//! `volumebinding`, `FindPodVolumes`). Bound claims need their volume's node
//! affinity to admit the node; each WaitForFirstConsumer claim takes the
//! smallest available volume whose node affinity admits the node, or is
//! provisioned where its class can provision and its `allowedTopologies`
//! admit the node. Volumes taken by placements earlier in the batch (or by
//! the pod's own earlier claims) are not available.
//!
//! Missing claims and unbound Immediate claims are PreFilter rejections the
//! caller reports with the claim's name. Upstream scores only with the alpha
//! `StorageCapacityScoring` gate (off by default): no Score here.

use super::node_affinity::term_matches;
use super::Reason;
use crate::model::{reason_code, row, Nodes, PluginId, Selectors, Volumes, MISSING_PV, NO_SELECTED_NODE, UNBOUND};

/// A bound claim's volume does not admit the node (upstream `ErrReasonNodeConflict`).
pub const VOLUME_NODE_CONFLICT: u32 = reason_code(PluginId::VolumeBinding, 0);
/// An unbound claim finds no volume and cannot be provisioned there (`ErrReasonBindConflict`).
pub const VOLUME_BIND_CONFLICT: u32 = reason_code(PluginId::VolumeBinding, 1);
/// A bound claim's volume does not exist (`ErrReasonPVNotExist`).
pub const VOLUME_PV_MISSING: u32 = reason_code(PluginId::VolumeBinding, 2);

/// Its reasons by local index, with upstream's strings; the registry numbers them.
pub const REASONS: &[Reason] = &[
    Reason::unresolvable("node(s) didn't match PersistentVolume's node affinity"),
    Reason::unresolvable("node(s) didn't find available persistent volumes to bind"),
    Reason::unresolvable("node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"),
];

/// `find`'s entry for a claim that is to be provisioned.
pub const PROVISION: i64 = -1;

/// The plugin's PreFilter state for one pod: its claims and the candidate
/// volumes that earlier placements of the batch took.
pub struct Filter {
    pod: usize,
    taken: Vec<i64>,
}

/// Whether a volume's node affinity admits the node.
#[inline]
fn pv_admits(v: &Volumes, sel: &Selectors, nodes: &Nodes, pv: usize, node: usize) -> bool {
    v.pv_has_affinity[pv] == 0
        || v.pv_terms[row(v.pv_term_offsets, pv)]
            .iter()
            .any(|&t| term_matches(sel, t as usize, nodes, node))
}

/// PreFilter: None (Skip) for a pod without claims.
pub fn prefilter(v: &Volumes, pod: usize, taken: &[bool]) -> Option<Filter> {
    let claims = row(v.claim_offsets, pod);
    if claims.is_empty() {
        return None;
    }
    let taken = claims
        .flat_map(|c| v.candidates[row(v.candidate_offsets, c)].iter().copied())
        .filter(|&pv| taken[pv as usize])
        .collect();
    Some(Filter { pod, taken })
}

/// Upstream's conflict reasons on one node, in its order.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    pub node_conflict: bool,
    pub bind_conflict: bool,
    pub pv_missing: bool,
}

impl Verdict {
    pub fn feasible(&self) -> bool {
        *self == Verdict::default()
    }
}

impl Filter {
    /// The pod's claims on `node`: the verdict, and in `chosen` per claim
    /// (in `Volumes` order) the volume it binds, or `PROVISION`.
    pub fn find(&self, v: &Volumes, sel: &Selectors, nodes: &Nodes, node: usize, chosen: &mut Vec<i64>) -> Verdict {
        let claims = row(v.claim_offsets, self.pod);
        let mut verdict = Verdict::default();
        chosen.clear();
        chosen.extend(claims.clone().map(|c| v.claim_pvs[c]));
        // Bound claims, until the first that fails (upstream checkBoundClaims).
        for c in claims.clone() {
            match v.claim_pvs[c] {
                UNBOUND => {}
                MISSING_PV => {
                    verdict.pv_missing = true;
                    break;
                }
                pv if !pv_admits(v, sel, nodes, pv as usize, node) => {
                    verdict.node_conflict = true;
                    break;
                }
                _ => {}
            }
        }
        // A claim selected for another node fails the node outright.
        if claims
            .clone()
            .any(|c| v.claim_pvs[c] == UNBOUND && v.claim_selected_nodes[c] != NO_SELECTED_NODE && v.claim_selected_nodes[c] != node as i64)
        {
            verdict.bind_conflict = true;
            return verdict;
        }
        let first = claims.start;
        for c in claims.clone() {
            if v.claim_pvs[c] != UNBOUND {
                continue;
            }
            chosen[c - first] = PROVISION;
            if v.claim_selected_nodes[c] != NO_SELECTED_NODE {
                continue;
            }
            let found = v.candidates[row(v.candidate_offsets, c)]
                .iter()
                .copied()
                .find(|&pv| !self.taken.contains(&pv) && !chosen.contains(&pv) && pv_admits(v, sel, nodes, pv as usize, node));
            if let Some(pv) = found {
                chosen[c - first] = pv;
            }
        }
        // The claims left (selected ones first, in order) are provisioned.
        for c in claims {
            if chosen[c - first] != PROVISION {
                continue;
            }
            let topology = &v.topology_terms[row(v.topology_offsets, c)];
            let admits = topology.is_empty() || topology.iter().any(|&t| term_matches(sel, t as usize, nodes, node));
            if v.provisionable[c] == 0 || !admits {
                verdict.bind_conflict = true;
                break;
            }
        }
        verdict
    }

    /// Filter: reports each of upstream's reasons that holds; whether the node passes.
    pub fn filter(&self, v: &Volumes, sel: &Selectors, nodes: &Nodes, node: usize, report: &mut impl FnMut(u32)) -> bool {
        let mut chosen = Vec::new();
        let verdict = self.find(v, sel, nodes, node, &mut chosen);
        for (holds, code) in [
            (verdict.node_conflict, VOLUME_NODE_CONFLICT),
            (verdict.bind_conflict, VOLUME_BIND_CONFLICT),
            (verdict.pv_missing, VOLUME_PV_MISSING),
        ] {
            if holds {
                report(code);
            }
        }
        verdict.feasible()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{bound, wffc, zoned_nodes, OwnedClasses, OwnedVolumes, Req, TestClaim, HOSTNAME, ZONE};

    const A: i32 = 1;
    const B: i32 = 2;

    fn on_host(h: i32) -> Option<Vec<Vec<Req>>> {
        Some(vec![vec![Req::In(HOSTNAME, vec![h])]])
    }

    #[test]
    fn filter_table() {
        struct Case {
            name: &'static str,
            claims: Vec<TestClaim>,
            taken: Vec<i64>,
            /// Per node (zone A, zone B): reported reasons, and the volumes chosen where it passes.
            want: [(Vec<u32>, Vec<i64>); 2],
        }
        let provisioned = |topology: Vec<Vec<Req>>| TestClaim {
            provisionable: true,
            topology,
            ..wffc(&[])
        };
        let cases = vec![
            Case {
                name: "bound claim, volume pinned to node 0",
                claims: vec![bound(0)],
                taken: vec![],
                want: [(vec![], vec![0]), (vec![VOLUME_NODE_CONFLICT], vec![])],
            },
            Case {
                name: "bound claim, volume without node affinity",
                claims: vec![bound(2)],
                taken: vec![],
                want: [(vec![], vec![2]), (vec![], vec![2])],
            },
            Case {
                name: "bound claim, volume missing",
                claims: vec![bound(MISSING_PV)],
                taken: vec![],
                want: [(vec![VOLUME_PV_MISSING], vec![]), (vec![VOLUME_PV_MISSING], vec![])],
            },
            Case {
                name: "unbound claim takes the local volume of each node",
                claims: vec![wffc(&[0, 1])],
                taken: vec![],
                want: [(vec![], vec![0]), (vec![], vec![1])],
            },
            Case {
                name: "unbound claim, only node 1 has a volume",
                claims: vec![wffc(&[1])],
                taken: vec![],
                want: [(vec![VOLUME_BIND_CONFLICT], vec![]), (vec![], vec![1])],
            },
            Case {
                name: "smallest fit first: the node-free volume after the local one",
                claims: vec![wffc(&[0, 2])],
                taken: vec![],
                want: [(vec![], vec![0]), (vec![], vec![2])],
            },
            Case {
                name: "two claims never share a volume",
                claims: vec![wffc(&[0]), wffc(&[0])],
                taken: vec![],
                want: [(vec![VOLUME_BIND_CONFLICT], vec![]), (vec![VOLUME_BIND_CONFLICT], vec![])],
            },
            Case {
                name: "a volume taken earlier in the batch is not available",
                claims: vec![wffc(&[0, 2])],
                taken: vec![0],
                want: [(vec![], vec![2]), (vec![], vec![2])],
            },
            Case {
                name: "provisioning where allowedTopologies admit the node",
                claims: vec![provisioned(vec![vec![Req::In(ZONE, vec![A])]])],
                taken: vec![],
                want: [(vec![], vec![PROVISION]), (vec![VOLUME_BIND_CONFLICT], vec![])],
            },
            Case {
                name: "provisioning without allowedTopologies: every node",
                claims: vec![provisioned(vec![])],
                taken: vec![],
                want: [(vec![], vec![PROVISION]), (vec![], vec![PROVISION])],
            },
            Case {
                name: "no volume and no provisioner",
                claims: vec![wffc(&[])],
                taken: vec![],
                want: [(vec![VOLUME_BIND_CONFLICT], vec![]), (vec![VOLUME_BIND_CONFLICT], vec![])],
            },
            Case {
                name: "claim selected for node 1",
                claims: vec![TestClaim {
                    selected_node: 1,
                    ..provisioned(vec![])
                }],
                taken: vec![],
                want: [(vec![VOLUME_BIND_CONFLICT], vec![]), (vec![], vec![PROVISION])],
            },
            Case {
                name: "bound and unbound claims both conflict",
                claims: vec![bound(0), wffc(&[])],
                taken: vec![],
                want: [
                    (vec![VOLUME_BIND_CONFLICT], vec![]),
                    (vec![VOLUME_NODE_CONFLICT, VOLUME_BIND_CONFLICT], vec![]),
                ],
            },
        ];
        let nodes = zoned_nodes(&[Some(A), Some(B)]).build();
        let nodes = nodes.view();
        for case in cases {
            let mut classes = OwnedClasses::default();
            classes.add(|_| {});
            let pvs = [on_host(100), on_host(101), None];
            let volumes = OwnedVolumes::new(&mut classes, &pvs, &[case.claims], &[], [-1; 4]);
            let v = volumes.view();
            let classes = classes.view();
            let mut taken = vec![false; 3];
            case.taken.iter().for_each(|&pv| taken[pv as usize] = true);
            let f = prefilter(&v, 0, &taken).expect("the pod has claims");
            for (node, (want_reasons, want_chosen)) in case.want.iter().enumerate() {
                let mut got = Vec::new();
                let passes = f.filter(&v, &classes.selectors, &nodes, node, &mut |c| got.push(c));
                assert_eq!(&got, want_reasons, "{}: node {node} reasons", case.name);
                assert_eq!(passes, want_reasons.is_empty(), "{}: node {node}", case.name);
                if passes {
                    let mut chosen = Vec::new();
                    f.find(&v, &classes.selectors, &nodes, node, &mut chosen);
                    assert_eq!(&chosen, want_chosen, "{}: node {node} volumes", case.name);
                }
            }
        }
    }

    #[test]
    fn a_pod_without_claims_is_skipped() {
        let mut classes = OwnedClasses::default();
        let volumes = OwnedVolumes::new(&mut classes, &[None], &[vec![], vec![wffc(&[0])]], &[], [-1; 4]);
        assert!(prefilter(&volumes.view(), 0, &[false]).is_none());
        assert!(prefilter(&volumes.view(), 1, &[false]).is_some());
    }
}
