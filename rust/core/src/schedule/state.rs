//! What placements earlier in the batch changed, and committing one more.

use super::engine::{Engine, PodView};
use crate::model::UNBOUND;
use crate::model::{row, PluginId, Reservations};
use crate::plugins::node_ports::HostPort;
use crate::plugins::{balanced_allocation, metrics, volume_binding};

/// The nominated pods' reservations given with the batch.
fn reservations<'e>(engine: &'e Engine) -> &'e Reservations<'e> {
    &engine
        .pods
        .preemption
        .as_ref()
        .expect("reservations imply preemption data")
        .reservations
}

/// A nominated pod not placed yet: a reservation given with the batch (a
/// pod outside it), or a pod of the batch nominated before the batch or by
/// a preemption earlier in it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Nominee {
    Reservation(usize),
    Batch(usize),
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Holder {
    pub nominee: Nominee,
    pub node: usize,
    pub priority: i64,
    /// False once the pod is placed or nominated elsewhere.
    pub active: bool,
}

impl Holder {
    fn request<'e>(&self, engine: &'e Engine) -> &'e [i64] {
        let r = engine.resources;
        match self.nominee {
            Nominee::Reservation(k) => &reservations(engine).requests[k * r..(k + 1) * r],
            Nominee::Batch(i) => &engine.pods.requests[i * r..(i + 1) * r],
        }
    }

    fn ports(&self, engine: &Engine, out: &mut Vec<HostPort>) {
        let (ports, k) = match self.nominee {
            Nominee::Reservation(k) => (&reservations(engine).ports, k),
            Nominee::Batch(i) => (&engine.pods.host_ports, i),
        };
        out.extend(
            row(ports.offsets, k)
                .filter(|&i| ports.ports[i] > 0)
                .map(|i| (ports.protocols[i], ports.ips[i], ports.ports[i])),
        );
    }

    /// The pod's row in the pod table (None: the caller gave it none).
    pub fn table_row(&self, engine: &Engine) -> Option<usize> {
        let table = engine.pods.table.as_ref()?;
        match self.nominee {
            Nominee::Reservation(k) => usize::try_from(reservations(engine).rows[k]).ok(),
            Nominee::Batch(i) => Some(table.bound + i),
        }
    }
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
    /// Metric values, `metrics` per node: the caller's, plus the estimates of
    /// placements. What the metric filter reads.
    pub values: Vec<f64>,
    /// The same less their caution (`LoadInputs::caution`, and each placement's
    /// estimate over its expected usage): what the metric scores read.
    pub scored: Vec<f64>,
    /// The caution in `scored` where the scores keep it (`LoadInputs::scores_caution`;
    /// else 0): the risk term still reads it as the node's deviation.
    pub kept_caution: Vec<f64>,
    pub metrics: usize,
    /// Each scored value's badness (NaN where missing) and each node's threshold verdict.
    pub badness: Vec<f64>,
    pub metric_codes: Vec<u32>,
    /// Bumped when an estimate changes a node's values (see `Base::epochs`).
    pub metric_epoch: Vec<u32>,
    /// Whether any metric has a load estimate.
    pub has_estimates: bool,
    /// Every pod on a node (pod table row, node): bound pods, then placements.
    pub on_nodes: Vec<(u32, u32)>,
    /// The subset with affinity terms.
    pub affine: Vec<(u32, u32)>,
    /// Nominated pods not placed yet (upstream's nominator), and per node
    /// the `holders` nominated to it (empty without preemption data).
    pub holders: Vec<Holder>,
    pub reserved: Vec<Vec<usize>>,
    /// Per pod of the batch: its holder while it is nominated.
    pub holder_of: Vec<Option<usize>>,
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
        // An infinite value is no value (`missing` applies): no score or threshold can use it.
        let values: Vec<f64> = metrics_in
            .values
            .iter()
            .map(|&v| if v.is_finite() { v } else { f64::NAN })
            .collect();
        let mut scored = values.clone();
        let mut kept_caution = vec![0.0; values.len()];
        if let Some(load) = &metrics_in.load {
            for (at, (&v, &c)) in values.iter().zip(load.caution).enumerate() {
                // A caution that is not finite, or that takes the value past the
                // largest float, is no caution: the scores read the value.
                if !(c.is_finite() && ((v - c).is_finite() || v.is_nan())) {
                    continue;
                }
                // `validate` held `scores_caution` to one flag a metric.
                if load.scores_caution[at % m] {
                    kept_caution[at] = c;
                } else {
                    scored[at] = v - c;
                }
            }
        }
        let mut state = BatchState {
            requested: nodes.requested.to_vec(),
            nonzero_requested: nodes.nonzero_requested.to_vec(),
            pod_count: nodes.pod_count.to_vec(),
            placed_ports: vec![Vec::new(); n],
            log: Vec::new(),
            balance_without: Vec::new(),
            values: values.clone(),
            metrics: m,
            badness: scored
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
            scored,
            kept_caution,
            metric_codes: (0..n)
                .map(|node| engine.shared_metric_code(&values[node * m..(node + 1) * m], node))
                .collect(),
            metric_epoch: vec![0; n],
            has_estimates: metrics_in.specs.iter().any(|s| s.estimate.is_some()),
            on_nodes: Vec::new(),
            affine: Vec::new(),
            holders: Vec::new(),
            reserved: Vec::new(),
            holder_of: vec![None; pods.count],
            victims_on: vec![Vec::new(); n],
            taken: Vec::new(),
            taken_volumes: vec![false; pods.volumes.as_ref().map_or(0, |v| v.pvs)],
            taken_claims: vec![false; pods.volumes.as_ref().map_or(0, |v| v.rwop_count())],
            placed_attachments: Vec::new(),
        };
        if let Some(pre) = &pods.preemption {
            state.reserved = vec![Vec::new(); n];
            for (k, (&node, &priority)) in pre.reservations.nodes.iter().zip(pre.reservations.priorities).enumerate() {
                state.hold(Nominee::Reservation(k), node as usize, priority);
            }
            for (i, (&node, &priority)) in pre.nominated.iter().zip(pre.priorities).enumerate() {
                if node >= 0 {
                    state.hold(Nominee::Batch(i), node as usize, priority);
                }
            }
            state.log.clear();
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

    /// Metric `k` of `node` as its scores read it (`scored`).
    #[inline]
    pub fn metric_value(&self, node: usize, k: usize) -> f64 {
        self.scored[node * self.metrics + k]
    }

    /// Hold `node` for a nominated pod (upstream's nominator adds it): pods
    /// of lower or equal priority see it there in their filters' first pass.
    fn hold(&mut self, nominee: Nominee, node: usize, priority: i64) {
        let id = self.holders.len();
        self.holders.push(Holder {
            nominee,
            node,
            priority,
            active: true,
        });
        self.reserved[node].push(id);
        if let Nominee::Batch(i) = nominee {
            self.holder_of[i] = Some(id);
        }
        self.log.push(node as u32);
    }

    /// The batch pod's nomination ends (it is placed, or nominated anew).
    fn release(&mut self, pod: usize) {
        if let Some(id) = self.holder_of.get_mut(pod).and_then(Option::take) {
            let h = &mut self.holders[id];
            h.active = false;
            let node = h.node;
            self.reserved[node].retain(|&k| k != id);
            self.log.push(node as u32);
        }
    }

    /// A preemption in the batch nominated the pod to `node`: it holds its
    /// place there, for the pods of lower or equal priority after it.
    pub fn nominate(&mut self, pod: &PodView, node: usize) {
        self.release(pod.index);
        self.hold(Nominee::Batch(pod.index), node, pod.priority);
    }

    /// The nominated pods that count for `pod`'s filters on `node`
    /// (upstream's `addGENominatedPods`): those of equal or higher priority,
    /// not the pod itself.
    #[inline]
    pub fn nominated_for<'s>(&'s self, pod: &'s PodView, node: usize) -> impl Iterator<Item = &'s Holder> + 's {
        self.reserved
            .get(node)
            .into_iter()
            .flatten()
            .map(|&k| &self.holders[k])
            .filter(move |h| h.active && h.priority >= pod.priority && h.nominee != Nominee::Batch(pod.index))
    }

    /// Whether any nominated pod counts for `pod` on `node`.
    #[inline]
    pub fn has_nominated_for(&self, pod: &PodView, node: usize) -> bool {
        !self.reserved.is_empty() && !self.reserved[node].is_empty() && self.nominated_for(pod, node).next().is_some()
    }

    /// The node's requested resources and pod count for a pod's filters
    /// with the nominated pods that count for it added (into `buf`).
    pub fn requested_with_nominated<'s>(&'s self, engine: &Engine, pod: &PodView, node: usize, buf: &'s mut Vec<i64>) -> (&'s [i64], i64) {
        let r = engine.resources;
        buf.clear();
        buf.extend_from_slice(&self.requested[node * r..(node + 1) * r]);
        let mut count = self.pod_count[node];
        for h in self.nominated_for(pod, node) {
            buf.iter_mut().zip(h.request(engine)).for_each(|(b, &q)| *b = b.saturating_add(q));
            count += 1;
        }
        (&buf[..], count)
    }

    /// The host ports in use on the node with those of the nominated pods
    /// that count for `pod` added (into `buf`).
    pub fn ports_with_nominated<'s>(&'s self, engine: &Engine, pod: &PodView, node: usize, buf: &'s mut Vec<HostPort>) -> &'s [HostPort] {
        buf.clear();
        buf.extend_from_slice(&self.placed_ports[node]);
        for h in self.nominated_for(pod, node) {
            h.ports(engine, buf);
        }
        &buf[..]
    }

    /// Count the pod on its node for the rest of the batch.
    pub fn commit(&mut self, engine: &Engine, pod: &PodView, node: usize) {
        self.release(pod.index);
        let r = engine.resources;
        // Saturating, as the node table's own sums: a node whose requests pass i64 is full.
        for &c in &pod.columns {
            let sum = &mut self.requested[node * r + c];
            *sum = sum.saturating_add(pod.request[c]);
        }
        for (sum, &q) in self.nonzero_requested[node * 2..node * 2 + 2]
            .iter_mut()
            .zip(&pod.nonzero_request[..2])
        {
            *sum = sum.saturating_add(q);
        }
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
        if self.has_estimates {
            self.add_estimate(engine, pod, node);
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

    /// Add the placed pod's estimated load to its node's estimated metrics, so
    /// later pods of the batch do not all chase the value of the last scrape: its
    /// estimate from the load inputs over the node's allocatable to what the
    /// filter reads, its expected usage to what the scores read; else (none
    /// given) its request times the factor to both.
    fn add_estimate(&mut self, engine: &Engine, pod: &PodView, node: usize) {
        let specs = &engine.metrics.specs;
        let (m, r) = (specs.len(), engine.resources);
        let load = engine.metrics.load.as_ref();
        for (k, spec) in specs.iter().enumerate() {
            let Some((column, factor)) = spec.estimate else { continue };
            let capacity = engine.nodes.allocatable[node * r + column];
            let at = node * m + k;
            if capacity > 0 && !self.values[at].is_nan() {
                let (filtered, scored) = match load {
                    Some(load) => {
                        let row = pod.index * m + k;
                        (load.amounts[row] as f64, load.expected[row] as f64)
                    }
                    None => {
                        let estimate = pod.request[column] as f64 * factor;
                        (estimate, estimate)
                    }
                };
                self.values[at] += filtered / capacity as f64;
                self.scored[at] += scored / capacity as f64;
                self.badness[at] = metrics::badness(spec.prefer, self.scored[at]);
            }
        }
        self.metric_codes[node] = engine.shared_metric_code(&self.values[node * m..(node + 1) * m], node);
        self.metric_epoch[node] += 1;
    }
}
