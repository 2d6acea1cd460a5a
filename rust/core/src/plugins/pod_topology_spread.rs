//! PodTopologySpread: `DoNotSchedule` constraints filter (skew against the
//! global minimum, `minDomains`, nodes missing the topology key), and
//! `ScheduleAnyway` constraints (or the profile's system defaults) score, as
//! upstream (`plugins/podtopologyspread`), with `nodeAffinityPolicy` and
//! `nodeTaintsPolicy` deciding which nodes' pods count. Pods placed earlier
//! in the batch count like bound pods.

use std::collections::HashMap;
use std::sync::Arc;

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

/// PreScore state of the `ScheduleAnyway` constraints (upstream's
/// `preScoreState`): matching pods per node (hostname constraints) and per
/// domain (the others), for Score over the feasible nodes. None when the
/// pod has no `ScheduleAnyway` constraint (every node scores 0).
#[derive(Clone)]
pub struct ScoreState {
    pub(crate) shape: Arc<ScoreShape>,
    pub(crate) counts: Arc<ScoreCounts>,
}

/// What a `ScheduleAnyway` group's counting depends on besides the pods.
pub(crate) struct ScoreShape {
    /// Per node: left out of scoring (the pod's own constraints need every
    /// topology key, and the node lacks one; upstream's `IgnoredNodes`).
    pub ignored: Vec<bool>,
    pub constraints: Vec<SoftShape>,
}

pub(crate) struct SoftShape {
    pub hostname: bool,
    /// Per node: whether it has the constraint's topology key.
    pub labeled: Vec<bool>,
    /// Per node: its domain (the key's value, the empty string where it has
    /// none), numbered from 0.
    pub domain: Vec<u32>,
    pub domains: usize,
    /// Per node: whether its pods count in its domain (not ignored, and it
    /// passes the constraint's inclusion policies).
    counted: Vec<bool>,
}

#[derive(Clone)]
pub(crate) struct ScoreCounts {
    /// Per constraint: matching pods per node (hostname constraints only).
    pub per_node: Vec<Vec<i64>>,
    /// Per constraint: matching pods per domain (the others).
    pub per_domain: Vec<Vec<i64>>,
}

/// A `ScheduleAnyway` group: its shape, the pods counted so far and the
/// selectors' verdicts per label set (0 unknown, 1 no, 2 yes).
struct ScoreGroup {
    state: ScoreState,
    counted: usize,
    verdicts: Vec<Vec<u8>>,
}

impl ScoreGroup {
    fn new(ctx: &Context, soft: &[usize], require_all: bool) -> ScoreGroup {
        let n = ctx.nodes.count;
        let ignored: Vec<bool> = (0..n).map(|node| require_all && !ctx.has_keys(soft, node)).collect();
        let empty = ctx.nodes.empty_string;
        let constraints: Vec<SoftShape> = soft
            .iter()
            .map(|&c| {
                let values: Vec<Option<i32>> = (0..n).map(|node| ctx.nodes.label(node, ctx.key(c))).collect();
                let mut numbers: IdMap<i32, u32> = IdMap::default();
                let domain = values
                    .iter()
                    .map(|v| {
                        let next = numbers.len() as u32;
                        *numbers.entry(v.unwrap_or(empty)).or_insert(next)
                    })
                    .collect();
                SoftShape {
                    hostname: ctx.key(c) == ctx.table.hostname_key,
                    labeled: values.iter().map(Option::is_some).collect(),
                    domain,
                    domains: numbers.len(),
                    counted: (0..n).map(|node| !ignored[node] && (ctx.include)(c, node)).collect(),
                }
            })
            .collect();
        let counts = ScoreCounts {
            per_node: constraints
                .iter()
                .map(|s| if s.hostname { vec![0; n] } else { Vec::new() })
                .collect(),
            per_domain: constraints
                .iter()
                .map(|s| if s.hostname { Vec::new() } else { vec![0; s.domains] })
                .collect(),
        };
        ScoreGroup {
            state: ScoreState {
                shape: Arc::new(ScoreShape { ignored, constraints }),
                counts: Arc::new(counts),
            },
            counted: 0,
            verdicts: vec![vec![0; ctx.table.labels.count()]; soft.len()],
        }
    }

    /// Count the pods placed since the last call (`countPodsMatchSelector`:
    /// the pod's namespace, no terminating pod, none for an empty selector).
    fn count_new(&mut self, ctx: &Context, soft: &[usize]) {
        let t = ctx.table;
        let ns = t.namespaces[ctx.row];
        let shape = &self.state.shape;
        // Copied only while an earlier pod's PreScore still holds the counts.
        let counts = Arc::make_mut(&mut self.state.counts);
        for &(other, node) in &ctx.placed[self.counted..] {
            let (other, node) = (other as usize, node as usize);
            if t.terminating[other] != 0 || t.namespaces[other] != ns {
                continue;
            }
            let set = t.label_sets[other] as usize;
            for (i, &c) in soft.iter().enumerate() {
                let selector = t.spread.selectors[c] as usize;
                let verdict = &mut self.verdicts[i][set];
                if *verdict == 0 {
                    *verdict = 1 + (!t.selectors.is_empty(selector) && t.selectors.matches(selector, &t.labels, set)) as u8;
                }
                if *verdict != 2 {
                    continue;
                }
                let s = &shape.constraints[i];
                if s.hostname {
                    counts.per_node[i][node] += 1;
                } else if s.counted[node] {
                    counts.per_domain[i][s.domain[node] as usize] += 1;
                }
            }
        }
        self.counted = ctx.placed.len();
    }
}

/// The pod's `ScheduleAnyway` constraints and whether they need every topology
/// key on a node (its own constraints do; the profile's system defaults do not).
pub(crate) fn soft_constraints(ctx: &Context) -> (Vec<usize>, bool) {
    (ctx.constraints(false), ctx.table.spread.system_default[ctx.index] == 0)
}

