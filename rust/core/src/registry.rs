//! The plugin registry: which plugins exist and in what order (the rows,
//! `model::PLUGINS`, upstream's `default_plugins.go`), and one function per
//! extension point that runs a plugin by id (upstream's `registry.go` plus
//! the framework runtime). Every path that filters or scores — the class
//! cache, the per-pod evaluation, preemption's dry run and `explain` —
//! iterates the per-level lists below and calls these; none lists plugins
//! itself. (What the batch loop keeps for one plugin is its own state: the
//! class's NodeAffinity PreFilter restriction, BalancedAllocation's cached
//! balance per node, PodTopologySpread's inclusion policies.)
//!
//! Reason codes follow the rows: each plugin lists its reasons by local index
//! and its row their count, and `crate::reasons::FIXED_REASONS` numbers them in
//! row order (`model::reason_code`), so adding a plugin renumbers none by hand.
//!
//! Dispatch is a `match` on `PluginId` in each extension point's function,
//! naming only the plugins that have that point at that level: a new plugin
//! is its file, its row, and an arm in the functions of the points its row
//! declares (the rows decide which plugin reaches which function; the batch
//! tests run every default plugin through each of its points, so a missing
//! arm fails them). No boxing, no allocation: the lists are constants, so the
//! per-node loops unroll and each call folds to the plugin's function.

use std::cell::RefCell;

pub use crate::model::{plugin_by_name, reason_code, ClusterEvent, Level, PluginId, PluginInfo, PLUGINS, PLUGIN_COUNT};

use crate::model::{row, Classes, Nodes, PodTable, Ports, Profile, Selectors, Volumes};
use crate::plugins::node_ports::HostPort;
use crate::plugins::{
    balanced_allocation, image_locality, inter_pod_affinity, node_affinity, node_name, node_pod_limit, node_ports, node_resources_fit,
    node_unschedulable, node_volume_limits, normalize, pod_topology_spread, taint_toleration, volume_binding, volume_restrictions,
    volume_zone, Reason, FEASIBLE,
};

/// A plugin's fixed reasons, by local index (the messages in its file).
pub(crate) const fn reasons_of(id: PluginId) -> &'static [Reason] {
    match id {
        PluginId::NodeUnschedulable => node_unschedulable::REASONS,
        PluginId::NodeName => node_name::REASONS,
        PluginId::TaintToleration => taint_toleration::REASONS,
        PluginId::NodeAffinity => node_affinity::REASONS,
        PluginId::NodePorts => node_ports::REASONS,
        PluginId::NodeResourcesFit => node_resources_fit::REASONS,
        PluginId::NodePodLimit => node_pod_limit::REASONS,
        PluginId::PodTopologySpread => pod_topology_spread::REASONS,
        PluginId::VolumeRestrictions => volume_restrictions::REASONS,
        PluginId::NodeVolumeLimits => node_volume_limits::REASONS,
        PluginId::VolumeBinding => volume_binding::REASONS,
        PluginId::VolumeZone => volume_zone::REASONS,
        PluginId::InterPodAffinity => inter_pod_affinity::REASONS,
        PluginId::NodeResourcesBalancedAllocation | PluginId::ImageLocality => &[],
    }
}

// Each row's reason count is its file's: the codes `reason_code` hands out are the table's.
const _: () = {
    let mut i = 0;
    while i < PLUGIN_COUNT {
        assert!(
            reasons_of(PLUGINS[i].id).len() == PLUGINS[i].reasons as usize,
            "a PLUGINS row's reason count differs from its file's REASONS"
        );
        i += 1;
    }
};

/// Whether a row is a Filter (`score` false) or Score plugin of `level`.
const fn is(p: &PluginInfo, score: bool, level: Level) -> bool {
    (if score { p.score } else { p.filter }) && p.level as usize == level as usize
}

const fn count(score: bool, level: Level) -> usize {
    let (mut n, mut i) = (0, 0);
    while i < PLUGIN_COUNT {
        n += is(&PLUGINS[i], score, level) as usize;
        i += 1;
    }
    n
}

const fn ids<const N: usize>(score: bool, level: Level) -> [PluginId; N] {
    let mut out = [PluginId::NodeUnschedulable; N];
    let (mut k, mut i) = (0, 0);
    while i < PLUGIN_COUNT {
        if is(&PLUGINS[i], score, level) {
            out[k] = PLUGINS[i].id;
            k += 1;
        }
        i += 1;
    }
    out
}

