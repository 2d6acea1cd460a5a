//! The node table: allocatable and requested resources, labels, taints,
//! host ports in use and container images, one row per node.

use super::encoding::{row, FIRST_SCALAR};
use super::error::{check_index, check_len, check_offsets, EngineError};

/// Node labels, sorted by key within each node.
#[derive(Clone, Copy)]
pub struct Labels<'a> {
    pub offsets: &'a [i64],
    pub keys: &'a [i32],
    pub values: &'a [i32],
    /// The value parsed as a base-10 int64 (for Gt/Lt), valid where `int_valid` is 1.
    pub int_values: &'a [i64],
    pub int_valid: &'a [u8],
}

impl Labels<'_> {
    /// Index of the label `key` of node `node`, if it has one.
    #[inline]
    pub fn find(&self, node: usize, key: i32) -> Option<usize> {
        let r = row(self.offsets, node);
        let keys = &self.keys[r.clone()];
        keys.binary_search(&key).ok().map(|i| r.start + i)
    }

    fn validate(&self, nodes: usize) -> Result<(), EngineError> {
        check_offsets("node label offsets", self.offsets, nodes, self.keys.len())?;
        check_len("node label values", self.values.len(), self.keys.len())?;
        check_len("node label int values", self.int_values.len(), self.keys.len())?;
        check_len("node label int valid", self.int_valid.len(), self.keys.len())
    }
}

#[derive(Clone, Copy)]
pub struct Taints<'a> {
    pub offsets: &'a [i64],
    pub keys: &'a [i32],
    pub values: &'a [i32],
    pub effects: &'a [u8],
}

#[derive(Clone, Copy)]
pub struct Ports<'a> {
    pub offsets: &'a [i64],
    pub protocols: &'a [u8],
    /// Interned host IP; the caller maps "" to the id of "0.0.0.0".
    pub ips: &'a [i32],
    pub ports: &'a [i32],
}

impl Ports<'_> {
    pub(super) fn validate(&self, what: &'static str, rows: usize) -> Result<(), EngineError> {
        check_offsets(what, self.offsets, rows, self.ports.len())?;
        check_len(what, self.protocols.len(), self.ports.len())?;
        check_len(what, self.ips.len(), self.ports.len())
    }
}

/// The container images on each node (`status.images`), every name of an
/// image its own entry as upstream's image states keep them. Image ids are
/// interned apart from other strings, so the per-image columns are dense.
#[derive(Clone, Copy)]
pub struct Images<'a> {
    /// Node -> its image ids, sorted within each node.
    pub offsets: &'a [i64],
    pub ids: &'a [i32],
    /// Per image id: its size in bytes (`sizeBytes` where first reported)
    /// and how many nodes have it.
    pub sizes: &'a [i64],
    pub node_counts: &'a [i64],
}

impl Images<'_> {
    /// Whether node `node` has the image `id`.
    #[inline]
    pub fn has(&self, node: usize, id: i32) -> bool {
        self.ids[row(self.offsets, node)].binary_search(&id).is_ok()
    }

    fn validate(&self, nodes: usize) -> Result<(), EngineError> {
        check_offsets("node image offsets", self.offsets, nodes, self.ids.len())?;
        check_len("image node counts", self.node_counts.len(), self.sizes.len())?;
        for &id in self.ids {
            check_index("node image", id as i64, self.sizes.len())?;
        }
        Ok(())
    }
}

/// The node table, with the requests of the pods already bound to each node.
#[derive(Clone, Copy)]
pub struct Nodes<'a> {
    pub count: usize,
    pub resources: usize,
    /// `count × resources`, row-major.
    pub allocatable: &'a [i64],
    /// `count × resources`: sum of the effective requests of the node's pods.
    pub requested: &'a [i64],
    /// `count × 2`: cpu and memory requested with upstream's non-zero defaults.
    pub nonzero_requested: &'a [i64],
    pub allowed_pods: &'a [i64],
    pub pod_count: &'a [i64],
    pub unschedulable: &'a [u8],
    pub names: &'a [i32],
    /// Stable per-node key for the seeded tie-break (e.g. a hash of the node name).
    pub keys: &'a [u64],
    pub labels: Labels<'a>,
    pub taints: Taints<'a>,
    pub used_ports: Ports<'a>,
    pub images: Images<'a>,
    /// The interned id of the wildcard host IP "0.0.0.0".
    pub wildcard_ip: i32,
    /// The interned id of the taint key `node.kubernetes.io/unschedulable`.
    pub unschedulable_key: i32,
    /// The interned id of the empty string.
    pub empty_string: i32,
}

impl Nodes<'_> {
    /// The value of node `node`'s label `key`, if it has one.
    #[inline]
    pub fn label(&self, node: usize, key: i32) -> Option<i32> {
        self.labels.find(node, key).map(|i| self.labels.values[i])
    }

    pub fn validate(&self) -> Result<(), EngineError> {
        let n = self.count;
        check_len("node allocatable", self.allocatable.len(), n * self.resources)?;
        check_len("node requested", self.requested.len(), n * self.resources)?;
        check_len("node non-zero requested", self.nonzero_requested.len(), n * 2)?;
        check_len("node allowed pods", self.allowed_pods.len(), n)?;
        check_len("node pod count", self.pod_count.len(), n)?;
        check_len("node unschedulable", self.unschedulable.len(), n)?;
        check_len("node names", self.names.len(), n)?;
        check_len("node keys", self.keys.len(), n)?;
        if self.resources < FIRST_SCALAR {
            return Err(EngineError::Shape {
                what: "resource columns",
                expected: FIRST_SCALAR,
                got: self.resources,
            });
        }
        self.labels.validate(n)?;
        check_offsets("node taint offsets", self.taints.offsets, n, self.taints.keys.len())?;
        check_len("node taint values", self.taints.values.len(), self.taints.keys.len())?;
        check_len("node taint effects", self.taints.effects.len(), self.taints.keys.len())?;
        self.used_ports.validate("node used ports", n)?;
        self.images.validate(n)
    }
}
