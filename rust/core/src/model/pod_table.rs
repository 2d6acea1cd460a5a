//! The pods whose labels and affinity terms the pod-level plugins read
//! (InterPodAffinity, PodTopologySpread): the pods bound to nodes, then the
//! batch's pending pods, as interned integer tables.
//!
//! Whole label sets are interned (pods of one workload share one row of
//! `LabelSets`), and so are whole sets of affinity terms (`TermSets`), so a
//! selector is matched once per label set, not once per pod.

use super::encoding::{row, SEL_EXISTS, SEL_IN, SEL_NOT_IN};
use super::error::{check_index, check_len, check_offsets, EngineError};

/// The four term lists of a term set, in `TermSets` order.
pub const REQUIRED_AFFINITY: usize = 0;
pub const REQUIRED_ANTI_AFFINITY: usize = 1;
pub const PREFERRED_AFFINITY: usize = 2;
pub const PREFERRED_ANTI_AFFINITY: usize = 3;

/// Interned pod label sets: `(key, value)` pairs sorted by key.
#[derive(Clone, Copy)]
pub struct LabelSets<'a> {
    pub offsets: &'a [i64],
    pub keys: &'a [i32],
    pub values: &'a [i32],
}

impl LabelSets<'_> {
    #[inline]
    pub fn get(&self, set: usize, key: i32) -> Option<i32> {
        let r = row(self.offsets, set);
        self.keys[r.clone()].binary_search(&key).ok().map(|i| self.values[r.start + i])
    }

    pub fn count(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }
}

/// Pod label selectors (of affinity terms and spread constraints).
#[derive(Clone, Copy)]
pub struct PodSelectors<'a> {
    /// Selector -> its requirements (matchLabels become `In` with one value).
    pub offsets: &'a [i64],
    /// 1 for a nil selector, which matches no pod.
    pub nothing: &'a [u8],
    pub keys: &'a [i32],
    pub operators: &'a [u8],
    pub value_offsets: &'a [i64],
    pub values: &'a [i32],
}

impl PodSelectors<'_> {
    pub fn matches(&self, selector: usize, labels: &LabelSets, set: usize) -> bool {
        if self.nothing[selector] != 0 {
            return false;
        }
        row(self.offsets, selector).all(|r| {
            let value = labels.get(set, self.keys[r]);
            let values = &self.values[row(self.value_offsets, r)];
            match self.operators[r] {
                SEL_IN => value.is_some_and(|v| values.contains(&v)),
                SEL_NOT_IN => !value.is_some_and(|v| values.contains(&v)),
                SEL_EXISTS => value.is_some(),
                _ => value.is_none(),
            }
        })
    }

    /// An empty (not nil) selector: matches every pod, but upstream's spread
    /// counting (`countPodsMatchSelector`) counts none.
    pub fn is_empty(&self, selector: usize) -> bool {
        self.nothing[selector] == 0 && row(self.offsets, selector).is_empty()
    }
}

/// Pod affinity terms, with their namespaces already resolved by the caller
/// (the pod's own namespace when none is named, plus every namespace the
/// namespaceSelector matches, or all namespaces for an empty namespaceSelector).
#[derive(Clone, Copy)]
pub struct PodTerms<'a> {
    pub selectors: &'a [i64],
    pub topology_keys: &'a [i32],
    /// Weight of a preferred term (unused for required terms).
    pub weights: &'a [i64],
    pub all_namespaces: &'a [u8],
    pub namespace_offsets: &'a [i64],
    /// Sorted within each term.
    pub namespaces: &'a [i32],
}

/// Sets of affinity terms: four lists per set (`REQUIRED_AFFINITY` ..).
#[derive(Clone, Copy)]
pub struct TermSets<'a> {
    /// `4 × sets + 1` offsets into `terms`.
    pub offsets: &'a [i64],
    pub terms: &'a [i64],
}

impl TermSets<'_> {
    #[inline]
    pub fn list(&self, set: usize, kind: usize) -> &[i64] {
        &self.terms[row(self.offsets, set * 4 + kind)]
    }
}

