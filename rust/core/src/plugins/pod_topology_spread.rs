//! PodTopologySpread: `DoNotSchedule` constraints filter (skew against the
//! global minimum, `minDomains`, nodes missing the topology key), and
//! `ScheduleAnyway` constraints (or the profile's system defaults) score, as
//! upstream (`plugins/podtopologyspread`), with `nodeAffinityPolicy` and
//! `nodeTaintsPolicy` deciding which nodes' pods count. Pods placed earlier
//! in the batch count like bound pods.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::{IdMap, ReasonInfo, FEASIBLE};
use crate::model::{row, Nodes, PluginId, PodTable};

pub const SPREAD: u32 = 15;
pub const SPREAD_MISSING_LABEL: u32 = 16;

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
    shape: Arc<ScoreShape>,
    counts: Arc<ScoreCounts>,
}

/// What a `ScheduleAnyway` group's counting depends on besides the pods.
struct ScoreShape {
    /// Per node: left out of scoring (the pod's own constraints need every
    /// topology key, and the node lacks one; upstream's `IgnoredNodes`).
    ignored: Vec<bool>,
    constraints: Vec<SoftShape>,
}

struct SoftShape {
    hostname: bool,
    /// Per node: whether it has the constraint's topology key.
    labeled: Vec<bool>,
    /// Per node: its domain (the key's value, the empty string where it has
    /// none), numbered from 0.
    domain: Vec<u32>,
    domains: usize,
    /// Per node: whether its pods count in its domain (not ignored, and it
    /// passes the constraint's inclusion policies).
    counted: Vec<bool>,
}

