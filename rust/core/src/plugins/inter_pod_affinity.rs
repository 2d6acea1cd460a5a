//! InterPodAffinity: required affinity and anti-affinity of the incoming pod,
//! the required anti-affinity of the pods already placed toward it
//! (symmetry), and the preferred terms of both sides in scoring, as upstream
//! (`plugins/interpodaffinity`). Pods placed earlier in the batch count like
//! bound pods.

use std::collections::HashSet;

use super::{IdBuild, IdMap, Reason, FEASIBLE, MAX_NODE_SCORE};
use crate::model::pod_table::{PREFERRED_AFFINITY, PREFERRED_ANTI_AFFINITY, REQUIRED_AFFINITY, REQUIRED_ANTI_AFFINITY};
use crate::model::{reason_code, row, Nodes, PluginId, PodTable};

pub const POD_AFFINITY: u32 = reason_code(PluginId::InterPodAffinity, 0);
pub const POD_ANTI_AFFINITY: u32 = reason_code(PluginId::InterPodAffinity, 1);
pub const EXISTING_ANTI_AFFINITY: u32 = reason_code(PluginId::InterPodAffinity, 2);

/// Its reasons by local index, with upstream's strings; the registry numbers them.
pub const REASONS: &[Reason] = &[
    Reason::unresolvable("node(s) didn't match pod affinity rules"),
    Reason::resolvable("node(s) didn't match pod anti-affinity rules"),
    Reason::resolvable("node(s) didn't satisfy existing pods anti-affinity rules"),
];

/// A (topology key, value) pair.
type Pair = (i32, i32);

/// PreScore's summed weights: topology key -> value -> weight.
pub type TopologyScore = IdMap<i32, IdMap<i32, i64>>;

/// PreFilter state: what the incoming pod's filter needs.
#[derive(Clone)]
pub struct Filter {
    /// Topology keys of the incoming pod's required affinity and anti-affinity terms.
    affinity_keys: Vec<i32>,
    anti_keys: Vec<i32>,
    affinity_counts: IdMap<Pair, i64>,
    anti_counts: IdMap<Pair, i64>,
    /// Pairs where some placed pod's required anti-affinity matches the incoming pod.
    existing_anti: HashSet<Pair, IdBuild>,
    /// The incoming pod matches all its own required affinity terms (there
    /// are some): upstream's escape for the first pod of such a group, taken
    /// while no pod matches them (`affinity_counts` empty).
    matches_own_terms: bool,
    /// The incoming pod's required affinity and anti-affinity terms.
    affinity_terms: Vec<usize>,
    anti_terms: Vec<usize>,
}

/// PreFilter. `placed` lists every pod on a node (table row, node): bound
/// pods and the batch's placements; `affine` the subset with affinity terms.
/// None when the plugin has nothing to check (upstream's Skip).
pub fn prefilter(table: &PodTable, nodes: &Nodes, placed: &[(u32, u32)], affine: &[(u32, u32)], pod: usize) -> Option<Filter> {
    let mut existing_anti = HashSet::default();
    for &(other, node) in affine {
        for &t in table.term_list(other as usize, REQUIRED_ANTI_AFFINITY) {
            let t = t as usize;
            if table.term_matches(t, pod) {
                let key = table.terms.topology_keys[t];
                if let Some(v) = nodes.label(node as usize, key) {
                    existing_anti.insert((key, v));
                }
            }
        }
    }
    let required_affinity: Vec<usize> = table.term_list(pod, REQUIRED_AFFINITY).iter().map(|&t| t as usize).collect();
    let required_anti: Vec<usize> = table.term_list(pod, REQUIRED_ANTI_AFFINITY).iter().map(|&t| t as usize).collect();
    if required_affinity.is_empty() && required_anti.is_empty() && existing_anti.is_empty() {
        return None;
    }
    let key = |t: usize| table.terms.topology_keys[t];
    let mut affinity_counts = IdMap::default();
    let mut anti_counts = IdMap::default();
    if !required_affinity.is_empty() || !required_anti.is_empty() {
        for &(other, node) in placed {
            let (other, node) = (other as usize, node as usize);
            if !required_affinity.is_empty() && required_affinity.iter().all(|&t| table.term_matches(t, other)) {
                for &t in &required_affinity {
                    if let Some(v) = nodes.label(node, key(t)) {
                        *affinity_counts.entry((key(t), v)).or_insert(0) += 1;
                    }
                }
            }
            for &t in &required_anti {
                if table.term_matches(t, other) {
                    if let Some(v) = nodes.label(node, key(t)) {
                        *anti_counts.entry((key(t), v)).or_insert(0) += 1;
                    }
                }
            }
        }
    }
    let matches_own_terms = !required_affinity.is_empty() && required_affinity.iter().all(|&t| table.term_matches(t, pod));
    Some(Filter {
        affinity_keys: required_affinity.iter().map(|&t| key(t)).collect(),
        anti_keys: required_anti.iter().map(|&t| key(t)).collect(),
        affinity_counts,
        anti_counts,
        existing_anti,
        matches_own_terms,
        affinity_terms: required_affinity,
        anti_terms: required_anti,
    })
}