/// Topology spread constraints of the pending pods.
#[derive(Clone, Copy)]
pub struct SpreadConstraints<'a> {
    /// Pending pod -> its constraints.
    pub offsets: &'a [i64],
    pub max_skew: &'a [i64],
    pub min_domains: &'a [i64],
    pub topology_keys: &'a [i32],
    /// 1 for DoNotSchedule (filters), 0 for ScheduleAnyway (scores).
    pub hard: &'a [u8],
    pub selectors: &'a [i64],
    /// nodeAffinityPolicy Honor (1) or Ignore (0); nodeTaintsPolicy likewise.
    pub honor_affinity: &'a [u8],
    pub honor_taints: &'a [u8],
    /// Per pending pod: 1 where the constraints are the profile's system
    /// defaults (then nodes need not have every topology key to be scored).
    pub system_default: &'a [u8],
}

/// Bound pods (rows `0..bound`), then the batch's pending pods in batch
/// order, then nominated pods outside the batch (`Reservations::rows`).
#[derive(Clone, Copy)]
pub struct PodTable<'a> {
    pub bound: usize,
    /// Node of each bound pod.
    pub nodes: &'a [i64],
    pub namespaces: &'a [i32],
    pub label_sets: &'a [i64],
    /// Term set of each pod, -1 for a pod without affinity terms.
    pub term_sets: &'a [i64],
    /// 1 for a pod being deleted (spread counting skips it).
    pub terminating: &'a [u8],
    pub labels: LabelSets<'a>,
    pub selectors: PodSelectors<'a>,
    pub terms: PodTerms<'a>,
    pub term_set_table: TermSets<'a>,
    pub spread: SpreadConstraints<'a>,
    /// The interned id of `kubernetes.io/hostname`.
    pub hostname_key: i32,
}

