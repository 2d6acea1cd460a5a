//! Pod tables for the pod-level plugins' tests: label sets, selectors,
//! affinity terms, spread constraints, and small zoned clusters.

use super::nodes::NodeBuilder;
use crate::model::*;

/// A pod label selector: None for a nil selector (matches no pod), else its
/// requirements (key, operator, values); `Some(vec![])` matches every pod.
pub type TestSelector = Option<Vec<(i32, u8, Vec<i32>)>>;

/// The selector `key In [value]` (a matchLabels entry).
pub fn label_is(key: i32, value: i32) -> TestSelector {
    Some(vec![(key, SEL_IN, vec![value])])
}

/// A pod affinity term, its namespaces resolved (None: every namespace).
#[derive(Clone)]
pub struct TestTerm {
    pub selector: i64,
    pub topology_key: i32,
    pub weight: i64,
    pub namespaces: Option<Vec<i32>>,
}

/// A required term over every namespace.
pub fn term(selector: i64, topology_key: i32) -> TestTerm {
    TestTerm {
        selector,
        topology_key,
        weight: 0,
        namespaces: None,
    }
}

/// A topology spread constraint, with upstream's default policies
/// (`nodeAffinityPolicy: Honor`, `nodeTaintsPolicy: Ignore`).
#[derive(Clone)]
pub struct TestSpread {
    pub max_skew: i64,
    pub min_domains: i64,
    pub topology_key: i32,
    /// DoNotSchedule (true) or ScheduleAnyway.
    pub hard: bool,
    pub selector: i64,
    pub honor_affinity: bool,
    pub honor_taints: bool,
}

pub fn spread(max_skew: i64, topology_key: i32, hard: bool, selector: i64) -> TestSpread {
    TestSpread {
        max_skew,
        min_domains: 1,
        topology_key,
        hard,
        selector,
        honor_affinity: true,
        honor_taints: false,
    }
}

/// A pod table: bound pods (rows `0..bound_nodes.len()`), then pending pods.
/// Per-pod columns cover every row; `spread` and `system_default` the
/// pending pods (`system_default` may be left empty: none).
#[derive(Default)]
pub struct OwnedPodTable {
    pub bound_nodes: Vec<i64>,
    pub label_sets_of_pods: Vec<i64>,
    pub term_sets_of_pods: Vec<i64>,
    pub namespaces: Vec<i32>,
    pub terminating: Vec<u8>,
    pub label_sets: Vec<Vec<(i32, i32)>>,
    pub selectors: Vec<TestSelector>,
    pub terms: Vec<TestTerm>,
    /// Four term lists per set.
    pub term_sets: Vec<[Vec<i64>; 4]>,
    pub spread: Vec<Vec<TestSpread>>,
    pub system_default: Vec<u8>,
    pub hostname_key: i32,
    /// Filled by `flatten`.
    pub flat: Flat,
}

/// The CSR arrays `view` borrows, filled by `flatten`.
#[derive(Default)]
pub struct Flat {
    label_offsets: Vec<i64>,
    label_keys: Vec<i32>,
    label_values: Vec<i32>,
    selector_offsets: Vec<i64>,
    selector_nothing: Vec<u8>,
    selector_keys: Vec<i32>,
    selector_operators: Vec<u8>,
    selector_value_offsets: Vec<i64>,
    selector_values: Vec<i32>,
    term_selectors: Vec<i64>,
    term_keys: Vec<i32>,
    term_weights: Vec<i64>,
    term_all_namespaces: Vec<u8>,
    term_namespace_offsets: Vec<i64>,
    term_namespaces: Vec<i32>,
    term_set_offsets: Vec<i64>,
    term_set_terms: Vec<i64>,
    spread_offsets: Vec<i64>,
    max_skew: Vec<i64>,
    min_domains: Vec<i64>,
    spread_keys: Vec<i32>,
    hard: Vec<u8>,
    spread_selectors: Vec<i64>,
    honor_affinity: Vec<u8>,
    honor_taints: Vec<u8>,
    system_default: Vec<u8>,
}

