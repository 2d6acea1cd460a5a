//! PodTopologySpread's PreScore and Score (upstream `podtopologyspread/scoring.go`):
//! matching pods counted per node or domain for the `ScheduleAnyway`
//! constraints (or the profile's system defaults), and the feasible nodes
//! ranked by them, the fewer the higher.

use std::collections::HashMap;
use std::sync::Arc;

use super::Context;
use crate::plugins::{IdMap, MAX_NODE_SCORE};

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
pub(super) fn normalize(raw: &[i64], ignored: &[bool]) -> Vec<i64> {
    let mut min = i64::MAX;
    let mut max = 0i64;
    for (&s, &ign) in raw.iter().zip(ignored) {
        if !ign {
            min = min.min(s);
            max = max.max(s);
        }
    }
    let max_score = MAX_NODE_SCORE;
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
