//! What placements earlier in the batch changed, and committing one more.

use super::engine::{Engine, PodView};
use crate::model::UNBOUND;
use crate::model::{row, PluginId, Reservations};
use crate::plugins::node_ports::HostPort;
use crate::plugins::{balanced_allocation, metrics, volume_binding};

/// The nominated pods' reservations, which `BatchState::reserved` indexes.
fn reservations<'e>(engine: &'e Engine) -> &'e Reservations<'e> {
    &engine
        .pods
        .preemption
        .as_ref()
        .expect("reservations imply preemption data")
        .reservations
}

pub(super) struct BatchState {
    pub requested: Vec<i64>,
    pub nonzero_requested: Vec<i64>,
    pub pod_count: Vec<i64>,
    pub placed_ports: Vec<Vec<HostPort>>,
    /// Nodes placed on, in order; signature caches re-evaluate what they have not seen.
    pub log: Vec<u32>,
    /// Each node's BalancedAllocation balance without the pod, for pods where
    /// it depends on the node alone (empty when the plugin is off).
    pub balance_without: Vec<i64>,
    /// Metric values, `metrics` per node: the caller's, plus herd estimates of placements.
    pub values: Vec<f64>,
    pub metrics: usize,
    /// Each value's badness (NaN where missing) and each node's threshold verdict.
    pub badness: Vec<f64>,
    pub metric_codes: Vec<u32>,
    /// Bumped when a herd estimate changes a node's values (see `Base::epochs`).
    pub metric_epoch: Vec<u32>,
    /// Whether any metric has a herd estimate.
    pub herd: bool,
    /// Every pod on a node (pod table row, node): bound pods, then placements.
    pub on_nodes: Vec<(u32, u32)>,
    /// The subset with affinity terms.
    pub affine: Vec<(u32, u32)>,
    /// Per node: the reservations (nominated pods) held on it; empty when there are none.
    pub reserved: Vec<Vec<usize>>,
    /// Per node: the evictable bound pods (`Victims` indices) on it.
    pub victims_on: Vec<Vec<usize>>,
    /// Victims a preemption earlier in the batch already chose.
    pub taken: Vec<bool>,
    /// PersistentVolumes placements earlier in the batch bound (empty without volumes).
    pub taken_volumes: Vec<bool>,
    /// ReadWriteOncePod claims (`Volumes::rwop_claims` ids) that pods placed
    /// or nominated earlier in the batch use.
    pub taken_claims: Vec<bool>,
    /// (node, volume, driver) for each volume pods placed in the batch attach (NodeVolumeLimits).
    pub placed_attachments: Vec<(u32, i32, i32)>,
}

