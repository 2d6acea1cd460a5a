//! The engine's input tables.
//!
//! Everything is a borrowed slice: resource quantities are `i64` in canonical
//! units (CPU millicores, bytes, counts), strings are interned ids chosen by
//! the caller, and variable-length lists are CSR tables (`offsets[i]..offsets[i+1]`
//! indexes row `i`'s entries). Columns 0, 1 and 2 of every resource matrix are
//! cpu, memory and ephemeral-storage; the rest are scalar (extended) resources.

use crate::error::{check_index, check_len, check_offsets, EngineError};

/// Resource column of CPU (millicores).
pub const CPU: usize = 0;
/// Resource column of memory (bytes).
pub const MEMORY: usize = 1;
/// Resource column of ephemeral storage (bytes).
pub const EPHEMERAL_STORAGE: usize = 2;
/// Columns below this are the native resources; the rest are scalar resources.
pub const FIRST_SCALAR: usize = 3;

/// Taint and toleration effects.
pub const EFFECT_ALL: u8 = 0; // a toleration with an empty effect
pub const EFFECT_NO_SCHEDULE: u8 = 1;
pub const EFFECT_PREFER_NO_SCHEDULE: u8 = 2;
pub const EFFECT_NO_EXECUTE: u8 = 3;

/// Toleration operators.
pub const TOLERATION_EQUAL: u8 = 0;
pub const TOLERATION_EXISTS: u8 = 1;

/// Node selector operators.
pub const OP_IN: u8 = 0;
pub const OP_NOT_IN: u8 = 1;
pub const OP_EXISTS: u8 = 2;
pub const OP_DOES_NOT_EXIST: u8 = 3;
pub const OP_GT: u8 = 4;
pub const OP_LT: u8 = 5;

/// Host port protocols.
pub const PROTOCOL_TCP: u8 = 0;
pub const PROTOCOL_UDP: u8 = 1;
pub const PROTOCOL_SCTP: u8 = 2;

#[inline]
pub fn row(offsets: &[i64], i: usize) -> std::ops::Range<usize> {
    offsets[i] as usize..offsets[i + 1] as usize
}

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
    fn validate(&self, what: &'static str, rows: usize) -> Result<(), EngineError> {
        check_offsets(what, self.offsets, rows, self.ports.len())?;
        check_len(what, self.protocols.len(), self.ports.len())?;
        check_len(what, self.ips.len(), self.ports.len())
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
    /// The interned id of the wildcard host IP "0.0.0.0".
    pub wildcard_ip: i32,
    /// The interned id of the taint key `node.kubernetes.io/unschedulable`.
    pub unschedulable_key: i32,
    /// The interned id of the empty string.
    pub empty_string: i32,
}

impl Nodes<'_> {
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
        self.used_ports.validate("node used ports", n)
    }
}

#[derive(Clone, Copy)]
pub struct Tolerations<'a> {
    pub offsets: &'a [i64],
    /// -1 for an empty key (matches every key).
    pub keys: &'a [i32],
    pub operators: &'a [u8],
    pub values: &'a [i32],
    pub effects: &'a [u8],
}

/// Node selector terms and their requirements, shared by all classes.
#[derive(Clone, Copy)]
pub struct Selectors<'a> {
    /// Term -> its requirements.
    pub term_offsets: &'a [i64],
    /// Weight of a preferred term (unused for required terms).
    pub term_weights: &'a [i64],
    /// Requirement key: a label key id, or the `metadata.name` field where `is_field` is 1.
    pub keys: &'a [i32],
    pub is_field: &'a [u8],
    pub operators: &'a [u8],
    pub value_offsets: &'a [i64],
    pub values: &'a [i32],
    /// The single value of a Gt/Lt requirement, parsed.
    pub int_values: &'a [i64],
}

impl Selectors<'_> {
    fn validate(&self) -> Result<(), EngineError> {
        let terms = self.term_weights.len();
        let reqs = self.keys.len();
        check_offsets("selector term offsets", self.term_offsets, terms, reqs)?;
        check_len("selector is_field", self.is_field.len(), reqs)?;
        check_len("selector operators", self.operators.len(), reqs)?;
        check_len("selector int values", self.int_values.len(), reqs)?;
        check_offsets("selector value offsets", self.value_offsets, reqs, self.values.len())
    }
}

/// Static constraint classes: pods with equal tolerations, node selectors,
/// affinity and node name share a class, so the node-level filters and
/// scores that cannot change within a batch are computed once per class.
#[derive(Clone, Copy)]
pub struct Classes<'a> {
    pub count: usize,
    /// Requested node name id, -1 for none.
    pub node_names: &'a [i32],
    pub tolerations: Tolerations<'a>,
    /// Term holding the nodeSelector map (ANDed with the affinity), -1 for none.
    pub node_selector_term: &'a [i64],
    /// 1 where the pod has requiredDuringScheduling node affinity.
    pub has_required: &'a [u8],
    pub required_offsets: &'a [i64],
    pub required_terms: &'a [i64],
    pub preferred_offsets: &'a [i64],
    pub preferred_terms: &'a [i64],
    /// 1 where NodeAffinity's PreFilter restricts the nodes to `prefilter_nodes`.
    pub has_prefilter: &'a [u8],
    pub prefilter_offsets: &'a [i64],
    pub prefilter_nodes: &'a [i64],
    pub selectors: Selectors<'a>,
}

