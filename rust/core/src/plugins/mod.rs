//! The plugins, one file each, named after the upstream plugin it mirrors:
//! its Filter and Score (and PreFilter / PreScore state where it has them),
//! its reasons (upstream's strings, numbered locally; the registry row gives
//! their codes). Plugins depend on the
//! input tables (`crate::model`) and nothing else; `crate::registry` runs them.

pub mod balanced_allocation;
pub mod default_preemption;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod metrics;
pub mod node_affinity;
pub mod node_name;
pub mod node_pod_limit;
pub mod node_ports;
pub mod node_resources_fit;
pub mod node_unschedulable;
pub mod node_volume_limits;
pub mod normalize;
pub mod pod_topology_spread;
pub mod taint_toleration;
pub mod volume_binding;
pub mod volume_restrictions;
pub mod volume_zone;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Upstream `framework.MaxNodeScore`: every plugin score is normalized to 0..=100.
pub const MAX_NODE_SCORE: i64 = 100;

/// The reason code of a node that passes a filter.
pub const FEASIBLE: u32 = 0;

/// A fixed filter failure reason as its plugin lists it: upstream's message
/// and whether evicting pods could resolve it (upstream's `Unschedulable`, as
/// opposed to `UnschedulableAndUnresolvable`: preemption skips the node). Its
/// code comes from its index in the plugin's `REASONS` and the plugin's row
/// (`model::reason_code`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reason {
    pub message: &'static str,
    pub resolvable: bool,
}

impl Reason {
    pub const fn resolvable(message: &'static str) -> Self {
        Reason { message, resolvable: true }
    }

    pub const fn unresolvable(message: &'static str) -> Self {
        Reason {
            message,
            resolvable: false,
        }
    }
}

/// Hashes interned ids (label keys and values) with one multiplication each:
/// the pod-level plugins hash a node's label value per node and per pod.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_i32(&mut self, i: i32) {
        self.0 = (self.0.rotate_left(32) ^ u64::from(i as u32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

pub type IdBuild = BuildHasherDefault<IdHasher>;

/// A map keyed by interned ids.
pub type IdMap<K, V> = HashMap<K, V, IdBuild>;