#[derive(Clone)]
struct ScoreCounts {
    /// Per constraint: matching pods per node (hostname constraints only).
    per_node: Vec<Vec<i64>>,
    /// Per constraint: matching pods per domain (the others).
    per_domain: Vec<Vec<i64>>,
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
fn soft_constraints(ctx: &Context) -> (Vec<usize>, bool) {
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

/// Buffers `add_scores` reuses from pod to pod.
#[derive(Default)]
pub struct Scratch {
    /// The feasible nodes that are scored (not ignored): the first `scored` entries.
    scored: Vec<u32>,
    /// Their sums, then their raw scores.
    sums: Vec<f64>,
    raw: Vec<i64>,
    /// The feasible nodes left out of scoring (they score 0).
    ignored: Vec<u32>,
    /// Per constraint (at its offset): whether a domain holds a scored node.
    seen: Vec<bool>,
    /// Normalized score times the weight per raw score minus the minimum (-1: not computed yet).
    weighted: Vec<i64>,
}

/// The largest spread of raw scores whose weighted scores are kept in a table.
const WEIGHTED_TABLE: i64 = 1 << 12;

/// `score` for every node that `feasible` admits, its normalized scores times
/// `weight` added to `base` into `out` (the other nodes keep `base`'s total):
/// what `score` and the engine's sum of pod-level scores give a pod whose only
/// pod-level score is this one, in node order and with the same arithmetic,
/// but without node lists or columns built per pod, and with each domain's
/// term computed once. A batch of ReplicaSet pods (the profile's system-default
/// constraints) scores every node this way for every pod.
pub fn add_scores(
    state: &ScoreState,
    ctx: &Context,
    weight: i64,
    feasible: impl Fn(usize) -> bool,
    base: &[f64],
    out: &mut Vec<f64>,
    scratch: &mut Scratch,
) {
    out.clear();
    out.extend_from_slice(base);
    let n = base.len();
    let (soft, _) = soft_constraints(ctx);
    let (shape, counts) = (&*state.shape, &*state.counts);
    let constraints = &shape.constraints;
    let Scratch {
        scored,
        sums,
        raw,
        ignored,
        seen,
        weighted,
    } = scratch;
    // Each constraint's offset into `seen` (its domains; hostname constraints have none).
    let mut offsets = Vec::with_capacity(constraints.len());
    let mut domains = 0;
    for s in constraints {
        offsets.push(domains);
        if !s.hostname {
            domains += s.domains;
        }
    }
    seen.clear();
    seen.resize(domains, false);
    ignored.clear();
    scored.clear();
    scored.resize(n, 0);
    // The scored nodes (written at `k` always, kept where the node counts), and the
    // domains that hold one.
    let mut k = 0;
    for node in 0..n {
        let is_feasible = feasible(node);
        let counts_here = is_feasible && !shape.ignored[node];
        if is_feasible && !counts_here {
            ignored.push(node as u32);
        }
        scored[k] = node as u32;
        k += counts_here as usize;
        for (s, &offset) in constraints.iter().zip(&offsets) {
            if !s.hostname {
                seen[offset + s.domain[node] as usize] |= counts_here;
            }
        }
    }
    scored.truncate(k);
    if scored.is_empty() && ignored.is_empty() {
        return; // no feasible node: nothing scored
    }
    // Per node, constraint by constraint (upstream's order), `count × weight + skew`
    // where the node has the key; a domain's term is computed once per domain.
    let max_skew = &ctx.table.spread.max_skew;
    sums.clear();
    sums.resize(k, 0.0);
    for (i, (s, &c)) in constraints.iter().zip(&soft).enumerate() {
        let size = if s.hostname {
            k
        } else {
            seen[offsets[i]..offsets[i] + s.domains].iter().filter(|&&x| x).count()
        };
        let (w, skew) = (((size + 2) as f64).ln(), (max_skew[c] - 1) as f64);
        if s.hostname {
            let per_node = &counts.per_node[i];
            for (sum, &node) in sums.iter_mut().zip(scored.iter()) {
                let node = node as usize;
                if s.labeled[node] {
                    *sum += per_node[node] as f64 * w + skew;
                }
            }
        } else {
            let terms: Vec<f64> = counts.per_domain[i].iter().map(|&m| m as f64 * w + skew).collect();
            for (sum, &node) in sums.iter_mut().zip(scored.iter()) {
                let node = node as usize;
                if s.labeled[node] {
                    *sum += terms[s.domain[node] as usize];
                }
            }
        }
    }
    raw.clear();
    raw.extend(sums.iter().map(|&x| round_non_negative(x)));
    let (min, max) = raw.iter().fold((i64::MAX, 0i64), |(lo, hi), &r| (lo.min(r), hi.max(r)));
    // NormalizeScore, times the weight: few distinct raw scores, so each is divided once.
    let max_score = super::MAX_NODE_SCORE;
    let of = |r: i64| if max == 0 { max_score } else { max_score * (max + min - r) / max } * weight;
    if max - min < WEIGHTED_TABLE {
        weighted.clear();
        weighted.resize((max - min + 1).max(0) as usize, -1);
        for (&node, &r) in scored.iter().zip(raw.iter()) {
            let slot = &mut weighted[(r - min) as usize];
            if *slot < 0 {
                *slot = of(r);
            }
            out[node as usize] += *slot as f64;
        }
    } else {
        for (&node, &r) in scored.iter().zip(raw.iter()) {
            out[node as usize] += of(r) as f64;
        }
    }
    for &node in ignored.iter() {
        out[node as usize] += 0.0;
    }
}

/// A finite total as a key that sorts as the number does (`-0.0` just below `0.0`).
fn rank_key(total: f64) -> u64 {
    let bits = total.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    }
}

fn rank_total(key: u64) -> f64 {
    f64::from_bits(if key >> 63 == 1 { key & !(1 << 63) } else { !key })
}

/// Nodes whose spread score has the same inputs: whether each constraint's key is
/// on the node and, where it is, the node's count (hostname constraints) or domain;
/// the nodes left out of scoring are one group of their own.
struct RankGroup {
    /// Per constraint: -1 where the node lacks the key, else its count or domain.
    inputs: Vec<i64>,
    ignored: bool,
    /// Its feasible nodes by their total without the spread score (`rank_key`).
    nodes: BTreeSet<(u64, u32)>,
}

/// Selection for a run of pods that share a signature and a `ScheduleAnyway`
/// group, without visiting every node for every pod: `add_scores` then
/// `select::select`, computed by groups. A node's spread score depends only on its
/// group's inputs, and within a group the node with the highest total without the
/// spread score has the highest total with it (adding a number is monotone), so
/// each pod computes one raw score per group, and visits only the nodes that tie
/// for the best total. The nodes that a placement changes (`BatchState::log`) move
/// between groups as the call goes on.
pub struct Ranked {
    shape: Arc<ScoreShape>,
    generation: u64,
    /// `BatchState::log` entries applied.
    synced: usize,
    groups: Vec<RankGroup>,
    index: HashMap<(Vec<i64>, bool), u32>,
    /// Per node: its group and key, where it is feasible.
    of_node: Vec<Option<(u32, u64)>>,
    /// Scored (feasible, not ignored) nodes, in all and per constraint and domain.
    scored: usize,
    per_domain: Vec<Vec<usize>>,
    /// A feasible node's total was not finite: `select` gives way from then on.
    unranked: bool,
}

impl ScoreState {
    /// Which `ScheduleAnyway` group (of the call) the state is of.
    pub fn shape_id(&self) -> usize {
        Arc::as_ptr(&self.shape) as usize
    }
}

impl Ranked {
    /// Rank the feasible nodes (`feasible`) by `base`, the signature's totals as of
    /// `log_len` entries of the batch's log and its totals' `generation`.
    pub fn new(state: &ScoreState, feasible: impl Fn(usize) -> bool, base: &[f64], generation: u64, log_len: usize) -> Ranked {
        let shape = state.shape.clone();
        let per_domain = shape
            .constraints
            .iter()
            .map(|s| if s.hostname { Vec::new() } else { vec![0; s.domains] })
            .collect();
        let mut ranked = Ranked {
            shape,
            generation,
            synced: log_len,
            groups: Vec::new(),
            index: HashMap::new(),
            of_node: vec![None; base.len()],
            scored: 0,
            per_domain,
            unranked: false,
        };
        for node in 0..base.len() {
            ranked.add(state, &feasible, base, node);
        }
        ranked
    }

    /// Whether this ranking was built on `shape` and totals of `generation`.
    pub fn fits(&self, state: &ScoreState, generation: u64) -> bool {
        Arc::ptr_eq(&self.shape, &state.shape) && self.generation == generation
    }