impl Classes<'_> {
    pub fn validate(&self, nodes: usize) -> Result<(), EngineError> {
        let c = self.count;
        check_len("class node names", self.node_names.len(), c)?;
        let t = &self.tolerations;
        check_offsets("toleration offsets", t.offsets, c, t.keys.len())?;
        check_len("toleration operators", t.operators.len(), t.keys.len())?;
        check_len("toleration values", t.values.len(), t.keys.len())?;
        check_len("toleration effects", t.effects.len(), t.keys.len())?;
        check_len("class node selector term", self.node_selector_term.len(), c)?;
        check_len("class has required", self.has_required.len(), c)?;
        check_offsets("class required offsets", self.required_offsets, c, self.required_terms.len())?;
        check_offsets("class preferred offsets", self.preferred_offsets, c, self.preferred_terms.len())?;
        check_len("class has prefilter", self.has_prefilter.len(), c)?;
        check_offsets("class prefilter offsets", self.prefilter_offsets, c, self.prefilter_nodes.len())?;
        self.selectors.validate()?;
        let terms = self.selectors.term_weights.len();
        for &term in self.required_terms.iter().chain(self.preferred_terms) {
            check_index("selector term", term, terms)?;
        }
        for &term in self.node_selector_term {
            if term >= 0 {
                check_index("node selector term", term, terms)?;
            }
        }
        for &node in self.prefilter_nodes {
            check_index("prefilter node", node, nodes)?;
        }
        Ok(())
    }
}

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
    /// Labels, namespaces and affinity terms of the bound and pending pods, for
    /// the pod-level plugins (None: they have nothing to act on).
    pub table: Option<crate::pod_table::PodTable<'a>>,
    /// Priorities, preemption and nominated reservations (None: all pods of equal
    /// priority and nothing nominated).
    pub preemption: Option<Preemption<'a>>,
}

/// Pods nominated to a node by an earlier preemption and not placed yet: their
/// requests are held on that node for pods of lower or equal priority.
#[derive(Clone, Copy)]
pub struct Reservations<'a> {
    pub nodes: &'a [i64],
    pub priorities: &'a [i64],
    /// `count × resources`.
    pub requests: &'a [i64],
}

#[derive(Clone, Copy)]
pub struct Preemption<'a> {
    /// Per pending pod.
    pub priorities: &'a [i64],
    /// 1 where the pod may preempt (`preemptionPolicy` is not `Never`).
    pub allowed: &'a [u8],
    /// The node an earlier preemption nominated, -1 for none.
    pub nominated: &'a [i64],
    pub victims: crate::default_preemption::Victims<'a>,
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
        check_len("reservation requests", r.requests.len(), r.nodes.len() * resources)?;
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
        self.host_ports.validate("pod host ports", self.count)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Prefer {
    Lower,
    Higher,
    Target(f64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    /// Score a node without a value at the middle of the range.
    Neutral,
    /// Score it as the worst node.
    Worst,
    /// Filter it out.
    Exclude,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MetricSpec {
    pub prefer: Prefer,
    /// Fixed normalization range; min–max over the feasible nodes when None.
    pub range: Option<(f64, f64)>,
    /// Filter out nodes whose value is above this.
    pub above: Option<f64>,
    /// Filter out nodes whose value is below this.
    pub below: Option<f64>,
    pub missing: Missing,
    pub weight: f64,
    /// Herd estimate: each pod placed in the batch adds request / allocatable of
    /// this resource column, times the factor, to its node's value.
    pub herd: Option<(usize, f64)>,
}

/// Per-node metric values, `nodes × specs.len()`, NaN where missing.
#[derive(Clone)]
pub struct Metrics<'a> {
    pub values: &'a [f64],
    pub specs: Vec<MetricSpec>,
}

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
    pub taint_toleration_weight: i64,
    pub node_affinity_weight: i64,
    pub fit_weight: i64,
    pub balanced_weight: i64,
    pub inter_pod_affinity_weight: i64,
    pub pod_topology_spread_weight: i64,
    /// InterPodAffinity's `hardPodAffinityWeight`.
    pub hard_pod_affinity_weight: i64,
    pub fit_strategy: Strategy,
    /// (resource column, weight) scored by NodeResourcesFit.
    pub fit_resources: Vec<(usize, i64)>,
    /// Resource columns scored by NodeResourcesBalancedAllocation.
    pub balanced_resources: Vec<usize>,
    pub filter_node_unschedulable: bool,
    pub filter_node_name: bool,
    pub filter_taint_toleration: bool,
    pub filter_node_affinity: bool,
    pub filter_node_ports: bool,
    pub filter_node_resources_fit: bool,
    pub filter_pod_topology_spread: bool,
    pub filter_inter_pod_affinity: bool,
    /// DefaultPreemption (PostFilter).
    pub preemption: bool,
}

impl Default for Profile {
    /// The default-equivalent profile: upstream's plugins and weights.
    fn default() -> Self {
        Profile {
            taint_toleration_weight: 3,
            node_affinity_weight: 2,
            fit_weight: 1,
            balanced_weight: 1,
            inter_pod_affinity_weight: 2,
            pod_topology_spread_weight: 2,
            hard_pod_affinity_weight: crate::inter_pod_affinity::HARD_POD_AFFINITY_WEIGHT,
            fit_strategy: Strategy::LeastAllocated,
            fit_resources: vec![(CPU, 1), (MEMORY, 1)],
            balanced_resources: vec![CPU, MEMORY],
            filter_node_unschedulable: true,
            filter_node_name: true,
            filter_taint_toleration: true,
            filter_node_affinity: true,
            filter_node_ports: true,
            filter_node_resources_fit: true,
            filter_pod_topology_spread: true,
            filter_inter_pod_affinity: true,
            preemption: true,
        }
    }
}
