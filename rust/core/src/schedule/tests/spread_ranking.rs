//! The ranked selection of spread pods (`spread_ranking`) against scoring
//! every node with the plugin's `score` and selecting with `select::select`.

use crate::plugins::pod_topology_spread::scoring::{score, ScoreCounters};
use crate::schedule::select;
use crate::schedule::spread_ranking::{add_scores, Ranked, Scratch, SpreadScore};
use crate::test_support::{spread_context, three_scored_pods, zoned_nodes, TablePod, APP, FOO, NS};

const BAR: i32 = 201;
const Z1: i32 = 110;

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
        rng = select::splitmix64(rng);
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
            let key = select::splitmix64(k as u64 * 31 + node as u64);
            if few {
                key % 3
            } else {
                key
            }
        };
        for (index, ranking) in rankings.iter_mut().enumerate() {
            let ctx = spread_context(&view, &nodes, &placed[..k], bound.len(), index, &include);
            let state = counters.prescore(&ctx).expect("every pod has a ScheduleAnyway constraint");
            let spread_score = SpreadScore {
                state: &state,
                ctx: &ctx,
                weight,
            };
            add_scores(&spread_score, is_feasible, &totals, &mut out, &mut scratch);
            let scored = score(&state, &ctx, &feasible_nodes);
            let mut want_totals = totals.clone();
            for (i, &node) in feasible_nodes.iter().enumerate() {
                want_totals[node] += (scored.as_ref().map_or(0, |(_, normalized)| normalized[i]) * weight) as f64;
            }
            let bits = |t: &[f64]| t.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&out), bits(&want_totals), "pod {index} after {k} placements: totals");
            let want = select::select(&out, feasible_nodes.len(), tie).map(|b| (b.node, b.total.to_bits(), b.tie));
            // Built at the start for two pods, after a third of the placements for the third.
            if ranking.is_none() && (index < 2 || k == placed.len() / 3) {
                *ranking = Some(Ranked::new(&state, is_feasible, &totals, 7, k));
            }
            if let Some(r) = ranking.as_mut() {
                assert!(r.fits(&state, 7));
                let got = r.select(&spread_score, is_feasible, &totals, &log[..k], tie);
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
    let ctx = spread_context(&view, &nodes, &placed, bound.len(), 0, &include);
    let state = counters.prescore(&ctx).expect("every pod has a ScheduleAnyway constraint");
    let ranking = rankings[0].as_mut().expect("built at the start");
    let spread_score = SpreadScore {
        state: &state,
        ctx: &ctx,
        weight,
    };
    for _ in 0..2 {
        let got = ranking.select(&spread_score, |node| feasible[node], &base, &log, |node| node as u64);
        assert_eq!(got, Err(()), "an infinite total is not ranked");
    }
}
