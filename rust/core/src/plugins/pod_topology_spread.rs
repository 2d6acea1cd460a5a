//! PodTopologySpread: `DoNotSchedule` constraints filter (skew against the
//! global minimum, `minDomains`, nodes missing the topology key), and
//! `ScheduleAnyway` constraints (or the profile's system defaults) score, as
//! upstream (`plugins/podtopologyspread`), with `nodeAffinityPolicy` and
//! `nodeTaintsPolicy` deciding which nodes' pods count. Pods placed earlier
//! in the batch count like bound pods.

use std::collections::{HashMap, HashSet};

use super::{ReasonInfo, FEASIBLE};
use crate::model::{row, Nodes, PluginId, PodTable};

pub const SPREAD: u32 = 8;
pub const SPREAD_MISSING_LABEL: u32 = 9;

pub const REASONS: &[ReasonInfo] = &[
    ReasonInfo {
        code: SPREAD,
        plugin: PluginId::PodTopologySpread,
        message: "node(s) didn't match pod topology spread constraints",
        resolvable: true,
    },
    ReasonInfo {
        code: SPREAD_MISSING_LABEL,
        plugin: PluginId::PodTopologySpread,
        message: "node(s) didn't match pod topology spread constraints (missing required label)",
        resolvable: false,
    },
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

struct HardConstraint {
    key: i32,
    max_skew: i64,
    counts: HashMap<i32, i64>,
    min_match: i64,
    self_match: i64,
}

/// PreFilter state of the `DoNotSchedule` constraints.
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
    let mut counts: Vec<HashMap<i32, i64>> = vec![HashMap::new(); hard.len()];
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
            let min_match = if (counts.len() as i64) < t.spread.min_domains[c] {
                0
            } else {
                counts.values().copied().min().unwrap_or(i32::MAX as i64)
            };
            let selector = t.spread.selectors[c] as usize;
            HardConstraint {
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

impl Filter {
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

/// Score the feasible nodes (upstream PreScore, Score and NormalizeScore):
/// raw and normalized scores in `feasible` order, or None when the pod has no
/// `ScheduleAnyway` constraint (every node scores 0).
#[allow(clippy::needless_range_loop)] // nodes index several per-node tables
pub fn score(ctx: &Context, feasible: &[usize]) -> Option<(Vec<i64>, Vec<i64>)> {
    let soft = ctx.constraints(false);
    if soft.is_empty() || feasible.is_empty() {
        return None;
    }
    let t = ctx.table;
    let nodes = ctx.nodes;
    let require_all = t.spread.system_default[ctx.index] == 0;
    let empty = nodes.empty_string;
    let value_of = |c: usize, node: usize| nodes.label(node, ctx.key(c)).unwrap_or(empty);
    let ignored: Vec<bool> = feasible.iter().map(|&n| require_all && !ctx.has_keys(&soft, n)).collect();
    let scored = ignored.iter().filter(|&&i| !i).count();
    let hostname = |c: usize| ctx.key(c) == t.hostname_key;
    let mut domains: Vec<HashSet<i32>> = vec![HashSet::new(); soft.len()];
    for (&node, &ign) in feasible.iter().zip(&ignored) {
        if ign {
            continue;
        }
        for (i, &c) in soft.iter().enumerate() {
            if !hostname(c) {
                domains[i].insert(value_of(c, node));
            }
        }
    }
    let per_node: Vec<Vec<i64>> = soft.iter().map(|&c| ctx.matching_per_node(c)).collect();
    let mut counts: Vec<HashMap<i32, i64>> = vec![HashMap::new(); soft.len()];
    for node in 0..nodes.count {
        if require_all && !ctx.has_keys(&soft, node) {
            continue;
        }
        for (i, &c) in soft.iter().enumerate() {
            if hostname(c) || !(ctx.include)(c, node) {
                continue;
            }
            let v = value_of(c, node);
            if domains[i].contains(&v) {
                *counts[i].entry(v).or_insert(0) += per_node[i][node];
            }
        }
    }
    let weights: Vec<f64> = soft
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let size = if hostname(c) { scored } else { domains[i].len() };
            ((size + 2) as f64).ln()
        })
        .collect();
    let raw: Vec<i64> = feasible
        .iter()
        .zip(&ignored)
        .map(|(&node, &ign)| {
            if ign {
                return 0;
            }
            let mut s = 0.0;
            for (i, &c) in soft.iter().enumerate() {
                if let Some(v) = nodes.label(node, ctx.key(c)) {
                    let cnt = if hostname(c) {
                        per_node[i][node]
                    } else {
                        counts[i].get(&v).copied().unwrap_or(0)
                    };
                    s += cnt as f64 * weights[i] + (t.spread.max_skew[c] - 1) as f64;
                }
            }
            s.round() as i64
        })
        .collect();
    let mut min = i64::MAX;
    let mut max = 0i64;
    for (&s, &ign) in raw.iter().zip(&ignored) {
        if !ign {
            min = min.min(s);
            max = max.max(s);
        }
    }
    let max_score = super::MAX_NODE_SCORE;
    let normalized = raw
        .iter()
        .zip(&ignored)
        .map(|(&s, &ign)| {
            if ign {
                0
            } else if max == 0 {
                max_score
            } else {
                max_score * (max + min - s) / max
            }
        })
        .collect();
    Some((raw, normalized))
}