impl Filter {
    /// Count pod table row `other` on `node` for the incoming pod `pod`
    /// (upstream's AddPod, `updateWithPod`): a nominated pod held there.
    pub fn add_pod(&mut self, table: &PodTable, nodes: &Nodes, pod: usize, other: usize, node: usize) {
        for &t in table.term_list(other, REQUIRED_ANTI_AFFINITY) {
            let t = t as usize;
            if table.term_matches(t, pod) {
                if let Some(v) = nodes.label(node, table.terms.topology_keys[t]) {
                    self.existing_anti.insert((table.terms.topology_keys[t], v));
                }
            }
        }
        if !self.affinity_terms.is_empty() && self.affinity_terms.iter().all(|&t| table.term_matches(t, other)) {
            for &t in &self.affinity_terms {
                let key = table.terms.topology_keys[t];
                if let Some(v) = nodes.label(node, key) {
                    *self.affinity_counts.entry((key, v)).or_insert(0) += 1;
                }
            }
        }
        for &t in &self.anti_terms {
            if table.term_matches(t, other) {
                let key = table.terms.topology_keys[t];
                if let Some(v) = nodes.label(node, key) {
                    *self.anti_counts.entry((key, v)).or_insert(0) += 1;
                }
            }
        }
    }

    /// Upstream's Filter: affinity, then anti-affinity, then the existing pods' anti-affinity.
    pub fn filter(&self, nodes: &Nodes, node: usize) -> u32 {
        let mut pods_exist = true;
        for &key in &self.affinity_keys {
            match nodes.label(node, key) {
                Some(v) => {
                    if self.affinity_counts.get(&(key, v)).copied().unwrap_or(0) <= 0 {
                        pods_exist = false;
                    }
                }
                // All topology labels must exist on the node.
                None => return POD_AFFINITY,
            }
        }
        let first_pod = self.affinity_counts.is_empty() && self.matches_own_terms;
        if !pods_exist && !first_pod {
            return POD_AFFINITY;
        }
        if !self.anti_counts.is_empty() {
            for &key in &self.anti_keys {
                if let Some(v) = nodes.label(node, key) {
                    if self.anti_counts.get(&(key, v)).copied().unwrap_or(0) > 0 {
                        return POD_ANTI_AFFINITY;
                    }
                }
            }
        }
        if !self.existing_anti.is_empty() {
            let l = &nodes.labels;
            for i in row(l.offsets, node) {
                if self.existing_anti.contains(&(l.keys[i], l.values[i])) {
                    return EXISTING_ANTI_AFFINITY;
                }
            }
        }
        FEASIBLE
    }
}

