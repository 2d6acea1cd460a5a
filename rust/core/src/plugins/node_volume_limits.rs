//! NodeVolumeLimits (upstream `CSILimits`): a node's CSINode lists, per CSI
//! driver, how many volumes it can attach (`allocatable.count`). A pod's
//! volumes not yet attached there (by the node's pods, bound or placed
//! earlier in the batch) must fit under each driver's limit. Volumes are
//! unique names (driver and volume handle; for an unbound claim, its class's
//! provisioner and the claim) interned by the caller. (VolumeAttachments and
//! in-tree volumes migrated to CSI are not counted.)

use super::{Reason, FEASIBLE};
use crate::model::{reason_code, row, PluginId, Volumes};

pub const MAX_VOLUME_COUNT: u32 = reason_code(PluginId::NodeVolumeLimits, 0);

/// Its reasons by local index, with upstream's strings; the registry numbers them.
pub const REASONS: &[Reason] = &[Reason::resolvable("node(s) exceed max volume count")];

/// The plugin's PreFilter state for one pod, with the (node, volume, driver)
/// attachments of placements earlier in the batch.
pub struct Filter {
    pod: usize,
    placed: Vec<(u32, i32, i32)>,
}

/// PreFilter: None (Skip) for a pod without attachable volumes, or where no node has limits.
pub fn prefilter(v: &Volumes, pod: usize, placed: &[(u32, i32, i32)]) -> Option<Filter> {
    (!row(v.attach_offsets, pod).is_empty() && !v.limit_drivers.is_empty()).then(|| Filter {
        pod,
        placed: placed.to_vec(),
    })
}

impl Filter {
    pub fn filter(&self, v: &Volumes, node: usize) -> u32 {
        let limits = row(v.limit_offsets, node);
        if limits.is_empty() {
            return FEASIBLE;
        }
        let placed = || {
            self.placed
                .iter()
                .filter(move |&&(n, _, _)| n as usize == node)
                .map(|&(_, vol, d)| (vol, d))
        };
        let attached_row = row(v.attached_offsets, node);
        let attached = &v.attached_volumes[attached_row.clone()];
        let attached_drivers = &v.attached_drivers[attached_row];
        let is_attached = |vol: i32| attached.contains(&vol) || placed().any(|(p, _)| p == vol);
        let mine = row(v.attach_offsets, self.pod);
        let (volumes, drivers) = (&v.attach_volumes[mine.clone()], &v.attach_drivers[mine]);
        for k in limits {
            let (driver, limit) = (v.limit_drivers[k], v.limit_counts[k]);
            let new = volumes
                .iter()
                .zip(drivers)
                .enumerate()
                .filter(|&(i, (&vol, &d))| d == driver && !is_attached(vol) && !volumes[..i].contains(&vol))
                .count() as i64;
            if new == 0 {
                continue;
            }
            let current = attached_drivers.iter().filter(|&&d| d == driver).count() as i64
                + placed().filter(|&(p, d)| d == driver && !attached.contains(&p)).count() as i64;
            if current + new > limit {
                return MAX_VOLUME_COUNT;
            }
        }
        FEASIBLE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{OwnedClasses, OwnedVolumes};

    const EBS: i32 = 1;
    const PD: i32 = 2;

    #[test]
    fn filter_table() {
        struct Case {
            name: &'static str,
            limits: Vec<(i32, i64)>,
            attached: Vec<(i32, i32)>,
            placed: Vec<(i32, i32)>,
            pod: Vec<(i32, i32)>,
            want: u32,
        }
        let cases = vec![
            Case {
                name: "under the limit",
                limits: vec![(EBS, 2)],
                attached: vec![(10, EBS)],
                placed: vec![],
                pod: vec![(11, EBS)],
                want: FEASIBLE,
            },
            Case {
                name: "over the limit",
                limits: vec![(EBS, 1)],
                attached: vec![(10, EBS)],
                placed: vec![],
                pod: vec![(11, EBS)],
                want: MAX_VOLUME_COUNT,
            },
            Case {
                name: "a volume already attached counts once",
                limits: vec![(EBS, 1)],
                attached: vec![(10, EBS)],
                placed: vec![],
                pod: vec![(10, EBS)],
                want: FEASIBLE,
            },
            Case {
                name: "another driver's limit does not apply",
                limits: vec![(PD, 1)],
                attached: vec![(10, PD)],
                placed: vec![],
                pod: vec![(11, EBS)],
                want: FEASIBLE,
            },
            Case {
                name: "placed earlier in the batch",
                limits: vec![(EBS, 2)],
                attached: vec![(10, EBS)],
                placed: vec![(12, EBS)],
                pod: vec![(11, EBS)],
                want: MAX_VOLUME_COUNT,
            },
            Case {
                name: "node without limits",
                limits: vec![],
                attached: vec![(10, EBS)],
                placed: vec![],
                pod: vec![(11, EBS), (12, EBS)],
                want: FEASIBLE,
            },
        ];
        for case in cases {
            let mut classes = OwnedClasses::default();
            let mut volumes = OwnedVolumes::new(&mut classes, &[], &[vec![]], &[], [-1; 4]);
            volumes.set_limits(&[case.limits.clone(), vec![(EBS, 1)]], &[case.attached, vec![]], &[case.pod]);
            let v = volumes.view();
            let placed: Vec<(u32, i32, i32)> = case.placed.iter().map(|&(vol, d)| (0, vol, d)).collect();
            let f = prefilter(&v, 0, &placed).expect("the pod has volumes and a node has limits");
            assert_eq!(f.filter(&v, 0), case.want, "{}", case.name);
        }
    }
}
