//! Which plugins exist, in what order, with which extension points and
//! default weights (upstream `apis/config/v1/default_plugins.go`), and the
//! compiled profile that switches and weights them.
//!
//! The rows live here, in the leaf, because the profile is indexed by them
//! and the plugins derive their reason codes from them; `crate::registry`
//! dispatches on them. Adding a plugin: `docs/adding-a-plugin.md`.

use super::encoding::{CPU, MEMORY};
use super::events::ClusterEvent::{self, *};

/// A plugin's index in `PLUGINS` (and in `Profile::filter` / `Profile::weight`).
#[repr(usize)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PluginId {
    NodeUnschedulable,
    NodeName,
    TaintToleration,
    NodeAffinity,
    NodePorts,
    NodeResourcesFit,
    NodePodLimit,
    VolumeRestrictions,
    NodeVolumeLimits,
    VolumeBinding,
    VolumeZone,
    PodTopologySpread,
    InterPodAffinity,
    NodeResourcesBalancedAllocation,
    ImageLocality,
}

pub const PLUGIN_COUNT: usize = 15;

/// What a plugin's verdict and score depend on besides the node, which
/// decides where the batch loop computes and caches them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// The pod's constraint class alone (tolerations, node selector and
    /// affinity, node name): computed once per class for the whole batch.
    Class,
    /// The pod's own requests or host ports and what the batch placed on the
    /// node: evaluated per pod, shared by pods of one signature.
    Node,
    /// The pods on other nodes, or the volumes earlier placements took (a
    /// PreFilter / PreScore over the pod table or the pod's claims):
    /// evaluated per pod, afresh.
    Pod,
}

/// One registry row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PluginInfo {
    pub id: PluginId,
    /// Upstream's plugin name.
    pub name: &'static str,
    /// Has a Filter extension point.
    pub filter: bool,
    /// Has a Score extension point.
    pub score: bool,
    /// Upstream's default score weight (0 where `score` is false).
    pub default_weight: i64,
    pub level: Level,
    /// Runs in the default-equivalent profile: every upstream plugin does;
    /// ksched's own plugins are enabled by a profile's `multiPoint`.
    pub default_enabled: bool,
    /// How many fixed reasons the plugin's file lists (its `REASONS`, checked
    /// by the registry): the codes it takes in the dense space.
    pub reasons: u32,
    /// The cluster events that can make a pod it rejected schedulable
    /// (upstream's `EventsToRegister`, with queueing hints on).
    pub events: &'static [ClusterEvent],
}

const fn row(id: PluginId, name: &'static str, filter: bool, default_weight: i64, level: Level) -> PluginInfo {
    PluginInfo {
        id,
        name,
        filter,
        score: default_weight > 0,
        default_weight,
        level,
        default_enabled: true,
        reasons: 0,
        events: &[],
    }
}

impl PluginInfo {
    const fn reasons(self, reasons: u32) -> Self {
        PluginInfo { reasons, ..self }
    }

    const fn events(self, events: &'static [ClusterEvent]) -> Self {
        PluginInfo { events, ..self }
    }

    /// A ksched plugin with no upstream counterpart: off unless a profile enables it.
    const fn off_by_default(self) -> Self {
        PluginInfo {
            default_enabled: false,
            ..self
        }
    }
}

