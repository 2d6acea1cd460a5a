//! NodeUnschedulable: a cordoned node (`spec.unschedulable`) takes only pods
//! that tolerate the `node.kubernetes.io/unschedulable:NoSchedule` taint.

use super::taint_toleration::tolerates;
use super::{Reason, FEASIBLE};
use crate::model::{reason_code, Nodes, PluginId, Tolerations, EFFECT_NO_SCHEDULE};

pub const NODE_UNSCHEDULABLE: u32 = reason_code(PluginId::NodeUnschedulable, 0);

/// Its reasons by local index, with upstream's strings; the registry numbers them.
pub const REASONS: &[Reason] = &[Reason::unresolvable("node(s) were unschedulable")];

pub fn filter(nodes: &Nodes, node: usize, tolerations: &Tolerations, class: usize) -> u32 {
    if nodes.unschedulable[node] == 0 || tolerates(tolerations, class, nodes.unschedulable_key, nodes.empty_string, EFFECT_NO_SCHEDULE) {
        FEASIBLE
    } else {
        NODE_UNSCHEDULABLE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EFFECT_ALL, TOLERATION_EQUAL, TOLERATION_EXISTS};
    use crate::test_support::NodeBuilder;

    #[test]
    fn table() {
        const KEY: i32 = 7;
        struct Case {
            name: &'static str,
            unschedulable: bool,
            tolerations: Vec<(i32, u8, i32, u8)>,
            want: u32,
        }
        let cases = [
            Case {
                name: "schedulable node",
                unschedulable: false,
                tolerations: vec![],
                want: FEASIBLE,
            },
            Case {
                name: "cordoned node",
                unschedulable: true,
                tolerations: vec![],
                want: NODE_UNSCHEDULABLE,
            },
            Case {
                name: "cordoned, tolerated with Exists",
                unschedulable: true,
                tolerations: vec![(KEY, TOLERATION_EXISTS, 0, EFFECT_NO_SCHEDULE)],
                want: FEASIBLE,
            },
            Case {
                name: "cordoned, tolerated by empty key Exists",
                unschedulable: true,
                tolerations: vec![(-1, TOLERATION_EXISTS, 0, EFFECT_ALL)],
                want: FEASIBLE,
            },
            Case {
                name: "cordoned, toleration for another effect",
                unschedulable: true,
                tolerations: vec![(KEY, TOLERATION_EXISTS, 0, crate::model::EFFECT_NO_EXECUTE)],
                want: NODE_UNSCHEDULABLE,
            },
            Case {
                name: "cordoned, Equal with wrong value",
                unschedulable: true,
                tolerations: vec![(KEY, TOLERATION_EQUAL, 3, EFFECT_NO_SCHEDULE)],
                want: NODE_UNSCHEDULABLE,
            },
        ];
        for case in cases {
            let mut b = NodeBuilder {
                unschedulable_key: KEY,
                ..NodeBuilder::default()
            };
            b.node(|n| n.unschedulable = case.unschedulable);
            let owned = b.build();
            let nodes = owned.view();
            let tols = crate::test_support::OwnedTolerations::new(vec![case.tolerations.clone()]);
            let got = filter(&nodes, 0, &tols.view(), 0);
            assert_eq!(got, case.want, "{}: want {} got {}", case.name, case.want, got);
        }
    }
}