/// The Filter plugins of each level, in registry order (which runs every
/// class-level filter first and every pod-level one last). Constant, so a
/// loop over one unrolls and each dispatch folds to a direct call.
pub const CLASS_FILTERS: [PluginId; count(false, Level::Class)] = ids(false, Level::Class);
pub const NODE_FILTERS: [PluginId; count(false, Level::Node)] = ids(false, Level::Node);
pub const POD_FILTERS: [PluginId; count(false, Level::Pod)] = ids(false, Level::Pod);

/// The Score plugins of each level, in registry order; a plugin's index
/// here is its slot in that level's score arrays.
pub const CLASS_SCORES: usize = count(true, Level::Class);
pub const NODE_SCORES: usize = count(true, Level::Node);
pub const POD_SCORES: usize = count(true, Level::Pod);
pub const CLASS_SCORERS: [PluginId; CLASS_SCORES] = ids(true, Level::Class);
pub const NODE_SCORERS: [PluginId; NODE_SCORES] = ids(true, Level::Node);
pub const POD_SCORERS: [PluginId; POD_SCORES] = ids(true, Level::Pod);

/// A score plugin's index among the score plugins of its level.
pub const fn score_slot(id: PluginId) -> usize {
    let level = PLUGINS[id as usize].level;
    let (mut slot, mut i) = (0, 0);
    while i < id as usize {
        slot += is(&PLUGINS[i], true, level) as usize;
        i += 1;
    }
    slot
}

/// Filter of a class-level plugin: the first failing reason code, or `FEASIBLE`.
#[inline]
pub fn filter_class(id: PluginId, nodes: &Nodes, classes: &Classes, class: usize, node: usize) -> u32 {
    match id {
        PluginId::NodeUnschedulable => node_unschedulable::filter(nodes, node, &classes.tolerations, class),
        PluginId::NodeName => node_name::filter(nodes, node, classes.node_names[class]),
        PluginId::TaintToleration => taint_toleration::filter(nodes, node, &classes.tolerations, class),
        PluginId::NodeAffinity => node_affinity::filter(classes, class, nodes, node),
        _ => unreachable!("{id:?} is not a class-level filter"),
    }
}

/// Whether a class-level score plugin can score anything for `class` (else every node scores 0).
pub fn scores_class(id: PluginId, classes: &Classes, class: usize) -> bool {
    match id {
        PluginId::TaintToleration => true,
        PluginId::NodeAffinity => !row(classes.preferred_offsets, class).is_empty(),
        _ => unreachable!("{id:?} has no class-level score"),
    }
}

/// Raw Score of a class-level plugin.
#[inline]
pub fn score_class(id: PluginId, nodes: &Nodes, classes: &Classes, class: usize, node: usize) -> i64 {
    match id {
        PluginId::TaintToleration => taint_toleration::score(nodes, node, &classes.tolerations, class),
        PluginId::NodeAffinity => node_affinity::score(classes, class, nodes, node),
        _ => unreachable!("{id:?} has no class-level score"),
    }
}

/// NormalizeScore of a class-level plugin, given the maximum raw score over the feasible nodes.
#[inline]
pub fn normalize_class(id: PluginId, raw: i64, max: i64) -> i64 {
    match id {
        // Fewer untolerated PreferNoSchedule taints is better.
        PluginId::TaintToleration => normalize::default_normalize(raw, max, true),
        PluginId::NodeAffinity => normalize::default_normalize(raw, max, false),
        _ => unreachable!("{id:?} has no class-level score"),
    }
}

/// The pod-level plugins' PreFilter results for one pod (None: the plugin
/// has nothing to check for it, upstream's Skip).
#[derive(Default)]
pub struct PreFilter {
    pub volume_restrictions: Option<volume_restrictions::Filter>,
    pub volume_limits: Option<node_volume_limits::Filter>,
    pub volume_binding: Option<volume_binding::Filter>,
    pub volume_zone: Option<volume_zone::Filter>,
    pub spread: Option<pod_topology_spread::Filter>,
    pub affinity: Option<inter_pod_affinity::Filter>,
}

impl PreFilter {
    pub fn is_empty(&self) -> bool {
        self.volume_restrictions.is_none()
            && self.volume_limits.is_none()
            && self.volume_binding.is_none()
            && self.volume_zone.is_none()
            && self.spread.is_none()
            && self.affinity.is_none()
    }
}