impl BatchState {
    /// The state before the batch's first placement: the node table's own accounting.
    pub fn new(engine: &Engine) -> BatchState {
        let (nodes, pods, metrics_in) = (engine.nodes, engine.pods, engine.metrics);
        let n = nodes.count;
        let m = metrics_in.specs.len();
        let mut state = BatchState {
            requested: nodes.requested.to_vec(),
            nonzero_requested: nodes.nonzero_requested.to_vec(),
            pod_count: nodes.pod_count.to_vec(),
            placed_ports: vec![Vec::new(); n],
            log: Vec::new(),
            balance_without: Vec::new(),
            values: metrics_in.values.to_vec(),
            metrics: m,
            badness: metrics_in
                .values
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    if v.is_nan() {
                        v
                    } else {
                        metrics::badness(metrics_in.specs[i % m].prefer, v)
                    }
                })
                .collect(),
            metric_codes: (0..n)
                .map(|node| metrics::filter(&metrics_in.specs, &metrics_in.values[node * m..(node + 1) * m], nodes.resources))
                .collect(),
            metric_epoch: vec![0; n],
            herd: metrics_in.specs.iter().any(|s| s.herd.is_some()),
            on_nodes: Vec::new(),
            affine: Vec::new(),
            reserved: Vec::new(),
            victims_on: vec![Vec::new(); n],
            taken: Vec::new(),
            taken_volumes: vec![false; pods.volumes.as_ref().map_or(0, |v| v.pvs)],
            taken_claims: vec![false; pods.volumes.as_ref().map_or(0, |v| v.rwop_count())],
            placed_attachments: Vec::new(),
        };
        if let Some(pre) = &pods.preemption {
            if !pre.reservations.nodes.is_empty() {
                state.reserved = vec![Vec::new(); n];
                for (k, &node) in pre.reservations.nodes.iter().enumerate() {
                    state.reserved[node as usize].push(k);
                }
            }
            for (i, &node) in pre.victims.nodes.iter().enumerate() {
                state.victims_on[node as usize].push(i);
            }
            state.taken = vec![false; pre.victims.count];
        }
        if let Some(table) = &pods.table {
            state.on_nodes = (0..table.bound).map(|r| (r as u32, table.nodes[r] as u32)).collect();
            state.affine = state
                .on_nodes
                .iter()
                .copied()
                .filter(|&(r, _)| table.term_sets[r as usize] >= 0)
                .collect();
        }
        if engine.profile.weight_of(PluginId::NodeResourcesBalancedAllocation) != 0 {
            let r = nodes.resources;
            let resources = &engine.profile.balanced_resources;
            state.balance_without = (0..n)
                .map(|node| {
                    balanced_allocation::without_pod(
                        resources,
                        &nodes.allocatable[node * r..(node + 1) * r],
                        &state.requested[node * r..(node + 1) * r],
                    )
                })
                .collect();
        }
        state
    }

    #[inline]
    pub fn metric_value(&self, node: usize, k: usize) -> f64 {
        self.values[node * self.metrics + k]
    }

    /// The node's requested resources and pod count for a pod's filters: the
    /// batch's, plus the reservations of nominated pods of equal or higher priority.
    #[inline]
    pub fn requested_for_filter<'s>(&'s self, engine: &Engine, pod: &PodView, node: usize, buf: &'s mut Vec<i64>) -> (&'s [i64], i64) {
        let r = engine.resources;
        let requested = &self.requested[node * r..(node + 1) * r];
        if self.reserved.is_empty() || self.reserved[node].is_empty() {
            return (requested, self.pod_count[node]);
        }
        let res = reservations(engine);
        buf.clear();
        buf.extend_from_slice(requested);
        let mut count = self.pod_count[node];
        for &k in &self.reserved[node] {
            if res.priorities[k] >= pod.priority {
                buf.iter_mut().zip(&res.requests[k * r..(k + 1) * r]).for_each(|(b, &q)| *b += q);
                count += 1;
            }
        }
        (&buf[..], count)
    }

    /// The host ports in use on the node for a pod's NodePorts filter: the
    /// batch's placements, plus the ports of nominated pods of equal or higher
    /// priority held there (upstream adds nominated pods to every filter).
    #[inline]
    pub fn ports_for_filter<'s>(&'s self, engine: &Engine, pod: &PodView, node: usize, buf: &'s mut Vec<HostPort>) -> &'s [HostPort] {
        let placed = &self.placed_ports[node];
        if !pod.has_ports || self.reserved.is_empty() || self.reserved[node].is_empty() {
            return placed;
        }
        let res = reservations(engine);
        buf.clear();
        buf.extend_from_slice(placed);
        for &k in self.reserved[node].iter().filter(|&&k| res.priorities[k] >= pod.priority) {
            buf.extend(row(res.ports.offsets, k).map(|i| (res.ports.protocols[i], res.ports.ips[i], res.ports.ports[i])));
        }
        &buf[..]
    }

    /// Count the pod on its node for the rest of the batch.
    pub fn commit(&mut self, engine: &Engine, pod: &PodView, node: usize) {
        let r = engine.resources;
        for &c in &pod.columns {
            self.requested[node * r + c] += pod.request[c];
        }
        self.nonzero_requested[node * 2] += pod.nonzero_request[0];
        self.nonzero_requested[node * 2 + 1] += pod.nonzero_request[1];
        self.pod_count[node] += 1;
        self.log.push(node as u32);
        if let Some(v) = &engine.pods.volumes {
            for &c in &v.rwop_claims[row(v.rwop_offsets, pod.index)] {
                self.taken_claims[c as usize] = true;
            }
            for i in row(v.attach_offsets, pod.index) {
                self.placed_attachments
                    .push((node as u32, v.attach_volumes[i], v.attach_drivers[i]));
            }
        }
        if let Some(table) = &engine.pods.table {
            let row = (table.bound + pod.index) as u32;
            self.on_nodes.push((row, node as u32));
            if table.term_sets[row as usize] >= 0 {
                self.affine.push((row, node as u32));
            }
        }
        if self.herd {
            self.herd_estimate(engine, pod, node);
        }
        if !self.balance_without.is_empty() {
            self.balance_without[node] = balanced_allocation::without_pod(
                &engine.profile.balanced_resources,
                &engine.nodes.allocatable[node * r..(node + 1) * r],
                &self.requested[node * r..(node + 1) * r],
            );
        }
        let ports = &engine.pods.host_ports;
        for i in row(ports.offsets, pod.index) {
            if ports.ports[i] > 0 {
                self.placed_ports[node].push((ports.protocols[i], ports.ips[i], ports.ports[i]));
            }
        }
    }

    /// Bind the placed pod's claims on its node for the rest of the batch:
    /// per claim (in `Volumes` order) the volume it binds, or
    /// `volume_binding::PROVISION`; the volumes matched to unbound claims
    /// are taken.
    pub fn bind_volumes(&mut self, engine: &Engine, pod: &PodView, node: usize) -> Vec<i64> {
        let Some(v) = engine.pods.volumes.as_ref() else {
            return Vec::new();
        };
        let Some(filter) = volume_binding::prefilter(v, pod.index, &self.taken_volumes) else {
            return Vec::new();
        };
        let mut chosen = Vec::new();
        filter.find(v, &engine.classes.selectors, engine.nodes, node, &mut chosen);
        for (c, &pv) in row(v.claim_offsets, pod.index).zip(&chosen) {
            if v.claim_pvs[c] == UNBOUND && pv >= 0 {
                self.taken_volumes[pv as usize] = true;
            }
        }
        chosen
    }

    /// Add the placed pod's estimated load to its node's herd-estimated metrics, so
    /// later pods of the batch do not all chase the value of the last scrape.
    fn herd_estimate(&mut self, engine: &Engine, pod: &PodView, node: usize) {
        let specs = &engine.metrics.specs;
        let (m, r) = (specs.len(), engine.resources);
        for (k, spec) in specs.iter().enumerate() {
            let Some((column, factor)) = spec.herd else { continue };
            let capacity = engine.nodes.allocatable[node * r + column];
            let v = &mut self.values[node * m + k];
            if capacity > 0 && !v.is_nan() {
                *v += pod.request[column] as f64 / capacity as f64 * factor;
                self.badness[node * m + k] = metrics::badness(spec.prefer, *v);
            }
        }
        self.metric_codes[node] = metrics::filter(specs, &self.values[node * m..(node + 1) * m], r);
        self.metric_epoch[node] += 1;
    }
}
