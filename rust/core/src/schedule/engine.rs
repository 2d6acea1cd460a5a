//! The call's options, the batch's inputs and profile, and the per-pod facts
//! every node's evaluation reuses.

use std::time::Instant;

use crate::model::{row, Classes, Metrics, Nodes, PluginId, Pods, Profile};
use crate::plugins::{balanced_allocation, node_resources_fit};

/// Nodes per parallel work item: small enough to balance two to a few dozen
/// threads, large enough that scheduling overhead stays under the work.
pub(super) const NODES_PER_CHUNK: usize = 256;

/// How one call runs.
#[derive(Clone, Debug, Default)]
pub struct ScheduleOptions {
    pub seed: u64,
    /// Stop placing pods after this instant; the rest are `NOT_ATTEMPTED`.
    pub deadline: Option<Instant>,
    /// Record a per-node explanation for this pod (index in the batch).
    pub explain: Option<usize>,
    /// Evaluate nodes in parallel on rayon's pool.
    pub parallel: bool,
    /// The metrics (by index) whose threshold-refused nodes the outcome lists for
    /// each pod that fits nowhere (`Outcome::threshold_nodes`): those whose
    /// saturation policy places a pod over the line. Empty: none are listed.
    pub threshold_metrics: Vec<usize>,
}

/// The batch's inputs, and how the call evaluates them.
pub(super) struct Engine<'a, 'm> {
    pub nodes: &'a Nodes<'a>,
    pub classes: &'a Classes<'a>,
    pub pods: &'a Pods<'a>,
    pub metrics: &'a Metrics<'m>,
    pub profile: &'a Profile,
    pub resources: usize,
    /// The seed of the tie-break and of preemption's node order (`ScheduleOptions::seed`).
    pub seed: u64,
    /// Nodes per work item of a pass over every node: `NODES_PER_CHUNK`, or every
    /// node in one where the call is sequential.
    pub chunk: usize,
    /// Whether passes over every node run on rayon's pool (`ScheduleOptions::parallel`,
    /// and more than one chunk of nodes).
    pub parallel: bool,
    /// Per metric, whether the outcome lists the nodes its threshold refused
    /// (`ScheduleOptions::threshold_metrics`).
    pub threshold_metrics: Vec<bool>,
}

/// How the metric filter treats one pod.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum MetricFilter {
    /// The node's shared verdict.
    Shared,
    /// No metric filters it (an exempt owner's pod, a mirror pod).
    Exempt,
    /// Its own verdict, from its row of the load inputs.
    Own,
}

/// Per-pod facts reused across all nodes.
pub(super) struct PodView<'p> {
    pub index: usize,
    pub class: usize,
    pub request: &'p [i64],
    pub nonzero_request: &'p [i64],
    pub columns: Vec<usize>,
    /// The columns NodeResourcesFit's filter checks: `columns` less the profile's ignored ones.
    pub fit_columns: Vec<usize>,
    pub has_ports: bool,
    pub balanced: bool,
    /// The balance without the pod is the node's cached one.
    pub balanced_node_only: bool,
    /// ImageLocality: the pod's images some node has (empty where the
    /// plugin is off) and its container count.
    pub images: &'p [i32],
    pub containers: i64,
    pub priority: i64,
    /// Whether the metric filter's verdicts are the nodes' shared ones (`load`).
    pub metric: MetricFilter,
    /// Whose estimate its metric scores add to the nodes' values (`Engine::incoming`).
    pub incoming: Incoming,
}

/// Whose estimate a pod's metric scores add to the nodes' values: the index of
/// a pod whose own estimate counts, or None (the batch's values).
pub(super) type Incoming = Option<usize>;

impl<'a, 'm> Engine<'a, 'm> {
    pub fn new(
        nodes: &'a Nodes,
        classes: &'a Classes,
        pods: &'a Pods,
        metrics: &'a Metrics<'m>,
        profile: &'a Profile,
        options: &ScheduleOptions,
    ) -> Self {
        let chunk = if options.parallel { NODES_PER_CHUNK } else { nodes.count.max(1) };
        Engine {
            nodes,
            classes,
            pods,
            metrics,
            profile,
            resources: nodes.resources,
            seed: options.seed,
            chunk,
            parallel: options.parallel && nodes.count > chunk,
            threshold_metrics: (0..metrics.specs.len()).map(|k| options.threshold_metrics.contains(&k)).collect(),
        }
    }

    pub fn pod_view(&self, index: usize) -> PodView<'_> {
        let r = self.resources;
        let request = &self.pods.requests[index * r..(index + 1) * r];
        let balanced_resources = &self.profile.balanced_resources;
        let images = &self.pods.images;
        let columns = node_resources_fit::requested_columns(request);
        let metric = self.metric_filter(index);
        PodView {
            index,
            class: self.pods.classes[index] as usize,
            request,
            nonzero_request: &self.pods.nonzero_requests[index * 2..index * 2 + 2],
            fit_columns: node_resources_fit::checked_columns(&columns, &self.profile.fit_ignored),
            columns,
            has_ports: !row(self.pods.host_ports.offsets, index).is_empty(),
            balanced: self.profile.weight_of(PluginId::NodeResourcesBalancedAllocation) != 0
                && balanced_allocation::applies(balanced_resources, request),
            balanced_node_only: balanced_allocation::node_only(balanced_resources, request),
            images: if self.profile.weight_of(PluginId::ImageLocality) != 0 {
                &images.ids[row(images.offsets, index)]
            } else {
                &[]
            },
            containers: images.containers[index],
            priority: self.pods.preemption.as_ref().map_or(0, |pre| pre.priorities[index]),
            metric,
            incoming: self.incoming(index, metric),
        }
    }
}