/// PreScore: topology key -> value -> summed weight. None when no term
/// applies (upstream's Skip: every node scores 0).
pub fn prescore(
    table: &PodTable,
    nodes: &Nodes,
    placed: &[(u32, u32)],
    affine: &[(u32, u32)],
    pod: usize,
    hard_weight: i64,
    ignore_existing: bool,
) -> Option<TopologyScore> {
    let preferred = table.term_list(pod, PREFERRED_AFFINITY);
    let preferred_anti = table.term_list(pod, PREFERRED_ANTI_AFFINITY);
    // `ignorePreferredTermsOfExistingPods`: a pod without preferred terms is not scored at all.
    if ignore_existing && preferred.is_empty() && preferred_anti.is_empty() {
        return None;
    }
    // Unless the pod has preferred terms, only pods with affinity terms matter.
    let pods = if preferred.is_empty() && preferred_anti.is_empty() {
        affine
    } else {
        placed
    };
    let mut map = TopologyScore::default();
    let t = &table.terms;
    let mut add = |term: usize, node: usize, weight: i64| {
        let key = t.topology_keys[term];
        if let Some(v) = nodes.label(node, key) {
            *map.entry(key).or_default().entry(v).or_insert(0) += weight;
        }
    };
    for &(other, node) in pods {
        let (other, node) = (other as usize, node as usize);
        if row(nodes.labels.offsets, node).is_empty() {
            continue;
        }
        for &term in preferred {
            if table.term_matches(term as usize, other) {
                add(term as usize, node, t.weights[term as usize]);
            }
        }
        for &term in preferred_anti {
            if table.term_matches(term as usize, other) {
                add(term as usize, node, -t.weights[term as usize]);
            }
        }
        if hard_weight > 0 {
            for &term in table.term_list(other, REQUIRED_AFFINITY) {
                if table.term_matches(term as usize, pod) {
                    add(term as usize, node, hard_weight);
                }
            }
        }
        for &term in table.term_list(other, PREFERRED_AFFINITY) {
            if table.term_matches(term as usize, pod) {
                add(term as usize, node, t.weights[term as usize]);
            }
        }
        for &term in table.term_list(other, PREFERRED_ANTI_AFFINITY) {
            if table.term_matches(term as usize, pod) {
                add(term as usize, node, -t.weights[term as usize]);
            }
        }
    }
    (!map.is_empty()).then_some(map)
}

/// Raw score of a node: the summed weights of its topology pairs.
pub fn score(map: &TopologyScore, nodes: &Nodes, node: usize) -> i64 {
    map.iter()
        .filter_map(|(&key, values)| nodes.label(node, key).map(|v| values.get(&v).copied().unwrap_or(0)))
        .sum()
}

/// Upstream's NormalizeScore: min-max to 0..=100, truncated.
pub fn normalize(scores: &mut [i64]) {
    let (Some(&min), Some(&max)) = (scores.iter().min(), scores.iter().max()) else {
        return;
    };
    let diff = max - min;
    for s in scores.iter_mut() {
        *s = if diff > 0 {
            (MAX_NODE_SCORE as f64 * ((*s - min) as f64 / diff as f64)) as i64
        } else {
            0
        };
    }
}

#[cfg(test)]
mod tests {
    //! Upstream-style cases (`interpodaffinity/filtering_test.go`,
    //! `scoring_test.go`): a small cluster, existing pods with their terms,
    //! one incoming pod, and each node's verdict or score.

    use super::*;
    use crate::test_support::{
        explain_first, label_is, pod, scores_of, term, verdicts, zoned_nodes, OwnedClasses, OwnedPodTable, TablePod, TestTerm, HOSTNAME,
        ZONE,
    };

    const APP: i32 = 20;
    const WEB: i32 = 200;
    const DB: i32 = 201;
    /// Selectors of every case: 0 is app=web, 1 is app=db.
    const SELECTS_WEB: i64 = 0;
    const SELECTS_DB: i64 = 1;
    const NS: i32 = 1;
    const OTHER_NS: i32 = 2;
    const F: u32 = FEASIBLE;

    struct Case {
        name: &'static str,
        /// Bound pods: (node, pod).
        existing: Vec<(i64, TablePod)>,
        incoming: TablePod,
        terms: Vec<TestTerm>,
        term_sets: Vec<[Vec<i64>; 4]>,
    }

    fn labelled(value: i32, namespace: i32, term_set: i64) -> TablePod {
        TablePod {
            term_set,
            ..TablePod::new(&[(APP, value)], namespace)
        }
    }

    /// Nodes 0 and 1 in zone 110, node 2 in zone 111, node 3 without a zone.
    fn run(c: &Case) -> crate::schedule::Explanation {
        let nodes = zoned_nodes(&[Some(110), Some(110), Some(111), None]);
        let mut classes = OwnedClasses::default();
        classes.add(|_| {});
        let mut table = OwnedPodTable::with_pods(&c.existing, std::slice::from_ref(&c.incoming));
        table.selectors = vec![label_is(APP, WEB), label_is(APP, DB)];
        table.terms = c.terms.clone();
        table.term_sets = c.term_sets.clone();
        table.flatten();
        explain_first(&nodes, &mut classes, &[pod(100, 1)], Some(&table)).1
    }

    fn in_namespaces(t: TestTerm, namespaces: &[i32]) -> TestTerm {
        TestTerm {
            namespaces: Some(namespaces.to_vec()),
            ..t
        }
    }

    fn weighted(t: TestTerm, weight: i64) -> TestTerm {
        TestTerm { weight, ..t }
    }

