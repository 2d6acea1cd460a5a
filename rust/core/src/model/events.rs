//! The cluster events that can make an unschedulable pod schedulable
//! (upstream's `fwk.ClusterEvent`: a resource and what happened to it).
//! Each plugin's registry row lists the ones it registers (its
//! `EventsToRegister`); the Python queue retries a pod it parked only on an
//! event that a plugin which rejected the pod registered.
//!
//! Only events ksched watches are named: it has no informer for CSIDrivers,
//! CSIStorageCapacities or VolumeAttachments, and a pending pod's own change
//! retries it whatever changed (upstream's UpdatePodToleration and the like).

/// One kind of cluster change, named as the Python side reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClusterEvent {
    NodeAdd,
    NodeDelete,
    NodeAllocatableChange,
    NodeLabelChange,
    NodeTaintChange,
    /// A pod bound to a node (by anyone), deleted from one, or its labels changed.
    AssignedPodAdd,
    AssignedPodDelete,
    AssignedPodLabelChange,
    PersistentVolumeAdd,
    PersistentVolumeUpdate,
    PersistentVolumeClaimAdd,
    PersistentVolumeClaimUpdate,
    StorageClassAdd,
    StorageClassUpdate,
    CSINodeAdd,
    CSINodeUpdate,
}

impl ClusterEvent {
    /// Every event, in declaration order.
    pub const ALL: [ClusterEvent; 16] = [
        ClusterEvent::NodeAdd,
        ClusterEvent::NodeDelete,
        ClusterEvent::NodeAllocatableChange,
        ClusterEvent::NodeLabelChange,
        ClusterEvent::NodeTaintChange,
        ClusterEvent::AssignedPodAdd,
        ClusterEvent::AssignedPodDelete,
        ClusterEvent::AssignedPodLabelChange,
        ClusterEvent::PersistentVolumeAdd,
        ClusterEvent::PersistentVolumeUpdate,
        ClusterEvent::PersistentVolumeClaimAdd,
        ClusterEvent::PersistentVolumeClaimUpdate,
        ClusterEvent::StorageClassAdd,
        ClusterEvent::StorageClassUpdate,
        ClusterEvent::CSINodeAdd,
        ClusterEvent::CSINodeUpdate,
    ];

    /// The name the Python queue is told (`SchedulingQueue.move_all`).
    pub const fn name(self) -> &'static str {
        match self {
            ClusterEvent::NodeAdd => "NodeAdd",
            ClusterEvent::NodeDelete => "NodeDelete",
            ClusterEvent::NodeAllocatableChange => "NodeAllocatableChange",
            ClusterEvent::NodeLabelChange => "NodeLabelChange",
            ClusterEvent::NodeTaintChange => "NodeTaintChange",
            ClusterEvent::AssignedPodAdd => "AssignedPodAdd",
            ClusterEvent::AssignedPodDelete => "AssignedPodDelete",
            ClusterEvent::AssignedPodLabelChange => "AssignedPodLabelChange",
            ClusterEvent::PersistentVolumeAdd => "PersistentVolumeAdd",
            ClusterEvent::PersistentVolumeUpdate => "PersistentVolumeUpdate",
            ClusterEvent::PersistentVolumeClaimAdd => "PersistentVolumeClaimAdd",
            ClusterEvent::PersistentVolumeClaimUpdate => "PersistentVolumeClaimUpdate",
            ClusterEvent::StorageClassAdd => "StorageClassAdd",
            ClusterEvent::StorageClassUpdate => "StorageClassUpdate",
            ClusterEvent::CSINodeAdd => "CSINodeAdd",
            ClusterEvent::CSINodeUpdate => "CSINodeUpdate",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_lists_each_event_once_named_as_its_variant() {
        for e in ClusterEvent::ALL {
            assert_eq!(e.name(), format!("{e:?}"));
        }
        let mut names: Vec<&str> = ClusterEvent::ALL.iter().map(|e| e.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ClusterEvent::ALL.len());
    }
}