/// Every plugin, in upstream's `multiPoint` order: Filter plugins run in this
/// order (the first failing one reports), Score plugins are listed in it.
/// Filters are ordered by level (class, node, pod), so the batch loop's
/// caching keeps that order (checked by a test).
pub const PLUGINS: [PluginInfo; PLUGIN_COUNT] = [
    row(PluginId::NodeUnschedulable, "NodeUnschedulable", true, 0, Level::Class)
        .reasons(1)
        .events(&[NodeAdd, NodeTaintChange]),
    row(PluginId::NodeName, "NodeName", true, 0, Level::Class)
        .reasons(1)
        .events(&[NodeAdd]),
    row(PluginId::TaintToleration, "TaintToleration", true, 3, Level::Class)
        .reasons(1)
        .events(&[NodeAdd, NodeTaintChange]),
    row(PluginId::NodeAffinity, "NodeAffinity", true, 2, Level::Class)
        .reasons(3)
        .events(&[NodeAdd, NodeLabelChange]),
    row(PluginId::NodePorts, "NodePorts", true, 0, Level::Node)
        .reasons(1)
        .events(&[AssignedPodDelete, NodeAdd]),
    row(PluginId::NodeResourcesFit, "NodeResourcesFit", true, 1, Level::Node)
        .reasons(1)
        .events(&[AssignedPodDelete, NodeAdd, NodeAllocatableChange]),
    row(PluginId::NodePodLimit, "NodePodLimit", true, 0, Level::Node)
        .reasons(1)
        .events(&[AssignedPodDelete, NodeAdd])
        .off_by_default(),
    row(PluginId::VolumeRestrictions, "VolumeRestrictions", true, 0, Level::Pod)
        .reasons(1)
        .events(&[AssignedPodDelete, NodeAdd, PersistentVolumeClaimAdd]),
    row(PluginId::NodeVolumeLimits, "NodeVolumeLimits", true, 0, Level::Pod)
        .reasons(1)
        .events(&[CSINodeAdd, CSINodeUpdate, AssignedPodDelete, PersistentVolumeClaimAdd]),
    row(PluginId::VolumeBinding, "VolumeBinding", true, 0, Level::Pod)
        .reasons(3)
        .events(&[
            StorageClassAdd,
            StorageClassUpdate,
            PersistentVolumeClaimAdd,
            PersistentVolumeClaimUpdate,
            PersistentVolumeAdd,
            PersistentVolumeUpdate,
            NodeAdd,
            NodeLabelChange,
            CSINodeAdd,
            CSINodeUpdate,
        ]),
    row(PluginId::VolumeZone, "VolumeZone", true, 0, Level::Pod).reasons(1).events(&[
        StorageClassAdd,
        NodeAdd,
        NodeLabelChange,
        PersistentVolumeClaimAdd,
        PersistentVolumeClaimUpdate,
        PersistentVolumeAdd,
        PersistentVolumeUpdate,
    ]),
    row(PluginId::PodTopologySpread, "PodTopologySpread", true, 2, Level::Pod)
        .reasons(2)
        .events(&[
            AssignedPodAdd,
            AssignedPodLabelChange,
            AssignedPodDelete,
            NodeAdd,
            NodeDelete,
            NodeLabelChange,
            NodeTaintChange,
        ]),
    row(PluginId::InterPodAffinity, "InterPodAffinity", true, 2, Level::Pod)
        .reasons(3)
        .events(&[AssignedPodAdd, AssignedPodLabelChange, AssignedPodDelete, NodeAdd, NodeLabelChange]),
    row(
        PluginId::NodeResourcesBalancedAllocation,
        "NodeResourcesBalancedAllocation",
        false,
        1,
        Level::Node,
    ),
    row(PluginId::ImageLocality, "ImageLocality", false, 1, Level::Node),
];

/// How many fixed reasons the plugins have. Their codes are 1..=this: 0 is
/// `FEASIBLE`, then each plugin's reasons in registry order, so a plugin added
/// anywhere moves the codes of the plugins after it without anyone editing them.
pub const FIXED_REASON_COUNT: u32 = reason_base(PLUGIN_COUNT) - 1;

/// The first code of the plugins from row `end` on.
const fn reason_base(end: usize) -> u32 {
    let (mut code, mut i) = (1, 0);
    while i < end {
        code += PLUGINS[i].reasons;
        i += 1;
    }
    code
}

/// The global code of reason `local` (its index in the plugin's `REASONS`).
pub const fn reason_code(id: PluginId, local: u32) -> u32 {
    assert!(local < PLUGINS[id as usize].reasons, "a reason index past the row's count");
    reason_base(id as usize) + local
}

pub fn plugin_by_name(name: &str) -> Option<PluginId> {
    PLUGINS.iter().find(|p| p.name == name).map(|p| p.id)
}

impl PluginId {
    #[inline]
    pub const fn info(self) -> &'static PluginInfo {
        &PLUGINS[self as usize]
    }

    pub const fn name(self) -> &'static str {
        self.info().name
    }
}

/// NodePodLimit's default `maxPods`: the kubelet's default `maxPods`, so
/// enabling the plugin without args changes nothing on default nodes.
pub const DEFAULT_MAX_PODS_PER_NODE: i64 = 110;

/// Upstream's default InterPodAffinity `hardPodAffinityWeight`.
pub const HARD_POD_AFFINITY_WEIGHT: i64 = 1;

#[derive(Clone, Debug, PartialEq)]
pub enum Strategy {
    LeastAllocated,
    MostAllocated,
    /// Shape points (utilization 0..=100, score 0..=10), sorted by utilization.
    RequestedToCapacityRatio(Vec<(i64, i64)>),
}

