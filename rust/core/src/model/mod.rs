//! The engine's input tables.
//!
//! Everything is a borrowed slice: resource quantities are `i64` in canonical
//! units (CPU millicores, bytes, counts), strings are interned ids chosen by
//! the caller, and variable-length lists are CSR tables (`offsets[i]..offsets[i+1]`
//! indexes row `i`'s entries). Columns 0, 1 and 2 of every resource matrix are
//! cpu, memory and ephemeral-storage; the rest are scalar (extended) resources.
//!
//! A leaf: the tables depend on nothing else in the crate, and every plugin
//! depends on them (upstream's `framework/types.go` snapshot types).

pub mod classes;
pub mod encoding;
pub mod error;
pub mod events;
pub mod metrics;
pub mod nodes;
pub mod pod_table;
pub mod pods;
pub mod profile;
pub mod volumes;

pub use classes::{Classes, Selectors, Tolerations};
pub use encoding::*;
pub use events::ClusterEvent;
pub use metrics::{LoadInputs, MetricSpec, Metrics, Missing, Prefer, METRIC_EXEMPT, METRIC_POD_THRESHOLDS, METRIC_STRICTER_THRESHOLDS};
pub use nodes::{Images, Labels, Nodes, Ports, Taints};
pub use pod_table::{LabelSets, PodSelectors, PodTable, PodTerms, SpreadConstraints, TermSets};
pub use pods::{PodImages, Pods, Preemption, Reservations, Victims};
pub use profile::{plugin_by_name, reason_code, Level, PluginId, PluginInfo, Profile, Strategy, FIXED_REASON_COUNT, PLUGINS, PLUGIN_COUNT};
pub use volumes::{Volumes, MISSING_PV, NO_SELECTED_NODE, UNBOUND, UNKNOWN_NODE};