impl PodTable<'_> {
    /// Whether term `term` matches pod row `pod`.
    #[inline]
    pub fn term_matches(&self, term: usize, pod: usize) -> bool {
        let t = &self.terms;
        let ns = self.namespaces[pod];
        (t.all_namespaces[term] != 0 || t.namespaces[row(t.namespace_offsets, term)].binary_search(&ns).is_ok())
            && self
                .selectors
                .matches(t.selectors[term] as usize, &self.labels, self.label_sets[pod] as usize)
    }

    #[inline]
    pub fn term_list(&self, pod: usize, kind: usize) -> &[i64] {
        match self.term_sets[pod] {
            s if s >= 0 => self.term_set_table.list(s as usize, kind),
            _ => &[],
        }
    }

    /// Rows: the bound pods, the batch's pending pods, then any nominated
    /// pods outside the batch (`Reservations::rows`).
    pub fn rows(&self) -> usize {
        self.namespaces.len()
    }

    pub fn validate(&self, nodes: usize, pending: usize) -> Result<(), EngineError> {
        let rows = self.namespaces.len().max(self.bound + pending);
        check_len("pod table nodes", self.nodes.len(), self.bound)?;
        check_len("pod table namespaces", self.namespaces.len(), rows)?;
        check_len("pod table label sets", self.label_sets.len(), rows)?;
        check_len("pod table term sets", self.term_sets.len(), rows)?;
        check_len("pod table terminating", self.terminating.len(), rows)?;
        for &n in self.nodes {
            check_index("pod table node", n, nodes)?;
        }
        let l = &self.labels;
        check_offsets("label set offsets", l.offsets, l.count(), l.keys.len())?;
        check_len("label set values", l.values.len(), l.keys.len())?;
        for &s in self.label_sets {
            check_index("pod label set", s, l.count())?;
        }
        let s = &self.selectors;
        let selectors = s.nothing.len();
        check_offsets("pod selector offsets", s.offsets, selectors, s.keys.len())?;
        check_len("pod selector operators", s.operators.len(), s.keys.len())?;
        check_offsets("pod selector value offsets", s.value_offsets, s.keys.len(), s.values.len())?;
        let t = &self.terms;
        let terms = t.selectors.len();
        check_len("pod term topology keys", t.topology_keys.len(), terms)?;
        check_len("pod term weights", t.weights.len(), terms)?;
        check_len("pod term all namespaces", t.all_namespaces.len(), terms)?;
        check_offsets("pod term namespace offsets", t.namespace_offsets, terms, t.namespaces.len())?;
        for &sel in t.selectors {
            check_index("pod term selector", sel, selectors)?;
        }
        let ts = &self.term_set_table;
        let sets = ts.offsets.len().saturating_sub(1) / 4;
        check_offsets("term set offsets", ts.offsets, sets * 4, ts.terms.len())?;
        for &term in ts.terms {
            check_index("term set term", term, terms)?;
        }
        for &set in self.term_sets {
            if set >= 0 {
                check_index("pod term set", set, sets)?;
            }
        }
        let sp = &self.spread;
        check_offsets("spread offsets", sp.offsets, pending, sp.max_skew.len())?;
        let c = sp.max_skew.len();
        check_len("spread min domains", sp.min_domains.len(), c)?;
        check_len("spread topology keys", sp.topology_keys.len(), c)?;
        check_len("spread hard", sp.hard.len(), c)?;
        check_len("spread selectors", sp.selectors.len(), c)?;
        check_len("spread honor affinity", sp.honor_affinity.len(), c)?;
        check_len("spread honor taints", sp.honor_taints.len(), c)?;
        check_len("spread system default", sp.system_default.len(), pending)?;
        for &sel in sp.selectors {
            check_index("spread selector", sel, selectors)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::encoding::SEL_DOES_NOT_EXIST;
    use super::*;
    use crate::test_support::{label_is, term, OwnedPodTable, TablePod, TestSelector, TestTerm};

    const APP: i32 = 1;
    const TIER: i32 = 2;
    const WEB: i32 = 10;
    const DB: i32 = 11;
    const FRONT: i32 = 20;

    /// One pending pod per label set, each in namespace 1 + its index.
    fn table(label_sets: &[&[(i32, i32)]], selectors: Vec<TestSelector>, terms: Vec<TestTerm>) -> OwnedPodTable {
        let pods: Vec<TablePod> = label_sets.iter().enumerate().map(|(i, l)| TablePod::new(l, 1 + i as i32)).collect();
        let mut t = OwnedPodTable::with_pods(&[], &pods);
        t.selectors = selectors;
        t.terms = terms;
        t.flatten();
        t
    }

    #[test]
    fn selector_table() {
        let pods: [&[(i32, i32)]; 3] = [&[(APP, WEB), (TIER, FRONT)], &[(APP, DB)], &[]];
        let cases: Vec<(&str, TestSelector, [bool; 3])> = vec![
            ("matchLabels", label_is(APP, WEB), [true, false, false]),
            ("In with two values", Some(vec![(APP, SEL_IN, vec![WEB, DB])]), [true, true, false]),
            (
                "NotIn matches a pod without the key",
                Some(vec![(APP, SEL_NOT_IN, vec![WEB])]),
                [false, true, true],
            ),
            ("Exists", Some(vec![(TIER, SEL_EXISTS, vec![])]), [true, false, false]),
            ("DoesNotExist", Some(vec![(TIER, SEL_DOES_NOT_EXIST, vec![])]), [false, true, true]),
            (
                "requirements are ANDed",
                Some(vec![(APP, SEL_IN, vec![WEB, DB]), (TIER, SEL_DOES_NOT_EXIST, vec![])]),
                [false, true, false],
            ),
            ("an empty selector matches every pod", Some(vec![]), [true, true, true]),
            ("a nil selector matches no pod", None, [false, false, false]),
        ];
        for (name, selector, want) in cases {
            let t = table(&pods, vec![selector], vec![]);
            let v = t.view();
            let got = [0, 1, 2].map(|set| v.selectors.matches(0, &v.labels, set));
            assert_eq!(got, want, "{name}: want {want:?} got {got:?}");
        }
        let t = table(&pods, vec![Some(vec![]), None, label_is(APP, WEB)], vec![]);
        let v = t.view();
        let empty = [0, 1, 2].map(|s| v.selectors.is_empty(s));
        assert_eq!(empty, [true, false, false], "only the empty selector is empty; nil is not");
        assert_eq!(v.labels.get(0, TIER), Some(FRONT));
        assert_eq!(v.labels.get(1, TIER), None);
    }

    #[test]
    fn term_namespaces() {
        // Pods 0, 1, 2 run in namespaces 1, 2, 3 and are all app=web.
        let web: &[(i32, i32)] = &[(APP, WEB)];
        let in_ns = |ns: Vec<i32>| TestTerm {
            namespaces: Some(ns),
            ..term(0, 0)
        };
        let cases = vec![
            ("all namespaces", term(0, 0), [true, true, true]),
            ("one namespace", in_ns(vec![2]), [false, true, false]),
            ("a namespace list", in_ns(vec![3, 1]), [true, false, true]),
            ("no namespace matches nothing", in_ns(vec![]), [false, false, false]),
        ];
        for (name, t, want) in cases {
            let owned = table(&[web, web, web], vec![label_is(APP, WEB)], vec![t]);
            let got = [0, 1, 2].map(|pod| owned.view().term_matches(0, pod));
            assert_eq!(got, want, "{name}: want {want:?} got {got:?}");
        }
        let owned = table(&[&[(APP, DB)]], vec![label_is(APP, WEB)], vec![term(0, 0)]);
        assert!(!owned.view().term_matches(0, 0), "the selector must match too");
    }

    #[test]
    fn validation_table() {
        let ok = || {
            let mut t = OwnedPodTable::with_pods(
                &[(0, TablePod::new(&[(APP, WEB)], 1))],
                &[TablePod {
                    term_set: 0,
                    ..TablePod::new(&[(APP, DB)], 1)
                }],
            );
            t.selectors = vec![label_is(APP, WEB)];
            t.terms = vec![term(0, 0)];
            t.term_sets = vec![[vec![0], vec![], vec![], vec![]]];
            t
        };
        let check = |t: &mut OwnedPodTable| {
            t.flatten();
            t.view().validate(2, 1)
        };
        assert_eq!(check(&mut ok()), Ok(()));
        type Break = fn(&mut OwnedPodTable);
        let cases: Vec<(&str, Break, EngineError)> = vec![
            (
                "a namespace per pod",
                |t| t.namespaces.truncate(1),
                EngineError::Shape {
                    what: "pod table namespaces",
                    expected: 2,
                    got: 1,
                },
            ),
            (
                "bound pods on known nodes",
                |t| t.bound_nodes[0] = 2,
                EngineError::Index {
                    what: "pod table node",
                    index: 2,
                    len: 2,
                },
            ),
            (
                "label sets that exist",
                |t| t.label_sets_of_pods[1] = 5,
                EngineError::Index {
                    what: "pod label set",
                    index: 5,
                    len: 2,
                },
            ),
            (
                "terms with known selectors",
                |t| t.terms[0].selector = 1,
                EngineError::Index {
                    what: "pod term selector",
                    index: 1,
                    len: 1,
                },
            ),
            (
                "term sets that exist",
                |t| t.term_sets_of_pods[1] = 1,
                EngineError::Index {
                    what: "pod term set",
                    index: 1,
                    len: 1,
                },
            ),
            (
                "spread constraints for every pending pod",
                |t| t.spread.clear(),
                EngineError::Shape {
                    what: "spread offsets",
                    expected: 2,
                    got: 1,
                },
            ),
        ];
        for (name, breaks, want) in cases {
            let mut t = ok();
            breaks(&mut t);
            assert_eq!(check(&mut t), Err(want), "{name}");
        }
    }
}