    /// The node's group by its current inputs (added if new).
    fn group_of(&mut self, state: &ScoreState, node: usize) -> u32 {
        let shape = &self.shape;
        let ignored = shape.ignored[node];
        let inputs: Vec<i64> = if ignored {
            Vec::new()
        } else {
            shape
                .constraints
                .iter()
                .enumerate()
                .map(|(i, s)| match (s.labeled[node], s.hostname) {
                    (false, _) => -1,
                    (true, true) => state.counts.per_node[i][node],
                    (true, false) => s.domain[node] as i64,
                })
                .collect()
        };
        let groups = &mut self.groups;
        *self.index.entry((inputs, ignored)).or_insert_with_key(|(inputs, ignored)| {
            groups.push(RankGroup {
                inputs: inputs.clone(),
                ignored: *ignored,
                nodes: BTreeSet::new(),
            });
            (groups.len() - 1) as u32
        })
    }

    /// Count a node in (`by` 1) or out of (-1) the scored nodes and its domains.
    fn count(&mut self, node: usize, group: usize, by: isize) {
        if self.groups[group].ignored {
            return;
        }
        self.scored = self.scored.wrapping_add_signed(by);
        for (i, s) in self.shape.constraints.iter().enumerate() {
            if !s.hostname {
                let d = &mut self.per_domain[i][s.domain[node] as usize];
                *d = d.wrapping_add_signed(by);
            }
        }
    }

    /// Apply the nodes the batch changed since the last pod (`log`).
    fn sync(&mut self, state: &ScoreState, feasible: &impl Fn(usize) -> bool, base: &[f64], log: &[u32]) {
        for &node in &log[self.synced.min(log.len())..] {
            let node = node as usize;
            if let Some((group, key)) = self.of_node[node].take() {
                self.groups[group as usize].nodes.remove(&(key, node as u32));
                self.count(node, group as usize, -1);
            }
            self.add(state, feasible, base, node);
        }
        self.synced = log.len();
    }

    /// Rank a node where it is feasible.
    fn add(&mut self, state: &ScoreState, feasible: &impl Fn(usize) -> bool, base: &[f64], node: usize) {
        if !feasible(node) {
            return;
        }
        if !base[node].is_finite() {
            self.unranked = true;
            return;
        }
        let group = self.group_of(state, node) as usize;
        let key = rank_key(base[node]);
        self.groups[group].nodes.insert((key, node as u32));
        self.count(node, group, 1);
        self.of_node[node] = Some((group as u32, key));
    }

