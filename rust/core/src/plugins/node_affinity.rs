//! NodeAffinity: `nodeSelector` and required node affinity filter (terms are
//! ORed, a term's requirements ANDed, an empty term matches nothing); the
//! weights of matching preferred terms score (normalized over feasible nodes).
//! The profile's `addedAffinity` required terms filter every pod first, with
//! their own reason; its preferred terms are merged into each pod's by the caller.
//! The PreFilter restriction to `matchFields` node names is applied by the
//! batch loop from the class's prefilter node list.

use super::{Reason, FEASIBLE};
use crate::model::{reason_code, row, Classes, Nodes, PluginId, Selectors, OP_DOES_NOT_EXIST, OP_EXISTS, OP_GT, OP_IN, OP_LT, OP_NOT_IN};

pub const NODE_AFFINITY: u32 = reason_code(PluginId::NodeAffinity, 0);
/// Nodes left out by the PreFilter (matchFields on metadata.name).
pub const NODE_AFFINITY_PREFILTER: u32 = reason_code(PluginId::NodeAffinity, 1);
/// Nodes the profile's `addedAffinity` (NodeAffinity args) leaves out.
pub const NODE_AFFINITY_ENFORCED: u32 = reason_code(PluginId::NodeAffinity, 2);

/// Its reasons by local index, with upstream's strings; the registry numbers them.
pub const REASONS: &[Reason] = &[
    Reason::unresolvable("node(s) didn't match Pod's node affinity/selector"),
    Reason::unresolvable("node(s) didn't satisfy plugin(s) [NodeAffinity]"),
    Reason::unresolvable("node(s) didn't match scheduler-enforced node affinity"),
];

#[inline]
fn requirement_matches(sel: &Selectors, req: usize, nodes: &Nodes, node: usize) -> bool {
    let values = &sel.values[row(sel.value_offsets, req)];
    let op = sel.operators[req];
    if sel.is_field[req] != 0 {
        let name = nodes.names[node];
        return match op {
            OP_IN => values.contains(&name),
            OP_NOT_IN => !values.contains(&name),
            _ => false,
        };
    }
    let label = nodes.labels.find(node, sel.keys[req]);
    match op {
        OP_IN => label.is_some_and(|i| values.contains(&nodes.labels.values[i])),
        OP_NOT_IN => label.is_none_or(|i| !values.contains(&nodes.labels.values[i])),
        OP_EXISTS => label.is_some(),
        OP_DOES_NOT_EXIST => label.is_none(),
        OP_GT | OP_LT => label.is_some_and(|i| {
            nodes.labels.int_valid[i] != 0 && {
                let v = nodes.labels.int_values[i];
                if op == OP_GT {
                    v > sel.int_values[req]
                } else {
                    v < sel.int_values[req]
                }
            }
        }),
        _ => false,
    }
}

/// Whether a term matches the node; a term without requirements matches nothing.
#[inline]
pub fn term_matches(sel: &Selectors, term: usize, nodes: &Nodes, node: usize) -> bool {
    let reqs = row(sel.term_offsets, term);
    !reqs.is_empty() && reqs.into_iter().all(|r| requirement_matches(sel, r, nodes, node))
}

pub fn filter(classes: &Classes, class: usize, nodes: &Nodes, node: usize) -> u32 {
    let sel = &classes.selectors;
    // The profile's addedAffinity, checked first as upstream does.
    if !classes.enforced_terms.is_empty() && !classes.enforced_terms.iter().any(|&t| term_matches(sel, t as usize, nodes, node)) {
        return NODE_AFFINITY_ENFORCED;
    }
    if !required_matches(classes, class, nodes, node) {
        return NODE_AFFINITY;
    }
    FEASIBLE
}

/// The pod's own `nodeSelector` and required node affinity (upstream
/// `RequiredNodeAffinity.Match`, which PodTopologySpread's `nodeAffinityPolicy` also reads).
pub fn required_matches(classes: &Classes, class: usize, nodes: &Nodes, node: usize) -> bool {
    let sel = &classes.selectors;
    let selector_term = classes.node_selector_term[class];
    if selector_term >= 0 && !term_matches(sel, selector_term as usize, nodes, node) {
        return false;
    }
    classes.has_required[class] == 0
        || classes.required_terms[row(classes.required_offsets, class)]
            .iter()
            .any(|&t| term_matches(sel, t as usize, nodes, node))
}

