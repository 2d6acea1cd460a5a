//! The pending pods of one batch, and what preemption needs: their
//! priorities, the bound pods they may evict and the nominated reservations.

use super::error::{check_index, check_len, check_offsets, EngineError};
use super::nodes::Ports;
use super::pod_table::PodTable;
use super::volumes::Volumes;

/// The pending pods of one batch, in queue order.
#[derive(Clone, Copy)]
pub struct Pods<'a> {
    pub count: usize,
    /// `count × resources`: the effective request (upstream's formula).
    pub requests: &'a [i64],
    /// `count × 2`: cpu and memory with upstream's non-zero defaults, for scoring.
    pub nonzero_requests: &'a [i64],
    pub classes: &'a [i64],
    /// Stable per-pod key for the seeded tie-break (e.g. a hash of namespace/name).
    pub keys: &'a [u64],
    pub host_ports: Ports<'a>,
    pub images: PodImages<'a>,
    /// Labels, namespaces and affinity terms of the bound and pending pods, for
    /// the pod-level plugins (None: they have nothing to act on).
    pub table: Option<PodTable<'a>>,
    /// Priorities, preemption and nominated reservations (None: all pods of equal
    /// priority and nothing nominated).
    pub preemption: Option<Preemption<'a>>,
    /// The pods' PersistentVolumeClaims (None: no pod of the batch has one).
    /// Claims are evaluated by pod-level plugins, so they need `table`.
    pub volumes: Option<Volumes<'a>>,
}

/// The container images of each pending pod that some node has (ImageLocality).
#[derive(Clone, Copy)]
pub struct PodImages<'a> {
    /// Pod -> image ids (`Images` ids), one per container, init container
    /// or image volume whose normalized image name a node reports; images
    /// no node has are left out (they add nothing on any node).
    pub offsets: &'a [i64],
    pub ids: &'a [i32],
    /// Per pod: its init containers plus containers (upstream's `numContainers`).
    pub containers: &'a [i64],
}

/// Pods outside the batch nominated to a node by an earlier preemption and
/// not placed yet: they count on that node in the filters of pods of lower or
/// equal priority (requests, host ports, and through their pod table rows,
/// inter-pod affinity and topology spreading).
#[derive(Clone, Copy)]
pub struct Reservations<'a> {
    pub nodes: &'a [i64],
    /// Each one's row in the pod table (after the batch's pending pods), -1
    /// where there is no table.
    pub rows: &'a [i64],
    pub priorities: &'a [i64],
    /// `count × resources`.
    pub requests: &'a [i64],
    pub ports: Ports<'a>,
}

#[derive(Clone, Copy)]
pub struct Preemption<'a> {
    /// Per pending pod.
    pub priorities: &'a [i64],
    /// 1 where the pod may preempt (`preemptionPolicy` is not `Never`).
    pub allowed: &'a [u8],
    /// The node an earlier preemption nominated, -1 for none.
    pub nominated: &'a [i64],
    pub victims: Victims<'a>,
    pub reservations: Reservations<'a>,
}

impl Preemption<'_> {
    pub fn validate(&self, pods: usize, nodes: usize, resources: usize) -> Result<(), EngineError> {
        check_len("pod priorities", self.priorities.len(), pods)?;
        check_len("pod preemption allowed", self.allowed.len(), pods)?;
        check_len("pod nominated nodes", self.nominated.len(), pods)?;
        for &n in self.nominated {
            if n >= 0 {
                check_index("nominated node", n, nodes)?;
            }
        }
        self.victims.validate(nodes, resources)?;
        let r = &self.reservations;
        check_len("reservation priorities", r.priorities.len(), r.nodes.len())?;
        check_len("reservation rows", r.rows.len(), r.nodes.len())?;
        check_len("reservation requests", r.requests.len(), r.nodes.len() * resources)?;
        r.ports.validate("reservation host ports", r.nodes.len())?;
        for &n in r.nodes {
            check_index("reservation node", n, nodes)?;
        }
        Ok(())
    }
}

impl Pods<'_> {
    pub fn validate(&self, resources: usize, classes: usize) -> Result<(), EngineError> {
        check_len("pod requests", self.requests.len(), self.count * resources)?;
        check_len("pod non-zero requests", self.nonzero_requests.len(), self.count * 2)?;
        check_len("pod classes", self.classes.len(), self.count)?;
        check_len("pod keys", self.keys.len(), self.count)?;
        for &c in self.classes {
            check_index("pod class", c, classes)?;
        }
        self.host_ports.validate("pod host ports", self.count)?;
        check_offsets("pod image offsets", self.images.offsets, self.count, self.images.ids.len())?;
        check_len("pod containers", self.images.containers.len(), self.count)
    }
}

/// Bound pods that a preemptor may evict (the caller passes the pods of lower
/// priority than some pending preemptor).
#[derive(Clone, Copy)]
pub struct Victims<'a> {
    pub count: usize,
    /// Row in the pod table (for the pod-level plugins), -1 when there is none.
    pub rows: &'a [i64],
    pub nodes: &'a [i64],
    pub priorities: &'a [i64],
    /// `count × resources`.
    pub requests: &'a [i64],
    /// Start time (any monotonic unit); earlier is more important at equal priority.
    pub start_times: &'a [i64],
    /// 1 for a pod already being deleted.
    pub terminating: &'a [u8],
    pub ports: Ports<'a>,
    /// Victim -> the PodDisruptionBudgets that select it.
    pub pdb_offsets: &'a [i64],
    pub pdbs: &'a [i64],
    /// Each PDB's `status.disruptionsAllowed`.
    pub pdb_allowed: &'a [i64],
}

impl Victims<'_> {
    pub fn validate(&self, nodes: usize, resources: usize) -> Result<(), EngineError> {
        let c = self.count;
        check_len("victim rows", self.rows.len(), c)?;
        check_len("victim nodes", self.nodes.len(), c)?;
        check_len("victim priorities", self.priorities.len(), c)?;
        check_len("victim requests", self.requests.len(), c * resources)?;
        check_len("victim start times", self.start_times.len(), c)?;
        check_len("victim terminating", self.terminating.len(), c)?;
        check_offsets("victim ports", self.ports.offsets, c, self.ports.ports.len())?;
        check_len("victim port protocols", self.ports.protocols.len(), self.ports.ports.len())?;
        check_len("victim port ips", self.ports.ips.len(), self.ports.ports.len())?;
        check_offsets("victim pdb offsets", self.pdb_offsets, c, self.pdbs.len())?;
        for &n in self.nodes {
            check_index("victim node", n, nodes)?;
        }
        for &p in self.pdbs {
            check_index("victim pdb", p, self.pdb_allowed.len())?;
        }
        Ok(())
    }
}
