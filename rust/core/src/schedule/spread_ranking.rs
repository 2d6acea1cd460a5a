//! Selection for pods whose one pod-level score is PodTopologySpread's
//! (`ScheduleAnyway` constraints or the profile's system defaults, no
//! inter-pod affinity score): a ReplicaSet's pods, typically, over every
//! node. The plugin (`plugins::pod_topology_spread`) says what a node scores;
//! this module computes the same totals and the same selection with less
//! work: each domain's term once (`add_scores`), and, for a run of pods of one
//! signature, nodes ranked by group so that a pod visits only the nodes that
//! tie for the best total (`Ranked`). Kept beside `signature`, whose totals
//! these add to.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::engine::{Engine, PodView};
use super::pod_level::{OnNodes, PodLevel};
use super::select::Best;
use super::signature::SignatureCache;
use super::state::BatchState;
use crate::model::PluginId;
use crate::plugins::pod_topology_spread::scoring::{round_non_negative, soft_constraints, ScoreShape, ScoreState};
use crate::plugins::pod_topology_spread::Context;
use crate::plugins::MAX_NODE_SCORE;

/// What a pod's weighted spread score is computed from: its PreScore state, its
/// context and the plugin's weight in the profile.
#[derive(Clone, Copy)]
pub struct SpreadScore<'s, 'a, 'b> {
    pub state: &'s ScoreState,
    pub ctx: &'s Context<'a, 'b>,
    pub weight: i64,
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
pub fn add_scores(score: &SpreadScore, feasible: impl Fn(usize) -> bool, base: &[f64], out: &mut Vec<f64>, scratch: &mut Scratch) {
    let SpreadScore { state, ctx, weight } = *score;
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
    let max_score = MAX_NODE_SCORE;
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

    /// `add_scores(score, feasible, base, ..)` then `select::select` over
    /// its totals: the node, its total and its tie key, None where no node is
    /// feasible. Err(()) where a feasible node's total is not finite (then the
    /// caller scores every node).
    pub fn select(
        &mut self,
        score: &SpreadScore,
        feasible: impl Fn(usize) -> bool,
        base: &[f64],
        log: &[u32],
        tie: impl Fn(usize) -> u64,
    ) -> Result<Option<(usize, f64, u64)>, ()> {
        let SpreadScore { state, ctx, weight } = *score;
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
        let max_score = MAX_NODE_SCORE;
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

/// A signature's `Ranked` nodes for one `ScheduleAnyway` group, kept through a call
/// (`Engine::select_spread`).
struct Ranking {
    /// The signature's totals it ranks (`SignatureCache::generation`).
    generation: u64,
    ranked: Option<Ranked>,
    /// The group's pods so far in the call, and the rankings built for them.
    pods: usize,
    builds: usize,
}

/// Pods a ranking must have served, per ranking built, before the next is built:
/// building one costs about what scoring every node does for a dozen pods.
const REBUILD_PODS: usize = 16;

/// The pods left in a call from which a spread pod's signature ranks its nodes,
/// at the second pod of its group: building a ranking costs about what scoring
/// every node does for a dozen pods.
const RANKED_PODS: usize = 16;

/// What one call keeps for its spread pods: the last spread pod's totals and the
/// buffers behind them (`Engine::add_spread_scores`), and the rankings of nodes
/// per signature and group (`Engine::select_spread`).
#[derive(Default)]
pub(super) struct SpreadSelection {
    pub totals: Vec<f64>,
    scratch: Scratch,
    rankings: HashMap<(u64, usize), Ranking>,
}

impl Engine<'_, '_> {
    /// `add_pod_level_scores` for a pod whose one pod-level score is PodTopologySpread's
    /// (the profile's system defaults, or `ScheduleAnyway` constraints, and no inter-pod
    /// affinity score), over `sig`'s feasible nodes: `sig`'s totals with the spread
    /// scores added, into `spread.totals`, reused from pod to pod. False, and nothing
    /// written, for any other pod.
    pub(super) fn add_spread_scores(
        &self,
        state: &BatchState,
        pod: &PodView,
        pl: &PodLevel,
        sig: &SignatureCache,
        spread: &mut SpreadSelection,
    ) -> bool {
        let (Some(score_state), None) = (&pl.prescore.spread, &pl.prescore.affinity) else {
            return false;
        };
        let table = self.pods.table.as_ref().expect("pod level implies a pod table");
        let include = self.inclusion(table, pod.class);
        let ctx = self.pod_context(table, state, pod, OnNodes::batch(state), &include).spread();
        let score = SpreadScore {
            state: score_state,
            ctx: &ctx,
            weight: self.profile.weight_of(PluginId::PodTopologySpread),
        };
        let (evals, totals) = (&sig.evals, &sig.totals);
        // An infeasible node's total is minus infinity, so the evals are read only there.
        let feasible = |node: usize| totals[node] != f64::NEG_INFINITY || evals[node].feasible;
        add_scores(&score, feasible, totals, &mut spread.totals, &mut spread.scratch);
        true
    }

    /// `add_spread_scores` then `select::select` for the same pods, through the
    /// signature's `Ranked` nodes for its `ScheduleAnyway` group (the call's, in
    /// `spread`; built here from the group's second pod on, where enough of the
    /// call's pods are left to pay for it): the best node, None where no node is
    /// feasible. None for any other pod, where no ranking is kept (and none is
    /// built), or where a total is not finite.
    pub(super) fn select_spread(
        &self,
        state: &BatchState,
        pod: &PodView,
        pl: &PodLevel,
        sig: &SignatureCache,
        spread: &mut SpreadSelection,
        tie: impl Fn(usize) -> u64,
    ) -> Option<Option<Best>> {
        let (Some(score_state), None) = (&pl.prescore.spread, &pl.prescore.affinity) else {
            return None;
        };
        let build = self.pods.count - pod.index >= RANKED_PODS;
        let (evals, totals) = (&sig.evals, &sig.totals);
        let feasible = |node: usize| totals[node] != f64::NEG_INFINITY || evals[node].feasible;
        let entry = spread.rankings.entry((sig.id, score_state.shape_id())).or_insert_with(|| Ranking {
            generation: sig.generation,
            ranked: None,
            pods: 0,
            builds: 0,
        });
        if entry.generation != sig.generation {
            // Every total moved (`rescore_all`): the ranking is rebuilt, if it pays.
            entry.generation = sig.generation;
            entry.ranked = None;
        }
        entry.pods += 1;
        // Built at the group's second pod (the first may be the only one), and after a
        // rescore only where the group's pods so far paid for the builds before.
        if entry.ranked.is_none() && build && entry.pods >= 2 && entry.pods >= REBUILD_PODS * entry.builds {
            let new = Ranked::new(score_state, feasible, totals, sig.generation, state.log.len());
            entry.ranked = Some(new);
            entry.builds += 1;
        }
        let ranking = entry.ranked.as_mut()?;
        debug_assert!(ranking.fits(score_state, sig.generation));
        let table = self.pods.table.as_ref().expect("pod level implies a pod table");
        let include = self.inclusion(table, pod.class);
        let ctx = self.pod_context(table, state, pod, OnNodes::batch(state), &include).spread();
        let score = SpreadScore {
            state: score_state,
            ctx: &ctx,
            weight: self.profile.weight_of(PluginId::PodTopologySpread),
        };
        let best = ranking
            .select(&score, feasible, totals, &state.log, &tie)
            .ok()?
            .map(|(node, total, tie)| Best { node, total, tie });
        #[cfg(debug_assertions)]
        {
            // Every node scored, as `add_spread_scores` and `select` do.
            let (mut out, mut scratch) = (Vec::new(), Scratch::default());
            add_scores(&score, feasible, totals, &mut out, &mut scratch);
            let want = super::select::select(&out, sig.feasible, &tie);
            let key = |b: Option<Best>| b.map(|b| (b.node, b.total.to_bits(), b.tie));
            assert_eq!(key(best), key(want), "ranked selection differs from scoring every node");
        }
        Some(best)
    }
}
