//! ksched scheduling engine.
//!
//! Filters and scores a batch of pending pods against a whole node table in
//! one call, with kube-scheduler semantics for every upstream plugin it
//! mirrors (one file per plugin, named after it) and ksched's metric plugins.
//! Inputs are flat integer tables (strings are interned by the caller); the
//! crate has no Python dependency and is tested with `cargo test` alone.

pub mod balanced_allocation;
pub mod default_preemption;
pub mod error;
pub mod inter_pod_affinity;
pub mod metrics;
pub mod model;
pub mod node_affinity;
pub mod node_name;
pub mod node_ports;
pub mod node_resources_fit;
pub mod node_unschedulable;
pub mod normalize;
pub mod pod_table;
pub mod pod_topology_spread;
pub mod reasons;
pub mod schedule;
pub mod select;
pub mod taint_toleration;

pub use default_preemption::Victims;
pub use error::EngineError;
pub use model::{
    Classes, Labels, MetricSpec, Metrics, Missing, Nodes, Pods, Ports, Prefer, Profile, Selectors, Strategy, Taints, Tolerations,
};
pub use model::{Preemption, Reservations};
pub use pod_table::{LabelSets, PodSelectors, PodTable, PodTerms, SpreadConstraints, TermSets};
pub use schedule::{schedule_batch, Explanation, Outcome, ScheduleOptions};

/// Upstream `framework.MaxNodeScore`: every plugin score is normalized to 0..=100.
pub const MAX_NODE_SCORE: i64 = 100;

#[cfg(test)]
pub(crate) mod test_support;