/// Raw score: the sum of the weights of the preferred terms the node matches.
pub fn score(classes: &Classes, class: usize, nodes: &Nodes, node: usize) -> i64 {
    let sel = &classes.selectors;
    classes.preferred_terms[row(classes.preferred_offsets, class)]
        .iter()
        .filter(|&&t| term_matches(sel, t as usize, nodes, node))
        .map(|&t| sel.term_weights[t as usize])
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{NodeBuilder, OwnedClasses, Req};

    const ZONE: i32 = 1;
    const GPU: i32 = 2;
    const CORES: i32 = 3;
    const A: i32 = 10;
    const B: i32 = 11;
    const NODE_NAME: i32 = 50;

    fn node() -> crate::test_support::OwnedNodes {
        let mut b = NodeBuilder::default();
        b.node(|n| {
            n.name = NODE_NAME;
            n.labels = vec![(ZONE, A, None), (CORES, 30, Some(16))];
        });
        b.build()
    }

    #[test]
    fn filter_table() {
        struct Case {
            name: &'static str,
            node_selector: Option<Vec<Req>>,
            required: Option<Vec<Vec<Req>>>,
            want: u32,
        }
        let cases = vec![
            Case {
                name: "no constraints",
                node_selector: None,
                required: None,
                want: FEASIBLE,
            },
            Case {
                name: "nodeSelector matches",
                node_selector: Some(vec![Req::In(ZONE, vec![A])]),
                required: None,
                want: FEASIBLE,
            },
            Case {
                name: "nodeSelector differs",
                node_selector: Some(vec![Req::In(ZONE, vec![B])]),
                required: None,
                want: NODE_AFFINITY,
            },
            Case {
                name: "In",
                node_selector: None,
                required: Some(vec![vec![Req::In(ZONE, vec![B, A])]]),
                want: FEASIBLE,
            },
            Case {
                name: "NotIn with value",
                node_selector: None,
                required: Some(vec![vec![Req::NotIn(ZONE, vec![A])]]),
                want: NODE_AFFINITY,
            },
            Case {
                name: "NotIn on absent key",
                node_selector: None,
                required: Some(vec![vec![Req::NotIn(GPU, vec![A])]]),
                want: FEASIBLE,
            },
            Case {
                name: "Exists",
                node_selector: None,
                required: Some(vec![vec![Req::Exists(ZONE)]]),
                want: FEASIBLE,
            },
            Case {
                name: "Exists absent",
                node_selector: None,
                required: Some(vec![vec![Req::Exists(GPU)]]),
                want: NODE_AFFINITY,
            },
            Case {
                name: "DoesNotExist",
                node_selector: None,
                required: Some(vec![vec![Req::DoesNotExist(GPU)]]),
                want: FEASIBLE,
            },
            Case {
                name: "Gt true",
                node_selector: None,
                required: Some(vec![vec![Req::Gt(CORES, 8)]]),
                want: FEASIBLE,
            },
            Case {
                name: "Gt false",
                node_selector: None,
                required: Some(vec![vec![Req::Gt(CORES, 16)]]),
                want: NODE_AFFINITY,
            },
            Case {
                name: "Lt true",
                node_selector: None,
                required: Some(vec![vec![Req::Lt(CORES, 17)]]),
                want: FEASIBLE,
            },
            Case {
                name: "Gt on non-numeric label",
                node_selector: None,
                required: Some(vec![vec![Req::Gt(ZONE, 1)]]),
                want: NODE_AFFINITY,
            },
            Case {
                name: "terms are ORed",
                node_selector: None,
                required: Some(vec![vec![Req::Exists(GPU)], vec![Req::In(ZONE, vec![A])]]),
                want: FEASIBLE,
            },
            Case {
                name: "expressions are ANDed",
                node_selector: None,
                required: Some(vec![vec![Req::In(ZONE, vec![A]), Req::Exists(GPU)]]),
                want: NODE_AFFINITY,
            },
            Case {
                name: "empty term matches nothing",
                node_selector: None,
                required: Some(vec![vec![]]),
                want: NODE_AFFINITY,
            },
            Case {
                name: "no terms matches nothing",
                node_selector: None,
                required: Some(vec![]),
                want: NODE_AFFINITY,
            },
            Case {
                name: "matchFields name In",
                node_selector: None,
                required: Some(vec![vec![Req::NameIn(vec![NODE_NAME])]]),
                want: FEASIBLE,
            },
            Case {
                name: "matchFields name NotIn",
                node_selector: None,
                required: Some(vec![vec![Req::NameNotIn(vec![NODE_NAME])]]),
                want: NODE_AFFINITY,
            },
            Case {
                name: "nodeSelector ANDed with affinity",
                node_selector: Some(vec![Req::In(ZONE, vec![A])]),
                required: Some(vec![vec![Req::Exists(GPU)]]),
                want: NODE_AFFINITY,
            },
        ];
        let owned = node();
        for case in cases {
            let mut classes = OwnedClasses::default();
            classes.add(|c| {
                c.node_selector = case.node_selector.clone();
                c.required = case.required.clone();
            });
            let got = filter(&classes.view(), 0, &owned.view(), 0);
            assert_eq!(got, case.want, "{}: want {} got {}", case.name, case.want, got);
        }
    }

    #[test]
    fn preferred_score_sums_matching_weights() {
        let owned = node();
        let mut classes = OwnedClasses::default();
        classes.add(|c| {
            c.preferred = vec![
                (5, vec![Req::In(ZONE, vec![A])]),
                (7, vec![Req::Exists(GPU)]),
                (11, vec![Req::Gt(CORES, 4)]),
            ];
        });
        assert_eq!(score(&classes.view(), 0, &owned.view(), 0), 16);
    }

    /// Upstream `TestNodeAffinity`'s addedAffinity cases: the profile's terms
    /// filter every pod first, with their own reason, and the pod's own still apply.
    #[test]
    fn added_affinity_table() {
        struct Case {
            name: &'static str,
            enforced: Vec<Vec<Req>>,
            required: Option<Vec<Vec<Req>>>,
            want: u32,
        }
        let cases = vec![
            Case {
                name: "no added affinity",
                enforced: vec![],
                required: None,
                want: FEASIBLE,
            },
            Case {
                name: "added affinity matches",
                enforced: vec![vec![Req::In(ZONE, vec![A])]],
                required: None,
                want: FEASIBLE,
            },
            Case {
                name: "added affinity does not match",
                enforced: vec![vec![Req::In(ZONE, vec![B])]],
                required: None,
                want: NODE_AFFINITY_ENFORCED,
            },
            Case {
                name: "added terms are ORed",
                enforced: vec![vec![Req::In(ZONE, vec![B])], vec![Req::Exists(CORES)]],
                required: None,
                want: FEASIBLE,
            },
            Case {
                name: "added matches, the pod's own does not",
                enforced: vec![vec![Req::In(ZONE, vec![A])]],
                required: Some(vec![vec![Req::Exists(GPU)]]),
                want: NODE_AFFINITY,
            },
            Case {
                name: "neither matches: the added affinity reports",
                enforced: vec![vec![Req::In(ZONE, vec![B])]],
                required: Some(vec![vec![Req::Exists(GPU)]]),
                want: NODE_AFFINITY_ENFORCED,
            },
        ];
        let nodes = node();
        for case in cases {
            let mut classes = OwnedClasses::default();
            classes.enforced = case.enforced.clone();
            classes.add(|c| c.required = case.required.clone());
            let got = filter(&classes.view(), 0, &nodes.view(), 0);
            assert_eq!(got, case.want, "{}: want {} got {}", case.name, case.want, got);
            let own = required_matches(&classes.view(), 0, &nodes.view(), 0);
            assert_eq!(
                own,
                case.required.is_none(),
                "{}: the pod's own affinity ignores the added one",
                case.name
            );
        }
    }
}