impl OwnedPodTable {
    /// Flatten the tables into CSR arrays; call before `view`.
    pub fn flatten(&mut self) {
        let mut f = Flat {
            label_offsets: vec![0],
            selector_offsets: vec![0],
            selector_value_offsets: vec![0],
            term_namespace_offsets: vec![0],
            term_set_offsets: vec![0],
            spread_offsets: vec![0],
            ..Flat::default()
        };
        for set in &self.label_sets {
            let mut set = set.clone();
            set.sort();
            f.label_keys.extend(set.iter().map(|l| l.0));
            f.label_values.extend(set.iter().map(|l| l.1));
            f.label_offsets.push(f.label_keys.len() as i64);
        }
        for sel in &self.selectors {
            f.selector_nothing.push(sel.is_none() as u8);
            for (key, op, values) in sel.iter().flatten() {
                f.selector_keys.push(*key);
                f.selector_operators.push(*op);
                f.selector_values.extend(values);
                f.selector_value_offsets.push(f.selector_values.len() as i64);
            }
            f.selector_offsets.push(f.selector_keys.len() as i64);
        }
        for t in &self.terms {
            f.term_selectors.push(t.selector);
            f.term_keys.push(t.topology_key);
            f.term_weights.push(t.weight);
            f.term_all_namespaces.push(t.namespaces.is_none() as u8);
            let mut namespaces = t.namespaces.clone().unwrap_or_default();
            namespaces.sort();
            f.term_namespaces.extend(namespaces);
            f.term_namespace_offsets.push(f.term_namespaces.len() as i64);
        }
        for list in self.term_sets.iter().flatten() {
            f.term_set_terms.extend(list);
            f.term_set_offsets.push(f.term_set_terms.len() as i64);
        }
        for constraints in &self.spread {
            for c in constraints {
                f.max_skew.push(c.max_skew);
                f.min_domains.push(c.min_domains);
                f.spread_keys.push(c.topology_key);
                f.hard.push(c.hard as u8);
                f.spread_selectors.push(c.selector);
                f.honor_affinity.push(c.honor_affinity as u8);
                f.honor_taints.push(c.honor_taints as u8);
            }
            f.spread_offsets.push(f.max_skew.len() as i64);
        }
        f.system_default = self.system_default.clone();
        f.system_default.resize(self.spread.len(), 0);
        self.flat = f;
    }

    pub fn view(&self) -> PodTable<'_> {
        let f = &self.flat;
        PodTable {
            bound: self.bound_nodes.len(),
            nodes: &self.bound_nodes,
            namespaces: &self.namespaces,
            label_sets: &self.label_sets_of_pods,
            term_sets: &self.term_sets_of_pods,
            terminating: &self.terminating,
            labels: LabelSets {
                offsets: &f.label_offsets,
                keys: &f.label_keys,
                values: &f.label_values,
            },
            selectors: PodSelectors {
                offsets: &f.selector_offsets,
                nothing: &f.selector_nothing,
                keys: &f.selector_keys,
                operators: &f.selector_operators,
                value_offsets: &f.selector_value_offsets,
                values: &f.selector_values,
            },
            terms: PodTerms {
                selectors: &f.term_selectors,
                topology_keys: &f.term_keys,
                weights: &f.term_weights,
                all_namespaces: &f.term_all_namespaces,
                namespace_offsets: &f.term_namespace_offsets,
                namespaces: &f.term_namespaces,
            },
            term_set_table: TermSets {
                offsets: &f.term_set_offsets,
                terms: &f.term_set_terms,
            },
            spread: SpreadConstraints {
                offsets: &f.spread_offsets,
                max_skew: &f.max_skew,
                min_domains: &f.min_domains,
                topology_keys: &f.spread_keys,
                hard: &f.hard,
                selectors: &f.spread_selectors,
                honor_affinity: &f.honor_affinity,
                honor_taints: &f.honor_taints,
                system_default: &f.system_default,
            },
            hostname_key: self.hostname_key,
        }
    }
}

/// Label keys of the small clusters the pod-level tests build.
pub const HOSTNAME: i32 = 10;
pub const ZONE: i32 = 11;

/// Nodes labelled `kubernetes.io/hostname` = 100 + index, and with a zone
/// where one is given.
pub fn zoned_nodes(zones: &[Option<i32>]) -> NodeBuilder {
    let mut b = NodeBuilder::default();
    for (i, zone) in zones.iter().enumerate() {
        b.node(|n| {
            n.labels.push((HOSTNAME, 100 + i as i32, None));
            if let Some(z) = zone {
                n.labels.push((ZONE, *z, None));
            }
        });
    }
    b
}

/// One pod of a pod table: its labels, namespace and term set (-1: none).
#[derive(Clone, Default)]
pub struct TablePod {
    pub labels: Vec<(i32, i32)>,
    pub namespace: i32,
    pub term_set: i64,
    pub terminating: bool,
}

impl TablePod {
    pub fn new(labels: &[(i32, i32)], namespace: i32) -> TablePod {
        TablePod {
            labels: labels.to_vec(),
            namespace,
            term_set: -1,
            terminating: false,
        }
    }
}

impl OwnedPodTable {
    /// A table of bound pods (node, pod) and pending pods, one label set per
    /// pod; selectors, terms, term sets and spread constraints are the caller's.
    pub fn with_pods(bound: &[(i64, TablePod)], pending: &[TablePod]) -> OwnedPodTable {
        let pods: Vec<&TablePod> = bound.iter().map(|(_, p)| p).chain(pending).collect();
        OwnedPodTable {
            bound_nodes: bound.iter().map(|&(node, _)| node).collect(),
            label_sets_of_pods: (0..pods.len() as i64).collect(),
            term_sets_of_pods: pods.iter().map(|p| p.term_set).collect(),
            namespaces: pods.iter().map(|p| p.namespace).collect(),
            terminating: pods.iter().map(|p| p.terminating as u8).collect(),
            label_sets: pods.iter().map(|p| p.labels.clone()).collect(),
            spread: vec![Vec::new(); pending.len()],
            hostname_key: HOSTNAME,
            ..OwnedPodTable::default()
        }
    }
}
