//! VolumeRestrictions: a PersistentVolumeClaim with the `ReadWriteOncePod`
//! access mode serves one pod. A pod whose such claim another pod uses —
//! bound, or placed or nominated earlier in the batch — fits no node
//! (upstream's `conflictingPVCRefCount`); evicting the pods that use it
//! resolves that, so preemption's dry run counts the claim's users without
//! its victims. (Upstream's disk conflicts of in-tree inline volumes — GCE
//! PD, EBS, iSCSI, RBD — are not checked.)

use super::{Reason, FEASIBLE};
use crate::model::{reason_code, row, PluginId, Volumes};

pub const RWOP_CONFLICT: u32 = reason_code(PluginId::VolumeRestrictions, 0);

/// Its reasons by local index, with upstream's strings; the registry numbers them.
pub const REASONS: &[Reason] = &[Reason::resolvable(
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod",
)];

/// The plugin's PreFilter state for one pod: whether one of its
/// ReadWriteOncePod claims is in use (the verdict is the same on every node).
pub struct Filter {
    conflict: bool,
}

/// PreFilter: None (Skip) for a pod without ReadWriteOncePod claims. A claim
/// is in use when a pod of the batch took it (`taken`, by claim) or one of
/// its bound users (pod table rows) is not `removed`.
pub fn prefilter(v: &Volumes, pod: usize, taken: &[bool], removed: &dyn Fn(u32) -> bool) -> Option<Filter> {
    let claims = &v.rwop_claims[row(v.rwop_offsets, pod)];
    if claims.is_empty() {
        return None;
    }
    let conflict = claims.iter().any(|&c| {
        let c = c as usize;
        taken[c] || v.rwop_users[row(v.rwop_user_offsets, c)].iter().any(|&r| !removed(r as u32))
    });
    Some(Filter { conflict })
}

impl Filter {
    pub fn filter(&self) -> u32 {
        if self.conflict {
            RWOP_CONFLICT
        } else {
            FEASIBLE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{OwnedClasses, OwnedVolumes};

    #[test]
    fn filter_table() {
        struct Case {
            name: &'static str,
            /// The pod's claims; per claim its bound users (rows).
            claims: Vec<i64>,
            users: Vec<Vec<i64>>,
            taken: Vec<bool>,
            removed: Vec<u32>,
            want: Option<u32>,
        }
        let cases = vec![
            Case {
                name: "no ReadWriteOncePod claim: Skip",
                claims: vec![],
                users: vec![vec![3]],
                taken: vec![false],
                removed: vec![],
                want: None,
            },
            Case {
                name: "claim unused",
                claims: vec![0],
                users: vec![vec![]],
                taken: vec![false],
                removed: vec![],
                want: Some(FEASIBLE),
            },
            Case {
                name: "claim used by a bound pod",
                claims: vec![0],
                users: vec![vec![3]],
                taken: vec![false],
                removed: vec![],
                want: Some(RWOP_CONFLICT),
            },
            Case {
                name: "claim taken earlier in the batch",
                claims: vec![0],
                users: vec![vec![]],
                taken: vec![true],
                removed: vec![],
                want: Some(RWOP_CONFLICT),
            },
            Case {
                name: "its user evicted in a dry run",
                claims: vec![0],
                users: vec![vec![3]],
                taken: vec![false],
                removed: vec![3],
                want: Some(FEASIBLE),
            },
            Case {
                name: "one of two users evicted",
                claims: vec![1, 0],
                users: vec![vec![], vec![3, 4]],
                taken: vec![false, false],
                removed: vec![3],
                want: Some(RWOP_CONFLICT),
            },
        ];
        for case in cases {
            let mut classes = OwnedClasses::default();
            let mut volumes = OwnedVolumes::new(&mut classes, &[], &[vec![]], &[], [-1; 4]);
            volumes.set_rwop(&[case.claims], &case.users);
            let v = volumes.view();
            let removed = |r: u32| case.removed.contains(&r);
            let got = prefilter(&v, 0, &case.taken, &removed).map(|f| f.filter());
            assert_eq!(got, case.want, "{}", case.name);
        }
    }
}
