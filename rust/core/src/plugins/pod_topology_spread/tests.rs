//! Upstream-style cases (`podtopologyspread/filtering_test.go`,
//! `scoring_test.go`): a small cluster, existing pods, one incoming pod,
//! and each node's verdict or score, run through the whole engine so the
//! inclusion policies and class filters are the real ones.

use std::collections::HashSet;

use super::scoring::{normalize, prescore, round_non_negative, score, ScoreCounters};
use super::*;
use crate::model::{EFFECT_NO_SCHEDULE, SEL_IN};
use crate::plugins::node_affinity::NODE_AFFINITY;
use crate::plugins::taint_toleration::TAINT_TOLERATION;
use crate::plugins::IdBuild;
use crate::test_support::{
    explain_first, label_is, pod, scores_of, spread, spread_context, three_scored_pods, verdicts, zoned_nodes, OwnedClasses, OwnedPodTable,
    Req, TablePod, TestSelector, TestSpread, APP, FOO, HOSTNAME, NS, ZONE,
};

const VERSION: i32 = 21;
const BAR: i32 = 201;
const V1: i32 = 210;
const V2: i32 = 211;
const Z1: i32 = 110;
const Z2: i32 = 111;
const Z3: i32 = 112;
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
            let ctx = spread_context(&view, &nodes, &placed[..k], bound.len(), index, &include);
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
            let ctx = spread_context(&view, &nodes, &placed[..k], bound.len(), index, &include);
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
