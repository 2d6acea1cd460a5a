//! PodTopologySpread: `DoNotSchedule` constraints filter (skew against the
//! global minimum, `minDomains`, nodes missing the topology key), and
//! `ScheduleAnyway` constraints (or the profile's system defaults) score, as
//! upstream (`plugins/podtopologyspread`), with `nodeAffinityPolicy` and
//! `nodeTaintsPolicy` deciding which nodes' pods count. Pods placed earlier
//! in the batch count like bound pods.
//!
//! This file holds the filter and what both halves read (`Context`); PreScore
//! and Score are in `scoring.rs`, as upstream keeps them in `scoring.go`.

pub mod scoring;

use std::collections::HashMap;

use super::{IdMap, Reason, FEASIBLE};
use crate::model::{reason_code, row, Nodes, PluginId, PodTable};

pub const SPREAD: u32 = reason_code(PluginId::PodTopologySpread, 0);
pub const SPREAD_MISSING_LABEL: u32 = reason_code(PluginId::PodTopologySpread, 1);

/// Its reasons by local index, with upstream's strings; the registry numbers them.
pub const REASONS: &[Reason] = &[
    Reason::resolvable("node(s) didn't match pod topology spread constraints"),
    Reason::unresolvable("node(s) didn't match pod topology spread constraints (missing required label)"),
];

/// What a spread computation needs besides the tables: the incoming pod's
/// row and batch index, and whether a node passes a constraint's inclusion
/// policies (`include(constraint, node)`).
pub struct Context<'a, 'b> {
    pub table: &'a PodTable<'b>,
    pub nodes: &'a Nodes<'b>,
    /// Every pod on a node (table row, node): bound pods, then the batch's placements.
    pub placed: &'a [(u32, u32)],
    pub row: usize,
    pub index: usize,
    /// The pod's constraint class: what `include` depends on besides the node.
    pub class: usize,
    pub include: &'a (dyn Fn(usize, usize) -> bool + Sync),
}

impl Context<'_, '_> {
    fn constraints(&self, hard: bool) -> Vec<usize> {
        let sp = &self.table.spread;
        row(sp.offsets, self.index).filter(|&c| (sp.hard[c] != 0) == hard).collect()
    }

    fn key(&self, c: usize) -> i32 {
        self.table.spread.topology_keys[c]
    }

    fn has_keys(&self, constraints: &[usize], node: usize) -> bool {
        constraints.iter().all(|&c| self.nodes.label(node, self.key(c)).is_some())
    }

    /// Pods per node matching constraint `c`'s selector in the pod's
    /// namespace, skipping terminating pods (upstream `countPodsMatchSelector`).
    fn matching_per_node(&self, c: usize) -> Vec<i64> {
        let t = self.table;
        let selector = t.spread.selectors[c] as usize;
        let mut counts = vec![0i64; self.nodes.count];
        if t.selectors.is_empty(selector) {
            return counts;
        }
        let ns = t.namespaces[self.row];
        // Selector verdict per label set: 0 unknown, 1 no, 2 yes.
        let mut memo = vec![0u8; t.labels.count()];
        for &(other, node) in self.placed {
            let other = other as usize;
            if t.terminating[other] != 0 || t.namespaces[other] != ns {
                continue;
            }
            let set = t.label_sets[other] as usize;
            if memo[set] == 0 {
                memo[set] = 1 + t.selectors.matches(selector, &t.labels, set) as u8;
            }
            if memo[set] == 2 {
                counts[node as usize] += 1;
            }
        }
        counts
    }
}

#[derive(Clone, Debug, PartialEq)]
struct HardConstraint {
    /// The constraint's index in `SpreadConstraints`.
    index: usize,
    key: i32,
    max_skew: i64,
    counts: IdMap<i32, i64>,
    min_match: i64,
    self_match: i64,
}

/// PreFilter state of the `DoNotSchedule` constraints.
#[derive(Clone, Debug, PartialEq)]
pub struct Filter {
    constraints: Vec<HardConstraint>,
}

