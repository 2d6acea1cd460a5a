//! `ksched explain`: one pod's verdict on every node, and each score
//! plugin's raw and normalized score (the registry's score plugins in order,
//! then the metrics), computed by the same functions as the batch.

use super::base::Maxima;
use super::engine::{Engine, PodView};
use super::filtering::ClassCache;
use super::pod_level::{PodLevel, PodScores};
use super::state::BatchState;
use crate::model::{Level, PLUGINS};
use crate::plugins::metrics;
use crate::registry::{self, score_slot, POD_SCORERS};

/// Per-node detail of one pod's scheduling, for `ksched explain`.
#[derive(Clone, Debug, Default)]
pub struct Explanation {
    pub pod: usize,
    /// Node -> the failing plugin's reason codes (empty where feasible).
    pub reason_offsets: Vec<i64>,
    pub reason_codes: Vec<u32>,
    /// Score plugins (registry order, then the metrics, named `metric:<index>`):
    /// name, weight, and `plugins × nodes` raw and normalized scores (NaN for
    /// infeasible nodes).
    pub plugins: Vec<String>,
    pub weights: Vec<f64>,
    pub raw: Vec<f64>,
    pub normalized: Vec<f64>,
    pub totals: Vec<f64>,
}

impl Engine<'_, '_> {
    pub(super) fn explain(
        &self,
        state: &BatchState,
        cache: &ClassCache,
        pod: &PodView,
        maxima: &Maxima,
        pod_level: Option<(&PodLevel, &PodScores)>,
        chosen: Option<usize>,
    ) -> Explanation {
        let n = self.nodes.count;
        let specs = &self.metrics.specs;
        let scored = || PLUGINS.iter().filter(|p| p.score);
        let mut plugins: Vec<String> = scored().map(|p| p.name.to_string()).collect();
        plugins.extend((0..specs.len()).map(|m| format!("metric:{m}")));
        let mut weights: Vec<f64> = scored().map(|p| self.profile.weight_of(p.id) as f64).collect();
        weights.extend(specs.iter().map(|s| s.weight));
        let k = plugins.len();
        let mut ex = Explanation {
            pod: pod.index,
            reason_offsets: vec![0],
            plugins,
            weights,
            raw: vec![f64::NAN; k * n],
            normalized: vec![f64::NAN; k * n],
            totals: vec![f64::NAN; n],
            ..Explanation::default()
        };
        let base = self.base(state, cache, maxima);
        for node in 0..n {
            let mut codes = Vec::new();
            let evaluated = self.evaluate(state, cache, pod, node, pod_level.map(|(pl, _)| &pl.prefilter), &mut |c| {
                codes.push(c)
            });
            if let Some(s) = evaluated {
                let mut column = 0;
                let mut record = |(raw, normalized): (f64, f64)| {
                    ex.raw[column * n + node] = raw;
                    ex.normalized[column * n + node] = normalized;
                    column += 1;
                };
                for p in scored() {
                    let slot = score_slot(p.id);
                    record(match p.level {
                        Level::Class => {
                            let raw = cache.raw[slot][node];
                            (raw as f64, registry::normalize_class(p.id, raw, maxima.class[slot]) as f64)
                        }
                        Level::Node => (s.0[slot] as f64, s.0[slot] as f64),
                        Level::Pod => pod_level.map_or((0.0, 0.0), |(_, ps)| ps.scores[slot][node]),
                    });
                }
                for (m, spec) in specs.iter().enumerate() {
                    let v = self.scored_value(state, pod.incoming, node, m);
                    record((v, metrics::score(spec, v, maxima.metric_min[m], maxima.metric_max[m])));
                }
                let pod_weighted: i64 = match pod_level {
                    Some((_, ps)) => POD_SCORERS
                        .iter()
                        .enumerate()
                        .map(|(slot, &id)| ps.scores[slot][node].1 as i64 * self.profile.weight_of(id))
                        .sum(),
                    None => 0,
                };
                let node_scores = s.0.map(|v| v as i32);
                ex.totals[node] = self.total(state, &base, pod.incoming, node, &node_scores) + pod_weighted as f64;
            }
            ex.reason_codes.extend(codes);
            ex.reason_offsets.push(ex.reason_codes.len() as i64);
        }
        debug_assert!(chosen.is_none_or(|c| !ex.totals[c].is_nan()));
        ex
    }
}
