//! Fixtures for PodTopologySpread's scoring, shared by the plugin's tests and
//! the ranked selection's (`schedule::spread_ranking`): app=foo pods with
//! `ScheduleAnyway` constraints over a table of bound pods, and the plugin's
//! context for one of them.

use super::pod_table::{label_is, spread, OwnedPodTable, TablePod, TestSpread, HOSTNAME, ZONE};
use crate::model::{Nodes, PodTable};
use crate::plugins::pod_topology_spread::Context;

pub const APP: i32 = 20;
pub const FOO: i32 = 200;
/// The pods' namespace.
pub const NS: i32 = 1;

/// The context of pending pod `index` of a table with `bound` bound pods.
pub fn spread_context<'a, 'b>(
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
pub fn three_scored_pods(bound: &[(i64, TablePod)]) -> OwnedPodTable {
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
