//! ksched scheduling engine.
//!
//! Filters and scores a batch of pending pods against a whole node table in
//! one call, with kube-scheduler semantics for every upstream plugin it
//! mirrors and ksched's metric plugins. Inputs are flat integer tables
//! (strings are interned by the caller); the crate has no Python dependency
//! and is tested with `cargo test` alone.
//!
//! Layers, each depending only on those before it:
//! - `model`: the input tables and the profile (a leaf);
//! - `plugins`: one file per plugin, named after the upstream plugin, with
//!   its reason codes and strings;
//! - `registry` (runs plugins by id, in the rows' order) and `reasons` (the dense
//!   reason-code space);
//! - `schedule`: the batch loop, which reads like upstream's `schedule_one.go`.

pub mod model;
pub mod plugins;
pub mod reasons;
pub mod registry;
pub mod schedule;

pub use model::error::{self, EngineError};
pub use model::{
    Classes, Images, LabelSets, Labels, LoadInputs, MetricSpec, Metrics, Missing, Nodes, PodImages, PodSelectors, PodTable, PodTerms, Pods,
    Ports, Preemption, Prefer, Profile, Reservations, Selectors, SpreadConstraints, Strategy, Taints, TermSets, Tolerations, Victims,
    Volumes,
};
pub use plugins::MAX_NODE_SCORE;
pub use reasons::{ReasonInfo, FIXED_REASONS};
pub use registry::{plugin_by_name, Level, PluginId, PluginInfo, PLUGINS, PLUGIN_COUNT};
pub use schedule::{
    schedule_batch, schedule_batch_cached, Explanation, Outcome, ScheduleCache, ScheduleOptions, NOT_ATTEMPTED, UNSCHEDULABLE,
};

#[cfg(test)]
pub(crate) mod test_support;