    /// A term set with one list filled (`REQUIRED_AFFINITY` ..).
    fn only(kind: usize, terms: Vec<i64>) -> [Vec<i64>; 4] {
        let mut set: [Vec<i64>; 4] = Default::default();
        set[kind] = terms;
        set
    }

    #[test]
    fn filter_table() {
        let existing_anti = |topology, namespaces: Option<&[i32]>| {
            let t = term(SELECTS_WEB, topology);
            vec![namespaces.map_or(t.clone(), |ns| in_namespaces(t, ns))]
        };
        let cases: Vec<(Case, Vec<u32>)> = vec![
            (
                Case {
                    name: "an existing pod's anti-affinity rejects the pod it matches on its node",
                    existing: vec![(0, labelled(DB, NS, 0))],
                    incoming: labelled(WEB, NS, -1),
                    terms: existing_anti(HOSTNAME, None),
                    term_sets: vec![only(REQUIRED_ANTI_AFFINITY, vec![0])],
                },
                vec![EXISTING_ANTI_AFFINITY, F, F, F],
            ),
            (
                Case {
                    name: "... and in its whole zone; a node without the key passes",
                    existing: vec![(0, labelled(DB, NS, 0))],
                    incoming: labelled(WEB, NS, -1),
                    terms: existing_anti(ZONE, None),
                    term_sets: vec![only(REQUIRED_ANTI_AFFINITY, vec![0])],
                },
                vec![EXISTING_ANTI_AFFINITY, EXISTING_ANTI_AFFINITY, F, F],
            ),
            (
                Case {
                    name: "existing anti-affinity naming another namespace ignores the pod",
                    existing: vec![(0, labelled(DB, NS, 0))],
                    incoming: labelled(WEB, NS, -1),
                    terms: existing_anti(HOSTNAME, Some(&[OTHER_NS])),
                    term_sets: vec![only(REQUIRED_ANTI_AFFINITY, vec![0])],
                },
                vec![F, F, F, F],
            ),
            (
                Case {
                    name: "existing anti-affinity whose namespace list holds the pod's",
                    existing: vec![(0, labelled(DB, OTHER_NS, 0))],
                    incoming: labelled(WEB, NS, -1),
                    terms: existing_anti(HOSTNAME, Some(&[OTHER_NS, NS])),
                    term_sets: vec![only(REQUIRED_ANTI_AFFINITY, vec![0])],
                },
                vec![EXISTING_ANTI_AFFINITY, F, F, F],
            ),
            (
                Case {
                    name: "existing anti-affinity with an empty namespaceSelector (all namespaces)",
                    existing: vec![(0, labelled(DB, OTHER_NS, 0))],
                    incoming: labelled(WEB, NS, -1),
                    terms: existing_anti(HOSTNAME, None),
                    term_sets: vec![only(REQUIRED_ANTI_AFFINITY, vec![0])],
                },
                vec![EXISTING_ANTI_AFFINITY, F, F, F],
            ),
            (
                Case {
                    name: "an existing pod's required affinity does not filter others",
                    existing: vec![(0, labelled(DB, NS, 0))],
                    incoming: labelled(WEB, NS, -1),
                    terms: vec![term(SELECTS_DB, HOSTNAME)],
                    term_sets: vec![only(REQUIRED_AFFINITY, vec![0])],
                },
                vec![F, F, F, F],
            ),
            (
                Case {
                    name: "required affinity: only the zone of a matching pod; keyless nodes fail",
                    existing: vec![(2, labelled(DB, NS, -1))],
                    incoming: labelled(WEB, NS, 0),
                    terms: vec![term(SELECTS_DB, ZONE)],
                    term_sets: vec![only(REQUIRED_AFFINITY, vec![0])],
                },
                vec![POD_AFFINITY, POD_AFFINITY, F, POD_AFFINITY],
            ),
            (
                Case {
                    name: "required affinity to pods of another namespace finds none",
                    existing: vec![(2, labelled(DB, OTHER_NS, -1))],
                    incoming: labelled(WEB, NS, 0),
                    terms: vec![in_namespaces(term(SELECTS_DB, ZONE), &[NS])],
                    term_sets: vec![only(REQUIRED_AFFINITY, vec![0])],
                },
                vec![POD_AFFINITY, POD_AFFINITY, POD_AFFINITY, POD_AFFINITY],
            ),
            (
                Case {
                    name: "first pod of a group affine to itself: no match anywhere is allowed",
                    existing: vec![],
                    incoming: labelled(WEB, NS, 0),
                    terms: vec![term(SELECTS_WEB, ZONE)],
                    term_sets: vec![only(REQUIRED_AFFINITY, vec![0])],
                },
                vec![F, F, F, POD_AFFINITY],
            ),
            (
                Case {
                    name: "the first-pod exception needs the pod to match its own term",
                    existing: vec![],
                    incoming: labelled(WEB, NS, 0),
                    terms: vec![term(SELECTS_DB, ZONE)],
                    term_sets: vec![only(REQUIRED_AFFINITY, vec![0])],
                },
                vec![POD_AFFINITY, POD_AFFINITY, POD_AFFINITY, POD_AFFINITY],
            ),
            (
                Case {
                    name: "the incoming pod's anti-affinity: not beside a matching pod",
                    existing: vec![(0, labelled(WEB, NS, -1))],
                    incoming: labelled(WEB, NS, 0),
                    terms: vec![term(SELECTS_WEB, HOSTNAME)],
                    term_sets: vec![only(REQUIRED_ANTI_AFFINITY, vec![0])],
                },
                vec![POD_ANTI_AFFINITY, F, F, F],
            ),
            (
                Case {
                    name: "the incoming pod's zone anti-affinity; a keyless node passes",
                    existing: vec![(0, labelled(WEB, NS, -1))],
                    incoming: labelled(WEB, NS, 0),
                    terms: vec![term(SELECTS_WEB, ZONE)],
                    term_sets: vec![only(REQUIRED_ANTI_AFFINITY, vec![0])],
                },
                vec![POD_ANTI_AFFINITY, POD_ANTI_AFFINITY, F, F],
            ),
        ];
        for (c, want) in cases {
            let got = verdicts(&run(&c));
            assert_eq!(got, want, "{}: want {:?} got {:?}", c.name, want, got);
        }
    }

