//! TaintToleration: NoSchedule and NoExecute taints filter, PreferNoSchedule
//! taints score (fewer untolerated is better, normalized in reverse).

use super::{Reason, FEASIBLE};
use crate::model::{
    reason_code, row, Nodes, PluginId, Tolerations, EFFECT_ALL, EFFECT_NO_EXECUTE, EFFECT_NO_SCHEDULE, EFFECT_PREFER_NO_SCHEDULE,
    TOLERATION_EQUAL, TOLERATION_EXISTS,
};

pub const TAINT_TOLERATION: u32 = reason_code(PluginId::TaintToleration, 0);

/// Its reasons by local index, with upstream's strings; the registry numbers them.
pub const REASONS: &[Reason] = &[Reason::unresolvable("node(s) had untolerated taint(s)")];

/// Upstream `Toleration.ToleratesTaint` for one toleration.
#[inline]
fn toleration_matches(t: &Tolerations, i: usize, key: i32, value: i32, effect: u8) -> bool {
    if t.effects[i] != EFFECT_ALL && t.effects[i] != effect {
        return false;
    }
    if t.keys[i] >= 0 && t.keys[i] != key {
        return false;
    }
    match t.operators[i] {
        TOLERATION_EQUAL => t.values[i] == value,
        TOLERATION_EXISTS => true,
        _ => false,
    }
}

/// Whether any toleration of `class` tolerates the taint.
#[inline]
pub fn tolerates(t: &Tolerations, class: usize, key: i32, value: i32, effect: u8) -> bool {
    row(t.offsets, class).any(|i| toleration_matches(t, i, key, value, effect))
}

pub fn filter(nodes: &Nodes, node: usize, t: &Tolerations, class: usize) -> u32 {
    let taints = &nodes.taints;
    for i in row(taints.offsets, node) {
        let effect = taints.effects[i];
        if (effect == EFFECT_NO_SCHEDULE || effect == EFFECT_NO_EXECUTE) && !tolerates(t, class, taints.keys[i], taints.values[i], effect) {
            return TAINT_TOLERATION;
        }
    }
    FEASIBLE
}