/// PreFilter; None when the pod has no `DoNotSchedule` constraint.
#[allow(clippy::needless_range_loop)] // nodes index several per-node tables
pub fn prefilter(ctx: &Context) -> Option<Filter> {
    let hard = ctx.constraints(true);
    if hard.is_empty() {
        return None;
    }
    let t = ctx.table;
    let per_node: Vec<Vec<i64>> = hard.iter().map(|&c| ctx.matching_per_node(c)).collect();
    let mut counts: Vec<IdMap<i32, i64>> = vec![IdMap::default(); hard.len()];
    for node in 0..ctx.nodes.count {
        if !ctx.has_keys(&hard, node) {
            continue;
        }
        for (i, &c) in hard.iter().enumerate() {
            if !(ctx.include)(c, node) {
                continue;
            }
            let value = ctx.nodes.label(node, ctx.key(c)).expect("checked by has_keys");
            *counts[i].entry(value).or_insert(0) += per_node[i][node];
        }
    }
    let constraints = hard
        .iter()
        .zip(counts)
        .map(|(&c, counts)| {
            let min_match = min_match(&counts, t.spread.min_domains[c]);
            let selector = t.spread.selectors[c] as usize;
            HardConstraint {
                index: c,
                key: ctx.key(c),
                max_skew: t.spread.max_skew[c],
                counts,
                min_match,
                self_match: t.selectors.matches(selector, &t.labels, t.label_sets[ctx.row] as usize) as i64,
            }
        })
        .collect();
    Some(Filter { constraints })
}

/// `prefilter`'s counts kept across the pods of one call. Pods of one
/// namespace and constraint class with the same `DoNotSchedule` constraints
/// (selector, topology key, inclusion policies) count the same pods in the
/// same domains, so each such group counts only the pods placed since its
/// last pod. For the batch's own list of pods on nodes, which only grows
/// (preemption's dry run, which leaves victims out, uses `prefilter`).
#[derive(Default)]
pub struct Counters {
    groups: HashMap<GroupKey, Group>,
}

#[derive(PartialEq, Eq, Hash)]
struct GroupKey {
    class: usize,
    namespace: i32,
    /// Per `DoNotSchedule` constraint: selector, topology key, nodeAffinityPolicy, nodeTaintsPolicy.
    constraints: Vec<(i64, i32, u8, u8)>,
}

struct Group {
    /// Entries of `Context::placed` counted so far.
    counted: usize,
    /// Per constraint: each node's domain where its pods count (it has every
    /// constraint's topology key and passes this constraint's policies).
    domains: Vec<Vec<Option<i32>>>,
    /// Per constraint: matching pods per domain, every domain of `domains` present.
    counts: Vec<IdMap<i32, i64>>,
    /// Per constraint: its selector's verdict per label set (0 unknown, 1 no, 2 yes).
    verdicts: Vec<Vec<u8>>,
}

impl Group {
    fn new(ctx: &Context, hard: &[usize]) -> Group {
        let n = ctx.nodes.count;
        let keyed: Vec<bool> = (0..n).map(|node| ctx.has_keys(hard, node)).collect();
        let domains: Vec<Vec<Option<i32>>> = hard
            .iter()
            .map(|&c| {
                (0..n)
                    .map(|node| {
                        (keyed[node] && (ctx.include)(c, node)).then(|| ctx.nodes.label(node, ctx.key(c)).expect("checked by has_keys"))
                    })
                    .collect()
            })
            .collect();
        let counts = domains.iter().map(|d| d.iter().flatten().map(|&v| (v, 0)).collect()).collect();
        Group {
            counted: 0,
            domains,
            counts,
            verdicts: vec![vec![0; ctx.table.labels.count()]; hard.len()],
        }
    }