    #[test]
    fn score_table() {
        // Raw: summed weights of the node's topology pairs; normalized min-max to 0..=100.
        let cases: Vec<(Case, Vec<f64>, Vec<f64>)> = vec![
            (
                Case {
                    name: "preferred affinity toward the zone of a matching pod",
                    existing: vec![(2, labelled(DB, NS, -1))],
                    incoming: labelled(WEB, NS, 0),
                    terms: vec![weighted(term(SELECTS_DB, ZONE), 5)],
                    term_sets: vec![only(PREFERRED_AFFINITY, vec![0])],
                },
                vec![0.0, 0.0, 5.0, 0.0],
                vec![0.0, 0.0, 100.0, 0.0],
            ),
            (
                Case {
                    name: "an existing pod's required affinity toward the pod adds hardPodAffinityWeight",
                    existing: vec![(2, labelled(DB, NS, -1)), (0, labelled(DB, NS, 1))],
                    incoming: labelled(WEB, NS, 0),
                    terms: vec![weighted(term(SELECTS_DB, ZONE), 5), term(SELECTS_WEB, HOSTNAME)],
                    term_sets: vec![only(PREFERRED_AFFINITY, vec![0]), only(REQUIRED_AFFINITY, vec![1])],
                },
                vec![6.0, 5.0, 5.0, 0.0],
                vec![100.0, 83.0, 83.0, 0.0],
            ),
            (
                Case {
                    name: "an existing pod's preferred anti-affinity toward the pod subtracts",
                    existing: vec![(0, labelled(DB, NS, 0))],
                    incoming: labelled(WEB, NS, -1),
                    terms: vec![weighted(term(SELECTS_WEB, ZONE), 4)],
                    term_sets: vec![only(PREFERRED_ANTI_AFFINITY, vec![0])],
                },
                vec![-4.0, -4.0, 0.0, 0.0],
                vec![0.0, 0.0, 100.0, 100.0],
            ),
        ];
        for (c, raw, normalized) in cases {
            let (got_raw, got_normalized) = scores_of(&run(&c), PluginId::InterPodAffinity.name());
            assert_eq!(got_raw, raw, "{}: raw", c.name);
            assert_eq!(got_normalized, normalized, "{}: normalized", c.name);
        }
    }

    #[test]
    fn normalize_is_min_max_truncated() {
        let mut s = vec![-3, 0, 4];
        normalize(&mut s);
        assert_eq!(s, vec![0, 42, 100]);
        let mut flat = vec![5, 5];
        normalize(&mut flat);
        assert_eq!(flat, vec![0, 0]);
    }
}