/// Raw score: the number of PreferNoSchedule taints not tolerated by the
/// class's tolerations whose effect is empty or PreferNoSchedule.
pub fn score(nodes: &Nodes, node: usize, t: &Tolerations, class: usize) -> i64 {
    let taints = &nodes.taints;
    let mut count = 0;
    for i in row(taints.offsets, node) {
        if taints.effects[i] != EFFECT_PREFER_NO_SCHEDULE {
            continue;
        }
        let tolerated = row(t.offsets, class).any(|j| {
            (t.effects[j] == EFFECT_ALL || t.effects[j] == EFFECT_PREFER_NO_SCHEDULE)
                && toleration_matches(t, j, taints.keys[i], taints.values[i], EFFECT_PREFER_NO_SCHEDULE)
        });
        if !tolerated {
            count += 1;
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{NodeBuilder, OwnedTolerations};

    const K1: i32 = 11;
    const K2: i32 = 12;
    const V1: i32 = 21;
    const V2: i32 = 22;

    #[test]
    fn filter_table() {
        struct Case {
            name: &'static str,
            taints: Vec<(i32, i32, u8)>,
            tolerations: Vec<(i32, u8, i32, u8)>,
            want: u32,
        }
        let cases = vec![
            Case {
                name: "no taints",
                taints: vec![],
                tolerations: vec![],
                want: FEASIBLE,
            },
            Case {
                name: "NoSchedule untolerated",
                taints: vec![(K1, V1, EFFECT_NO_SCHEDULE)],
                tolerations: vec![],
                want: TAINT_TOLERATION,
            },
            Case {
                name: "NoExecute untolerated",
                taints: vec![(K1, V1, EFFECT_NO_EXECUTE)],
                tolerations: vec![],
                want: TAINT_TOLERATION,
            },
            Case {
                name: "PreferNoSchedule never filters",
                taints: vec![(K1, V1, EFFECT_PREFER_NO_SCHEDULE)],
                tolerations: vec![],
                want: FEASIBLE,
            },
            Case {
                name: "Equal with matching value",
                taints: vec![(K1, V1, EFFECT_NO_SCHEDULE)],
                tolerations: vec![(K1, TOLERATION_EQUAL, V1, EFFECT_NO_SCHEDULE)],
                want: FEASIBLE,
            },
            Case {
                name: "Equal with other value",
                taints: vec![(K1, V1, EFFECT_NO_SCHEDULE)],
                tolerations: vec![(K1, TOLERATION_EQUAL, V2, EFFECT_NO_SCHEDULE)],
                want: TAINT_TOLERATION,
            },
            Case {
                name: "Exists on key, empty effect tolerates all effects",
                taints: vec![(K1, V1, EFFECT_NO_EXECUTE)],
                tolerations: vec![(K1, TOLERATION_EXISTS, 0, EFFECT_ALL)],
                want: FEASIBLE,
            },
            Case {
                name: "empty key with Exists tolerates everything",
                taints: vec![(K1, V1, EFFECT_NO_SCHEDULE), (K2, V2, EFFECT_NO_EXECUTE)],
                tolerations: vec![(-1, TOLERATION_EXISTS, 0, EFFECT_ALL)],
                want: FEASIBLE,
            },
            Case {
                name: "effect mismatch",
                taints: vec![(K1, V1, EFFECT_NO_EXECUTE)],
                tolerations: vec![(K1, TOLERATION_EXISTS, 0, EFFECT_NO_SCHEDULE)],
                want: TAINT_TOLERATION,
            },
            Case {
                name: "one of two taints untolerated",
                taints: vec![(K1, V1, EFFECT_NO_SCHEDULE), (K2, V2, EFFECT_NO_SCHEDULE)],
                tolerations: vec![(K1, TOLERATION_EXISTS, 0, EFFECT_ALL)],
                want: TAINT_TOLERATION,
            },
        ];
        for case in cases {
            let mut b = NodeBuilder::default();
            b.node(|n| n.taints = case.taints.clone());
            let owned = b.build();
            let tols = OwnedTolerations::new(vec![case.tolerations.clone()]);
            let got = filter(&owned.view(), 0, &tols.view(), 0);
            assert_eq!(got, case.want, "{}: want {} got {}", case.name, case.want, got);
        }
    }

    #[test]
    fn score_table() {
        struct Case {
            name: &'static str,
            taints: Vec<(i32, i32, u8)>,
            tolerations: Vec<(i32, u8, i32, u8)>,
            want: i64,
        }
        let cases = vec![
            Case {
                name: "no taints",
                taints: vec![],
                tolerations: vec![],
                want: 0,
            },
            Case {
                name: "two untolerated PreferNoSchedule",
                taints: vec![(K1, V1, EFFECT_PREFER_NO_SCHEDULE), (K2, V2, EFFECT_PREFER_NO_SCHEDULE)],
                tolerations: vec![],
                want: 2,
            },
            Case {
                name: "one tolerated",
                taints: vec![(K1, V1, EFFECT_PREFER_NO_SCHEDULE), (K2, V2, EFFECT_PREFER_NO_SCHEDULE)],
                tolerations: vec![(K1, TOLERATION_EQUAL, V1, EFFECT_PREFER_NO_SCHEDULE)],
                want: 1,
            },
            Case {
                name: "NoSchedule toleration does not count for PreferNoSchedule",
                taints: vec![(K1, V1, EFFECT_PREFER_NO_SCHEDULE)],
                tolerations: vec![(K1, TOLERATION_EXISTS, 0, EFFECT_NO_SCHEDULE)],
                want: 1,
            },
            Case {
                name: "NoSchedule taints are not scored",
                taints: vec![(K1, V1, EFFECT_NO_SCHEDULE)],
                tolerations: vec![],
                want: 0,
            },
        ];
        for case in cases {
            let mut b = NodeBuilder::default();
            b.node(|n| n.taints = case.taints.clone());
            let owned = b.build();
            let tols = OwnedTolerations::new(vec![case.tolerations.clone()]);
            let got = score(&owned.view(), 0, &tols.view(), 0);
            assert_eq!(got, case.want, "{}: want {} got {}", case.name, case.want, got);
        }
    }
}
