//! The node-only part of a pod's totals, shared by every signature of a
//! constraint class: the class-level plugins' and the metrics' weighted
//! scores of each node, normalized by the maxima over the pod's feasible
//! nodes (`Maxima`), and a feasible node's total from it and the node-level
//! scores (`Engine::total`).

use std::sync::Arc;

use rayon::prelude::*;

use super::engine::{Engine, Incoming, NODES_PER_CHUNK};
use super::filtering::ClassCache;
use super::state::BatchState;
use crate::plugins::metrics;
use crate::registry::{self, CLASS_SCORERS, CLASS_SCORES, NODE_SCORERS, NODE_SCORES};

/// Maxima and minima over a pod's feasible nodes, for normalization.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Maxima {
    /// The class-level plugins' highest raw score (`score_slot` order).
    pub class: [i64; CLASS_SCORES],
    pub metric_min: Vec<f64>,
    pub metric_max: Vec<f64>,
}

impl Maxima {
    pub fn empty(metrics: usize) -> Maxima {
        Maxima {
            class: [0; CLASS_SCORES],
            metric_min: vec![f64::INFINITY; metrics],
            metric_max: vec![f64::NEG_INFINITY; metrics],
        }
    }

    /// Add a feasible node, its metric values as the pod's scores read them (`Incoming`).
    #[inline]
    pub fn add_node(&mut self, engine: &Engine, state: &BatchState, cache: &ClassCache, incoming: Incoming, node: usize) {
        for (max, raw) in self.class.iter_mut().zip(&cache.raw) {
            *max = (*max).max(raw[node]);
        }
        // f64::min and max ignore a NaN operand: a missing value changes nothing. A metric
        // scored over a fixed range has no extremes to keep: its values move (load
        // estimates) without rescoring every node.
        for k in 0..self.metric_min.len() {
            if engine.metrics.specs[k].range.is_some() {
                continue;
            }
            let b = engine.scored_badness(state, incoming, node, k);
            self.metric_min[k] = self.metric_min[k].min(b);
            self.metric_max[k] = self.metric_max[k].max(b);
        }
    }

    /// Whether the node holds one of the maxima or minima.
    pub fn held_by(&self, engine: &Engine, state: &BatchState, cache: &ClassCache, incoming: Incoming, node: usize) -> bool {
        let held = |k: usize| {
            if engine.metrics.specs[k].range.is_some() {
                return false;
            }
            let b = engine.scored_badness(state, incoming, node, k);
            b == self.metric_min[k] || b == self.metric_max[k]
        };
        // Maxima start at 0 and raw scores are never negative: a maximum of 0 cannot move.
        self.class.iter().zip(&cache.raw).any(|(&max, raw)| max > 0 && raw[node] == max) || (0..self.metric_min.len()).any(held)
    }

    pub fn merge(&mut self, other: &Maxima) {
        for (max, &o) in self.class.iter_mut().zip(&other.class) {
            *max = (*max).max(o);
        }
        for k in 0..self.metric_min.len() {
            self.metric_min[k] = self.metric_min[k].min(other.metric_min[k]);
            self.metric_max[k] = self.metric_max[k].max(other.metric_max[k]);
        }
    }
}

/// The node-only part of the totals for one constraint class and one set of
/// maxima: the class-level plugins' weighted scores (integers) and each
/// metric's weighted score. Every signature of the class shares it.
pub(super) struct Base {
    maxima: Maxima,
    static_int: Vec<i64>,
    /// `metrics` weighted scores per node.
    metric: Vec<f64>,
    /// `BatchState::metric_epoch` when built (load estimates only): a node whose
    /// epoch moved since has its metric scores computed afresh.
    epochs: Vec<u32>,
}

/// The class's current base if it was built for `maxima`, else a new one (kept as current).
pub(super) fn class_base(
    slot: &mut Option<Arc<Base>>,
    engine: &Engine,
    state: &BatchState,
    cache: &ClassCache,
    maxima: &Maxima,
) -> Arc<Base> {
    match slot {
        Some(base) if base.maxima == *maxima => Arc::clone(base),
        _ => {
            let base = Arc::new(engine.base(state, cache, maxima));
            *slot = Some(Arc::clone(&base));
            base
        }
    }
}

impl Engine<'_, '_> {
    /// The node-only part of the totals of a class's nodes under `maxima`.
    pub(super) fn base(&self, state: &BatchState, cache: &ClassCache, maxima: &Maxima) -> Base {
        let n = self.nodes.count;
        let m = self.metrics.specs.len();
        let static_int = |node: usize| {
            let mut total = 0;
            for (slot, &id) in CLASS_SCORERS.iter().enumerate() {
                let weight = self.profile.weight_of(id);
                if weight != 0 {
                    total += registry::normalize_class(id, cache.raw[slot][node], maxima.class[slot]) * weight;
                }
            }
            total
        };
        let mut metric = vec![0.0; n * m];
        let weighted = |(node, row): (usize, &mut [f64])| {
            for (k, spec) in self.metrics.specs.iter().enumerate() {
                row[k] = metrics::score(spec, state.metric_value(node, k), maxima.metric_min[k], maxima.metric_max[k]) * spec.weight;
            }
        };
        let static_int = if self.parallel {
            if m > 0 {
                metric
                    .par_chunks_mut(m)
                    .with_min_len(NODES_PER_CHUNK)
                    .enumerate()
                    .for_each(weighted);
            }
            (0..n).into_par_iter().with_min_len(NODES_PER_CHUNK).map(static_int).collect()
        } else {
            if m > 0 {
                metric.chunks_mut(m).enumerate().for_each(weighted);
            }
            (0..n).map(static_int).collect()
        };
        Base {
            maxima: maxima.clone(),
            static_int,
            metric,
            epochs: if state.has_estimates {
                state.metric_epoch.clone()
            } else {
                Vec::new()
            },
        }
    }

    /// Weighted total of a feasible node without the pod-level scores. The
    /// integer plugins are summed exactly, then each metric's weighted score
    /// is added in order: the base's, or computed afresh where a placement's
    /// estimate moved the node's values or the pod's own estimate counts
    /// (`Incoming`: the base is the class's, shared by pods of every estimate).
    #[inline]
    pub(super) fn total(&self, state: &BatchState, base: &Base, incoming: Incoming, node: usize, scores: &[i32; NODE_SCORES]) -> f64 {
        let m = self.metrics.specs.len();
        let mut int = base.static_int[node];
        for (slot, &id) in NODE_SCORERS.iter().enumerate() {
            int += scores[slot] as i64 * self.profile.weight_of(id);
        }
        let mut total = int as f64;
        if incoming.is_some() || (state.has_estimates && base.epochs[node] != state.metric_epoch[node]) {
            let mx = &base.maxima;
            for (k, spec) in self.metrics.specs.iter().enumerate() {
                let v = self.scored_value(state, incoming, node, k);
                total += metrics::score(spec, v, mx.metric_min[k], mx.metric_max[k]) * spec.weight;
            }
            return total;
        }
        for &score in &base.metric[node * m..(node + 1) * m] {
            total += score;
        }
        total
    }
}