/// PreScore, counting every pod on nodes afresh.
pub fn prescore(ctx: &Context) -> Option<ScoreState> {
    let (soft, require_all) = soft_constraints(ctx);
    if soft.is_empty() {
        return None;
    }
    let mut group = ScoreGroup::new(ctx, &soft, require_all);
    group.count_new(ctx, &soft);
    Some(group.state)
}

/// `prescore`'s counts kept across the pods of one call, as `Counters` keeps
/// PreFilter's: pods of one namespace and constraint class with the same
/// `ScheduleAnyway` constraints (selector, topology key, inclusion policies)
/// count the same pods in the same domains; for the batch's own list of pods
/// on nodes, which only grows.
#[derive(Default)]
pub struct ScoreCounters {
    groups: HashMap<ScoreKey, ScoreGroup>,
}

#[derive(PartialEq, Eq, Hash)]
struct ScoreKey {
    class: usize,
    namespace: i32,
    require_all: bool,
    constraints: Vec<(i64, i32, u8, u8)>,
}

impl ScoreCounters {
    /// `prescore(ctx)`, counting only the pods placed since the group's last pod.
    pub fn prescore(&mut self, ctx: &Context) -> Option<ScoreState> {
        let (soft, require_all) = soft_constraints(ctx);
        if soft.is_empty() {
            return None;
        }
        let sp = &ctx.table.spread;
        let key = ScoreKey {
            class: ctx.class,
            namespace: ctx.table.namespaces[ctx.row],
            require_all,
            constraints: soft
                .iter()
                .map(|&c| (sp.selectors[c], sp.topology_keys[c], sp.honor_affinity[c], sp.honor_taints[c]))
                .collect(),
        };
        let group = self.groups.entry(key).or_insert_with(|| ScoreGroup::new(ctx, &soft, require_all));
        debug_assert!(group.counted <= ctx.placed.len(), "the pods on nodes only grow");
        group.count_new(ctx, &soft);
        Some(group.state.clone())
    }
}

/// Score the feasible nodes (upstream Score and NormalizeScore): raw and
/// normalized scores in `feasible` order.
pub fn score(state: &ScoreState, ctx: &Context, feasible: &[usize]) -> Option<(Vec<i64>, Vec<i64>)> {
    if feasible.is_empty() {
        return None;
    }
    let (soft, _) = soft_constraints(ctx);
    let (shape, counts) = (&state.shape, &state.counts);
    let ignored: Vec<bool> = feasible.iter().map(|&n| shape.ignored[n]).collect();
    let scored = ignored.iter().filter(|&&i| !i).count();
    // Each constraint's weight: the log of its number of domains among the scored nodes.
    let weights: Vec<f64> = shape
        .constraints
        .iter()
        .map(|s| {
            let size = if s.hostname {
                scored
            } else {
                let mut seen = vec![false; s.domains];
                let mut size = 0;
                for (&node, &ign) in feasible.iter().zip(&ignored) {
                    let d = s.domain[node] as usize;
                    if !ign && !seen[d] {
                        seen[d] = true;
                        size += 1;
                    }
                }
                size
            };
            ((size + 2) as f64).ln()
        })
        .collect();
    // Summed constraint by constraint (in the same order per node as upstream's loop), each
    // a tight pass over the feasible nodes.
    let max_skew = &ctx.table.spread.max_skew;
    let mut sums = vec![0.0f64; feasible.len()];
    for (i, (sh, &c)) in shape.constraints.iter().zip(&soft).enumerate() {
        let (weight, skew) = (weights[i], (max_skew[c] - 1) as f64);
        let nodes = feasible.iter().zip(&ignored).zip(sums.iter_mut());
        if sh.hostname {
            let per_node = &counts.per_node[i];
            for ((&node, &ign), sum) in nodes {
                if !ign && sh.labeled[node] {
                    *sum += per_node[node] as f64 * weight + skew;
                }
            }
        } else {
            let per_domain = &counts.per_domain[i];
            for ((&node, &ign), sum) in nodes {
                if !ign && sh.labeled[node] {
                    *sum += per_domain[sh.domain[node] as usize] as f64 * weight + skew;
                }
            }
        }
    }
    let raw: Vec<i64> = sums.into_iter().map(round_non_negative).collect();
    let normalized = normalize(&raw, &ignored);
    Some((raw, normalized))
}

/// `x.round() as i64` (half away from zero, Go's `math.Round`) for `0 <= x < 2^52`,
/// inline: on baseline x86-64 `f64::round` is a call into libm, once per feasible
/// node of every spread pod.
pub(crate) fn round_non_negative(x: f64) -> i64 {
    debug_assert!((0.0..4_503_599_627_370_496.0).contains(&x));
    let r = (x + 0.5) as i64;
    // `x + 0.5` may round up to the next integer (0.49999999999999994 + 0.5 == 1.0);
    // `r - 0.5` is exact, so the comparison is too.
    if r as f64 - 0.5 > x {
        r - 1
    } else {
        r
    }
}

/// NormalizeScore: the fewer matching pods, the higher; ignored nodes score 0.
fn normalize(raw: &[i64], ignored: &[bool]) -> Vec<i64> {
    let mut min = i64::MAX;
    let mut max = 0i64;
    for (&s, &ign) in raw.iter().zip(ignored) {
        if !ign {
            min = min.min(s);
            max = max.max(s);
        }
    }
    let max_score = super::MAX_NODE_SCORE;
    raw.iter()
        .zip(ignored)
        .map(|(&s, &ign)| {
            if ign {
                0
            } else if max == 0 {
                max_score
            } else {
                max_score * (max + min - s) / max
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