/// The pod-level filters' PreFilter state with the nominated pods held on one
/// node added (upstream's `addGENominatedPods` and each plugin's AddPod);
/// None where the plugin's PreFilter has nothing to check (upstream skips it,
/// AddPod included).
#[derive(Default)]
pub struct WithNominated {
    pub spread: Option<pod_topology_spread::Filter>,
    pub affinity: Option<inter_pod_affinity::Filter>,
}

/// The pod-level plugins' PreScore results for one pod (None / false: every node scores 0).
#[derive(Default)]
pub struct PreScore {
    pub spread: Option<pod_topology_spread::scoring::ScoreState>,
    pub affinity: Option<inter_pod_affinity::TopologyScore>,
}

impl PreScore {
    pub fn is_empty(&self) -> bool {
        self.spread.is_none() && self.affinity.is_none()
    }
}

/// What the pod-level plugins read: the pod table, the pods on nodes (bound,
/// then placed in the batch; preemption's dry run leaves victims out), the
/// pod's row and batch index, the spread inclusion policies, and the
/// batch's claims with the volumes earlier placements took.
pub struct PodContext<'a, 'b> {
    pub table: &'a PodTable<'b>,
    pub volumes: Option<&'a Volumes<'b>>,
    pub taken_volumes: &'a [bool],
    /// ReadWriteOncePod claims that pods of the batch use, and whether a
    /// bound pod (pod table row) is gone in preemption's dry run.
    pub taken_claims: &'a [bool],
    pub removed: &'a dyn Fn(u32) -> bool,
    /// (node, volume, driver) attached by placements earlier in the batch.
    pub placed_attachments: &'a [(u32, i32, i32)],
    pub nodes: &'a Nodes<'b>,
    pub on_nodes: &'a [(u32, u32)],
    /// The subset of `on_nodes` with affinity terms.
    pub affine: &'a [(u32, u32)],
    pub row: usize,
    pub index: usize,
    /// The pod's constraint class (`include` depends on it).
    pub class: usize,
    pub include: &'a (dyn Fn(usize, usize) -> bool + Sync),
    /// What the plugins keep across the pods of the call, where `on_nodes`
    /// is the batch's own list (which only grows); None: compute afresh.
    pub kept: Option<&'a RefCell<PodLevelKept>>,
    pub hard_pod_affinity_weight: i64,
    pub ignore_preferred_terms_of_existing_pods: bool,
}

impl<'a, 'b> PodContext<'a, 'b> {
    pub(crate) fn spread(&self) -> pod_topology_spread::Context<'a, 'b> {
        pod_topology_spread::Context {
            table: self.table,
            nodes: self.nodes,
            placed: self.on_nodes,
            row: self.row,
            index: self.index,
            class: self.class,
            include: self.include,
        }
    }
}

/// The pod-level plugins' state kept across the pods of one call (see `PodContext::kept`).
#[derive(Default)]
pub struct PodLevelKept {
    pub spread: pod_topology_spread::Counters,
    pub spread_score: pod_topology_spread::scoring::ScoreCounters,
}

/// PreFilter of a pod-level plugin, into its slot of `out`.
pub fn prefilter(id: PluginId, ctx: &PodContext, out: &mut PreFilter) {
    match id {
        PluginId::VolumeRestrictions => {
            out.volume_restrictions = ctx
                .volumes
                .and_then(|v| volume_restrictions::prefilter(v, ctx.index, ctx.taken_claims, ctx.removed))
        }
        PluginId::NodeVolumeLimits => {
            out.volume_limits = ctx
                .volumes
                .and_then(|v| node_volume_limits::prefilter(v, ctx.index, ctx.placed_attachments))
        }
        PluginId::VolumeBinding => {
            out.volume_binding = ctx.volumes.and_then(|v| volume_binding::prefilter(v, ctx.index, ctx.taken_volumes))
        }
        PluginId::VolumeZone => out.volume_zone = ctx.volumes.and_then(|v| volume_zone::prefilter(v, ctx.index)),
        PluginId::PodTopologySpread => {
            out.spread = match ctx.kept {
                Some(kept) => kept.borrow_mut().spread.prefilter(&ctx.spread()),
                None => pod_topology_spread::prefilter(&ctx.spread()),
            }
        }
        PluginId::InterPodAffinity => out.affinity = inter_pod_affinity::prefilter(ctx.table, ctx.nodes, ctx.on_nodes, ctx.affine, ctx.row),
        _ => unreachable!("{id:?} is not a pod-level filter"),
    }
}

