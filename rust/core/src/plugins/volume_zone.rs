//! VolumeZone: a pod's bound PersistentVolumes carry zone and region labels
//! (`topology.kubernetes.io/zone`, `.../region` and their beta
//! `failure-domain.beta.kubernetes.io` forms, values joined by `__`); a node
//! with any of those labels must carry each volume's key (or, for a beta
//! key, the GA one) with one of its values. A node with none of them passes.

use super::{Reason, FEASIBLE};
use crate::model::{reason_code, row, Nodes, PluginId, Volumes};

pub const VOLUME_ZONE_CONFLICT: u32 = reason_code(PluginId::VolumeZone, 0);

/// Its reasons by local index, with upstream's strings; the registry numbers them.
pub const REASONS: &[Reason] = &[Reason::unresolvable("node(s) had no available volume zone")];

/// The plugin's PreFilter state for one pod.
pub struct Filter {
    pod: usize,
}

/// PreFilter: None (Skip) for a pod whose bound volumes carry no zone labels.
pub fn prefilter(v: &Volumes, pod: usize) -> Option<Filter> {
    (!row(v.zone_offsets, pod).is_empty()).then_some(Filter { pod })
}

impl Filter {
    pub fn filter(&self, v: &Volumes, nodes: &Nodes, node: usize) -> u32 {
        if !v.zone_label_keys.iter().any(|&k| nodes.labels.find(node, k).is_some()) {
            return FEASIBLE;
        }
        for c in row(v.zone_offsets, self.pod) {
            let label = nodes
                .labels
                .find(node, v.zone_keys[c])
                .or_else(|| nodes.labels.find(node, v.zone_alt_keys[c]));
            let allowed = &v.zone_values[row(v.zone_value_offsets, c)];
            if !label.is_some_and(|i| allowed.contains(&nodes.labels.values[i])) {
                return VOLUME_ZONE_CONFLICT;
            }
        }
        FEASIBLE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{NodeBuilder, OwnedClasses, OwnedVolumes, TestZone};

    const BETA_ZONE: i32 = 20;
    const BETA_REGION: i32 = 21;
    const ZONE: i32 = 22;
    const REGION: i32 = 23;
    const KEYS: [i32; 4] = [BETA_ZONE, BETA_REGION, ZONE, REGION];
    const A: i32 = 1;
    const B: i32 = 2;
    const R: i32 = 3;

    #[test]
    fn filter_table() {
        struct Case {
            name: &'static str,
            node_labels: Vec<(i32, i32)>,
            zones: Vec<TestZone>,
            want: u32,
        }
        let cases = vec![
            Case {
                name: "volume zone matches",
                node_labels: vec![(ZONE, A)],
                zones: vec![(ZONE, ZONE, vec![A])],
                want: FEASIBLE,
            },
            Case {
                name: "volume zone differs",
                node_labels: vec![(ZONE, B)],
                zones: vec![(ZONE, ZONE, vec![A])],
                want: VOLUME_ZONE_CONFLICT,
            },
            Case {
                name: "one of several zones (a__b)",
                node_labels: vec![(ZONE, B)],
                zones: vec![(ZONE, ZONE, vec![A, B])],
                want: FEASIBLE,
            },
            Case {
                name: "beta volume label, GA node label",
                node_labels: vec![(ZONE, A)],
                zones: vec![(BETA_ZONE, ZONE, vec![A])],
                want: FEASIBLE,
            },
            Case {
                name: "node without any topology label",
                node_labels: vec![(99, A)],
                zones: vec![(ZONE, ZONE, vec![A])],
                want: FEASIBLE,
            },
            Case {
                name: "node with a region only lacks the volume's zone",
                node_labels: vec![(REGION, R)],
                zones: vec![(ZONE, ZONE, vec![A])],
                want: VOLUME_ZONE_CONFLICT,
            },
            Case {
                name: "zone and region both checked",
                node_labels: vec![(ZONE, A), (REGION, R)],
                zones: vec![(ZONE, ZONE, vec![A]), (BETA_REGION, REGION, vec![B])],
                want: VOLUME_ZONE_CONFLICT,
            },
        ];
        for case in cases {
            let mut b = NodeBuilder::default();
            b.node(|n| n.labels = case.node_labels.iter().map(|&(k, v)| (k, v, None)).collect());
            let nodes = b.build();
            let mut classes = OwnedClasses::default();
            let volumes = OwnedVolumes::new(&mut classes, &[], &[vec![]], &[case.zones], KEYS);
            let v = volumes.view();
            let f = prefilter(&v, 0).expect("the pod has zone constraints");
            assert_eq!(f.filter(&v, &nodes.view(), 0), case.want, "{}", case.name);
        }
    }
}