    /// Count the pods placed since the last call (`countPodsMatchSelector`:
    /// the pod's namespace, no terminating pod, none for an empty selector).
    fn count_new(&mut self, ctx: &Context, hard: &[usize]) {
        let t = ctx.table;
        let ns = t.namespaces[ctx.row];
        for &(other, node) in &ctx.placed[self.counted..] {
            let (other, node) = (other as usize, node as usize);
            if t.terminating[other] != 0 || t.namespaces[other] != ns {
                continue;
            }
            let set = t.label_sets[other] as usize;
            for (i, &c) in hard.iter().enumerate() {
                let Some(value) = self.domains[i][node] else {
                    continue;
                };
                let selector = t.spread.selectors[c] as usize;
                let verdict = &mut self.verdicts[i][set];
                if *verdict == 0 {
                    *verdict = 1 + (!t.selectors.is_empty(selector) && t.selectors.matches(selector, &t.labels, set)) as u8;
                }
                if *verdict == 2 {
                    *self.counts[i].get_mut(&value).expect("every domain is counted") += 1;
                }
            }
        }
        self.counted = ctx.placed.len();
    }
}

impl Counters {
    /// `prefilter(ctx)`, counting only the pods placed since the group's last pod.
    pub fn prefilter(&mut self, ctx: &Context) -> Option<Filter> {
        let hard = ctx.constraints(true);
        if hard.is_empty() {
            return None;
        }
        let t = ctx.table;
        let sp = &t.spread;
        let key = GroupKey {
            class: ctx.class,
            namespace: t.namespaces[ctx.row],
            constraints: hard
                .iter()
                .map(|&c| (sp.selectors[c], sp.topology_keys[c], sp.honor_affinity[c], sp.honor_taints[c]))
                .collect(),
        };
        let group = self.groups.entry(key).or_insert_with(|| Group::new(ctx, &hard));
        debug_assert!(group.counted <= ctx.placed.len(), "the pods on nodes only grow");
        group.count_new(ctx, &hard);
        let constraints = hard
            .iter()
            .zip(&group.counts)
            .map(|(&c, counts)| HardConstraint {
                index: c,
                key: ctx.key(c),
                max_skew: sp.max_skew[c],
                counts: counts.clone(),
                min_match: min_match(counts, sp.min_domains[c]),
                self_match: t
                    .selectors
                    .matches(sp.selectors[c] as usize, &t.labels, t.label_sets[ctx.row] as usize) as i64,
            })
            .collect();
        Some(Filter { constraints })
    }
}

/// The lowest count of a constraint's domains, 0 while fewer domains than
/// `minDomains` exist (upstream's `minMatchNum`).
fn min_match(counts: &IdMap<i32, i64>, min_domains: i64) -> i64 {
    if (counts.len() as i64) < min_domains {
        0
    } else {
        counts.values().copied().min().unwrap_or(i32::MAX as i64)
    }
}

impl Filter {
    /// Count pod table row `other` on `node` for the incoming pod (row `pod`;
    /// `include` as in `Context`): upstream's AddPod (`updateWithPod`) for a
    /// nominated pod held there. Upstream matches the selector here even
    /// where it is empty (PreFilter's counting counts no pod for one).
    pub fn add_pod(
        &mut self,
        table: &PodTable,
        nodes: &Nodes,
        include: &dyn Fn(usize, usize) -> bool,
        pod: usize,
        other: usize,
        node: usize,
    ) {
        if table.namespaces[other] != table.namespaces[pod] || self.constraints.iter().any(|c| nodes.label(node, c.key).is_none()) {
            return;
        }
        let set = table.label_sets[other] as usize;
        for c in &mut self.constraints {
            let selector = table.spread.selectors[c.index] as usize;
            if !table.selectors.matches(selector, &table.labels, set) || !include(c.index, node) {
                continue;
            }
            let value = nodes.label(node, c.key).expect("checked above");
            *c.counts.entry(value).or_insert(0) += 1;
            c.min_match = min_match(&c.counts, table.spread.min_domains[c.index]);
        }
    }

    pub fn filter(&self, nodes: &Nodes, node: usize) -> u32 {
        for c in &self.constraints {
            let Some(value) = nodes.label(node, c.key) else {
                return SPREAD_MISSING_LABEL;
            };
            let matching = c.counts.get(&value).copied().unwrap_or(0);
            if matching + c.self_match - c.min_match > c.max_skew {
                return SPREAD;
            }
        }
        FEASIBLE
    }
}

#[cfg(test)]
mod tests;