/// PreScore of a pod-level plugin, into its slot of `out`.
pub fn prescore(id: PluginId, ctx: &PodContext, out: &mut PreScore) {
    match id {
        PluginId::PodTopologySpread => {
            out.spread = match ctx.kept {
                Some(kept) => kept.borrow_mut().spread_score.prescore(&ctx.spread()),
                None => pod_topology_spread::scoring::prescore(&ctx.spread()),
            }
        }
        PluginId::InterPodAffinity => {
            out.affinity = inter_pod_affinity::prescore(
                ctx.table,
                ctx.nodes,
                ctx.on_nodes,
                ctx.affine,
                ctx.row,
                ctx.hard_pod_affinity_weight,
                ctx.ignore_preferred_terms_of_existing_pods,
            )
        }
        _ => unreachable!("{id:?} has no pod-level score"),
    }
}

/// Score and NormalizeScore of a pod-level plugin over the feasible nodes:
/// raw and normalized scores in `feasible` order, or None when every node scores 0.
pub fn score_pod(id: PluginId, ctx: &PodContext, pre: &PreScore, feasible: &[usize]) -> Option<(Vec<i64>, Vec<i64>)> {
    match id {
        PluginId::PodTopologySpread => pre
            .spread
            .as_ref()
            .and_then(|state| pod_topology_spread::scoring::score(state, &ctx.spread(), feasible)),
        PluginId::InterPodAffinity => pre.affinity.as_ref().map(|map| {
            let raw: Vec<i64> = feasible
                .iter()
                .map(|&node| inter_pod_affinity::score(map, ctx.nodes, node))
                .collect();
            let mut normalized = raw.clone();
            inter_pod_affinity::normalize(&mut normalized);
            (raw, normalized)
        }),
        _ => unreachable!("{id:?} has no pod-level score"),
    }
}

/// What the node- and pod-level plugins read about one pod on one node, as
/// the batch left the node. Per-node tables are passed whole and sliced by
/// the plugin that reads them, so building an input costs no work for the
/// plugins a pod or profile does not run.
pub struct NodeInput<'x> {
    pub nodes: &'x Nodes<'x>,
    /// The batch's claims, and the selector terms their volumes' node affinity refers to.
    pub volumes: Option<&'x Volumes<'x>>,
    pub selectors: &'x Selectors<'x>,
    pub node: usize,
    pub profile: &'x Profile,
    /// The pod's batch index, its host ports (`has_ports`: any at all) and requests.
    pub pod: usize,
    pub pod_ports: &'x Ports<'x>,
    pub has_ports: bool,
    pub request: &'x [i64],
    pub nonzero_request: &'x [i64],
    /// Columns of `request` that are non-zero.
    pub columns: &'x [usize],
    /// The node's requests and pod count as the filters see them: the
    /// batch's, plus reservations held for the pod's betters, minus victims
    /// in a preemption dry run.
    pub filter_requested: &'x [i64],
    pub filter_pod_count: i64,
    /// Per node: host ports placed in the batch. And the ports a dry run's victims free.
    /// Host ports in use on the node besides its bound pods' (placements earlier
    /// in the batch, nominated pods held there).
    pub placed_ports: &'x [HostPort],
    pub freed_ports: &'x [HostPort],
    /// Per node (`nodes × resources`, `nodes × 2`): the requests the scores see, the batch's.
    pub requested: &'x [i64],
    pub nonzero_requested: &'x [i64],
    /// BalancedAllocation: whether it scores the pod, whether the balance
    /// without the pod is the node's cached one, and those cached balances.
    pub balanced: bool,
    pub balanced_node_only: bool,
    pub balance_without: &'x [i64],
    /// ImageLocality: the pod's images that some node has (empty: every
    /// node scores 0) and its container count.
    pub images: &'x [i32],
    pub containers: i64,
    pub prefilter: Option<&'x PreFilter>,
    /// The spread and affinity state with the nominated pods held on the node
    /// added, in place of `prefilter`'s (the first of upstream's two passes).
    pub with_nominated: Option<&'x WithNominated>,
}

impl NodeInput<'_> {
    #[inline(always)]
    fn resource_row<'s>(&self, table: &'s [i64]) -> &'s [i64] {
        let r = self.nodes.resources;
        &table[self.node * r..(self.node + 1) * r]
    }
}