    /// `add_scores(state, ctx, weight, feasible, base, ..)` then `select::select` over
    /// its totals: the node, its total and its tie key, None where no node is
    /// feasible. Err(()) where a feasible node's total is not finite (then the
    /// caller scores every node).
    #[allow(clippy::too_many_arguments, clippy::result_unit_err)]
    pub fn select(
        &mut self,
        state: &ScoreState,
        ctx: &Context,
        weight: i64,
        feasible: impl Fn(usize) -> bool,
        base: &[f64],
        log: &[u32],
        tie: impl Fn(usize) -> u64,
    ) -> Result<Option<(usize, f64, u64)>, ()> {
        self.sync(state, &feasible, base, log);
        if self.unranked {
            return Err(());
        }
        let (soft, _) = soft_constraints(ctx);
        let counts = &*state.counts;
        let max_skew = &ctx.table.spread.max_skew;
        // Each constraint's weight and `maxSkew - 1`, as `add_scores` computes them.
        let terms: Vec<(f64, f64)> = self
            .shape
            .constraints
            .iter()
            .zip(&soft)
            .enumerate()
            .map(|(i, (s, &c))| {
                let size = if s.hostname {
                    self.scored
                } else {
                    self.per_domain[i].iter().filter(|&&m| m > 0).count()
                };
                (((size + 2) as f64).ln(), (max_skew[c] - 1) as f64)
            })
            .collect();
        // Each group's raw score (None: ignored), and the lowest and highest.
        let raws: Vec<Option<i64>> = self
            .groups
            .iter()
            .map(|g| {
                if g.ignored || g.nodes.is_empty() {
                    return None;
                }
                let mut sum = 0.0f64;
                for (i, ((s, &(w, skew)), &input)) in self.shape.constraints.iter().zip(&terms).zip(&g.inputs).enumerate() {
                    if input >= 0 {
                        sum += if s.hostname {
                            input as f64 * w + skew
                        } else {
                            counts.per_domain[i][input as usize] as f64 * w + skew
                        };
                    }
                }
                Some(round_non_negative(sum))
            })
            .collect();
        let (min, max) = raws.iter().flatten().fold((i64::MAX, 0i64), |(lo, hi), &r| (lo.min(r), hi.max(r)));
        let max_score = super::MAX_NODE_SCORE;
        let added = |raw: Option<i64>| -> f64 {
            let score = match raw {
                None => 0,
                Some(_) if max == 0 => max_score,
                Some(r) => max_score * (max + min - r) / max,
            };
            (score * weight) as f64
        };
        // The best total, then the tie keys of the nodes that reach it.
        let mut best_total = f64::NEG_INFINITY;
        let mut any = false;
        for (g, &raw) in self.groups.iter().zip(&raws) {
            if let Some(&(key, _)) = g.nodes.last() {
                any = true;
                let t = rank_total(key) + added(raw);
                if t > best_total {
                    best_total = t;
                }
            }
        }
        if !any {
            return Ok(None);
        }
        let mut best: Option<(u64, usize)> = None;
        for (g, &raw) in self.groups.iter().zip(&raws) {
            let add = added(raw);
            for &(key, node) in g.nodes.iter().rev() {
                if rank_total(key) + add != best_total {
                    break;
                }
                let (t, node) = (tie(node as usize), node as usize);
                // The highest tie key; among equal keys the first node, as `select` keeps.
                if best.is_none_or(|(bt, bn)| t > bt || (t == bt && node < bn)) {
                    best = Some((t, node));
                }
            }
        }
        Ok(best.map(|(t, node)| (node, best_total, t)))
    }
}

/// `x.round() as i64` (half away from zero, Go's `math.Round`) for `0 <= x < 2^52`,
/// inline: on baseline x86-64 `f64::round` is a call into libm, once per feasible
/// node of every spread pod.
fn round_non_negative(x: f64) -> i64 {
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
mod tests {
    //! Upstream-style cases (`podtopologyspread/filtering_test.go`,
    //! `scoring_test.go`): a small cluster, existing pods, one incoming pod,
    //! and each node's verdict or score, run through the whole engine so the
    //! inclusion policies and class filters are the real ones.

    use std::collections::HashSet;

    use super::*;
    use crate::model::{EFFECT_NO_SCHEDULE, SEL_IN};
    use crate::plugins::node_affinity::NODE_AFFINITY;
    use crate::plugins::taint_toleration::TAINT_TOLERATION;
    use crate::plugins::IdBuild;
    use crate::test_support::{
        explain_first, label_is, pod, scores_of, spread, verdicts, zoned_nodes, OwnedClasses, OwnedPodTable, Req, TablePod, TestSelector,
        TestSpread, HOSTNAME, ZONE,
    };

    const APP: i32 = 20;
    const VERSION: i32 = 21;
    const FOO: i32 = 200;
    const BAR: i32 = 201;
    const V1: i32 = 210;
    const V2: i32 = 211;
    const Z1: i32 = 110;
    const Z2: i32 = 111;
    const Z3: i32 = 112;
    const NS: i32 = 1;
    const OTHER_NS: i32 = 2;
    const TAINT: i32 = 30;
    const F: u32 = FEASIBLE;

    struct Case {
        name: &'static str,
        /// Zone of each node (None: no zone label).
        zones: Vec<Option<i32>>,
        /// Nodes with an untolerated NoSchedule taint.
        tainted: Vec<usize>,
        /// The incoming pod's required node affinity: zone In these.
        affinity_zones: Option<Vec<i32>>,
        /// Bound pods: (node, pod).
        existing: Vec<(i64, TablePod)>,
        labels: Vec<(i32, i32)>,
        selectors: Vec<TestSelector>,
        constraints: Vec<TestSpread>,
        system_default: bool,
    }

    fn case(name: &'static str, zones: Vec<Option<i32>>, constraints: Vec<TestSpread>) -> Case {
        Case {
            name,
            zones,
            tainted: vec![],
            affinity_zones: None,
            existing: vec![],
            labels: vec![(APP, FOO)],
            selectors: vec![label_is(APP, FOO)],
            constraints,
            system_default: false,
        }
    }

    fn foo_on(nodes: &[i64]) -> Vec<(i64, TablePod)> {
        nodes.iter().map(|&n| (n, TablePod::new(&[(APP, FOO)], NS))).collect()
    }

    fn terminating(labels: &[(i32, i32)]) -> TablePod {
        TablePod {
            terminating: true,
            ..TablePod::new(labels, NS)
        }
    }

    fn run(c: &Case) -> crate::schedule::Explanation {
        let mut nodes = zoned_nodes(&c.zones);
        for &n in &c.tainted {
            nodes.nodes[n].taints.push((TAINT, 0, EFFECT_NO_SCHEDULE));
        }
        let mut classes = OwnedClasses::default();
        classes.add(|k| k.required = c.affinity_zones.clone().map(|z| vec![vec![Req::In(ZONE, z)]]));
        let mut table = OwnedPodTable::with_pods(&c.existing, &[TablePod::new(&c.labels, NS)]);
        table.selectors = c.selectors.clone();
        table.spread = vec![c.constraints.clone()];
        table.system_default = vec![c.system_default as u8];
        table.flatten();
        explain_first(&nodes, &mut classes, &[pod(100, 1)], Some(&table)).1
    }

    #[test]
    fn filter_table() {
        let hard_zone = || spread(1, ZONE, true, 0);
        let two_zones = || vec![Some(Z1), Some(Z1), Some(Z2), Some(Z2)];
        let cases: Vec<(Case, Vec<u32>)> = vec![
            (
                Case {
                    existing: foo_on(&[0, 1, 2]),
                    ..case("maxSkew 1: only the emptier zone", two_zones(), vec![hard_zone()])
                },
                vec![SPREAD, SPREAD, F, F],
            ),
            (
                Case {
                    existing: foo_on(&[0, 1, 2]),
                    ..case("maxSkew 2 admits both zones", two_zones(), vec![spread(2, ZONE, true, 0)])
                },
                vec![F, F, F, F],
            ),
            (
                Case {
                    existing: foo_on(&[0, 1, 2, 2]),
                    ..case(
                        "missing topology key: the node fails and its pods do not count",
                        vec![Some(Z1), Some(Z2), None],
                        vec![hard_zone()],
                    )
                },
                vec![F, F, SPREAD_MISSING_LABEL],
            ),
            (
                Case {
                    existing: foo_on(&[0, 2]),
                    ..case("minDomains met: the minimum is the emptiest zone", two_zones(), vec![hard_zone()])
                },
                vec![F, F, F, F],
            ),
            (
                Case {
                    existing: foo_on(&[0, 2]),
                    ..case(
                        "minDomains 3 over two zones: the global minimum is 0",
                        two_zones(),
                        vec![TestSpread {
                            min_domains: 3,
                            ..hard_zone()
                        }],
                    )
                },
                vec![SPREAD, SPREAD, SPREAD, SPREAD],
            ),
            (
                Case {
                    existing: foo_on(&[0, 1]),
                    affinity_zones: Some(vec![Z1, Z2]),
                    ..case(
                        "nodeAffinityPolicy Honor: the zone the pod cannot use does not count",
                        vec![Some(Z1), Some(Z2), Some(Z3)],
                        vec![hard_zone()],
                    )
                },
                vec![F, F, NODE_AFFINITY],
            ),
            (
                Case {
                    existing: foo_on(&[0, 1]),
                    affinity_zones: Some(vec![Z1, Z2]),
                    ..case(
                        "nodeAffinityPolicy Ignore: the empty zone sets the minimum",
                        vec![Some(Z1), Some(Z2), Some(Z3)],
                        vec![TestSpread {
                            honor_affinity: false,
                            ..hard_zone()
                        }],
                    )
                },
                vec![SPREAD, SPREAD, NODE_AFFINITY],
            ),
            (
                Case {
                    existing: foo_on(&[0, 1]),
                    tainted: vec![2],
                    ..case(
                        "nodeTaintsPolicy Ignore: the tainted empty zone sets the minimum",
                        vec![Some(Z1), Some(Z2), Some(Z3)],
                        vec![hard_zone()],
                    )
                },
                vec![SPREAD, SPREAD, TAINT_TOLERATION],
            ),
            (
                Case {
                    existing: foo_on(&[0, 1]),
                    tainted: vec![2],
                    ..case(
                        "nodeTaintsPolicy Honor: the tainted zone does not count",
                        vec![Some(Z1), Some(Z2), Some(Z3)],
                        vec![TestSpread {
                            honor_taints: true,
                            ..hard_zone()
                        }],
                    )
                },
                vec![F, F, TAINT_TOLERATION],
            ),
            (
                Case {
                    existing: vec![
                        (0, TablePod::new(&[(APP, FOO), (VERSION, V1)], NS)),
                        (0, TablePod::new(&[(APP, FOO), (VERSION, V1)], NS)),
                        (2, TablePod::new(&[(APP, FOO), (VERSION, V2)], NS)),
                    ],
                    labels: vec![(APP, FOO), (VERSION, V2)],
                    ..case("selector app=foo counts every version", two_zones(), vec![hard_zone()])
                },
                vec![SPREAD, SPREAD, F, F],
            ),
            (
                Case {
                    existing: vec![
                        (0, TablePod::new(&[(APP, FOO), (VERSION, V1)], NS)),
                        (0, TablePod::new(&[(APP, FOO), (VERSION, V1)], NS)),
                        (2, TablePod::new(&[(APP, FOO), (VERSION, V2)], NS)),
                    ],
                    labels: vec![(APP, FOO), (VERSION, V2)],
                    // matchLabelKeys [version], resolved by the caller into `version In [v2]`.
                    selectors: vec![Some(vec![(APP, SEL_IN, vec![FOO]), (VERSION, SEL_IN, vec![V2])])],
                    ..case("matchLabelKeys: only the pod's own version counts", two_zones(), vec![hard_zone()])
                },
                vec![F, F, SPREAD, SPREAD],
            ),
            (
                Case {
                    existing: vec![
                        (0, TablePod::new(&[(APP, FOO)], OTHER_NS)),
                        (0, TablePod::new(&[(APP, FOO)], OTHER_NS)),
                        (2, TablePod::new(&[(APP, FOO)], NS)),
                    ],
                    ..case("pods of other namespaces do not count", two_zones(), vec![hard_zone()])
                },
                vec![F, F, SPREAD, SPREAD],
            ),
            (
                Case {
                    existing: vec![
                        (0, terminating(&[(APP, FOO)])),
                        (0, terminating(&[(APP, FOO)])),
                        (2, TablePod::new(&[(APP, FOO)], NS)),
                    ],
                    ..case("terminating pods do not count", two_zones(), vec![hard_zone()])
                },
                vec![F, F, SPREAD, SPREAD],
            ),
            (
                Case {
                    existing: foo_on(&[0, 2, 2]),
                    labels: vec![(APP, BAR)],
                    ..case(
                        "an incoming pod its selector does not match adds nothing to the skew",
                        two_zones(),
                        vec![hard_zone()],
                    )
                },
                vec![F, F, F, F],
            ),
            (
                Case {
                    existing: foo_on(&[0, 2, 2]),
                    ..case("an incoming pod it matches counts itself", two_zones(), vec![hard_zone()])
                },
                vec![F, F, SPREAD, SPREAD],
            ),
            (
                Case {
                    existing: foo_on(&[0, 0, 0]),
                    ..case(
                        "two constraints: hostname and zone must both hold",
                        two_zones(),
                        vec![spread(1, HOSTNAME, true, 0), spread(4, ZONE, true, 0)],
                    )
                },
                vec![SPREAD, F, F, F],
            ),
        ];
        for (c, want) in cases {
            let got = verdicts(&run(&c));
            assert_eq!(got, want, "{}: want {:?} got {:?}", c.name, want, got);
        }
    }

    /// Ten nodes in three zones (every fourth without the zone key) and 40
    /// bound pods of three label sets in two namespaces, some terminating.
    fn mixed_cluster() -> (Vec<Option<i32>>, Vec<(i64, TablePod)>) {
        let zones: Vec<Option<i32>> = (0..10).map(|i| (i % 4 != 3).then_some(Z1 + (i % 3))).collect();
        let labels = [vec![(APP, FOO)], vec![(APP, BAR)], vec![(APP, FOO), (VERSION, V1)]];
        let bound: Vec<(i64, TablePod)> = (0..40)
            .map(|i| {
                let p = TablePod {
                    terminating: i % 7 == 0,
                    ..TablePod::new(&labels[i % 3], if i % 5 == 0 { OTHER_NS } else { NS })
                };
                ((i * 7 % 10) as i64, p)
            })
            .collect();
        (zones, bound)
    }

    /// `Counters` counts each group's new pods only; after every placement
    /// its PreFilter state must equal `prefilter`'s, which counts every pod
    /// on every node afresh. Pods of two namespaces, terminating pods, nodes
    /// without the zone key, a policy that leaves some nodes out, two groups
    /// (one with a second, hostname constraint) taking turns.
    #[test]
    fn counters_match_prefilter_after_every_placement() {
        let (zones, bound) = mixed_cluster();
        let built = zoned_nodes(&zones).build();
        let nodes = built.view();
        let pending = [TablePod::new(&[(APP, FOO)], NS), TablePod::new(&[(APP, FOO)], NS)];
        let mut table = OwnedPodTable::with_pods(&bound, &pending);
        table.selectors = vec![label_is(APP, FOO), Some(vec![])];
        table.spread = vec![
            vec![spread(1, ZONE, true, 0)],
            vec![spread(2, ZONE, true, 0), spread(1, HOSTNAME, true, 0), spread(1, ZONE, true, 1)],
        ];
        table.flatten();
        let view = table.view();
        let placed: Vec<(u32, u32)> = bound.iter().enumerate().map(|(r, &(n, _))| (r as u32, n as u32)).collect();
        let include = |c: usize, node: usize| c == 0 || node % 3 != 2;
        let mut counters = Counters::default();
        for k in 0..=placed.len() {
            for index in [k % 2, 1 - k % 2] {
                let ctx = pending_ctx(&view, &nodes, &placed[..k], bound.len(), index, &include);
                assert_eq!(counters.prefilter(&ctx), prefilter(&ctx), "pod {index} after {k} placements");
            }
        }
    }

    /// Score as upstream's PreScore and Score compute it for one pod: every
    /// pod on nodes counted afresh, domains and counts in hash maps.
    #[allow(clippy::needless_range_loop)]
    fn direct_score(ctx: &Context, feasible: &[usize]) -> Option<(Vec<i64>, Vec<i64>)> {
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
        let mut domains: Vec<HashSet<i32, IdBuild>> = vec![HashSet::default(); soft.len()];
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
        let mut counts: Vec<HashMap<i32, i64, IdBuild>> = vec![HashMap::default(); soft.len()];
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
        let normalized = normalize(&raw, &ignored);
        Some((raw, normalized))
    }

    /// The context of pending pod `index` of a table with `bound` bound pods.
    fn pending_ctx<'a, 'b>(
        view: &'a PodTable<'b>,
        nodes: &'a Nodes<'b>,
        placed: &'a [(u32, u32)],
        bound: usize,
        index: usize,
        include: &'a (dyn Fn(usize, usize) -> bool + Sync),
    ) -> Context<'a, 'b> {
        Context {
            table: view,
            nodes,
            placed,
            row: bound + index,
            index,
            class: 0,
            include,
        }
    }

    /// `bound` and three pending app=foo pods: one with its own `ScheduleAnyway`
    /// constraint (zone), two with system defaults (hostname and zone; the second's
    /// zone constraint ignores node affinity).
    fn three_scored_pods(bound: &[(i64, TablePod)]) -> OwnedPodTable {
        let pending = [
            TablePod::new(&[(APP, FOO)], NS),
            TablePod::new(&[(APP, FOO)], NS),
            TablePod::new(&[(APP, FOO)], NS),
        ];
        let mut table = OwnedPodTable::with_pods(bound, &pending);
        table.selectors = vec![label_is(APP, FOO), Some(vec![])];
        let unpolicied = TestSpread {
            honor_affinity: false,
            ..spread(5, ZONE, false, 0)
        };
        table.spread = vec![
            vec![spread(2, ZONE, false, 0)],
            vec![spread(3, HOSTNAME, false, 0), spread(5, ZONE, false, 0)],
            vec![spread(3, HOSTNAME, false, 0), unpolicied],
        ];
        table.system_default = vec![0, 1, 1];
        table.flatten();
        table
    }

    /// `ScoreCounters` counts each group's new pods only, and scoring reads
    /// numbered domains: after every placement, for a pod with its own
    /// constraints and two with the profile's system defaults (one with a
    /// policy that leaves some nodes out), over all nodes and over a subset,
    /// its scores must equal `direct_score`'s. Pods of two namespaces,
    /// terminating pods, nodes without the zone key.
    #[test]
    fn kept_scores_match_a_direct_count_after_every_placement() {
        let (zones, bound) = mixed_cluster();
        let built = zoned_nodes(&zones).build();
        let nodes = built.view();
        let table = three_scored_pods(&bound);
        let view = table.view();
        let placed: Vec<(u32, u32)> = bound.iter().enumerate().map(|(r, &(n, _))| (r as u32, n as u32)).collect();
        let include = |c: usize, node: usize| view.spread.honor_affinity[c] == 0 || node % 3 != 2;
        let all: Vec<usize> = (0..nodes.count).collect();
        let some: Vec<usize> = (0..nodes.count).filter(|n| n % 4 != 1).collect();
        let mut counters = ScoreCounters::default();
        for k in 0..=placed.len() {
            for index in [k % 3, (k + 1) % 3, (k + 2) % 3] {
                let ctx = pending_ctx(&view, &nodes, &placed[..k], bound.len(), index, &include);
                let kept = counters.prescore(&ctx).expect("every pod has a ScheduleAnyway constraint");
                let fresh = prescore(&ctx).expect("every pod has a ScheduleAnyway constraint");
                for feasible in [&all, &some] {
                    let want = direct_score(&ctx, feasible);
                    assert_eq!(score(&kept, &ctx, feasible), want, "pod {index} after {k} placements, kept");
                    assert_eq!(score(&fresh, &ctx, feasible), want, "pod {index} after {k} placements, fresh");
                }
            }
        }
    }

    /// `Ranked` (built once, then kept in step through the log of placed nodes)
    /// must select what `add_scores` then `select::select` select, and
    /// `add_scores` must give each feasible node its total plus `score`'s
    /// normalized score times the weight, after every placement: for a pod
    /// with its own constraints (nodes without the zone key left out), and
    /// two with the system defaults (one with a policy that leaves nodes
    /// out). The totals without spread take few values (-0.0 and 0.0
    /// among them), so many nodes tie; the tie keys do too, where the first
    /// node must win; nodes turn infeasible and back. A total that is not
    /// finite makes the ranking give way.
    #[test]
    fn ranked_selection_matches_scoring_every_node() {
        let mut rng = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |below: u64| {
            rng = crate::schedule::select::splitmix64(rng);
            rng % below
        };
        let n = 30;
        let zones: Vec<Option<i32>> = (0..n).map(|i| (i % 5 != 4).then_some(Z1 + (i % 3) as i32)).collect();
        let built = zoned_nodes(&zones).build();
        let nodes = built.view();
        let labels = [vec![(APP, FOO)], vec![(APP, BAR)]];
        let bound: Vec<(i64, TablePod)> = (0..150)
            .map(|i| {
                let p = TablePod {
                    terminating: i % 11 == 0,
                    ..TablePod::new(&labels[(next(3) == 0) as usize], NS)
                };
                (next(n as u64) as i64, p)
            })
            .collect();
        let table = three_scored_pods(&bound);
        let view = table.view();
        let placed: Vec<(u32, u32)> = bound.iter().enumerate().map(|(r, &(node, _))| (r as u32, node as u32)).collect();
        let log: Vec<u32> = placed.iter().map(|&(_, node)| node).collect();
        let include = |c: usize, node: usize| view.spread.honor_affinity[c] == 0 || node % 3 != 2;
        let values = [-0.0, 0.0, 12.0, 12.5, 14.25];
        let mut base: Vec<f64> = (0..n).map(|_| values[next(5) as usize]).collect();
        let mut feasible = vec![true; n];
        let mut counters = ScoreCounters::default();
        let mut rankings: Vec<Option<Ranked>> = (0..3).map(|_| None).collect();
        let (mut out, mut scratch) = (Vec::new(), Scratch::default());
        let weight = 2;
        for k in 0..=placed.len() {
            if k > 0 {
                // The placement changes its node: its total, and sometimes its feasibility.
                let node = placed[k - 1].1 as usize;
                base[node] = values[next(5) as usize];
                feasible[node] = next(4) != 0;
            }
            let totals: Vec<f64> = (0..n)
                .map(|node| if feasible[node] { base[node] } else { f64::NEG_INFINITY })
                .collect();
            let is_feasible = |node: usize| feasible[node];
            let feasible_nodes: Vec<usize> = (0..n).filter(|&node| feasible[node]).collect();
            let few = next(2) == 0;
            let tie = |node: usize| {
                let key = crate::schedule::select::splitmix64(k as u64 * 31 + node as u64);
                if few {
                    key % 3
                } else {
                    key
                }
            };
            for (index, ranking) in rankings.iter_mut().enumerate() {
                let ctx = pending_ctx(&view, &nodes, &placed[..k], bound.len(), index, &include);
                let state = counters.prescore(&ctx).expect("every pod has a ScheduleAnyway constraint");
                add_scores(&state, &ctx, weight, is_feasible, &totals, &mut out, &mut scratch);
                let scored = score(&state, &ctx, &feasible_nodes);
                let mut want_totals = totals.clone();
                for (i, &node) in feasible_nodes.iter().enumerate() {
                    want_totals[node] += (scored.as_ref().map_or(0, |(_, normalized)| normalized[i]) * weight) as f64;
                }
                let bits = |t: &[f64]| t.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&out), bits(&want_totals), "pod {index} after {k} placements: totals");
                let want = crate::schedule::select::select(&out, feasible_nodes.len(), tie).map(|b| (b.node, b.total.to_bits(), b.tie));
                // Built at the start for two pods, after a third of the placements for the third.
                if ranking.is_none() && (index < 2 || k == placed.len() / 3) {
                    *ranking = Some(Ranked::new(&state, is_feasible, &totals, 7, k));
                }
                if let Some(r) = ranking.as_mut() {
                    assert!(r.fits(&state, 7));
                    let got = r.select(&state, &ctx, weight, is_feasible, &totals, &log[..k], tie);
                    let got = got
                        .expect("every total is finite")
                        .map(|(node, total, tie)| (node, total.to_bits(), tie));
                    assert_eq!(got, want, "pod {index} after {k} placements: selection");
                }
            }
        }
        // A feasible node whose total is infinite: the ranking gives way, for good.
        let (infinite, mut log) = (placed[0].1 as usize, log);
        base[infinite] = f64::INFINITY;
        feasible[infinite] = true;
        log.push(infinite as u32);
        let ctx = pending_ctx(&view, &nodes, &placed, bound.len(), 0, &include);
        let state = counters.prescore(&ctx).expect("every pod has a ScheduleAnyway constraint");
        let ranking = rankings[0].as_mut().expect("built at the start");
        for _ in 0..2 {
            let got = ranking.select(&state, &ctx, weight, |node| feasible[node], &base, &log, |node| node as u64);
            assert_eq!(got, Err(()), "an infinite total is not ranked");
        }
    }