/// A compiled scheduling profile: which plugins run and with what weights.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// Per plugin (`PluginId` index): whether its Filter runs.
    pub filter: [bool; PLUGIN_COUNT],
    /// Per plugin: its score weight, 0 when its Score is off.
    pub weight: [i64; PLUGIN_COUNT],
    /// InterPodAffinity's `hardPodAffinityWeight`.
    pub hard_pod_affinity_weight: i64,
    /// InterPodAffinity's `ignorePreferredTermsOfExistingPods`: a pod without
    /// preferred terms of its own is not scored by the others' terms.
    pub ignore_preferred_terms_of_existing_pods: bool,
    pub fit_strategy: Strategy,
    /// (resource column, weight) scored by NodeResourcesFit.
    pub fit_resources: Vec<(usize, i64)>,
    /// Extended resource columns NodeResourcesFit's filter does not check
    /// (its `ignoredResources` and `ignoredResourceGroups`).
    pub fit_ignored: Vec<usize>,
    /// Resource columns scored by NodeResourcesBalancedAllocation.
    pub balanced_resources: Vec<usize>,
    /// DefaultPreemption (PostFilter).
    pub preemption: bool,
    /// NodePodLimit's `maxPods`: the most pods a node may hold.
    pub max_pods_per_node: i64,
}

impl Profile {
    #[inline]
    pub fn filters(&self, id: PluginId) -> bool {
        self.filter[id as usize]
    }

    #[inline]
    pub fn weight_of(&self, id: PluginId) -> i64 {
        self.weight[id as usize]
    }
}

impl Default for Profile {
    /// The default-equivalent profile: upstream's plugins and weights.
    fn default() -> Self {
        Profile {
            filter: PLUGINS.map(|p| p.filter && p.default_enabled),
            weight: PLUGINS.map(|p| if p.default_enabled { p.default_weight } else { 0 }),
            hard_pod_affinity_weight: HARD_POD_AFFINITY_WEIGHT,
            ignore_preferred_terms_of_existing_pods: false,
            fit_strategy: Strategy::LeastAllocated,
            fit_resources: vec![(CPU, 1), (MEMORY, 1)],
            fit_ignored: Vec::new(),
            balanced_resources: vec![CPU, MEMORY],
            preemption: true,
            max_pods_per_node: DEFAULT_MAX_PODS_PER_NODE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_indexed_by_their_id() {
        for (i, p) in PLUGINS.iter().enumerate() {
            assert_eq!(p.id as usize, i, "{}", p.name);
            assert_eq!(plugin_by_name(p.name), Some(p.id));
        }
        assert_eq!(plugin_by_name("DefaultBinder"), None);
    }

    #[test]
    fn filters_are_ordered_by_level() {
        // The batch loop runs class-level filters (cached), then node-level,
        // then pod-level ones: that must be the registry's order too.
        let levels: Vec<(usize, &str)> = PLUGINS.iter().filter(|p| p.filter).map(|p| (p.level as usize, p.name)).collect();
        let mut sorted = levels.clone();
        sorted.sort_by_key(|&(level, _)| level);
        assert_eq!(levels, sorted);
    }

    #[test]
    fn default_weights_are_upstreams() {
        let want = [
            ("TaintToleration", 3),
            ("NodeAffinity", 2),
            ("NodeResourcesFit", 1),
            ("PodTopologySpread", 2),
            ("InterPodAffinity", 2),
            ("NodeResourcesBalancedAllocation", 1),
            ("ImageLocality", 1),
        ];
        let profile = Profile::default();
        let got: Vec<(&str, i64)> = PLUGINS
            .iter()
            .filter(|p| profile.weight_of(p.id) > 0)
            .map(|p| (p.name, profile.weight_of(p.id)))
            .collect();
        assert_eq!(got, want);
        let filters: Vec<&str> = PLUGINS.iter().filter(|p| profile.filters(p.id)).map(|p| p.name).collect();
        assert_eq!(
            filters,
            [
                "NodeUnschedulable",
                "NodeName",
                "TaintToleration",
                "NodeAffinity",
                "NodePorts",
                "NodeResourcesFit",
                "VolumeRestrictions",
                "NodeVolumeLimits",
                "VolumeBinding",
                "VolumeZone",
                "PodTopologySpread",
                "InterPodAffinity"
            ]
        );
    }
}