/// Filter of a node- or pod-level plugin; `report` receives its reason codes.
#[inline(always)]
pub fn filter(id: PluginId, x: &NodeInput, report: &mut impl FnMut(u32)) -> bool {
    let code = match id {
        PluginId::NodePorts if x.has_ports => node_ports::filter(x.nodes, x.node, x.pod_ports, x.pod, x.placed_ports, x.freed_ports),
        PluginId::NodePorts => FEASIBLE,
        PluginId::NodeResourcesFit => {
            return node_resources_fit::filter(
                x.resource_row(x.nodes.allocatable),
                x.filter_requested,
                x.nodes.allowed_pods[x.node],
                x.filter_pod_count,
                x.request,
                x.columns,
                report,
            )
        }
        PluginId::NodePodLimit => node_pod_limit::filter(x.filter_pod_count, x.profile.max_pods_per_node),
        PluginId::VolumeRestrictions => match x.prefilter.and_then(|p| p.volume_restrictions.as_ref()) {
            Some(f) => f.filter(),
            None => FEASIBLE,
        },
        PluginId::NodeVolumeLimits => match (x.prefilter.and_then(|p| p.volume_limits.as_ref()), x.volumes) {
            (Some(f), Some(v)) => f.filter(v, x.node),
            _ => FEASIBLE,
        },
        PluginId::VolumeBinding => match (x.prefilter.and_then(|p| p.volume_binding.as_ref()), x.volumes) {
            (Some(f), Some(v)) => return f.filter(v, x.selectors, x.nodes, x.node, report),
            _ => FEASIBLE,
        },
        PluginId::VolumeZone => match (x.prefilter.and_then(|p| p.volume_zone.as_ref()), x.volumes) {
            (Some(f), Some(v)) => f.filter(v, x.nodes, x.node),
            _ => FEASIBLE,
        },
        PluginId::PodTopologySpread => match x
            .with_nominated
            .map_or_else(|| x.prefilter.and_then(|p| p.spread.as_ref()), |n| n.spread.as_ref())
        {
            Some(f) => f.filter(x.nodes, x.node),
            None => FEASIBLE,
        },
        PluginId::InterPodAffinity => match x
            .with_nominated
            .map_or_else(|| x.prefilter.and_then(|p| p.affinity.as_ref()), |n| n.affinity.as_ref())
        {
            Some(f) => f.filter(x.nodes, x.node),
            None => FEASIBLE,
        },
        _ => unreachable!("{id:?} is not a node- or pod-level filter"),
    };
    if code != FEASIBLE {
        report(code);
    }
    code == FEASIBLE
}

/// Score of a node-level plugin, already normalized (0..=100).
#[inline(always)]
pub fn score_node(id: PluginId, x: &NodeInput) -> i64 {
    let p = x.profile;
    match id {
        PluginId::NodeResourcesFit => node_resources_fit::score(
            &p.fit_strategy,
            &p.fit_resources,
            x.resource_row(x.nodes.allocatable),
            x.resource_row(x.requested),
            &x.nonzero_requested[x.node * 2..x.node * 2 + 2],
            x.request,
            x.nonzero_request,
        ),
        PluginId::NodeResourcesBalancedAllocation if x.balanced => balanced_allocation::score(
            &p.balanced_resources,
            x.resource_row(x.nodes.allocatable),
            x.resource_row(x.requested),
            x.request,
            x.balanced_node_only.then(|| x.balance_without[x.node]),
        ),
        PluginId::NodeResourcesBalancedAllocation => 0,
        PluginId::ImageLocality if !x.images.is_empty() => {
            image_locality::score(&x.nodes.images, x.nodes.count, x.node, x.images, x.containers)
        }
        PluginId::ImageLocality => 0,
        _ => unreachable!("{id:?} has no node-level score"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_plugins_register_events_and_score_plugins_none() {
        for p in &PLUGINS {
            assert_eq!(!p.events.is_empty(), p.filter, "{}: {:?}", p.name, p.events);
        }
    }

    #[test]
    fn level_lists_partition_the_rows_in_order() {
        let filters: Vec<PluginId> = CLASS_FILTERS.iter().chain(&NODE_FILTERS).chain(&POD_FILTERS).copied().collect();
        let want: Vec<PluginId> = PLUGINS.iter().filter(|p| p.filter).map(|p| p.id).collect();
        assert_eq!(filters, want, "filters by level, in registry order");
        for scorers in [&CLASS_SCORERS[..], &NODE_SCORERS[..], &POD_SCORERS[..]] {
            for (slot, &id) in scorers.iter().enumerate() {
                assert_eq!(score_slot(id), slot, "{id:?}");
            }
        }
        assert_eq!(CLASS_SCORES + NODE_SCORES + POD_SCORES, PLUGINS.iter().filter(|p| p.score).count());
    }
}