    #[test]
    fn rounding_matches_f64_round() {
        let mut cases = vec![
            0.0,
            0.5,
            1.5,
            2.5,
            0.49999999999999994,
            1.4999999999999998,
            2.5000000000000004,
            1e15 + 0.5,
        ];
        let mut x = 0.0f64;
        for i in 0..100_000 {
            x += 0.013_7 * (1 + i % 7) as f64;
            cases.push(x);
            cases.push(x.floor() + 0.5);
            cases.push(f64::from_bits((x.floor() + 0.5).to_bits() - 1));
        }
        for x in cases {
            assert_eq!(round_non_negative(x), x.round() as i64, "round({x:e})");
        }
    }

    #[test]
    fn score_table() {
        let soft_zone = || spread(1, ZONE, false, 0);
        // Raw: matching pods in the node's zone × ln(zones + 2) + maxSkew − 1,
        // rounded; normalized: 100 × (max + min − raw) / max over scored nodes.
        let cases = vec![
            (
                Case {
                    existing: foo_on(&[0, 0]),
                    ..case("emptier zone scores higher", vec![Some(Z1), Some(Z1), Some(Z2)], vec![soft_zone()])
                },
                // ln 4 × 2 = 2.77 → 3.
                (vec![3.0, 3.0, 0.0], vec![0.0, 0.0, 100.0]),
            ),
            (
                Case {
                    existing: foo_on(&[0, 0, 0, 2]),
                    ..case("skew proportional to counts", vec![Some(Z1), Some(Z1), Some(Z2)], vec![soft_zone()])
                },
                // ln 4 × 3 = 4.16 → 4; ln 4 × 1 = 1.39 → 1; normalized 100 × (4 + 1 − s) / 4.
                (vec![4.0, 4.0, 1.0], vec![25.0, 25.0, 100.0]),
            ),
            (
                Case {
                    existing: foo_on(&[0, 0]),
                    ..case(
                        "a node without the key is not scored",
                        vec![Some(Z1), Some(Z2), None],
                        vec![soft_zone()],
                    )
                },
                (vec![3.0, 0.0, 0.0], vec![0.0, 100.0, 0.0]),
            ),
            (
                Case {
                    existing: foo_on(&[0, 0]),
                    system_default: true,
                    ..case(
                        "system default constraints score a node without the key",
                        vec![Some(Z1), Some(Z2), None],
                        vec![soft_zone()],
                    )
                },
                // The keyless node's zone is the empty value: 0 matching, a third domain (ln 5).
                (vec![3.0, 0.0, 0.0], vec![0.0, 100.0, 100.0]),
            ),
        ];
        for (c, (raw, normalized)) in cases {
            let (got_raw, got_normalized) = scores_of(&run(&c), PluginId::PodTopologySpread.name());
            assert_eq!(got_raw, raw, "{}: raw", c.name);
            assert_eq!(got_normalized, normalized, "{}: normalized", c.name);
        }
    }
}
